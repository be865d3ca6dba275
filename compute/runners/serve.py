"""The serve runner: a model on Ray Serve answering requests until the lease ends
(docs/architecture.md §12).

It runs on the lease's own Ray (`provider.lease.worker` starts it). Serve's controller runs
there with no HTTP proxy of its own; the deployment (`Replica`) loads the model once per
replica, checks each request alone, and answers concurrent ones in batches (`@serve.batch`),
whose size and wait a `compute.serving.BatchTuner` adapts to the load. Replicas autoscale from
`min_replicas` to `replicas` within the CPUs and GPUs the lease reserved, and Serve's router
spreads requests over them. The ingress is a small ASGI app on a Unix socket in the lease's
work directory (`socket`), which only the site reaches: the sandbox has no network, and the
site alone speaks to buyers and takes their receipts.

Routes, inside the lease: `POST /predict` (`{"input": ...}` → `{"model", "output"}`),
`POST /v1/completions` (a text model: OpenAI's completion shape, `usage` counting tokens) and
`GET /health`. A malformed body is a 400 with one sentence; the lease keeps serving.
At `ends_at` the ingress stops, and the result records what was served."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from ray import serve

from compute.accounting import usage
from compute.jobs import ComputeJob, JobResult
from compute.manifest import OUTPUT_DIR, result_hash
from compute.runners.params import MAX_BATCH, ServeParams
from compute.serving import BadRequest, BatchTuner, Predictor, answer_shape, load_predictor

MAX_BODY_BYTES = 1 << 20
APP = "lease"
ROUTES = {"predict": "/predict", "generate": "/v1/completions"}
# Requests a replica holds at once: enough that the router never backs off below 64 concurrent
# callers, whatever the batch size (a batch forms from those it holds).
MIN_ONGOING = 64


class Replica:
    """One replica of the lease's model."""

    def __init__(self, params: dict[str, Any], seed: int) -> None:
        self.params = ServeParams(**params)
        self.predictor = load_predictor(self.params, seed)
        self.tuner = BatchTuner(self.params.max_batch_size, self.params.max_batch_wait_s)
        self._apply()
        self.served = 0
        self.batches = 0

    def _apply(self) -> None:
        self.batch.set_max_batch_size(self.tuner.size)
        self.batch.set_batch_wait_timeout_s(self.tuner.wait_s)

    @serve.batch(max_batch_size=MAX_BATCH, batch_wait_timeout_s=0.01)
    async def batch(self, inputs: list[Any]) -> list[dict[str, Any]]:
        answers = await asyncio.to_thread(self.predictor, inputs)  # requests queue up meanwhile
        self.served += len(inputs)
        self.batches += 1
        self.tuner.observe(len(inputs))
        self._apply()
        return answers

    async def __call__(self, body: Any) -> dict[str, Any]:
        try:
            checked = self.predictor.check(body)
        except BadRequest as exc:
            return {"error": str(exc)}
        return await self.batch(checked)

    def stats(self) -> dict[str, Any]:
        return {"served": self.served, "batches": self.batches, "batch_size": self.tuner.size,
                "batch_wait_s": self.tuner.wait_s, "model": self.predictor.name}


def deployment(params: ServeParams) -> Any:
    """The lease's deployment: its replicas, their resources, and how they scale."""
    scaling: dict[str, Any] = {"num_replicas": params.replicas}
    if params.replicas > params.min_replicas:
        scaling = {"autoscaling_config": {
            "min_replicas": params.min_replicas, "max_replicas": params.replicas,
            "target_ongoing_requests": max(1, params.max_batch_size // 2),
            "upscale_delay_s": 1.0, "downscale_delay_s": 20.0, "metrics_interval_s": 1.0,
            "look_back_period_s": 5.0}}
    return serve.deployment(Replica).options(
        name="model", max_ongoing_requests=max(MIN_ONGOING, 4 * params.max_batch_size),
        max_queued_requests=-1,
        ray_actor_options={"num_cpus": params.replica_cpus, "num_gpus": params.replica_gpus}, **scaling)


def ingress(handle: Any, task: str, model: str, counts: dict[str, int]) -> Any:
    """The ASGI app the site forwards requests to; `counts` counts what it answered and refused."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    shape = Predictor()
    shape.task = task

    async def answer(request: Request) -> JSONResponse:
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            counts["refused"] += 1
            return JSONResponse({"error": f"the body is over {MAX_BODY_BYTES} bytes."}, status_code=413)
        try:
            parsed = json.loads(body)
        except ValueError:
            counts["refused"] += 1
            return JSONResponse({"error": "the body is not JSON."}, status_code=400)
        result = await handle.remote(parsed)
        if "error" in result:
            counts["refused"] += 1
            return JSONResponse({"error": result["error"]}, status_code=400)
        counts["answered"] += 1
        return JSONResponse(answer_shape(shape, result, model, "cmpl-" + uuid.uuid4().hex[:24]))

    async def health(_request: Request) -> JSONResponse:
        return JSONResponse({"ready": True, "task": task, "model": model})

    return Starlette(routes=[Route(ROUTES[task], answer, methods=["POST"]),
                             Route("/health", health, methods=["GET"])])


def run(job: ComputeJob) -> JobResult:
    """Serves the job's model through its socket until `ends_at`; returns what was served."""
    import uvicorn

    params = job.params_of(ServeParams)
    started = time.monotonic()
    serve.start(http_options={"location": "NoServer"})
    fields = dataclasses.asdict(params)
    handle = serve.run(deployment(params).bind(fields, job.seed), name=APP, route_prefix=None)
    model = params.checkpoint.rsplit("/", 1)[-1] if params.checkpoint else params.model
    socket = Path(params.socket).resolve()
    socket.unlink(missing_ok=True)
    counts = {"answered": 0, "refused": 0}
    server = uvicorn.Server(uvicorn.Config(ingress(handle, params.task, model, counts), uds=str(socket),
                                           log_level="warning", access_log=False, lifespan="off"))

    def end() -> None:
        while not server.should_exit and time.time() < params.ends_at:
            time.sleep(min(1.0, max(0.0, params.ends_at - time.time())))
        server.should_exit = True

    threading.Thread(target=end, daemon=True, name="swarm-serve-end").start()
    print(f"serving {model} ({params.task}) until {params.ends_at:.0f}", flush=True)
    server.run()
    serve.shutdown()
    return _result(job, params, model, counts, time.monotonic() - started)


def _result(job: ComputeJob, params: ServeParams, model: str, counts: dict[str, int],
            wall_s: float) -> JobResult:
    result_dir = job.result_dir()
    outputs = result_dir / OUTPUT_DIR
    shutil.rmtree(outputs, ignore_errors=True)
    outputs.mkdir(parents=True)
    record = {"task": params.task, "model": model, "answered": counts["answered"],
              "refused": counts["refused"], "ends_at": params.ends_at}
    (outputs / "served.json").write_text(json.dumps(record, sort_keys=True, indent=2))
    cpus = params.replicas * params.replica_cpus
    used = usage([wall_s * (params.replicas * params.replica_gpus or cpus)], job.use_gpu)
    metrics = record | {"wall_s": round(wall_s, 3)}
    return JobResult(job.job_id, job.kind, job.provider, metrics, str(result_dir), result_hash(result_dir),
                     used.amount, used.unit)
