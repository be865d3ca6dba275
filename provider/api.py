"""A provider's site over HTTPS (docs/architecture.md §4): the agent's API.

Every request but `/v1/info` carries a signature (headers `Swarm-Nonce`, `Swarm-Expires`,
`Swarm-Signature`) over the action its route names, the site, the job, the keccak of its body,
the nonce and the expiry; the site serves it only if `authorize` — the chain's rules in
`provider.auth` — says so, and before anything runs. A refusal is a status and one sentence.
"""

from __future__ import annotations

import json
import re
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Request  # module level: FastAPI resolves the routes' annotations here

from compute.errors import ComputeError
from core.errors import Refused
from ledger.errors import ChainUnavailable, InvalidInput
from ledger.units import parse_address
from provider.agent import MAX_CELLS, PROBE_TIMEOUT_S, Site
from provider.auth import JobView
from provider.mesh import HeadMesh
from provider.serving import MAX_BODY_BYTES, ServingLeases
from wire.request import SiteRequest

# (request, signature, spec hash or None) -> the signer's address and, for a lease action, what the
# chain says of the job; raises Refused
Authorizer = Callable[[SiteRequest, bytes, "bytes | None"], "tuple[str, JobView | None]"]


def make_app(site: Site, authorize: Authorizer, chain_id: int, market: str, mesh: HeadMesh | None = None,
             serving: ServingLeases | None = None):
    """The site's API; every route but /v1/info needs a request the chain authorizes, but the
    mesh's (`/v1/mesh/…`, when the site runs one), which the site's own machines call with the
    site's join secret, and serving's calls, claims and vouchers (`/v1/serving/…`), which the
    buyer's receipts and vouchers authorize."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, PlainTextResponse
    from starlette.concurrency import run_in_threadpool  # the site's calls block (Ray, the job API)

    app = FastAPI(title="Swarm site", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(Refused)
    async def refused(_request: Request, exc: Refused):
        return JSONResponse({"error": str(exc)}, status_code=exc.status)

    @app.exception_handler(ComputeError)
    async def failed(_request: Request, exc: ComputeError):
        return JSONResponse({"error": str(exc)}, status_code=500)

    @app.exception_handler(ChainUnavailable)
    async def chain_down(_request: Request, exc: ChainUnavailable):
        # No one's fault, and passing: the caller asks again (the market follows a lease through it).
        return JSONResponse({"error": f"The site cannot reach its chain node now ({exc}); ask again "
                                      "shortly."}, status_code=503)

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception):
        import traceback

        traceback.print_exception(exc, file=sys.stderr)  # the operator's log; the caller gets one sentence
        return JSONResponse({"error": f"The site failed to serve {request.url.path} ({type(exc).__name__}); "
                                      "its operator's log has the details."}, status_code=500)

    async def check(
        request: Request, action: str, job_id: int, spec_hash: bytes | None = None
    ) -> tuple[bytes, Any]:
        body, job, _signer = await signed(request, action, job_id, spec_hash)
        return body, job

    async def signed(
        request: Request, action: str, job_id: int, spec_hash: bytes | None = None
    ) -> tuple[bytes, Any, str]:
        body = await request.body()
        try:
            nonce = int(request.headers["swarm-nonce"])
            expires = int(request.headers["swarm-expires"])
            signature = bytes.fromhex(request.headers["swarm-signature"].removeprefix("0x"))
        except (KeyError, ValueError):
            raise Refused(
                401, "The request is not signed: send Swarm-Nonce, Swarm-Expires and Swarm-Signature."
            )
        from wire.request import body_hash

        signed = SiteRequest(action, site.provider, job_id, body_hash(body), nonce, expires)
        signer, job = await run_in_threadpool(authorize, signed, signature,
                                              spec_hash if action == "lease.start" else None)
        return body, job, signer

    async def mesh_body(request: Request, fields: tuple[str, ...]) -> dict[str, Any]:
        if mesh is None:
            raise Refused(404, "This site runs no mesh; serve it with --mesh-endpoint HOST:PORT.")
        try:
            raw = json.loads(await request.body())
            if not isinstance(raw, dict) or not isinstance(raw.get("secret"), str) \
                    or not set(fields) <= set(raw):
                raise TypeError
            return raw
        except (ValueError, TypeError):
            shape = ", ".join(f'"{f}": ...' for f in ("secret", *fields))
            raise Refused(400, f"A mesh request's body is {{{shape}}}.") from None

    @app.post("/v1/mesh/join")
    async def mesh_join(request: Request):
        """A machine of the site joins: its name, its public key, and where it listens (null: it
        only dials out). The answer: its address in the mesh and its peers."""
        raw = await mesh_body(request, ("name", "public_key", "endpoint"))
        assert mesh is not None
        return await run_in_threadpool(mesh.join, raw["secret"], str(raw["name"]), str(raw["public_key"]),
                                       raw["endpoint"] if isinstance(raw["endpoint"], str) else None)

    @app.post("/v1/mesh/peers")
    async def mesh_peers(request: Request):
        raw = await mesh_body(request, ("public_key",))
        assert mesh is not None
        return {"peers": mesh.coordinator.peers(raw["secret"], str(raw["public_key"]))}

    @app.post("/v1/mesh/machines")
    async def mesh_machines(request: Request):
        raw = await mesh_body(request, ())
        assert mesh is not None
        return {"network": mesh.coordinator.state.network, "machines": mesh.machines(raw["secret"])}

    @app.post("/v1/mesh/remove")
    async def mesh_remove(request: Request):
        raw = await mesh_body(request, ("name",))
        assert mesh is not None
        removed = await run_in_threadpool(mesh.remove, raw["secret"], str(raw["name"]))
        return {"removed": removed.name, "address": removed.address}

    @app.get("/v1/info")
    async def info():
        """Public: whose site this is, for which deployment, and what it has."""
        return {"provider": site.provider, "chain_id": chain_id, "market": market,
                "capacity": await run_in_threadpool(site.capacity)}

    @app.post("/v1/leases/{job_id}")
    async def start(job_id: int, request: Request):
        """The body: {"spec": the job's spec as posted (its keccak is the chain's spec hash),
        "prior": the spec of the job whose result it builds on, for a job:<id> model}."""
        from wire.request import body_hash

        try:
            raw = json.loads(await request.body())
            spec = raw["spec"].encode()
            prior = raw["prior"].encode() if raw.get("prior") is not None else None
        except (ValueError, KeyError, TypeError, AttributeError):
            raise Refused(
                400, 'A lease starts from a JSON body {"spec": "...", "prior": "..." or null}.'
            ) from None
        _, job = await check(request, "lease.start", job_id, spec_hash=body_hash(spec))
        return (await run_in_threadpool(site.start, job, job_id, spec, prior)).as_dict()

    @app.get("/v1/leases/{job_id}")
    async def status(job_id: int, request: Request):
        _, job = await check(request, "lease.status", job_id)
        return (await run_in_threadpool(site.status, job, job_id)).as_dict()

    @app.get("/v1/leases/{job_id}/logs")
    async def logs(job_id: int, request: Request, offset: int | None = None):
        """The last of what the lease printed, as text; with `?offset=N`, for a follower, what it
        printed from byte N on, as JSON (`Site.log_since`)."""
        _, job = await check(request, "lease.logs", job_id)
        if offset is not None:
            return await run_in_threadpool(site.log_since, job, job_id, offset)
        return PlainTextResponse(await run_in_threadpool(site.logs, job, job_id))

    @app.get("/v1/leases/{job_id}/result")
    async def result(job_id: int, request: Request):
        _, job = await check(request, "lease.result", job_id)
        status = await run_in_threadpool(site.status, job, job_id)
        if status.state != "succeeded":
            raise Refused(409, f"Job {job_id}'s lease is {status.state}; it has no result.")
        return status.as_dict()

    @app.post("/v1/leases/{job_id}/stop")
    async def stop(job_id: int, request: Request):
        _, job = await check(request, "lease.stop", job_id)
        return (await run_in_threadpool(site.stop, job, job_id)).as_dict()

    def leases() -> ServingLeases:
        if serving is None:
            raise Refused(404, "This site serves no models.")
        return serving

    @app.post("/v1/serving")
    async def serving_deploy(request: Request):
        """A buyer with a deposit deploys a model: the body is its serving order (provider.serving)."""
        body, _, buyer = await signed(request, "serve.deploy", 0)
        return await run_in_threadpool(leases().deploy, buyer, body)

    @app.get("/v1/serving")
    async def serving_list():
        """Public: the site's serving leases, what each serves, at what price, until when."""
        return {"leases": await run_in_threadpool(leases().leases)}

    @app.get("/v1/serving/{lease}")
    async def serving_info(lease: str):
        return await run_in_threadpool(leases().info, lease)

    @app.post("/v1/serving/{lease}/stop")
    async def serving_stop(lease: str, request: Request):
        number = int(lease.removeprefix("serve-")) if lease.removeprefix("serve-").isdigit() else 0
        _, _, buyer = await signed(request, "serve.stop", number)
        return await run_in_threadpool(leases().stop, buyer, lease)

    # A model's calls (`POST /v1/serving/<lease>/predict`, `…/v1/completions`) are served by
    # ServingCalls, in front of this app: see there.

    @app.post("/v1/serving/claim")
    async def serving_claim(request: Request):
        """What the site asks a buyer to sign: its previous voucher and its receipts charged since."""
        try:
            buyer = parse_address(json.loads(await request.body())["buyer"], "buyer")
        except (ValueError, KeyError, TypeError, InvalidInput):
            raise Refused(400, 'A claim\'s body is {"buyer": "0x…"}.') from None
        book = leases().book
        return book.claim(buyer).as_dict() | {"owed": {k: str(v) for k, v in book.owed(buyer).items()}}

    @app.post("/v1/serving/voucher")
    async def serving_voucher(request: Request):
        """A buyer's voucher for a claim: {"voucher": {buyer, provider, cumulative, signature},
        "receipts": [nonce (hex), ...]}."""
        from ledger.serving import Voucher

        try:
            raw = json.loads(await request.body())
            voucher = Voucher.from_dict(raw["voucher"])
            nonces = [int(n, 16) for n in raw["receipts"]]
        except (ValueError, KeyError, TypeError, AttributeError, InvalidInput):
            raise Refused(400, 'A voucher\'s body is {"voucher": {"buyer", "provider", "cumulative", '
                               '"signature"}, "receipts": ["<nonce hex>", ...]}.') from None
        cumulative = leases().book.aggregate(voucher, nonces)
        return {"buyer": voucher.buyer, "cumulative": str(cumulative)}

    @app.post("/v1/probe")
    async def probe(request: Request):
        body, _ = await check(request, "probe", 0)
        try:
            timeout_s = min(
                60.0, max(0.1, float(json.loads(body or b"{}").get("timeout_s", PROBE_TIMEOUT_S)))
            )
        except (ValueError, TypeError, AttributeError):
            raise Refused(400, 'A probe\'s body is {"timeout_s": SECONDS} or empty.') from None
        return {"provider": site.provider, "nodes": await run_in_threadpool(site.probe, timeout_s)}

    def timeout_of(raw: dict[str, Any]) -> float:
        return min(600.0, max(0.1, float(raw.get("timeout_s", 120))))

    async def challenge_body(request: Request, shape: str) -> dict[str, Any]:
        body, _ = await check(request, "challenge", 0)
        try:
            raw = json.loads(body)
            if not isinstance(raw, dict):
                raise TypeError
            timeout_of(raw)
            return raw
        except (ValueError, TypeError):
            raise Refused(400, f"A challenge request's body is {shape}.") from None

    @app.post("/v1/challenge/ready")
    async def challenge_ready(request: Request):
        shape = ('{"params": {"size": N, "rounds": N, "stride": N, "precision": "fp32|bf16|fp16"}, '
                 '"vram_mb": MIB, "timeout_s": SECONDS}')
        raw = await challenge_body(request, shape)
        params, vram_mb = raw.get("params"), raw.get("vram_mb", 0)
        if not isinstance(params, dict) or set(params) != {"size", "rounds", "stride", "precision"} \
                or not all(type(params[k]) is int for k in ("size", "rounds", "stride")) \
                or type(vram_mb) not in (int, float) or not 0 <= vram_mb <= 1 << 24:
            raise Refused(400, f"A challenge request's body is {shape}.")
        from compute.challenge import Challenge

        try:
            Challenge(seed=0, **params)
        except ComputeError as exc:
            raise Refused(400, f"The challenge cannot be readied: {exc}") from None
        return await run_in_threadpool(site.challenge_ready, params, timeout_of(raw), float(vram_mb))

    @app.post("/v1/challenge/commit")
    async def challenge_commit(request: Request):
        shape = '{"ticket": "...", "seed": N, "timeout_s": SECONDS}'
        raw = await challenge_body(request, shape)
        seed = raw.get("seed")
        if not isinstance(raw.get("ticket"), str) or type(seed) is not int or not 0 <= seed < 1 << 64:
            raise Refused(400, f"A challenge request's body is {shape}.")
        return await run_in_threadpool(site.challenge_commit, raw["ticket"], seed, timeout_of(raw))

    @app.post("/v1/challenge/open")
    async def challenge_open(request: Request):
        shape = '{"ticket": "...", "cells": [[CHECKPOINT, ROW], ...], "timeout_s": SECONDS}'
        raw = await challenge_body(request, shape)
        cells = raw.get("cells")
        if (
            not isinstance(raw.get("ticket"), str)
            or not isinstance(cells, list)
            or not 0 <= len(cells) <= MAX_CELLS  # none: end it unopened
            or not all(isinstance(c, list) and len(c) == 2 and all(type(v) is int for v in c) for c in cells)
        ):
            raise Refused(400, f"A challenge request's body is {shape}, at most {MAX_CELLS} cells.")
        try:
            return await run_in_threadpool(site.challenge_open, raw["ticket"], [tuple(c) for c in cells],
                                           timeout_of(raw))
        except ValueError as exc:  # a cell the challenge does not have
            raise Refused(400, str(exc)) from None

    return app if serving is None else ServingCalls(app, serving)


_CALL = re.compile(r"/v1/serving/([A-Za-z0-9_-]{1,64})/(predict|v1/completions)")


class ServingCalls:
    """The site's app with a model's calls taken straight to `ServingLeases.forward`: the one path
    buyers call thousands of times a second, past FastAPI's routing and middleware (half the time
    a call spent in the site, measured: BENCHMARKS.md). Its errors are the app's: a refusal its
    status and one sentence, the chain away 503, anything else 500 with the details in the log.
    Every other request goes to the app."""

    def __init__(self, app, serving: ServingLeases) -> None:
        self.app = app
        self.serving = serving

    async def __call__(self, scope, receive, send) -> None:
        match = _CALL.fullmatch(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" \
            else None
        if match is None:
            await self.app(scope, receive, send)
            return
        lease, route = match.groups()
        headers: dict[str, str] = {}
        try:
            body = await _body(receive, MAX_BODY_BYTES)
            receipt = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"swarm-receipt"), None)
            status, answer, headers = await self.serving.forward(lease, route, body, receipt)
        except Refused as exc:
            status, answer = exc.status, _error(str(exc))
        except ChainUnavailable as exc:
            status, answer = 503, _error(f"The site cannot reach its chain node now ({exc}); ask again "
                                         "shortly.")
        except Exception as exc:  # noqa: BLE001 -- the operator's log has it; the caller one sentence
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
            status, answer = 500, _error(f"The site failed to serve {scope['path']} ({type(exc).__name__}); "
                                         "its operator's log has the details.")
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode()),
            *((k.lower().encode(), v.encode()) for k, v in headers.items())]})
        await send({"type": "http.response.body", "body": answer})


async def _body(receive, limit: int) -> bytes:
    """The request's body; past `limit` bytes, a 413 before the rest is read."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Refused(400, "The caller went away before its request's body arrived.")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"The body is over {limit} bytes.")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _error(sentence: str) -> bytes:
    return json.dumps({"error": sentence}).encode()


def listen(host: str, port: int) -> socket.socket:
    """The site's listening socket. A site takes it before it starts its Ray cluster, whose
    processes bind free ports of their own while they start: the port is the site's from here."""
    try:
        return socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        raise ComputeError(f"The site cannot listen on {host}:{port} ({exc.strerror}); choose another port "
                           "with --port, or stop the program that holds it.") from None


def serve(
    app, listener: socket.socket, certificate: Path, key: Path, ready: Callable[[], None] | None = None
) -> None:
    """Serves `app` over HTTPS on `listener` (see `listen`) until SIGTERM or SIGINT."""
    import uvicorn

    host, port = listener.getsockname()[:2]
    # A stopping site gives requests in flight 10 s, and no longer waits on a kept-alive client's TLS
    # goodbye (30 s each, a client that keeps its connection and does not read).
    config = uvicorn.Config(app, host=host, port=port, ssl_certfile=str(certificate), ssl_keyfile=str(key),
                            log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=10)
    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if ready is not None:
                ready()

    Server(config).run(sockets=[listener])
