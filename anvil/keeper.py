"""Runs one anvil and keeps its chain state on disk so that no crash can cut the file short.

anvil's own `--state-interval` dumps rewrite the state file in place: a crash (kill -9, a lost
machine) in the middle of a dump leaves it truncated, and the chain cannot start from it again.
The keeper is the process `swarm chain up` leaves behind instead: it starts anvil as its child
(loading the state file, dumping nothing itself), asks it for its state every `interval` seconds
(`anvil_dumpState`), and replaces the file with a new one only once that is complete on disk
(written beside it, synced, renamed over it). A crash at any moment therefore leaves the last
complete dump: at most `interval` seconds of chain lost, as anvil's own dumps promised.

SIGTERM: one last dump, then anvil is stopped. anvil dies with the keeper (PR_SET_PDEATHSIG),
and the keeper with anvil, with its exit status; both share one process group, so killing the
group is how a crash is simulated (AnvilNode.kill).

    python -m anvil.keeper STATE_FILE INTERVAL_S HOST:PORT -- ANVIL_ARGV...

Only the standard library and anvil's own JSON-RPC client (anvil/rpc.py)."""

from __future__ import annotations

import ctypes
import gzip
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from anvil.errors import SwarmError
from anvil.rpc import JsonRpc

PR_SET_PDEATHSIG = 1
WATCH_S = 0.1  # how soon the keeper notices anvil's exit or its own stop


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def dump_state(rpc: JsonRpc) -> bytes | None:
    """The chain's state as anvil serializes it (the JSON its --load-state reads), or None when
    anvil does not answer yet."""
    try:
        result = rpc.call("anvil_dumpState")
    except SwarmError:  # ChainUnavailable while anvil starts, RpcError
        return None
    if not isinstance(result, str) or not result.startswith("0x"):
        return None
    return gzip.decompress(bytes.fromhex(result[2:]))


def write_whole(path: Path, data: bytes) -> None:
    """`data` at `path`, or the file as it was: never a part of it."""
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class Keeper:
    def __init__(self, state: Path, interval: float, address: str) -> None:
        self.state, self.interval = state, interval
        self.rpc = JsonRpc(f"http://{address}")  # where anvil listens: the keeper asks it for its state
        self.stopping = threading.Event()
        self._written = hashlib.sha256(state.read_bytes()).digest() if state.exists() else b""

    def save(self) -> None:
        data = dump_state(self.rpc)
        if data is None:
            return
        digest = hashlib.sha256(data).digest()
        if digest != self._written:  # an idle chain's state is not rewritten every interval
            write_whole(self.state, data)
            self._written = digest

    def run(self, argv: list[str]) -> int:
        if self.state.exists() and self.state.stat().st_size > 0:
            argv = [*argv, "--load-state", str(self.state)]
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        signal.signal(signal.SIGINT, lambda *_: self.stopping.set())
        anvil = subprocess.Popen(argv, preexec_fn=_die_with_parent)  # noqa: PLW1509 - prctl only
        saved = time.monotonic()
        while not self.stopping.wait(WATCH_S):
            if anvil.poll() is not None:
                return anvil.returncode
            if time.monotonic() - saved >= self.interval:
                self.save()
                saved = time.monotonic()
        if anvil.poll() is None:
            self.save()
            anvil.terminate()
            try:
                anvil.wait(15)
            except subprocess.TimeoutExpired:
                anvil.kill()
                anvil.wait()
        return 0


def main(args: list[str]) -> int:
    state, interval, address, separator, *argv = args
    if separator != "--" or not argv:
        print("usage: python -m anvil.keeper STATE_FILE INTERVAL_S HOST:PORT -- ANVIL_ARGV...",
              file=sys.stderr)
        return 2
    return Keeper(Path(state), float(interval), address).run(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
