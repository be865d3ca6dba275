"""A lease's sandbox: the processes of one lease see a read-only system, their own working
directory and nothing of the provider's (keystores, the cluster token, other leases' files).

Built on Debian's bubblewrap (`bwrap`), which needs no daemon and no root: a user, PID, IPC
and UTS namespace per lease, the whole file system mounted read-only, a private `/tmp`, the
lease's directory as the only writable place, and every hidden path covered by an empty
directory. Limits come from the kernel's resource limits, set in the sandbox's first process
and inherited by everything it starts:

  memory     RLIMIT_AS, the address space of each process;
  processes  RLIMIT_NPROC, the processes of the lease's user — a user of its own when the
             site runs as root (setpriv), so no lease counts another's processes;
  time       RLIMIT_CPU for CPU seconds, and the wall clock: the whole process group is
             killed at the deadline.

A lease that breaks a limit is stopped and its outcome says which (`SandboxResult.broke`), so
the site can fail it as the buyer's fault.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compute.errors import ComputeError

BWRAP = "bwrap"
SETPRIV = "setpriv"
# The first uid given to leases when the site runs as root: far from system and human users.
LEASE_UID_BASE = 200_000


@dataclass(frozen=True)
class Limits:
    """What one lease may use."""

    memory_bytes: int  # address space per process
    max_processes: int  # processes (and threads) of the lease's user
    wall_seconds: float  # from start to kill
    cpu_seconds: int | None = None  # CPU time per process; None: the wall clock bounds it

    def __post_init__(self) -> None:
        if self.memory_bytes < 16 * 2**20:
            raise ValueError(f"a lease needs at least 16 MiB of memory, got {self.memory_bytes} bytes")
        if self.max_processes < 1 or self.wall_seconds <= 0:
            raise ValueError("a lease needs at least one process and a positive wall-clock limit")


@dataclass(frozen=True)
class SandboxResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    broke: str | None = None  # "time", "memory" or "processes" when the lease broke that limit


@dataclass
class Sandbox:
    """Runs commands for one lease in `workdir`, hiding `hidden` paths from them."""

    workdir: Path
    limits: Limits
    hidden: Sequence[Path] = ()
    lease_uid: int | None = None  # a uid of the lease's own, used when the site runs as root
    env: Mapping[str, str] = field(default_factory=dict)

    def command(self, argv: Sequence[str]) -> list[str]:
        """The full command line: bwrap around `argv` (with setpriv first when root)."""
        bwrap = shutil.which(BWRAP)
        if bwrap is None:
            raise ComputeError("bubblewrap (`bwrap`) is not installed; install Debian's `bubblewrap` package.")
        workdir = self.workdir.resolve()
        args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        for path in self.hidden:
            path = Path(path).resolve()
            if path.exists() and not _within(workdir, path):
                args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
        args += [
            "--bind", str(workdir), str(workdir), "--chdir", str(workdir),
            "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--clearenv",
        ]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir), "TMPDIR": "/tmp",
               **self.env}
        for key, value in env.items():
            args += ["--setenv", key, value]
        args += ["--", *argv]
        if os.geteuid() == 0 and self.lease_uid is not None:
            uid = str(self.lease_uid)
            args = [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *args]
        return args

    def run(self, argv: Sequence[str]) -> SandboxResult:
        """Runs `argv` to its end or to a limit; never raises for what the lease does."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0 and self.lease_uid is not None:
            os.chown(self.workdir, self.lease_uid, self.lease_uid)
        limits = self.limits
        start = time.monotonic()
        proc = subprocess.Popen(
            self.command(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True, preexec_fn=lambda: _apply_limits(limits),
        )
        broke = None
        try:
            stdout, stderr = proc.communicate(timeout=limits.wall_seconds)
        except subprocess.TimeoutExpired:
            broke = "time"
            _kill_group(proc)
            stdout, stderr = proc.communicate()
        seconds = time.monotonic() - start
        if broke is None:
            broke = _broken_limit(proc.returncode, stderr)
        return SandboxResult(proc.returncode, stdout, stderr, seconds, broke)


def lease_uid(lease_number: int) -> int:
    """The uid a site gives lease number `lease_number` when it runs as root."""
    return LEASE_UID_BASE + lease_number


def _apply_limits(limits: Limits) -> None:
    """Runs in the sandbox's first process, before bwrap: every process inside inherits these."""
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes, limits.max_processes))
    if limits.cpu_seconds is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _broken_limit(returncode: int, stderr: str) -> str | None:
    """Which limit a finished lease ran into, from how it ended."""
    if returncode == -signal.SIGXCPU or returncode == 128 + signal.SIGXCPU:
        return "time"
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr or "std::bad_alloc" in stderr:
        return "memory"
    if "Resource temporarily unavailable" in stderr or "BlockingIOError" in stderr \
            or "can't fork" in stderr.lower():
        return "processes"
    return None


def _within(parent: Path, path: Path) -> bool:
    try:
        path.relative_to(parent)
        return True
    except ValueError:
        return False
