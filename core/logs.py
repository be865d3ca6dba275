"""Swarm's one logging configuration: every module logs to `logging.getLogger(__name__)`, and
the process's entry point (the `swarm` command line, a lease's launcher and worker, a lease's
node actors) calls `configure` once.

Quiet by default: warnings and errors only, one line each on stderr. `--verbose` (`-v`) adds
what Swarm's services do (INFO: a job's transitions, an epoch's steps, a site's leases), `-vv`
Swarm's DEBUG and the libraries' INFO. Child processes a command starts (a site, a service, a
lease) inherit the level through SWARM_VERBOSE, so one flag shows a whole devnet's story.

What a command shows its user (a result, a table, the start line of a service) is its output,
on stdout through the command line's console; logging is for what Swarm does on the way."""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

VERBOSE_ENV = "SWARM_VERBOSE"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
HANDLER = "swarm"  # the name of the handler `configure` gives the root logger
# Libraries that speak at INFO about their own start-up on every run: heard from at -vv only.
CHATTY = ("ray", "apscheduler", "uvicorn", "alembic", "httpx", "urllib3", "filelock", "asyncio")
# Warnings a library gives for what Swarm does on purpose, heard from at -vv only: APScheduler's
# "skipped: maximum number of running instances reached", for an oracle step that waits for the
# previous one (one at a time, by design).
BY_DESIGN = ("apscheduler.scheduler",)


class _Stderr(logging.StreamHandler[TextIO]):
    """The process's stderr as it is when a line is written, not when logging was configured: a
    command run inside another process (the tests' `cli`) logs to the stderr it was given."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _: TextIO) -> None:
        pass


def verbosity_from_env() -> int:
    """The verbosity a parent process asked for (0 when none, or when SWARM_VERBOSE is not a count)."""
    raw = os.environ.get(VERBOSE_ENV, "0")
    return int(raw) if raw.isdigit() else 0


def configure(verbosity: int | None = None, stream: TextIO | None = None, libraries: bool = True) -> int:
    """Sets up logging for this process: WARNING, INFO (`verbosity` 1) or DEBUG (2 or more), the
    chatty libraries at WARNING until 2. None reads SWARM_VERBOSE; the verbosity chosen is
    exported there for child processes. Returns it.

    `libraries=False` leaves the libraries' levels and Python's warnings as they are: inside a
    lease, what Ray or a warning prints is the lease's own log, which the buyer reads."""
    verbosity = verbosity_from_env() if verbosity is None else max(0, verbosity)
    os.environ[VERBOSE_ENV] = str(verbosity)
    handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    handler.setFormatter(logging.Formatter(FORMAT, datefmt="%H:%M:%S"))
    handler.set_name(HANDLER)
    root = logging.getLogger()
    # In place of the one an earlier call made; a handler someone else gave the process (a test
    # runner's, say) stays.
    root.handlers[:] = [*(h for h in root.handlers if h.get_name() != HANDLER), handler]
    root.setLevel((logging.WARNING, logging.INFO, logging.DEBUG)[min(verbosity, 2)])
    if not libraries:
        return verbosity
    for name in CHATTY:
        logging.getLogger(name).setLevel(library_level())
        for child in _descendants(name):  # one level for the library: a level a module set is let go
            child.setLevel(logging.NOTSET)
    for name in BY_DESIGN:
        logging.getLogger(name).setLevel(logging.ERROR if verbosity < 2 else logging.NOTSET)
    logging.captureWarnings(True)
    return verbosity


def _descendants(name: str) -> list[logging.Logger]:
    """The loggers made so far below `name` (uvicorn's "uvicorn.error", Ray's "ray.data", …)."""
    return [logger for key, logger in logging.Logger.manager.loggerDict.items()
            if key.startswith(name + ".") and isinstance(logger, logging.Logger)]


def child_env() -> dict[str, str]:
    """What a child process started with an environment of its own (a lease's sandbox, a Ray job)
    is given to log as this one does."""
    return {VERBOSE_ENV: str(verbosity_from_env())}


def library_level() -> int:
    """The level the libraries' loggers are kept at: WARNING, or INFO from -vv on."""
    return logging.WARNING if verbosity_from_env() < 2 else logging.INFO


def adopt(name: str) -> None:
    """Brings a library that configures its own logger as it loads (Ray: INFO, a handler of its
    own, nothing passed on) into this configuration: its handler gone, its records passed on to
    the process's one handler, at the libraries' level. Called once the library has loaded."""
    logger = logging.getLogger(name)
    logger.handlers.clear()
    logger.propagate = True
    logger.setLevel(library_level())
