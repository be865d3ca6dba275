"""A provider's site (docs/architecture.md §4): the agent on the provider's head machine
that owns the provider's Ray cluster and serves it over HTTPS to those the chain allows.

`Site` keeps the leases: each is a Ray job of the site's cluster, submitted through Ray's
job submission API (`compute.lease` is its entrypoint, the plan travels in the job), whose
work runs in a sandbox on whichever machine of the site Ray places it. The site reads a
lease's log and its launcher's verdict back through Ray's job API. A lease is started once
per job: starting it again returns the lease that exists. When the node running a lease is
lost, the site submits the lease again and it resumes from its last checkpoint (in the
buyer's output when that is a directory the site's machines share, or in the lease's
directory when it runs on the same machine again).
When a lease succeeds the site
signs (jobId, resultHash, units) with the provider's key: the provider's own word on the
result, which the market must bring to the chain.

`make_app` is the HTTP face. Every request carries a signature (headers `Swarm-Nonce`,
`Swarm-Expires`, `Swarm-Signature`) over the action its route names, the site, the job, the
keccak of its body, the nonce and the expiry; the site serves it only if `authorize` — the
chain's rules in `compute.site_auth` — says so, and before anything runs. This module knows
no chain and no market: the caller brings the authorization, the planning of a lease from a
job's spec and the signing of results.
"""

from __future__ import annotations

import json
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fastapi import Request  # module level: FastAPI resolves the routes' annotations here

from compute.errors import ComputeError
from compute.lease import HERE, VERDICT, WORK, LeasePlan, Outcome, ray_job, verdict
from compute.site_auth import JobView, Refused, SiteRequest

MAX_ATTEMPTS = 3  # a lease whose node is lost runs again, from its checkpoint, this often
LOG_TAIL_BYTES = 64 * 1024
PROBE_TIMEOUT_S = 10.0
CHALLENGE_KEEP_S = 300.0  # a readied challenge's worker ends this long after, if never opened
MAX_CHALLENGES = 8  # readied challenges a site holds at once
MAX_CELLS = 4096  # rows one opening request may ask for

# (what the chain says of the job, job_id, spec bytes, lease number, the lease's own storage
# directory, the spec of the job whose result it builds on or None) -> the lease to run;
# raises Refused for a spec it cannot run
Planner = Callable[[JobView, int, bytes, int, Path, "bytes | None"], LeasePlan]
# (job_id, result_hash, units) -> the provider's signature
ResultSigner = Callable[[int, bytes, int], bytes]
# (request, signature, spec hash or None) -> the signer's address and, for a lease action, what the
# chain says of the job; raises Refused
Authorizer = Callable[[SiteRequest, bytes, "bytes | None"], "tuple[str, JobView | None]"]


@dataclass(frozen=True)
class LeaseStatus:
    job_id: int
    state: str  # pending | running | succeeded | failed | stopped
    attempt: int
    error: str | None = None
    broke: str | None = None  # the limit a failed lease broke: the buyer's fault
    result_hash: str | None = None
    units: int = 0
    unit: str = "cpu-seconds"
    signature: str | None = None  # 0x, the provider's over (jobId, resultHash, units)
    metrics: dict[str, Any] | None = None
    fault: str | None = None  # a failed lease's: "buyer" (its job) or "provider" (the site lost it)
    compute_id: str | None = None  # its compute job id: the name of its results in the buyer's output
    result_uri: str | None = None  # where its results went: <the buyer's output>/<compute id>

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Site:
    """The leases of one provider's site, run on its Ray cluster."""

    def __init__(self, root: Path, provider: str, dashboard_url: str, planner: Planner, signer: ResultSigner,
                 hidden: tuple[str, ...] = ()) -> None:
        from ray.job_submission import JobSubmissionClient

        self.root = root
        self.leases = root / "leases"
        self.leases.mkdir(parents=True, exist_ok=True)
        self.provider = provider
        self.planner = planner
        self.signer = signer
        self.hidden = tuple(hidden) + (str(self.leases),)
        self.jobs = JobSubmissionClient(dashboard_url)
        self._lock = threading.Lock()
        self._challenges: dict[str, tuple[Any, dict[str, Any], float]] = {}  # ticket → (worker, params, until)

    # ── leases ───────────────────────────────────────────────────────────────
    def start(self, job: JobView, job_id: int, spec: bytes, prior: bytes | None = None) -> LeaseStatus:
        """Starts the job's lease, once: a lease that exists is returned as it is. `prior` is
        the spec of the job whose result this one builds on (`job:<id>`), if any."""
        with self._lock:
            directory = self._dir(job, job_id)
            if (directory / "lease.json").is_file():
                return self.status(job, job_id)
            plan = self.planner(job, job_id, spec, self._next_number(), Path(HERE) / WORK / "storage", prior)
            plan = LeasePlan(**(asdict(plan) | {"hidden": tuple(plan.hidden) + self.hidden,
                                                 "verdict_key": secrets.token_hex(16)}))
            plan.write(directory)
            self._submit(directory, plan)
        return self.status(job, job_id)

    def status(self, job: JobView, job_id: int) -> LeaseStatus:
        directory = self._existing(job, job_id)
        plan = LeasePlan.read(directory)
        if (directory / "stopped").exists():
            return LeaseStatus(job_id, "stopped", plan.attempt, error="stopped at the market's request",
                               fault="buyer")
        outcome = Outcome.read(directory)
        if outcome is not None and outcome.attempt == plan.attempt:
            return self._finished(job_id, directory, outcome)
        from ray.job_submission import JobStatus

        submission = _submission(directory, plan.attempt)
        state = self.jobs.get_job_status(submission)
        if state in (JobStatus.PENDING, JobStatus.RUNNING):
            return LeaseStatus(job_id, state.value.lower(), plan.attempt)
        outcome = verdict(self._job_log(submission), plan.verdict_key)  # from whichever machine ran it
        if outcome is not None and outcome.attempt == plan.attempt:
            outcome.write(directory)
            return self._finished(job_id, directory, outcome)
        # The Ray job ended with no outcome written: its node was lost under it.
        with self._lock:
            if plan.attempt >= MAX_ATTEMPTS:
                return LeaseStatus(job_id, "failed", plan.attempt, fault="provider",
                                   error=f"the site lost the node running it {plan.attempt} times")
            plan = LeasePlan(**(asdict(plan) | {"attempt": plan.attempt + 1}))
            plan.write(directory)
            self._submit(directory, plan)
        return LeaseStatus(job_id, "pending", plan.attempt)

    def logs(self, job: JobView, job_id: int) -> str:
        """What the lease's attempts printed, the last LOG_TAIL_BYTES of it, from Ray's job logs."""
        directory = self._existing(job, job_id)
        plan = LeasePlan.read(directory)
        text = "".join(self._job_log(_submission(directory, attempt)) for attempt in range(1, plan.attempt + 1))
        mark = f"{VERDICT}{plan.verdict_key} "
        text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(mark))
        return text.encode()[-LOG_TAIL_BYTES:].decode(errors="replace")

    def _job_log(self, submission: str) -> str:
        try:
            return self.jobs.get_job_logs(submission)
        except RuntimeError:  # a job Ray no longer knows, or whose node's log is gone with it
            return ""

    def stop(self, job: JobView, job_id: int) -> LeaseStatus:
        directory = self._existing(job, job_id)
        plan = LeasePlan.read(directory)
        (directory / "stopped").touch()
        try:
            self.jobs.stop_job(_submission(directory, plan.attempt))
        except RuntimeError:
            pass  # it had ended already
        return self.status(job, job_id)

    def _finished(self, job_id: int, directory: Path, outcome: Outcome) -> LeaseStatus:
        plan = LeasePlan.read(directory)
        status = LeaseStatus(job_id, outcome.state, outcome.attempt, error=outcome.error, broke=outcome.broke,
                             result_hash=outcome.result_hash, units=outcome.units, unit=outcome.unit,
                             metrics=outcome.metrics or None, fault=None if outcome.state == "succeeded" else outcome.fault,
                             compute_id=plan.job["job_id"] if plan.job else str(job_id),
                             result_uri=plan.result if outcome.state == "succeeded" else None)
        if outcome.state != "succeeded":
            return status
        signed = directory / "signature"
        if not signed.is_file():
            signature = self.signer(job_id, bytes.fromhex(outcome.result_hash[2:]), outcome.units)
            signed.write_text("0x" + signature.hex())
        return LeaseStatus(**(status.as_dict() | {"signature": signed.read_text().strip()}))

    def _submit(self, directory: Path, plan: LeasePlan) -> None:
        self.jobs.submit_job(submission_id=_submission(directory, plan.attempt),
                             metadata={"swarm_job": str(plan.job_id), "attempt": str(plan.attempt)},
                             **ray_job(plan, directory.name))

    def _dir(self, job: JobView, job_id: int) -> Path:
        """A lease's directory: the job's id and the block it was posted in, so a job id the
        chain reuses after a reorganization is a new lease."""
        return self.leases / (f"{job_id}-{job.posted_in.hex()[:16]}" if job.posted_in else str(job_id))

    def _existing(self, job: JobView, job_id: int) -> Path:
        directory = self._dir(job, job_id)
        if not (directory / "lease.json").is_file():
            raise Refused(404, f"This site has no lease for job {job_id}; the market starts one when it is assigned.")
        return directory

    def _next_number(self) -> int:
        counter = self.root / "lease-numbers"
        number = int(counter.read_text()) + 1 if counter.is_file() else 1
        counter.write_text(str(number))
        return number

    def capacity(self) -> dict[str, float]:
        """What the site's live nodes have, summed, and its largest node's CPUs and GPUs (the
        most one lease can have): what the market may match against."""
        import ray

        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        total = {"nodes": len(nodes), "cpus": 0.0, "gpus": 0.0, "memory_gb": 0.0, "node_cpus": 0.0,
                 "node_gpus": 0.0}
        for node in nodes:
            r = node.get("Resources", {})
            total["cpus"] += r.get("CPU", 0.0)
            total["gpus"] += r.get("GPU", 0.0)
            total["memory_gb"] += r.get("memory", 0.0) / 2**30
            total["node_cpus"] = max(total["node_cpus"], r.get("CPU", 0.0))  # a lease runs on one machine
            total["node_gpus"] = max(total["node_gpus"], r.get("GPU", 0.0))
        return total

    # ── the oracle's measurements ────────────────────────────────────────────
    def probe(self, timeout_s: float = PROBE_TIMEOUT_S) -> list[dict[str, Any]]:
        """One probe per live node of the site: its clock and its GPUs, or why it did not answer."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from compute.telemetry import _probe_task

        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        sent = time.time()
        refs = {n["NodeID"]: _probe_task.options(
                    num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                for n in nodes}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        answers = []
        resources = {n["NodeID"]: n.get("Resources", {}) for n in nodes}
        for node_id, ref in refs.items():
            devices = {"cpus": resources[node_id].get("CPU", 0.0), "gpus_declared": resources[node_id].get("GPU", 0.0)}
            if ref in ready:
                answered, stamp, gpus = ray.get(ref)
                answers.append({"node_id": node_id, "alive": True, "stamp": stamp, "sent": sent,
                                "latency_s": time.time() - sent, "gpu": asdict(gpus), **devices})
            else:
                ray.cancel(ref, force=True)
                answers.append({"node_id": node_id, "alive": False, "sent": sent,
                                "error": f"no answer within {timeout_s:.0f} s", **devices})
        return answers

    # A challenge (compute.challenge, compute.proof) takes three requests: `challenge_ready`
    # places a worker on one of the site's nodes (its GPU when it has one) before the oracle's
    # clock starts; `challenge_commit` gives it the seed and answers with its Merkle root — what
    # the oracle times; `challenge_open` opens the rows the oracle then asks for and ends it. A
    # worker the oracle never asks to open is ended CHALLENGE_KEEP_S after it was readied.
    def challenge_ready(self, params: dict[str, Any], timeout_s: float, vram_mb: float = 0.0) -> dict[str, Any]:
        from compute.challenge import Challenge, ready_worker
        from compute.errors import ProviderFault

        Challenge(seed=0, **params)  # the size, rounds and stride are valid (else ComputeError)
        self._expire_challenges()
        with self._lock:
            if len(self._challenges) >= MAX_CHALLENGES:
                raise Refused(429, f"This site holds {MAX_CHALLENGES} challenges already; open or let them expire.")
        try:
            worker, answer = ready_worker(self.provider, timeout_s, vram_mb)
        except ProviderFault as exc:
            raise Refused(503, str(exc)[0].upper() + str(exc)[1:]) from None
        ticket = secrets.token_hex(16)
        with self._lock:
            self._challenges[ticket] = (worker, params, time.monotonic() + CHALLENGE_KEEP_S)
        return {"ticket": ticket, **answer}

    def challenge_commit(self, ticket: str, seed: int, timeout_s: float) -> dict[str, Any]:
        import ray

        worker, params, _ = self._challenge(ticket)
        ref = worker.commit.remote({**params, "seed": seed})
        ready, _ = ray.wait([ref], timeout=timeout_s)
        if not ready:
            self._end_challenge(ticket)
            raise ComputeError(f"The challenge was not computed within {timeout_s:g} s.")
        return {"root": ray.get(ref)}

    def challenge_open(self, ticket: str, cells: list[tuple[int, int]], timeout_s: float) -> dict[str, Any]:
        import ray

        worker, _, _ = self._challenge(ticket)
        try:
            ref = worker.open.remote(cells)
            ready, _ = ray.wait([ref], timeout=timeout_s)
            if not ready:
                raise ComputeError(f"The challenge's rows were not opened within {timeout_s:g} s.")
            return {"openings": ray.get(ref)}
        finally:
            self._end_challenge(ticket)

    def _challenge(self, ticket: str) -> tuple[Any, dict[str, Any], float]:
        self._expire_challenges()
        with self._lock:
            held = self._challenges.get(ticket)
        if held is None:
            raise Refused(404, f"This site holds no challenge {ticket[:32]!r}: ready one first (they end when opened "
                               f"or {CHALLENGE_KEEP_S:g} s after).")
        return held

    def _end_challenge(self, ticket: str) -> None:
        import ray

        with self._lock:
            held = self._challenges.pop(ticket, None)
        if held is not None:
            ray.kill(held[0])

    def _expire_challenges(self) -> None:
        now = time.monotonic()
        with self._lock:
            expired = [t for t, (_, _, until) in self._challenges.items() if until < now]
        for ticket in expired:
            self._end_challenge(ticket)


def _submission(directory: Path, attempt: int) -> str:
    return f"lease-{directory.name}-{attempt}"


# ── the HTTP face ────────────────────────────────────────────────────────────

def make_app(site: Site, authorize: Authorizer, chain_id: int, market: str):
    """The site's API; every route but /v1/info needs a request the chain authorizes."""
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

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception):
        import traceback

        traceback.print_exception(exc, file=sys.stderr)  # the operator's log; the caller gets one sentence
        return JSONResponse({"error": f"The site failed to serve {request.url.path} ({type(exc).__name__}); "
                                      "its operator's log has the details."}, status_code=500)

    async def check(request: Request, action: str, job_id: int, spec_hash: bytes | None = None) -> tuple[bytes, Any]:
        body = await request.body()
        try:
            nonce = int(request.headers["swarm-nonce"])
            expires = int(request.headers["swarm-expires"])
            signature = bytes.fromhex(request.headers["swarm-signature"].removeprefix("0x"))
        except (KeyError, ValueError):
            raise Refused(401, "The request is not signed: send Swarm-Nonce, Swarm-Expires and Swarm-Signature.")
        from compute.site_auth import body_hash

        signed = SiteRequest(action, site.provider, job_id, body_hash(body), nonce, expires)
        _signer, job = await run_in_threadpool(authorize, signed, signature,
                                               spec_hash if action == "lease.start" else None)
        return body, job

    @app.get("/v1/info")
    async def info():
        """Public: whose site this is, for which deployment, and what it has."""
        return {"provider": site.provider, "chain_id": chain_id, "market": market,
                "capacity": await run_in_threadpool(site.capacity)}

    @app.post("/v1/leases/{job_id}")
    async def start(job_id: int, request: Request):
        """The body: {"spec": the job's spec as posted (its keccak is the chain's spec hash),
        "prior": the spec of the job whose result it builds on, for a job:<id> model}."""
        from compute.site_auth import body_hash

        try:
            raw = json.loads(await request.body())
            spec = raw["spec"].encode()
            prior = raw["prior"].encode() if raw.get("prior") is not None else None
        except (ValueError, KeyError, TypeError, AttributeError):
            raise Refused(400, 'A lease starts from a JSON body {"spec": "...", "prior": "..." or null}.') from None
        _, job = await check(request, "lease.start", job_id, spec_hash=body_hash(spec))
        return (await run_in_threadpool(site.start, job, job_id, spec, prior)).as_dict()

    @app.get("/v1/leases/{job_id}")
    async def status(job_id: int, request: Request):
        _, job = await check(request, "lease.status", job_id)
        return (await run_in_threadpool(site.status, job, job_id)).as_dict()

    @app.get("/v1/leases/{job_id}/logs")
    async def logs(job_id: int, request: Request):
        _, job = await check(request, "lease.logs", job_id)
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

    @app.post("/v1/probe")
    async def probe(request: Request):
        body, _ = await check(request, "probe", 0)
        try:
            timeout_s = min(60.0, max(0.1, float(json.loads(body or b"{}").get("timeout_s", PROBE_TIMEOUT_S))))
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
        if not isinstance(raw.get("ticket"), str) or not isinstance(cells, list) or not 0 < len(cells) <= MAX_CELLS \
                or not all(isinstance(c, list) and len(c) == 2 and all(type(v) is int for v in c) for c in cells):
            raise Refused(400, f"A challenge request's body is {shape}, at most {MAX_CELLS} cells.")
        try:
            return await run_in_threadpool(site.challenge_open, raw["ticket"], [tuple(c) for c in cells],
                                           timeout_of(raw))
        except ValueError as exc:  # a cell the challenge does not have
            raise Refused(400, str(exc)) from None

    return app


def listen(host: str, port: int) -> socket.socket:
    """The site's listening socket. A site takes it before it starts its Ray cluster, whose
    processes bind free ports of their own while they start: the port is the site's from here."""
    try:
        return socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        raise ComputeError(f"The site cannot listen on {host}:{port} ({exc.strerror}); choose another port "
                           "with --port, or stop the program that holds it.") from None


def serve(app, listener: socket.socket, certificate: Path, key: Path, ready: Callable[[], None] | None = None) -> None:
    """Serves `app` over HTTPS on `listener` (see `listen`) until SIGTERM or SIGINT."""
    import uvicorn

    host, port = listener.getsockname()[:2]
    config = uvicorn.Config(app, host=host, port=port, ssl_certfile=str(certificate), ssl_keyfile=str(key),
                            log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    if ready is not None:
        original = server.startup

        async def startup(*args, **kwargs):
            await original(*args, **kwargs)
            ready()

        server.startup = startup
    server.run(sockets=[listener])
