"""A wait that follows the process it waits for (core/starting.py), on real processes: small Python
scripts that print, sleep and exit as a site, a Ray node or anvil does while it starts."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import SwarmError
from core.starting import (
    ExitedWhileStarting,
    Starting,
    StartTimedOut,
    first_line,
    first_lines,
    last_lines,
    wait_exit,
    wait_until,
)

pytestmark = pytest.mark.light

GENEROUS_S = 120.0  # a ceiling none of these processes should come near but the one that hangs


def _start(tmp_path: Path, name: str, code: str) -> Starting:
    """`code` run as a process whose stdout is a pipe and whose stderr is its log, as a site's is."""
    log = tmp_path / f"{name}.log"
    with open(log, "wb") as err:
        process = subprocess.Popen([sys.executable, "-u", "-c", textwrap.dedent(code)],
                                   stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    return Starting(f"the {name}", process, log)


@pytest.fixture
def started():
    """Every process a test starts, killed with its children at its end, whatever the test left running."""
    processes: list[subprocess.Popen] = []
    yield processes
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_a_process_that_starts_slowly_but_surely_is_waited_for(tmp_path: Path, started) -> None:
    site = _start(tmp_path, "site", """
        import sys, time
        for step in range(4):
            print(f"starting: step {step}", file=sys.stderr)
            time.sleep(0.5)
        print('{"url": "https://127.0.0.1:1"}')
        time.sleep(60)
    """)
    started.append(site.process)
    began = time.monotonic()
    assert first_line(site, ceiling_s=GENEROUS_S) == '{"url": "https://127.0.0.1:1"}'
    assert time.monotonic() - began >= 1.9  # it was waited for, not given up on
    assert site.process.poll() is None


def test_a_line_written_in_pieces_is_read_whole(tmp_path: Path, started) -> None:
    site = _start(tmp_path, "site", """
        import sys, time
        for piece in ("rea", "dy\\n"):
            sys.stdout.write(piece); sys.stdout.flush(); time.sleep(0.3)
        time.sleep(60)
    """)
    started.append(site.process)
    assert first_line(site, ceiling_s=GENEROUS_S) == "ready"


def test_a_process_that_exits_early_fails_at_once_with_its_status_and_last_line(tmp_path: Path,
                                                                                   started) -> None:
    node = _start(tmp_path, "node", """
        import sys
        print("reading the configuration", file=sys.stderr)
        print("ValueError: port 70000 is out of range", file=sys.stderr)
        sys.exit(3)
    """)
    started.append(node.process)
    began = time.monotonic()
    with pytest.raises(ExitedWhileStarting) as caught:
        first_line(node, ceiling_s=GENEROUS_S)
    assert time.monotonic() - began < 30  # at once, not at the ceiling
    error = caught.value
    assert error.returncode == 3 and isinstance(error, SwarmError)
    assert error.last_lines == ("reading the configuration", "ValueError: port 70000 is out of range")
    assert str(error) == (f"The node exited while starting (exit status 3): ValueError: port 70000 is out of "
                          f"range (see {node.log}).")


def test_an_exit_is_seen_at_once_while_a_child_still_holds_the_pipe(tmp_path: Path, started) -> None:
    """A site's Ray processes inherit its stdout: the pipe stays open when the site itself dies."""
    site = _start(tmp_path, "site", """
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print("the agent could not bind its port", file=sys.stderr)
        sys.exit(1)
    """)
    started.append(site.process)
    began = time.monotonic()
    with pytest.raises(ExitedWhileStarting, match=r"exit status 1.*could not bind its port"):
        first_line(site, ceiling_s=GENEROUS_S)
    assert time.monotonic() - began < 30


def test_a_process_killed_while_starting_is_said_to_be(tmp_path: Path, started) -> None:
    node = _start(tmp_path, "node", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    started.append(node.process)
    with pytest.raises(ExitedWhileStarting, match=r"signal 9\), with nothing in its log") as caught:
        first_line(node, ceiling_s=GENEROUS_S)
    assert caught.value.returncode == -9 and caught.value.last_lines == ()


def test_a_line_written_just_before_the_exit_is_the_answer(tmp_path: Path, started) -> None:
    """As the local cluster's supervisor says `error: …` and exits: what it said is read."""
    supervisor = _start(tmp_path, "supervisor",
                        "import sys; print('error: Exception: too slow'); sys.exit(1)")
    started.append(supervisor.process)
    assert first_line(supervisor, ceiling_s=GENEROUS_S) == "error: Exception: too slow"


def test_a_process_that_hangs_fails_at_the_ceiling_with_its_last_line(tmp_path: Path, started) -> None:
    site = _start(tmp_path, "site", """
        import sys, time
        print("waiting for the chain", file=sys.stderr)
        time.sleep(60)
    """)
    started.append(site.process)
    began = time.monotonic()
    with pytest.raises(StartTimedOut) as caught:
        first_line(site, ceiling_s=1.5)
    waited = time.monotonic() - began
    assert 1.5 <= waited < 30
    assert caught.value.last_lines == ("waiting for the chain",) and caught.value.waited_s == 1.5
    assert str(caught.value) == (f"The site still had not started after 1.5 s, alive: waiting for the chain "
                                 f"(see {site.log}).")
    assert site.process.poll() is None, "the wait leaves the process to its caller"


def test_sites_waited_for_together_fail_on_the_first_that_exits(tmp_path: Path, started) -> None:
    slow = _start(tmp_path, "site of A", "import time; time.sleep(60)")
    dead = _start(tmp_path, "site of B",
                  "import sys; print('no key for account 2', file=sys.stderr); sys.exit(2)")
    started += [slow.process, dead.process]
    began = time.monotonic()
    with pytest.raises(ExitedWhileStarting, match=r"^The site of B exited .*no key for account 2"):
        first_lines([slow, dead], ceiling_s=GENEROUS_S)
    assert time.monotonic() - began < 30


def test_sites_waited_for_together_give_each_its_own_line(tmp_path: Path, started) -> None:
    sites = [_start(tmp_path, f"site {i}", f"import time; time.sleep({0.6 - i * 0.3}); print('site {i}'); "
                                           "time.sleep(60)") for i in range(3)]
    started += [s.process for s in sites]
    assert first_lines(sites, ceiling_s=GENEROUS_S) == ["site 0", "site 1", "site 2"]


def test_a_condition_is_waited_for_while_its_process_starts(tmp_path: Path, started) -> None:
    marker = tmp_path / "listening"
    node = _start(tmp_path, "anvil", f"""
        import pathlib, time
        time.sleep(1.0)
        pathlib.Path({str(marker)!r}).write_text("8545")
        time.sleep(60)
    """)
    started.append(node.process)
    port = wait_until(node, lambda: marker.read_text() if marker.exists() else None, ceiling_s=GENEROUS_S,
                      poll_s=0.05)
    assert port == "8545"


def test_a_condition_fails_at_once_when_its_process_exits(tmp_path: Path, started) -> None:
    node = _start(tmp_path, "anvil", """
        import sys, time
        time.sleep(0.5)
        print("Error: Address already in use", file=sys.stderr)
        sys.exit(1)
    """)
    started.append(node.process)
    asked = []
    began = time.monotonic()
    with pytest.raises(ExitedWhileStarting, match="Address already in use"):
        wait_until(node, lambda: asked.append(1), ceiling_s=GENEROUS_S, poll_s=10.0)
    assert time.monotonic() - began < 9, "the exit ended the wait between two asks"
    assert len(asked) == 1


def test_a_condition_that_never_holds_fails_at_the_ceiling(tmp_path: Path, started) -> None:
    node = _start(tmp_path, "node",
                  "import sys, time; print('raylet started', file=sys.stderr); time.sleep(60)")
    started.append(node.process)
    began = time.monotonic()
    with pytest.raises(StartTimedOut, match="after 1 s, alive: raylet started"):
        wait_until(node, lambda: None, ceiling_s=1.0, poll_s=0.1)
    assert 1.0 <= time.monotonic() - began < 30


def test_wait_exit_sees_an_end_and_a_process_that_goes_on(tmp_path: Path, started) -> None:
    quick = _start(tmp_path, "quick", "import time; time.sleep(0.3)")
    lasting = _start(tmp_path, "lasting", "import time; time.sleep(60)")
    started += [quick.process, lasting.process]
    assert wait_exit(quick.process.pid, GENEROUS_S) is True
    began = time.monotonic()
    assert wait_exit(lasting.process.pid, 0.5) is False
    assert time.monotonic() - began >= 0.5


@settings(max_examples=50, deadline=None)
@given(lines=st.lists(st.text(st.characters(exclude_categories=["Cs"]), max_size=40), max_size=40),
       count=st.integers(1, 25))
def test_last_lines_are_the_logs_last_lines_that_say_something(tmp_path_factory: pytest.TempPathFactory,
                                                               lines: list[str], count: int) -> None:
    log = tmp_path_factory.mktemp("log") / "serve.log"
    log.write_bytes("\n".join(lines).encode())
    said = [line.strip() for line in "\n".join(lines).splitlines() if line.strip()]
    assert last_lines(log, count) == tuple(said[-count:])


def test_last_lines_of_a_missing_log_are_none(tmp_path: Path) -> None:
    assert last_lines(tmp_path / "never-written.log") == ()
