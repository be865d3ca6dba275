"""Start, stop and report a local anvil whose chain state persists under $SWARM_HOME."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from anvil.errors import AnvilError
from anvil.rpc import RpcClient
from core.starting import START_CEILING_S, NotStarted, Starting, wait_until

REPO_ROOT = Path(__file__).resolve().parents[1]
READY_LINE = "Listening on"


@dataclass(frozen=True)
class AnvilConfig:
    """Where and how the local devnet runs."""

    home: Path  # $SWARM_HOME; anvil keeps its files in home/anvil
    port: int = 8545
    host: str = "127.0.0.1"
    chain_id: int = 31337
    state_interval: int = 2  # seconds between the keeper's state dumps, so a killed node loses little
    block_time: int | None = None  # None: mine a block per transaction
    startup_timeout: float = START_CEILING_S  # for anvil alive and starting; its exit fails at once

    @property
    def directory(self) -> Path:
        return self.home / "anvil"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class AnvilStatus:
    running: bool
    url: str
    pid: int | None
    chain_id: int | None
    block_number: int | None
    state_file: str
    state_bytes: int

    def as_dict(self) -> dict:
        return asdict(self)


def anvil_binary() -> Path:
    """The native anvil from the pinned npm package (or $SWARM_ANVIL_BIN)."""
    override = os.environ.get("SWARM_ANVIL_BIN")
    if override:
        return Path(override)
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )
    system = platform.system().lower()
    candidate = REPO_ROOT / "node_modules" / "@foundry-rs" / f"anvil-{system}-{arch}" / "bin" / "anvil"
    if not candidate.exists():
        raise AnvilError(
            f"anvil is not installed ({candidate} is missing). Run `npm ci` in the repository, "
            "or set SWARM_ANVIL_BIN to an anvil binary."
        )
    return candidate


class AnvilNode:
    """One local anvil process, found again across commands through its pid file."""

    def __init__(self, config: AnvilConfig) -> None:
        self.config = config
        self.rpc = RpcClient(config.url)

    # ── paths ────────────────────────────────────────────────────────────────
    @property
    def state_file(self) -> Path:
        return self.config.directory / "state.json"

    @property
    def pid_file(self) -> Path:
        return self.config.directory / "anvil.pid"

    @property
    def log_file(self) -> Path:
        return self.config.directory / "anvil.log"

    # ── lifecycle ────────────────────────────────────────────────────────────
    def start(self) -> AnvilStatus:
        """Starts anvil from its saved state, or reports the one already running."""
        pid = self._live_pid()
        if pid is not None:
            if self.rpc.is_up():
                return self.status()
            raise AnvilError(
                f"anvil (pid {pid}) is running but not answering at {self.config.url}; "
                "stop it with `swarm chain down` and start again."
            )
        if _port_in_use(self.config.host, self.config.port):
            raise AnvilError(
                f"Port {self.config.port} on {self.config.host} is already in use by another program; "
                "choose another with --port (or SWARM_ANVIL_PORT), or stop that program."
            )
        self.config.directory.mkdir(parents=True, exist_ok=True)
        process = self._spawn()
        self.pid_file.write_text(str(process.pid))
        self._write_settings()
        self._wait_ready(process)
        return self.status()

    def stop(self, timeout: float = 15.0) -> bool:
        """Stops anvil gracefully so it writes its state; returns False if none was running."""
        pid = self._live_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        if not _wait_exit(pid, timeout):
            os.killpg(pid, signal.SIGKILL)
            _wait_exit(pid, 5.0)
        _wait_group_exit(pid, 5.0)
        self.pid_file.unlink(missing_ok=True)
        return True

    def kill(self) -> None:
        """Kills anvil and its keeper at once (no final state dump), as a crash would."""
        pid = self._live_pid()
        if pid is not None:
            os.killpg(pid, signal.SIGKILL)  # the keeper leads the group anvil runs in
            _wait_exit(pid, 5.0)
            _wait_group_exit(pid, 5.0)  # anvil too, so its port is free again
        self.pid_file.unlink(missing_ok=True)

    def status(self) -> AnvilStatus:
        pid = self._live_pid()
        up = pid is not None and self.rpc.is_up()
        state_bytes = self.state_file.stat().st_size if self.state_file.exists() else 0
        return AnvilStatus(
            running=up,
            url=self.config.url,
            pid=pid,
            chain_id=self.rpc.chain_id() if up else None,
            block_number=self.rpc.block_number() if up else None,
            state_file=str(self.state_file),
            state_bytes=state_bytes,
        )

    # ── internals ────────────────────────────────────────────────────────────
    def _spawn(self) -> subprocess.Popen:
        cfg = self.config
        anvil = [
            str(anvil_binary()),
            "--host", cfg.host,
            "--port", str(cfg.port),
            "--chain-id", str(cfg.chain_id),
        ]
        if cfg.block_time:
            anvil += ["--block-time", str(cfg.block_time)]
        # The keeper (anvil/keeper.py) runs anvil and writes its state file whole, never in place.
        host = "127.0.0.1" if cfg.host in ("0.0.0.0", "::") else cfg.host  # anvil listens everywhere
        args = [sys.executable, "-m", "anvil.keeper", str(self.state_file), str(cfg.state_interval),
                f"{host}:{cfg.port}", "--", *anvil]
        log = open(self.log_file, "ab")  # noqa: SIM115 - handed to the child
        try:
            return subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                cwd=REPO_ROOT,
            )
        except OSError as exc:
            raise AnvilError(f"anvil could not be started ({exc}); run `npm ci` in the repository.") from exc
        finally:
            log.close()

    def _wait_ready(self, process: subprocess.Popen) -> None:
        """Waits for anvil's own 'Listening on' line and its port's answer, while it lives and starts
        (core.starting): its exit fails the start at once, with its log's last line."""
        offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        with open(self.log_file, "rb") as log:
            log.seek(max(0, offset - 4096))
            seen = bytearray()

            def listening() -> bool | None:
                seen.extend(log.read())
                return True if READY_LINE.encode() in seen and self.rpc.is_up() else None

            try:
                wait_until(Starting("the local anvil", process, self.log_file), listening,
                           self.config.startup_timeout, poll_s=0.05)
            except NotStarted:
                if process.poll() is None:  # alive at the ceiling: stuck
                    process.kill()
                self.pid_file.unlink(missing_ok=True)
                raise

    def _write_settings(self) -> None:
        settings = {"url": self.config.url, "port": self.config.port, "chain_id": self.config.chain_id}
        (self.config.directory / "node.json").write_text(json.dumps(settings, indent=2))

    def _live_pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _alive(pid) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) counts as gone once its last thread is.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z" or _threads_left(pid)
    except FileNotFoundError:
        return True


def _threads_left(pid: int) -> bool:
    """Whether a process whose first thread has ended still has others. A killed process's
    threads end one by one, and what they share (anvil's listening socket) closes with the last:
    its first thread shows as a zombie before that (milliseconds apart on a busy machine)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except (FileNotFoundError, ProcessLookupError):
        return False


def _group_alive(group: int) -> bool:
    """Whether a process of process group `group` still runs (zombies whose threads have all
    ended do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and (fields[0] != "Z" or _threads_left(int(stat.parent.name))):
            return True
    return False


def _wait_group_exit(group: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.02)


def _wait_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        with contextlib.suppress(ChildProcessError):  # reap it if it is our own child
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    return not _alive(pid)


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


# Ports handed out for devnets lie below the kernel's ephemeral range, where every other
# program's port-0 binds land (Ray's processes make many), above Ray's worker ports (10002–19999)
# and below those a site draws for its Ray processes (compute.node.free_port: 26000 up): a port a
# devnet was given is still free when the devnet starts again on it.
PORTS_FROM, PORTS_BELOW = 20_000, 26_000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port() -> int:
    """An unused TCP port on 127.0.0.1, for tests and parallel devnets."""
    import random

    try:
        below = min(int(EPHEMERAL_RANGE.read_text().split()[0]), PORTS_BELOW)
    except (OSError, ValueError, IndexError):
        below = PORTS_FROM
    draw = random.SystemRandom()
    for _ in range(100 if below > PORTS_FROM + 1_000 else 0):
        port = draw.randrange(PORTS_FROM, below)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # no such range here: any free port
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
