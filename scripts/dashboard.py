"""`swarm dashboard`: serve the live page, the JSON API and /metrics over the ledger database."""

from __future__ import annotations

import socket

import click

from ledger.config import database_url
from ledger.errors import SwarmError
from scripts.common import settings

# The command line loads what a command needs as it runs: `swarm --help` imports this module, so what only
# some of its commands need — the dashboard's server (FastAPI, uvicorn, the ORM) — loads inside them
# (tests/test_startup.py, bench/startup.py).

DEFAULT_PORT = 8600


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), default=DEFAULT_PORT, show_default=True,
              help="TCP port to serve on.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but loopback shows the ledger to the network.")
@click.option("--chain-id", type=int, default=None,
              help="The chain to show when the ledger indexes several.")
def dashboard(port: int, host: str, chain_id: int | None) -> None:
    """Serve a live page of providers, jobs, rewards and slashes, a JSON API and Prometheus /metrics."""
    import uvicorn

    from dashboard import create_app

    s = settings()
    app = create_app(s.home, database_url(s.home), chain_id)
    source = app.state.source
    sock = listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    click.echo(
        f"Swarm dashboard on http://{shown}:{port} (chain {source.chain_id}, ledger {source.database}); "
        "Ctrl-C stops it."
    )
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shut down cleanly first, then re-raised the Ctrl-C
        pass
    finally:
        sock.close()


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, bound before the server starts so a busy port is one sentence."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise SwarmError(f"--host {host!r} is not an address of this machine ({exc.strerror}); "
                         "give an IP such as 127.0.0.1.") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait out TIME_WAIT
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise SwarmError(f"Cannot serve the dashboard on {host}:{port} ({exc.strerror}); "
                         "choose another port with --port.") from None
    sock.set_inheritable(True)
    return sock
