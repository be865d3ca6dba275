"""The dashboard's web app: the page at `/`, the JSON API under `/api`, Prometheus at `/metrics`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlmodel import Session

from dashboard import data
from dashboard.metrics import registry
from ledger.db import DatabaseUnavailable, database_errors

PAGE = Path(__file__).resolve().parent / "static" / "index.html"


def create_app(home: Path, db_url: str, chain_id: int | None = None) -> FastAPI:
    """The app over the ledger at `db_url` (refused, in one sentence, when it holds nothing yet)."""
    source = data.open_source(home, db_url, chain_id)
    metrics = registry(source)
    page = PAGE.read_text(encoding="utf-8")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        source.engine.dispose()

    app = FastAPI(title="Swarm dashboard", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.source = source

    def read(query: Callable[[Session], Any]) -> Any:
        with database_errors(source.database), source.session() as session:
            return query(session)

    @app.exception_handler(DatabaseUnavailable)
    async def _unavailable(_, exc: DatabaseUnavailable) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=503)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    @app.get("/api/summary")
    def summary() -> dict:
        """Counts, totals, the latest epoch and the jobs running now."""
        return read(lambda s: data.summary(s, source))

    @app.get("/api/providers")
    def providers() -> list[dict]:
        """Every provider: declared hardware and price, stake, jail state, latest scores, rewards."""
        return read(lambda s: data.providers(s, source))

    @app.get("/api/jobs")
    def jobs(limit: int = Query(100, ge=1, le=1000)) -> list[dict]:
        """The newest jobs, with the market's state and per-epoch training metrics."""
        return read(lambda s: data.jobs(s, source, limit))

    @app.get("/api/jobs/{job_id}")
    def job(job_id: int) -> Any:
        """One job with its spec, its program's metrics and reports, a failed lease's last lines and the
        market's transitions."""
        found = read(lambda s: data.job_detail(s, source, job_id))
        if found is None:
            return JSONResponse(
                {"error": f"Job {job_id} is not in the ledger of chain {source.chain_id}; "
                          "check the id, or wait for the indexer to catch up."},
                status_code=404,
            )
        return found

    @app.get("/api/epochs")
    def epochs(limit: int = Query(data.EPOCHS_SHOWN, ge=1, le=1000)) -> list[dict]:
        """The oracle's newest epochs, oldest first: utilization, emission, each provider's reward."""
        return read(lambda s: data.epochs(s, source, limit))

    @app.get("/api/slashes")
    def slashes(limit: int = Query(100, ge=1, le=1000)) -> dict:
        """Slashes applied on chain, and the oracle's slashing decisions with their reasons."""
        return read(lambda s: data.slashes(s, source, limit))

    @app.get("/metrics", include_in_schema=False)
    def prometheus() -> Response:
        return Response(generate_latest(metrics), media_type=CONTENT_TYPE_LATEST)

    return app
