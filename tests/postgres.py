"""A throwaway PostgreSQL server for the tests (and the indexer benchmark).

Debian's `postgresql` package installs the server under /usr/lib/postgresql/<v>/bin
without putting it on PATH; `make test` installs the package when it is missing. The
server runs from a temporary data directory on a free port of 127.0.0.1 with trust
authentication. initdb refuses to run as root, so as root it runs as the `postgres` user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import pytest

from anvil.node import free_port

SUPERUSER = "postgres"


def postgres_bin() -> Path | None:
    """The directory holding initdb and pg_ctl: $SWARM_PG_BIN, PATH, or Debian's newest version."""
    override = os.environ.get("SWARM_PG_BIN")
    if override:
        return Path(override)
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
    )
    return versions[-1].parent if versions else None


class TempPostgres:
    """One PostgreSQL server in a temporary directory, stopped and removed by `stop()`."""

    def __init__(self, durable: bool = False) -> None:
        bin_dir = postgres_bin()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL is not installed (initdb not found); `make test` installs it.")
        self.bin = bin_dir
        self.durable = durable  # False: no fsync, for tests; True: the server's defaults, for benchmarks
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="swarm-pg-"))
        self.data = self.root / "data"
        self._names = count(1)
        self._as_postgres = os.geteuid() == 0

    @property
    def admin_url(self) -> str:
        return self.url("postgres")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> TempPostgres:
        if self._as_postgres:
            shutil.chown(self.root, SUPERUSER)
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-locale")
        settings = [
            "listen_addresses = '127.0.0.1'",
            f"port = {self.port}",
            "unix_socket_directories = ''",
            "max_connections = 50",
        ]
        if not self.durable:
            settings += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n".join(settings) + "\n")
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "-t", "60", "start"
        )
        return self

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = name or f"ledger_{next(self._names)}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.data.exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, tool: str, *args: str, check: bool = True) -> None:
        command = [str(self.bin / tool), *args]
        if self._as_postgres:
            command = ["runuser", "-u", SUPERUSER, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{tool} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
            )


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[TempPostgres]:
    """A PostgreSQL server for the whole session; the ledger tests need one (`make test` installs it)."""
    if postgres_bin() is None:
        pytest.fail("PostgreSQL is not installed; `make test` installs it (apt-get install postgresql).")
    server = TempPostgres().start()
    yield server
    server.stop()
