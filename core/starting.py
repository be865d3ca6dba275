"""Waiting for a process this machine starts to be ready: for as long as it lives and starts.

A site, a Ray node, a supervisor of a local Ray cluster, anvil: each is a process that takes
seconds to start on a quiet machine and minutes on a loaded one, and a wait on a fixed clock
cannot tell the two apart — it gives up on a process that is merely slow, and its error says
nothing of why. So a wait here follows the process, and ends in one of three ways:

- the process is ready (it printed its line, its condition holds): the wait returns at once;
- the process exited: `ExitedWhileStarting`, at once, with its exit status and its log's last line;
- the process still lives at START_CEILING_S: `StartTimedOut`, with its log's last line.

The waiting is on events: a line on the process's stdout pipe, and the process's exit, which
Linux signals on a pidfd (`os.pidfd_open`; polled every EXIT_POLL_S where there is none). A
condition with no event of its own (a port that answers, a node its cluster lists) is asked
every `poll_s`, while the exit is waited on between asks.

Only the standard library: anvil, compute and devnet wait with it, and `core` is below them all.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self, TypeVar

from core.errors import SwarmError, Unavailable

# How long a process that still lives may take to start. A site's start (its Ray head and nodes,
# then its agent) takes 10-25 s on a quiet 2-core machine and passed 180 s — the fixed limit this
# replaces — in a `make test` of 49 minutes on a loaded one, every process alive and starting. A
# process that has not started after ten minutes, alive, is stuck, not slow; one that exits is
# reported at once whatever this is.
START_CEILING_S = 600.0
EXIT_POLL_S = 0.1  # where the kernel gives no pidfd: how often the process's exit is looked for
TAIL_BYTES = 64 * 1024  # the end of a log read for its last lines
T = TypeVar("T")


class NotStarted(SwarmError):
    """A process did not start; `last_lines` ends its log (empty where it has none)."""

    def __init__(self, message: str, what: str, last_lines: tuple[str, ...]) -> None:
        super().__init__(message)
        self.what = what
        self.last_lines = last_lines


class ExitedWhileStarting(NotStarted):
    """The process exited before it was ready: starting it again the same way fails the same way."""

    def __init__(self, message: str, what: str, last_lines: tuple[str, ...], returncode: int) -> None:
        super().__init__(message, what, last_lines)
        self.returncode = returncode


class StartTimedOut(NotStarted, Unavailable):
    """The process still lived, not ready, when the ceiling passed."""

    def __init__(self, message: str, what: str, last_lines: tuple[str, ...], waited_s: float) -> None:
        super().__init__(message, what, last_lines)
        self.waited_s = waited_s


@dataclass(frozen=True)
class Starting:
    """A process being waited for: what an error calls it ("the site of 0x…"), and its log."""

    what: str
    process: subprocess.Popen
    log: Path | None = None  # where its last lines are read from; None: the caller reads its pipe


def first_line(starting: Starting, ceiling_s: float = START_CEILING_S) -> str:
    """The first line the process writes to its stdout pipe (`stdout=subprocess.PIPE`), without its
    line end, as soon as it is written."""
    return first_lines([starting], ceiling_s)[0]


def first_lines(starting: Sequence[Starting], ceiling_s: float = START_CEILING_S) -> list[str]:
    """The first line each process writes to its stdout pipe, waited for together: the first of
    them to exit without one fails the wait at once, whichever is still starting."""
    deadline = time.monotonic() + ceiling_s
    pipes = [_Pipe(s.process) for s in starting]
    lines: list[str | None] = [None] * len(starting)
    with _Exits([s.process for s in starting]) as exits:
        while None in lines:
            pending = [i for i, line in enumerate(lines) if line is None]
            listened = [pipes[i].fd for i in pending if pipes[i].open]
            readable = set(_select(listened + exits.fds, exits.timeout(deadline)))
            for i in pending:
                if pipes[i].fd in readable:
                    lines[i] = pipes[i].read()
                if lines[i] is None and starting[i].process.poll() is not None:
                    lines[i] = pipes[i].drain()  # what it wrote before it ended
                    if lines[i] is None:
                        raise _exited(starting[i])
            if None in lines and time.monotonic() >= deadline:
                raise _timed_out(starting[lines.index(None)], ceiling_s)
    return [line for line in lines if line is not None]


def wait_until(starting: Starting | Sequence[Starting], ready: Callable[[], T | None],
               ceiling_s: float = START_CEILING_S, poll_s: float = 0.1) -> T:
    """`ready()`'s first answer that is not None, asked every `poll_s` while the processes start;
    the first of them to exit fails the wait at once."""
    group = [starting] if isinstance(starting, Starting) else list(starting)
    deadline = time.monotonic() + ceiling_s
    with _Exits([s.process for s in group]) as exits:
        while True:
            answer = ready()
            if answer is not None:
                return answer
            exits.wait(min(poll_s, max(0.0, deadline - time.monotonic())))
            for start in group:
                if start.process.poll() is not None:
                    raise _exited(start)
            if time.monotonic() >= deadline:
                raise _timed_out(group[0], ceiling_s)


def wait_exit(pid: int, timeout_s: float) -> bool:
    """Waits up to `timeout_s` for process `pid` (a child or not) to end; whether it did. A child
    is not reaped here: a zombie has ended."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except (AttributeError, OSError):  # no pidfd on this system: look every EXIT_POLL_S
        deadline = time.monotonic() + timeout_s
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(EXIT_POLL_S)
        return not _running(pid)
    try:
        return bool(_select([fd], timeout_s))
    finally:
        os.close(fd)


def last_lines(log: Path, count: int = 20) -> tuple[str, ...]:
    """The last `count` lines of `log` that are not blank (none if it cannot be read)."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - TAIL_BYTES))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ()
    return tuple(line.strip() for line in text.splitlines() if line.strip())[-count:]


# ── inside ───────────────────────────────────────────────────────────────────

class _Exits:
    """Descriptors that become readable when one of the processes exits: their pidfds."""

    def __init__(self, processes: list[subprocess.Popen]) -> None:
        self.fds: list[int] = []
        self.polled = False  # some process has no pidfd: its exit is looked for every EXIT_POLL_S
        for process in processes:
            try:
                self.fds.append(os.pidfd_open(process.pid))
            except ProcessLookupError:  # reaped already: `poll()` has its status
                pass
            except (AttributeError, OSError):
                self.polled = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        for fd in self.fds:
            os.close(fd)

    def timeout(self, deadline: float) -> float:
        left = max(0.0, deadline - time.monotonic())
        return min(left, EXIT_POLL_S) if self.polled else left

    def wait(self, timeout_s: float) -> None:
        """Until a process exits or `timeout_s` passes."""
        _select(self.fds, min(timeout_s, EXIT_POLL_S) if self.polled else timeout_s)


def _select(fds: list[int], timeout_s: float) -> list[int]:
    if not fds:
        time.sleep(timeout_s)
        return []
    readable, _, _ = select.select(fds, [], [], timeout_s)
    return readable


class _Pipe:
    """A process's stdout pipe, read as it comes without blocking, up to its first line."""

    def __init__(self, process: subprocess.Popen) -> None:
        if process.stdout is None:
            raise ValueError("a first line is read from the process's stdout: start it with stdout=PIPE")
        self.fd = process.stdout.fileno()
        self.open = True
        self._text = b""

    def read(self) -> str | None:
        """What the pipe holds now; the first line once it is whole (or the pipe has closed after
        some text), else None."""
        chunk = os.read(self.fd, 65536)
        self._text += chunk
        line, newline, _ = self._text.partition(b"\n")
        if newline or (not chunk and line.strip()):
            return line.decode(errors="replace").strip()
        self.open = bool(chunk)  # closed with nothing said: only the process's exit is left to wait for
        return None

    def drain(self) -> str | None:
        """The first line among what the pipe still holds, read without waiting for more."""
        while self.open and _select([self.fd], 0):
            line = self.read()
            if line is not None:
                return line
        return None


def _exited(start: Starting) -> ExitedWhileStarting:
    tail = last_lines(start.log) if start.log is not None else ()
    status = start.process.returncode
    how = f"signal {-status}" if status < 0 else f"exit status {status}"
    message = f"{_capital(start.what)} exited while starting ({how}){_said(tail, start.log)}"
    return ExitedWhileStarting(message, start.what, tail, status)


def _timed_out(start: Starting, ceiling_s: float) -> StartTimedOut:
    tail = last_lines(start.log) if start.log is not None else ()
    return StartTimedOut(f"{_capital(start.what)} still had not started after {ceiling_s:g} s, alive"
                         f"{_said(tail, start.log)}", start.what, tail, ceiling_s)


def _said(tail: tuple[str, ...], log: Path | None) -> str:
    if log is None:  # the caller has what the process said
        return "."
    return f": {tail[-1]} (see {log})." if tail else f", with nothing in its log (see {log})."


def _capital(what: str) -> str:
    return what[:1].upper() + what[1:]


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
