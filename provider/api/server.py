"""The site's HTTPS server: its listening socket, taken first, and uvicorn serving the app on it."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

from starlette.types import ASGIApp

from core.errors import UserError


def listen(host: str, port: int) -> socket.socket:
    """The site's listening socket. A site takes it before it starts its Ray cluster, whose
    processes bind free ports of their own while they start: the port is the site's from here."""
    try:
        return socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        raise UserError(f"The site cannot listen on {host}:{port} ({exc.strerror}); choose another port "
                        "with --port, or stop the program that holds it.") from None


def serve(app: ASGIApp, listener: socket.socket, certificate: Path, key: Path,
          ready: Callable[[], None] | None = None) -> None:
    """Serves `app` over HTTPS on `listener` (see `listen`) until SIGTERM or SIGINT."""
    import uvicorn

    host, port = listener.getsockname()[:2]
    # A stopping site gives requests in flight 10 s, and no longer waits on a kept-alive client's TLS
    # goodbye (30 s each, a client that keeps its connection and does not read). Its logging is the
    # process's one configuration (core.logs), not uvicorn's own handlers.
    config = uvicorn.Config(app, host=host, port=port, ssl_certfile=str(certificate), ssl_keyfile=str(key),
                            log_config=None, access_log=False, lifespan="off",
                            timeout_graceful_shutdown=10)

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if ready is not None:
                ready()

    Server(config).run(sockets=[listener])
