"""Swarm's one logging configuration: every module logs to `logging.getLogger(__name__)`, and
the process's entry point (the `swarm` command line, a lease's worker) calls `configure` once.

Quiet by default: warnings and errors only, one line each on stderr. `--verbose` (`-v`) adds
what Swarm's services do (INFO: a job's transitions, an epoch's steps, a site's leases), `-vv`
Swarm's DEBUG and the libraries' INFO. Child processes a command starts (a site, a service, a
lease) inherit the level through SWARM_VERBOSE, so one flag shows a whole devnet's story."""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

VERBOSE_ENV = "SWARM_VERBOSE"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries that speak at INFO about their own start-up on every run: heard from at -vv only.
CHATTY = ("ray", "apscheduler", "uvicorn", "httpx", "urllib3", "filelock", "asyncio")


def verbosity_from_env() -> int:
    """The verbosity a parent process asked for (0 when none, or when SWARM_VERBOSE is not a count)."""
    raw = os.environ.get(VERBOSE_ENV, "0")
    return int(raw) if raw.isdigit() else 0


def configure(verbosity: int | None = None, stream: TextIO | None = None) -> int:
    """Sets up logging for this process: WARNING, INFO (`verbosity` 1) or DEBUG (2 or more), the
    chatty libraries at WARNING until 2. None reads SWARM_VERBOSE; the verbosity chosen is
    exported there for child processes. Returns it."""
    verbosity = verbosity_from_env() if verbosity is None else max(0, verbosity)
    os.environ[VERBOSE_ENV] = str(verbosity)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT, datefmt="%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((logging.WARNING, logging.INFO, logging.DEBUG)[min(verbosity, 2)])
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING if verbosity < 2 else logging.INFO)
    logging.captureWarnings(True)
    return verbosity
