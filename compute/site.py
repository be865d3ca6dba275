"""A provider's site (docs/architecture.md §4): the agent on the provider's head machine
that owns the provider's Ray cluster and serves it over HTTPS to those the chain allows.

`Site` keeps the leases: each is a Ray job of the site's cluster, submitted through Ray's
job submission API (`compute.lease` is its entrypoint), whose work runs in a sandbox. A
lease is started once per job: starting it again returns the lease that exists. When the
node running a lease is lost, the site submits the lease again and it resumes from its
last checkpoint, which the lease keeps in its own directory. When a lease succeeds the site
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
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fastapi import Request  # module level: FastAPI resolves the routes' annotations here

from compute.errors import ComputeError
from compute.lease import LOG, WORK, LeasePlan, Outcome
from compute.site_auth import Refused, SiteRequest

MAX_ATTEMPTS = 3  # a lease whose node is lost runs again, from its checkpoint, this often
LOG_TAIL_BYTES = 64 * 1024
PROBE_TIMEOUT_S = 10.0

# (job_id, spec bytes) -> the lease to run and the spec's keccak; raises ValueError for a bad spec
Planner = Callable[[int, bytes, int], LeasePlan]
# (job_id, result_hash, units) -> the provider's signature
ResultSigner = Callable[[int, bytes, int], bytes]
# (request, signature, spec hash or None) -> the signer's address; raises Refused
Authorizer = Callable[[SiteRequest, bytes, "bytes | None"], str]


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

    # ── leases ───────────────────────────────────────────────────────────────
    def start(self, job_id: int, spec: bytes) -> LeaseStatus:
        """Starts the job's lease, once: a lease that exists is returned as it is."""
        with self._lock:
            directory = self._dir(job_id)
            if (directory / "lease.json").is_file():
                return self.status(job_id)
            plan = self.planner(job_id, spec, self._next_number())
            plan = LeasePlan(**(asdict(plan) | {"hidden": tuple(plan.hidden) + self.hidden}))
            plan.write(directory)
            self._submit(directory, plan)
        return self.status(job_id)

    def status(self, job_id: int) -> LeaseStatus:
        directory = self._existing(job_id)
        plan = LeasePlan.read(directory)
        if (directory / "stopped").exists():
            return LeaseStatus(job_id, "stopped", plan.attempt, error="stopped at the market's request")
        outcome = Outcome.read(directory)
        if outcome is not None and outcome.attempt == plan.attempt:
            return self._finished(job_id, directory, outcome)
        from ray.job_submission import JobStatus

        state = self.jobs.get_job_status(_submission(job_id, plan.attempt))
        if state in (JobStatus.PENDING, JobStatus.RUNNING):
            return LeaseStatus(job_id, state.value.lower(), plan.attempt)
        outcome = Outcome.read(directory)  # it may have finished since it was read above
        if outcome is not None and outcome.attempt == plan.attempt:
            return self._finished(job_id, directory, outcome)
        # The Ray job ended with no outcome written: its node was lost under it.
        with self._lock:
            if plan.attempt >= MAX_ATTEMPTS:
                return LeaseStatus(job_id, "failed", plan.attempt,
                                   error=f"the site lost the node running it {plan.attempt} times")
            plan = LeasePlan(**(asdict(plan) | {"attempt": plan.attempt + 1}))
            plan.write(directory)
            self._submit(directory, plan)
        return LeaseStatus(job_id, "pending", plan.attempt)

    def logs(self, job_id: int) -> str:
        log = self._existing(job_id) / LOG
        if not log.is_file():
            return ""
        with open(log, "rb") as f:
            f.seek(max(0, log.stat().st_size - LOG_TAIL_BYTES))
            return f.read().decode(errors="replace")

    def stop(self, job_id: int) -> LeaseStatus:
        directory = self._existing(job_id)
        plan = LeasePlan.read(directory)
        (directory / "stopped").touch()
        try:
            self.jobs.stop_job(_submission(job_id, plan.attempt))
        except RuntimeError:
            pass  # it had ended already
        return self.status(job_id)

    def _finished(self, job_id: int, directory: Path, outcome: Outcome) -> LeaseStatus:
        status = LeaseStatus(job_id, outcome.state, outcome.attempt, error=outcome.error, broke=outcome.broke,
                             result_hash=outcome.result_hash, units=outcome.units, unit=outcome.unit,
                             metrics=outcome.metrics or None)
        if outcome.state != "succeeded":
            return status
        signed = directory / "signature"
        if not signed.is_file():
            signature = self.signer(job_id, bytes.fromhex(outcome.result_hash[2:]), outcome.units)
            signed.write_text("0x" + signature.hex())
        return LeaseStatus(**(status.as_dict() | {"signature": signed.read_text().strip()}))

    def _submit(self, directory: Path, plan: LeasePlan) -> None:
        project = str(Path(__file__).resolve().parent.parent)
        self.jobs.submit_job(
            entrypoint=f"{sys.executable} -m compute.lease launch {directory}",
            submission_id=_submission(plan.job_id, plan.attempt),
            entrypoint_num_cpus=plan.cpus, entrypoint_num_gpus=plan.gpus or None,
            runtime_env={"env_vars": {"PYTHONPATH": project}},
            metadata={"swarm_job": str(plan.job_id), "attempt": str(plan.attempt)},
        )

    def _dir(self, job_id: int) -> Path:
        return self.leases / str(job_id)

    def _existing(self, job_id: int) -> Path:
        directory = self._dir(job_id)
        if not (directory / "lease.json").is_file():
            raise Refused(404, f"This site has no lease for job {job_id}; the market starts one when it is assigned.")
        return directory

    def _next_number(self) -> int:
        counter = self.root / "lease-numbers"
        number = int(counter.read_text()) + 1 if counter.is_file() else 1
        counter.write_text(str(number))
        return number

    # ── the oracle's measurements ────────────────────────────────────────────
    def probe(self, timeout_s: float = PROBE_TIMEOUT_S) -> list[dict[str, Any]]:
        """One probe per live node of the site: its clock and its GPUs, or why it did not answer."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from compute.telemetry import _probe_task

        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        task = ray.remote(num_cpus=0)(_probe_task)
        sent = time.time()
        refs = {n["NodeID"]: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote() for n in nodes}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        answers = []
        for node_id, ref in refs.items():
            if ref in ready:
                answered, stamp, gpus = ray.get(ref)
                answers.append({"node_id": node_id, "alive": True, "stamp": stamp, "sent": sent,
                                "latency_s": time.time() - sent, "gpus": asdict(gpus)})
            else:
                ray.cancel(ref, force=True)
                answers.append({"node_id": node_id, "alive": False, "sent": sent,
                                "error": f"no answer within {timeout_s:.0f} s"})
        return answers

    def challenge(self, params: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        from compute.challenge import Challenge, run_on_provider

        result = run_on_provider(self.provider, Challenge(**params), timeout_s)
        return asdict(result)


def _submission(job_id: int, attempt: int) -> str:
    return f"lease-{job_id}-{attempt}"


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

    async def check(request: Request, action: str, job_id: int, spec_hash: bytes | None = None) -> bytes:
        body = await request.body()
        try:
            nonce = int(request.headers["swarm-nonce"])
            expires = int(request.headers["swarm-expires"])
            signature = bytes.fromhex(request.headers["swarm-signature"].removeprefix("0x"))
        except (KeyError, ValueError):
            raise Refused(401, "The request is not signed: send Swarm-Nonce, Swarm-Expires and Swarm-Signature.")
        from compute.site_auth import body_hash

        signed = SiteRequest(action, site.provider, job_id, body_hash(body), nonce, expires)
        await run_in_threadpool(authorize, signed, signature, spec_hash if action == "lease.start" else None)
        return body

    @app.get("/v1/info")
    async def info():
        return {"provider": site.provider, "chain_id": chain_id, "market": market}

    @app.post("/v1/leases/{job_id}")
    async def start(job_id: int, request: Request):
        from compute.site_auth import body_hash

        body = await request.body()
        await check(request, "lease.start", job_id, spec_hash=body_hash(body))
        return (await run_in_threadpool(site.start, job_id, body)).as_dict()

    @app.get("/v1/leases/{job_id}")
    async def status(job_id: int, request: Request):
        await check(request, "lease.status", job_id)
        return (await run_in_threadpool(site.status, job_id)).as_dict()

    @app.get("/v1/leases/{job_id}/logs")
    async def logs(job_id: int, request: Request):
        await check(request, "lease.logs", job_id)
        return PlainTextResponse(await run_in_threadpool(site.logs, job_id))

    @app.get("/v1/leases/{job_id}/result")
    async def result(job_id: int, request: Request):
        await check(request, "lease.result", job_id)
        status = await run_in_threadpool(site.status, job_id)
        if status.state != "succeeded":
            raise Refused(409, f"Job {job_id}'s lease is {status.state}; it has no result.")
        return status.as_dict()

    @app.post("/v1/leases/{job_id}/stop")
    async def stop(job_id: int, request: Request):
        await check(request, "lease.stop", job_id)
        return (await run_in_threadpool(site.stop, job_id)).as_dict()

    @app.post("/v1/probe")
    async def probe(request: Request):
        await check(request, "probe", 0)
        return {"provider": site.provider, "nodes": await run_in_threadpool(site.probe)}

    @app.post("/v1/challenge")
    async def challenge(request: Request):
        body = await check(request, "challenge", 0)
        raw = json.loads(body or b"{}")
        return await run_in_threadpool(site.challenge, raw["challenge"], float(raw.get("timeout_s", 120)))

    return app


def serve(app, host: str, port: int, certificate: Path, key: Path, ready: Callable[[], None] | None = None) -> None:
    """Serves `app` over HTTPS until SIGTERM or SIGINT."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, ssl_certfile=str(certificate), ssl_keyfile=str(key),
                            log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    if ready is not None:
        original = server.startup

        async def startup(*args, **kwargs):
            await original(*args, **kwargs)
            ready()

        server.startup = startup
    server.run()
