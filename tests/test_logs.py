"""Swarm's one logging configuration (core/logs.py): quiet by default, a service's INFO with
`swarm -v`, Swarm's DEBUG and the libraries' INFO with `-vv`; child processes log as their
parent asked (SWARM_VERBOSE); a command's output stays on stdout whatever the verbosity."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from core import logs
from ledger.client import Swarm

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train.yaml"
SWARMS = ("market.tick", "oracle.epoch", "provider.agent", "provider.serving")
LIBRARIES = ("apscheduler.executors.default", "uvicorn.error", "alembic.runtime.migration", "httpx")
LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)


@contextmanager
def configured(verbosity: int, libraries: bool = True) -> Iterator[io.StringIO]:
    """`logs.configure(verbosity)` writing to a buffer, and this process's logging (its
    handlers, its loggers' levels, SWARM_VERBOSE, Python's warnings) as it was afterwards."""
    root = logging.getLogger()
    names = (*logs.CHATTY, *logs.BY_DESIGN)
    kept = (list(root.handlers), root.level, {n: logging.getLogger(n).level for n in names},
            os.environ.get(logs.VERBOSE_ENV), warnings.showwarning)
    out = io.StringIO()
    try:
        logs.configure(verbosity, stream=out, libraries=libraries)
        yield out
    finally:
        handlers, level, levels, verbose, shown = kept
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, was in levels.items():
            logging.getLogger(name).setLevel(was)
        if verbose is None:
            os.environ.pop(logs.VERBOSE_ENV, None)
        else:
            os.environ[logs.VERBOSE_ENV] = verbose
        logging.captureWarnings(False)
        warnings.showwarning = shown


@given(st.integers(0, 4), st.sampled_from(SWARMS + LIBRARIES), st.sampled_from(LEVELS))
def test_a_line_is_shown_by_the_level_its_logger_and_the_verbosity_ask_for(
    verbosity: int, name: str, level: int
) -> None:
    with configured(verbosity) as out:
        logging.getLogger(name).log(level, "the line")
    if name in SWARMS:
        least = (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbosity, 2)]
    else:  # a chatty library: its warnings always, its INFO from -vv on, its DEBUG never
        least = logging.WARNING if verbosity < 2 else logging.INFO
    shown = out.getvalue()
    assert ("the line" in shown) == (level >= least), (verbosity, name, level, shown)
    if shown:
        assert shown.count("\n") == 1 and f" {logging.getLevelName(level)} {name}: the line" in shown


def test_the_schedulers_notice_of_a_step_skipped_by_design_is_heard_only_at_minus_vv() -> None:
    skipped = 'Execution of job "probe" skipped: maximum number of running instances reached (1)'
    for verbosity, heard in ((0, False), (1, False), (2, True)):
        with configured(verbosity) as out:
            logging.getLogger("apscheduler.scheduler").warning(skipped)
            logging.getLogger("apscheduler.scheduler").error("a job the scheduler could not run")
        assert (skipped in out.getvalue()) == heard, verbosity
        assert "could not run" in out.getvalue()  # what is not by design is always heard


def test_inside_a_lease_the_libraries_and_warnings_are_left_as_they_print() -> None:
    library = logging.getLogger("uvicorn")
    before, shown = library.level, warnings.showwarning
    library.setLevel(5)  # as a lease's own code might have set it
    try:
        with configured(1, libraries=False) as out:
            logging.getLogger("provider.lease.worker").info("the worker's own line")
            assert library.level == 5 and warnings.showwarning is shown
        with configured(1):
            assert library.level == logging.WARNING  # a command's process: the library kept quiet
    finally:
        library.setLevel(before)
    assert "INFO provider.lease.worker: the worker's own line" in out.getvalue()


def test_the_verbosity_reaches_child_processes_inherited_or_given(tmp_path: Path) -> None:
    """A child started with its parent's environment inherits the verbosity; one started with an
    environment of its own (a lease's sandbox, a Ray job) is given it (`logs.child_env`)."""
    child = ("import logging; from core import logs; logs.configure(); "
             "logging.getLogger('provider.lease.launch').info('the child says so')")
    parent = textwrap.dedent(f"""
        import os, subprocess, sys
        from core import logs
        logs.configure(int(sys.argv[1]))
        run = [sys.executable, '-c', {child!r}]
        inherited = subprocess.run(run, capture_output=True, text=True)
        own = {{'PATH': os.environ.get('PATH', '')}} | logs.child_env()
        given = subprocess.run(run, capture_output=True, text=True, env=own)
        print(inherited.returncode, given.returncode, inherited.stderr.count('the child says so'),
              given.stderr.count('the child says so'))
    """)
    env = {k: v for k, v in os.environ.items() if k != logs.VERBOSE_ENV}
    for verbosity, expected in ((1, "0 0 1 1"), (0, "0 0 0 0")):
        done = subprocess.run([sys.executable, "-c", parent, str(verbosity)], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == expected.split(), (verbosity, done.stdout, done.stderr)


def test_ray_is_brought_into_the_configuration_once_it_has_loaded() -> None:
    """Ray sets its own logger as it loads (INFO, a handler of its own): adopted, its INFO is
    heard at -vv only, its warnings always, each as one line of Swarm's format."""
    probe = textwrap.dedent("""
        import logging, sys
        from core import logs
        logs.configure(int(sys.argv[1]))
        import ray
        logs.adopt("ray")
        logging.getLogger("ray._private.worker").info("Connected to Ray cluster.")
        logging.getLogger("ray._private.worker").warning("a node is short of memory")
    """)
    for verbosity, heard in ((1, False), (2, True)):
        done = subprocess.run([sys.executable, "-c", probe, str(verbosity)], capture_output=True, text=True,
                              cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)}, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert ("INFO ray._private.worker: Connected to Ray cluster." in done.stderr) == heard, done.stderr
        assert done.stderr.count("a node is short of memory") == 1, done.stderr
        assert "WARNING ray._private.worker: a node is short of memory" in done.stderr


def test_swarm_minus_v_shows_the_services_lines_on_stderr_and_without_it_none(
    cli, cli_process, swarm: Swarm, tmp_path: Path
) -> None:
    db = {"SWARM_DB_URL": f"sqlite:///{tmp_path / 'ledger.db'}", "SWARM_VERBOSE": "0"}  # none asked, but -v
    posted = cli("job", "post", str(EXAMPLE), "--account", "5", "--json", env=db)  # no provider takes it
    assert posted.code == 0, posted.stderr
    (job_id,) = json.loads(posted.stdout)["job_ids"]

    verbose = cli_process("-v", "market", "run", "--once", env=db)
    # a ledger of its own, so the same job is new to it: the same lines to log, none shown
    quiet = cli_process("market", "run", "--once", env=db | {"SWARM_DB_URL": f"sqlite:///{tmp_path / 'q'}"})

    for done in (verbose, quiet):
        assert done.code == 0, done.stderr
        assert "Market service on chain" in done.stdout and "Market pass done" in done.stdout
        assert f"job {job_id}" not in done.stdout  # a job's moves are the service's log, not its output
    assert f"INFO market.observe: job {job_id}: queued: seen posted on chain" in verbose.stderr
    assert f"INFO market.assign: Job {job_id} matched no provider" in verbose.stderr
    assert " INFO " not in quiet.stderr and f"ob {job_id}" not in quiet.stderr, quiet.stderr


def test_the_demos_services_log_holds_the_market_and_the_oracle_and_leaves_the_loggers_as_they_were(
    tmp_path: Path,
) -> None:
    from devnet.demo import ServicesLog

    market, oracle = logging.getLogger("market"), logging.getLogger("oracle")
    before = [(logger.level, logger.propagate, list(logger.handlers)) for logger in (market, oracle)]
    with configured(0) as console:
        services = ServicesLog(tmp_path / "demo" / "services.log")
        logging.getLogger("market.tick").info("job 1: queued → assigned: matched")
        logging.getLogger("oracle.epoch").warning("epoch 2: submit refused")
        logging.getLogger("ledger.indexer").warning("not one of the services")
        services.close()
        logging.getLogger("market.tick").info("after the story")
    kept = (tmp_path / "demo" / "services.log").read_text()
    assert "INFO market.tick: job 1: queued → assigned: matched" in kept
    assert "WARNING oracle.epoch: epoch 2: submit refused" in kept
    assert "not one of the services" not in kept and "after the story" not in kept
    # on the console, where the story's progress is: neither service's lines, the rest as ever
    assert "epoch 2" not in console.getvalue() and "not one of the services" in console.getvalue()
    assert [(logger.level, logger.propagate, list(logger.handlers)) for logger in (market, oracle)] == before
