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
             is killed at the deadline;
  disk       what its writable directories and its log hold, summed every second, and no
             file larger than that (RLIMIT_FSIZE).

A lease that breaks a limit is stopped and its outcome says which (`SandboxResult.broke`), so
the site can fail it as the buyer's fault.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import stat
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
UNSHARE = "unshare"
SUBUID, SUBGID = Path("/etc/subuid"), Path("/etc/subgid")
LEASE_USERS_ENV = "SWARM_LEASE_USERS"  # set inside a site user's namespace: how many lease uids it maps
MIN_LEASE_USERS = 1024
WATCH_INTERVAL_S = 0.05
# Every thread's children are read this often: a few milliseconds for the few hundred threads of
# a lease's Ray, a sixth of a core at every look. The looks between read the main threads' only
# (a tenth of that), beside the processes the last full read found.
TREE_INTERVAL_S = 0.5
DISK_INTERVAL_S = 1.0
# The peak's proportional size is read this often (and whenever the resident total passes the
# limit): smaps_rollup of a lease's Ray takes about 50 ms, a twentieth of a core once a second.
PEAK_INTERVAL_S = 5.0
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
BWRAP_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
# The host's directories every lease sees, read-only: its programs, libraries and settings, and
# /sys, which Ray and torch read the machine's CPUs and memory from.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")


@dataclass(frozen=True)
class Limits:
    """What one lease may use."""

    memory_bytes: int  # memory of all the lease's processes together (their PSS)
    max_processes: int  # processes (and threads) of the lease's user
    wall_seconds: float  # from start to kill
    cpu_seconds: int | None = None  # CPU time per process; None: the wall clock bounds it
    disk_bytes: int | None = None  # what its writable directories and its log may hold together

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
    broke: str | None = None  # "time", "memory", "processes" or "disk" when the lease broke that limit
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
    # A network namespace made for it (a node of a lease across nodes: a loopback and the lease's
    # own link, provider.lease.network), entered as root before bubblewrap, instead of either.
    netns: Path | None = None
    # Where the lease sees its work directory, when not at its own path: every node of a lease
    # across nodes sees its own at its first node's path, so a path one node names holds there too.
    at: Path | None = None
    runtime: Sequence[Path] | None = None
    binds: Sequence[tuple[Path, bool]] = ()  # more directories the lease sees: (path, writable)
    # Device nodes the lease may open, (the host's node, where the lease sees it): a GPU lease's
    # GPUs and the driver's nodes (provider.lease.devices). Its /dev has nothing else of the host's.
    devices: Sequence[tuple[Path, str]] = ()
    # Directories of the host the lease sees only part of: (the directory, its entries shown). A
    # GPU lease's /proc/driver/nvidia/gpus shows its own GPUs' entries only.
    covered: Sequence[tuple[str, Sequence[str]]] = ()

    @property
    def as_root(self) -> bool:
        return os.geteuid() == 0 and self.lease_uid is not None

    def command(self, argv: Sequence[str]) -> list[str]:
        """The full command line: bwrap around `argv` (dropping to the lease's user when root).

        The sandbox's file system is built from nothing (bwrap's root is an empty tmpfs) and shows
        only what is named: the system's directories (`SYSTEM`, read-only), the runtime, the
        lease's own directory and `binds`, and in its own /dev the `devices` it was given. What
        is not named — homes, /srv, /var, /opt, /mnt, other leases, other buyers' files — is not
        there at all."""
        bwrap = shutil.which(BWRAP)
        if bwrap is None:
            raise ComputeError(
                "bubblewrap (`bwrap`) is not installed; install Debian's `bubblewrap` package."
            )
        workdir = self.workdir.resolve()
        seen_at = self.at or workdir
        args = [bwrap]
        shown: list[Path] = []  # what the lease sees of the host, read-only unless bound writable
        for top in SYSTEM:
            if os.path.islink(top):  # a merged /usr: /bin → usr/bin
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
                shown.append(Path(top))
        # Its /tmp and /dev/shm are memory: each at most the lease's memory, and what they hold
        # counts against it (`_watch`).
        size = str(self.limits.memory_bytes)
        args += ["--dev", "/dev", "--proc", "/proc",
                 "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
                 "--perms", "1777", "--size", size, "--tmpfs", "/dev/shm"]
        for node, inside in self.devices:
            args += ["--dev-bind", str(node), inside]
        made: set[Path] = {Path("/")}
        runtime = self.runtime if self.runtime is not None else default_runtime()
        targets = [*((Path(p).resolve(), Path(p).resolve(), False) for p in sorted(set(runtime))),
                   *((Path(p).resolve(), Path(p).resolve(), w) for p, w in self.binds),
                   (workdir, seen_at, True)]
        for source, target, writable in targets:
            if not writable and any(_within(top, target) for top in shown):
                continue  # in sight already (a virtual environment inside the project)
            # The way down, made open to the lease's user (bwrap would make it root's, 0700).
            for step in reversed(target.parents):
                if step not in made and not any(_within(top, step) for top in shown):
                    args += ["--perms", "0755", "--dir", str(step)]
                    made.add(step)
            args += ["--bind" if writable else "--ro-bind", str(source), str(target)]
            shown.append(target)
        for directory, entries in self.covered:
            args += ["--tmpfs", directory]
            for entry in entries:
                args += ["--ro-bind", f"{directory}/{entry}", f"{directory}/{entry}"]
        # What the site keeps from its leases, where it lies inside something they see (a
        # SWARM_HOME inside the project): covered by an empty directory or an empty file.
        for path in self.hidden:
            path = Path(path).resolve()
            if path.exists() and not _within(workdir, path) and not _within(seen_at, path) \
                    and any(_within(top, path) for top in shown):
                args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
        args += ["--chdir", str(seen_at),
                 "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                 "--die-with-parent", "--new-session", "--clearenv"]
        if self.netns is not None:
            if not self.as_root:
                raise ComputeError("a lease across nodes needs a site that runs as root, which makes its "
                                   "network; run `swarm provider serve` as root.")
            args = ["nsenter", f"--net={self.netns}", "--", *args]
        elif not self.network:
            args.append("--unshare-net")
        if not self.as_root:
            args.append("--unshare-user")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(seen_at), "TMPDIR": "/tmp",
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
                disk = [self.workdir, *(p for p, writable in self.binds if writable), *([log] if log else [])]
                broke, peak = _watch(proc, limits, start, disk)
            seconds = time.monotonic() - start
            stdout = "" if log else out_path.read_text(errors="replace")
            stderr = "" if log else err_path.read_text(errors="replace")
        if broke is None:
            broke = _broken_limit(proc.returncode, stderr if not log else _tail(log))
        return SandboxResult(proc.returncode, stdout, stderr, seconds, broke, peak)


def lease_uid(lease_number: int) -> int:
    """The uid a site gives lease number `lease_number`: from LEASE_UID_BASE, as root sees it.
    A site run by an ordinary user has as many as it has subordinate uids (`lease_root`), used
    in turn."""
    users = os.environ.get(LEASE_USERS_ENV)
    return LEASE_UID_BASE + (lease_number % int(users) if users else lease_number)


def lease_root(argv: Sequence[str], user: str | None = None) -> tuple[list[str], dict[str, str]]:
    """How a site run by an ordinary user runs `argv` with a root's power over its leases and
    nothing more: in a user namespace (`unshare`) in which the site's user is root and the
    user's subordinate uids and gids (/etc/subuid, /etc/subgid, mapped by Debian's setuid
    `newuidmap`) are the leases' users from LEASE_UID_BASE. So each lease runs as a uid of its
    own on the host, as on a root site: it cannot read the site user's files or processes, and
    its process limit counts only its own processes. Returns the command and the environment
    variables to add. ComputeError, naming the fix, when the user has no subordinate ids."""
    import pwd

    name = user or pwd.getpwuid(os.getuid()).pw_name
    uids = _subordinate(SUBUID, name, os.getuid())
    gids = _subordinate(SUBGID, name, os.getuid())
    missing = [tool for tool in (UNSHARE, "newuidmap", "newgidmap") if shutil.which(tool) is None]
    if uids is None or gids is None or missing:
        raise ComputeError(
            f"the site runs as {name}, which cannot give its leases users of their own "
            + (f"(no {', '.join(missing)})" if missing else "(no subordinate uids and gids)")
            + f"; install Debian's `uidmap` package and run `usermod --add-subuids 200000-265535 "
            f"--add-subgids 200000-265535 {name}` as root (docs/operations.md)"
        )
    count = min(uids[1], gids[1])
    command = [UNSHARE, "--map-user=0", "--map-group=0", f"--map-users={uids[0]},{LEASE_UID_BASE},{count}",
               f"--map-groups={gids[0]},{LEASE_UID_BASE},{count}", "--", *argv]
    return command, {LEASE_USERS_ENV: str(count)}


def _subordinate(table: Path, name: str, uid: int) -> tuple[int, int] | None:
    """The user's first range of subordinate ids of at least MIN_LEASE_USERS: (first, count)."""
    try:
        lines = table.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.strip().split(":")
        numbers = len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit()
        if numbers and fields[0] in (name, str(uid)) and int(fields[2]) >= MIN_LEASE_USERS:
            return int(fields[1]), int(fields[2])
    return None


def default_runtime() -> list[Path]:
    """What a lease runs Swarm's code with: the interpreter's installation, its virtual
    environment and the project's Python packages — those alone, not the whole checkout, where
    a devnet's SWARM_HOME, its buyers' files and their results may lie."""
    import sys

    project = Path(__file__).resolve().parents[2]
    packages = {p for p in project.iterdir() if (p / "__init__.py").is_file() and p.name != "tests"}
    return sorted({Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), *packages})


def _watch(proc: subprocess.Popen, limits: Limits, start: float,
           disk: Sequence[Path] = ()) -> tuple[str | None, int]:
    """Waits for the lease, killing it at its wall clock or when its processes together, with
    what its /tmp and /dev/shm hold, take more memory than it may; returns which limit it broke
    and its peak memory.

    Each look reads the lease's process tree and their resident sizes from /proc, and the use of
    its two memory file systems (cheap); their proportional sizes, which the limit is on, are
    read only when the resident total passes the limit (resident is never below proportional)
    and every PEAK_INTERVAL_S for the peak. What its writable directories hold on disk is summed every
    DISK_INTERVAL_S (no file can outgrow the quota in between: RLIMIT_FSIZE). A process forked by
    a thread other than its parent's main one is found within TREE_INTERVAL_S."""
    peak, last_pss, last_disk, last_tree = 0, start, start, start - TREE_INTERVAL_S
    known: list[int] = []
    while proc.poll() is None:
        now = time.monotonic()
        if now - start > limits.wall_seconds:
            _kill_group(proc)
            proc.wait()
            return "time", peak
        if limits.disk_bytes is not None and now - last_disk >= DISK_INTERVAL_S:
            last_disk = now
            if disk_usage(disk, limits.disk_bytes) > limits.disk_bytes:
                _kill_group(proc)
                proc.wait()
                return "disk", peak
        if now - last_tree >= TREE_INTERVAL_S:
            pids = known = _tree(proc.pid)
            last_tree = now
        else:
            pids = list(dict.fromkeys([*_tree(proc.pid, every_thread=False), *known]))
        files = _tmpfs_bytes(pids, limits.memory_bytes)
        if _rss(pids) + files > limits.memory_bytes or now - last_pss >= PEAK_INTERVAL_S:
            pss, mapped = _pss(pids)
            # What its memory file systems hold and no process of it maps (a mapped page, Ray's
            # object store in /dev/shm, is in its processes' PSS already).
            held, last_pss = pss + max(0, files - mapped), now
            peak = max(peak, held)
            if held > limits.memory_bytes:
                _kill_group(proc)
                proc.wait()
                return "memory", peak
        time.sleep(WATCH_INTERVAL_S)
    return None, peak


def _tmpfs_bytes(pids: Sequence[int], size: int) -> int:
    """What the lease's /tmp and /dev/shm hold, seen through the root of its first process
    inside the sandbox (bwrap's own first process stays outside). Until the sandbox has made
    them, that root shows the host's: a file system not of the size the sandbox gives its own
    is not the lease's, and counts nothing."""
    if len(pids) < 2:
        return 0
    total = 0
    for mount in ("tmp", "dev/shm"):
        try:
            fs = os.statvfs(f"/proc/{pids[1]}/root/{mount}")
        except OSError:
            continue  # gone meanwhile
        if abs(fs.f_blocks * fs.f_frsize - size) < PAGE_BYTES:
            total += (fs.f_blocks - fs.f_bfree) * fs.f_frsize
    return total


def disk_usage(paths: Sequence[Path], stop_above: int | None = None) -> int:
    """The bytes `paths` take on disk (allocated blocks, so a sparse file counts what it holds),
    never following a link; summing stops once past `stop_above`."""
    total = 0
    stack = [str(p) for p in paths]
    while stack:
        path = stack.pop()
        try:
            info = os.lstat(path)
        except OSError:
            continue
        total += info.st_blocks * 512
        if stop_above is not None and total > stop_above:
            return total
        if stat.S_ISDIR(info.st_mode):
            try:
                with os.scandir(path) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        else:
                            try:
                                total += entry.stat(follow_symlinks=False).st_blocks * 512
                            except OSError:
                                continue
            except OSError:
                continue
    return total


def _tree(root: int, every_thread: bool = True) -> list[int]:
    """`root` and every process under it, from the kernel's list of each thread's children
    (psutil's walk over every process of the machine where the kernel keeps no such list);
    without `every_thread`, only the children each process's main thread forked."""
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
            for task in os.listdir(f"/proc/{pid}/task") if every_thread else (str(pid),):
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


def _pss(pids: Sequence[int]) -> tuple[int, int]:
    """The processes' proportional set size — each one's private memory plus its share of what
    it maps with others (a library every worker loads counts once over them all) — and the part
    of it that is shared memory (tmpfs files, /dev/shm) they map."""
    total = shmem = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                    elif line.startswith("Pss_Shmem:"):
                        shmem += int(line.split()[1]) * 1024
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return total, shmem


def _apply_limits(limits: Limits) -> None:
    """Runs in the sandbox's first process, before bwrap: every process inside inherits these."""
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes, limits.max_processes))
    if limits.cpu_seconds is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.disk_bytes is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.disk_bytes, limits.disk_bytes))


def _kill_group(proc: subprocess.Popen) -> None:
    """Kills bwrap's group; its namespace's first process dies with it, and every process
    in the lease's PID namespace with that."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _tail(path: Path, size: int = 8192) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - size))
        return f.read().decode(errors="replace")


def _broken_limit(returncode: int, stderr: str) -> str | None:
    """Which limit a finished lease ran into, from how it ended."""
    if returncode == -signal.SIGXCPU or returncode == 128 + signal.SIGXCPU:
        return "time"
    if returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ) or "File too large" in stderr:
        return "disk"
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
