"""A lease's sandbox: the processes of one lease see a read-only system, their own working
directory and nothing of the provider's (keystores, the cluster token, other leases' files).

Built on Debian's bubblewrap (`bwrap`), which needs no daemon: a PID, IPC, UTS and network
namespace per lease (only a loopback of its own: a lease reaches neither the site's Ray
cluster nor the network), the whole file system mounted read-only, a private `/tmp` and
`/dev/shm`, the lease's directory as the only writable place, and every hidden path covered
by an empty directory. A site that runs as root builds the sandbox as root and drops to a
user of the lease's own inside it (setpriv: no capabilities, no new privileges), binding the
Python runtime back in where a private home hid it; a site that runs as an ordinary user
gets a user namespace instead. Limits:

  memory     the memory of all the lease's processes together (proportional set size, so
             libraries they share count once), watched every 50 ms: a lease over its
             memory is killed;
  processes  RLIMIT_NPROC, the processes and threads of the lease's user — a user of its
             own when the site runs as root, so no lease counts another's processes;
  time       RLIMIT_CPU for CPU seconds, and the wall clock: everything the lease started
             is killed at the deadline.

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
WATCH_INTERVAL_S = 0.05
PEAK_INTERVAL_S = 1.0
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
BWRAP_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


@dataclass(frozen=True)
class Limits:
    """What one lease may use."""

    memory_bytes: int  # memory of all the lease's processes together (their PSS)
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
    peak_memory_bytes: int = 0


@dataclass
class Sandbox:
    """Runs commands for one lease in `workdir`, hiding `hidden` paths from them.

    `runtime` are paths the lease must be able to read and execute (the Python it runs,
    the packages it imports) even where they lie under a directory its user cannot enter;
    by default the running interpreter's installation and this project."""

    workdir: Path
    limits: Limits
    hidden: Sequence[Path] = ()
    lease_uid: int | None = None  # a uid of the lease's own, used when the site runs as root
    env: Mapping[str, str] = field(default_factory=dict)
    network: bool = False  # True: the host's network; False: a loopback of its own
    runtime: Sequence[Path] | None = None
    binds: Sequence[tuple[Path, bool]] = ()  # more directories the lease sees: (path, writable)

    @property
    def as_root(self) -> bool:
        return os.geteuid() == 0 and self.lease_uid is not None

    def command(self, argv: Sequence[str]) -> list[str]:
        """The full command line: bwrap around `argv` (dropping to the lease's user when root)."""
        bwrap = shutil.which(BWRAP)
        if bwrap is None:
            raise ComputeError(
                "bubblewrap (`bwrap`) is not installed; install Debian's `bubblewrap` package."
            )
        workdir = self.workdir.resolve()
        args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/dev/shm"]
        emptied = [Path("/tmp")]  # directories the sandbox replaces with empty ones
        # The runtime first, then what is hidden: a hidden SWARM_HOME inside a project that is
        # bound back (a checkout in a private home) stays hidden.
        args += _runtime_binds(self.runtime if self.runtime is not None else default_runtime(), emptied)
        for path in self.hidden:
            path = Path(path).resolve()
            if path.exists() and not _within(workdir, path):
                args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
                emptied.append(path)
        # The way down to each directory the lease sees, where it crosses an emptied one, is
        # recreated open to the lease's user (bwrap would make it 0700, owned by root).
        made: set[Path] = set()
        targets = [*((Path(p).resolve(), w) for p, w in self.binds), (workdir, True)]
        for target, _ in targets:  # a directory closed to other users on the way is emptied too
            closed = next(
                (
                    p
                    for p in reversed(target.parents)
                    if p != Path("/")
                    and not any(_within(top, p) for top in emptied)
                    and not os.stat(p).st_mode & 0o001
                ),
                None,
            )
            if closed is not None:
                args += ["--perms", "0755", "--tmpfs", str(closed)]
                emptied.append(closed)
        for target, writable in targets:
            for step in reversed(target.parents):
                if step not in made and any(step != top and _within(top, step) for top in emptied):
                    args += ["--perms", "0755", "--dir", str(step)]
                    made.add(step)
            if target != workdir:
                args += ["--bind" if writable else "--ro-bind", str(target), str(target)]
        args += ["--bind", str(workdir), str(workdir), "--chdir", str(workdir),
                 "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                 "--die-with-parent", "--new-session", "--clearenv"]
        if not self.network:
            args.append("--unshare-net")
        if not self.as_root:
            args.append("--unshare-user")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir), "TMPDIR": "/tmp",
               **self.env}
        for key, value in env.items():
            args += ["--setenv", key, value]
        args.append("--")
        if self.as_root:
            uid = str(self.lease_uid)
            args += [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                     "--bounding-set=-all", "--no-new-privs", "--"]
        return args + list(argv)

    def run(self, argv: Sequence[str], log: Path | None = None) -> SandboxResult:
        """Runs `argv` to its end or to a limit; never raises for what the lease does.

        With `log`, stdout and stderr go to that file together (the result's are empty)."""
        import tempfile

        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.as_root and self.lease_uid is not None:
            os.chown(self.workdir, self.lease_uid, self.lease_uid)
        limits = self.limits
        with tempfile.TemporaryDirectory(prefix="swarm-sandbox-") as scratch:
            out_path = log or Path(scratch) / "stdout"
            err_path = Path(scratch) / "stderr"
            with open(out_path, "ab") as out, (out if log else open(err_path, "wb")) as err:
                start = time.monotonic()
                proc = subprocess.Popen(
                    # bwrap itself is the first process of the lease's PID namespace, whose
                    # environment a lease reads in /proc/1/environ: it starts with none of the site's.
                    self.command(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=BWRAP_ENV,
                    # The limits are set in the child before bwrap runs: every process inside inherits them.
                    start_new_session=True, preexec_fn=lambda: _apply_limits(limits),  # noqa: PLW1509
                )
                broke, peak = _watch(proc, limits, start)
            seconds = time.monotonic() - start
            stdout = "" if log else out_path.read_text(errors="replace")
            stderr = "" if log else err_path.read_text(errors="replace")
        if broke is None:
            broke = _broken_limit(proc.returncode, stderr if not log else _tail(log))
        return SandboxResult(proc.returncode, stdout, stderr, seconds, broke, peak)


def lease_uid(lease_number: int) -> int:
    """The uid a site gives lease number `lease_number` when it runs as root."""
    return LEASE_UID_BASE + lease_number


def default_runtime() -> list[Path]:
    """What a lease runs Swarm's code with: the interpreter's installation, its virtual
    environment and the project's source."""
    import sys

    project = Path(__file__).resolve().parents[2]
    return sorted({Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), project})


def _runtime_binds(paths: Sequence[Path], emptied_by_sandbox: Sequence[Path]) -> list[str]:
    """Binds each path back in, read-only, where the sandbox empties an ancestor (its own
    /tmp) or one closed to other users (a private home, a private temporary directory) would
    keep the lease's user out of it."""
    args: list[str] = []
    bound: list[Path] = []
    emptied: set[Path] = set()
    for path in sorted({Path(p).resolve() for p in paths}):
        if any(_within(b, path) for b in bound):
            continue  # inside one bound already (a virtual environment inside the project)
        top = next((t for t in emptied_by_sandbox if _within(t, path) and t != path), None)
        if top is not None:  # inside a directory the sandbox empties: the way down made again
            args += [arg for step in reversed(path.parents) if step != top and _within(top, step)
                     for arg in ("--perms", "0755", "--dir", str(step))]
            args += ["--ro-bind", str(path), str(path)]
            bound.append(path)
            continue
        closed = next(
            (p for p in reversed(path.parents) if p != Path("/") and not os.stat(p).st_mode & 0o001), None
        )
        if closed is None and os.stat(path).st_mode & 0o005 == 0o005:
            continue  # every user can reach it already
        if closed is not None:
            if closed not in emptied:  # emptied once: a second tmpfs would hide what the first let back in
                args += ["--perms", "0755", "--tmpfs", str(closed)]
                emptied.add(closed)
            for step in reversed(path.parents):
                if step != closed and _within(closed, step):
                    args += ["--perms", "0755", "--dir", str(step)]
        args += ["--ro-bind", str(path), str(path)]
        bound.append(path)
    return args


def _watch(proc: subprocess.Popen, limits: Limits, start: float) -> tuple[str | None, int]:
    """Waits for the lease, killing it at its wall clock or when its processes together hold
    more memory than it may; returns which limit it broke and its peak memory.

    Each look reads the lease's process tree and their resident sizes from /proc (cheap);
    their proportional sizes, which the limit is on, are read only when the resident total
    passes the limit (resident is never below proportional) and once a second for the peak."""
    peak, last_pss = 0, start
    while proc.poll() is None:
        now = time.monotonic()
        if now - start > limits.wall_seconds:
            _kill_group(proc)
            proc.wait()
            return "time", peak
        pids = _tree(proc.pid)
        if _rss(pids) > limits.memory_bytes or now - last_pss >= PEAK_INTERVAL_S:
            held, last_pss = _pss(pids), now
            peak = max(peak, held)
            if held > limits.memory_bytes:
                _kill_group(proc)
                proc.wait()
                return "memory", peak
        time.sleep(WATCH_INTERVAL_S)
    return None, peak


def _tree(root: int) -> list[int]:
    """`root` and every process under it, from the kernel's list of each thread's children
    (psutil's walk over every process of the machine where the kernel keeps no such list)."""
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        import psutil

        try:
            return [root, *(p.pid for p in psutil.Process(root).children(recursive=True))]
        except psutil.NoSuchProcess:
            return [root]
    pids, i = [root], 0
    while i < len(pids):
        pid = pids[i]
        i += 1
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    pids += (int(child) for child in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone meanwhile
    return pids


def _rss(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE_BYTES
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass
    return total


def _pss(pids: Sequence[int]) -> int:
    """The processes' proportional set size: each one's private memory plus its share of what
    it maps with others (a library every worker loads counts once over them all)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
        except (FileNotFoundError, ProcessLookupError, PermissionError, StopIteration):
            pass
    return total


def _apply_limits(limits: Limits) -> None:
    """Runs in the sandbox's first process, before bwrap: every process inside inherits these."""
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes, limits.max_processes))
    if limits.cpu_seconds is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _kill_group(proc: subprocess.Popen) -> None:
    """Kills bwrap's group; its namespace's first process dies with it, and every process
    in the lease's PID namespace with that."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _tail(path: Path, size: int = 8192) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - size))
        return f.read().decode(errors="replace")


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
