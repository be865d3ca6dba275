"""The job contract: one job for one provider, typed from the buyer's spec to the lease's worker.

A `ComputeJob` carries its kind's parameters as one arm of a tagged union, `Params`: the
runners' own classes (`compute.runners.params`), the `ray` kind's program included; its kind
is its parameters' `KIND`. It is serialized once, as versioned JSON (`to_json`, `from_json`),
and read back with the runners' own parsing, so what the market plans (`market.spec`), what a
site plans a lease from (`compute.order`) and what the worker in the lease's sandbox reads
are one structure, checked the same way at every step.

This module is the contract alone: it imports no runner and no Ray. Running a job is
`compute.dispatch`'s, and where its work runs (on the provider's nodes, or in place in a lease's
process) is `compute.context`'s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from compute.errors import InvalidJob
from compute.runners.params import (
    FinetuneParams,
    InferParams,
    ProgramParams,
    Scope,
    ServeParams,
    TrainParams,
    TuneParams,
)

P = TypeVar("P")
FORMAT = 1  # the contract's version: a reader refuses any other
Params = TrainParams | FinetuneParams | InferParams | TuneParams | ServeParams | ProgramParams
PARAMS: dict[str, type[Params]] = {c.KIND: c for c in (TrainParams, FinetuneParams, InferParams, TuneParams,
                                                      ServeParams, ProgramParams)}
KINDS = tuple(PARAMS)
BUILT_IN = tuple(k for k in KINDS if k != ProgramParams.KIND)  # the kinds Swarm's own runners run
ONE_TASK_KINDS = (InferParams.KIND, FinetuneParams.KIND)  # each one task on one node, never Ray Train
FIELDS = (
    "format",
    "kind",
    "job_id",
    "provider",
    "workers",
    "seed",
    "storage",
    "use_gpu",
    "timeout_s",
    "params",
)


@dataclass(frozen=True)
class ComputeJob:
    """One job for one provider, with its kind's typed parameters."""

    job_id: str
    provider: str  # the provider's address; its nodes carry the label provider=<address>
    params: Params
    workers: int = 1
    seed: int = 0
    storage: str = ""  # result storage: a local directory or any pyarrow filesystem URI
    use_gpu: bool = False
    timeout_s: float = 3_600.0  # a job that runs longer is stopped and fails

    @property
    def kind(self) -> str:
        return self.params.KIND

    def params_of(self, kind: type[P]) -> P:
        """This job's parameters as `kind`'s, which its runner reads; InvalidJob for a job of
        another kind (a runner handed a job it does not run)."""
        if not isinstance(self.params, kind):
            raise InvalidJob(f"job {self.job_id} is a {self.kind} job, not the kind this runner runs.")
        return self.params

    @classmethod
    def of(cls, job_id: str, kind: str, provider: str, params: Mapping[str, Any] | None = None,
           **fields: Any) -> ComputeJob:
        """A job from its kind's raw parameters, read with the kind's own parsing; InvalidJob
        names what is wrong."""
        if kind not in PARAMS:
            raise InvalidJob(f"unknown job kind {kind!r}; choose one of {', '.join(KINDS)}.", "kind")
        scope = Scope(job_id, kind, float(fields.get("timeout_s", 3_600.0)))
        job = cls(job_id=job_id, provider=provider, params=PARAMS[kind].parse(params or {}, scope), **fields)
        validate(job)
        return job

    def with_params(self, **changes: Any) -> ComputeJob:
        """The job with some of its parameters changed (where a lease put an input, say)."""
        return replace(self, params=replace(self.params, **changes))

    def result_dir(self) -> Path:
        """The local directory for this job's results (outputs/ plus bookkeeping).

        With a URI storage, checkpoints go to the URI and the outputs to $SWARM_HOME/results.
        """
        if self.storage and "://" not in self.storage:
            return Path(self.storage) / self.job_id
        return Path(os.environ.get("SWARM_HOME", ".swarm")) / "results" / self.job_id

    # ── the contract's one serialization ─────────────────────────────────────────────
    def to_dict(self) -> dict[str, Any]:
        params = self.params.as_json() if isinstance(self.params, ProgramParams) else asdict(self.params)
        return {"format": FORMAT, "kind": self.kind, "job_id": self.job_id, "provider": self.provider,
                "workers": self.workers, "seed": self.seed, "storage": self.storage, "use_gpu": self.use_gpu,
                "timeout_s": self.timeout_s, "params": params}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, raw: Any) -> ComputeJob:
        """Reads what `to_dict` wrote, checking every field as a stranger's; InvalidJob says what is wrong."""
        if not isinstance(raw, Mapping):
            raise InvalidJob(f"a job must be a JSON object, got {type(raw).__name__}.")
        if raw.get("format") != FORMAT:
            raise InvalidJob(
                f"the job is in format {raw.get('format')!r}; this reader reads format {FORMAT}."
            )
        if set(raw) != set(FIELDS):
            raise InvalidJob(
                f"a job has the fields {', '.join(FIELDS)}; got {', '.join(sorted(map(str, raw)))}."
            )
        for name, kind in (("job_id", str), ("provider", str), ("storage", str), ("use_gpu", bool)):
            if not isinstance(raw[name], kind):
                raise InvalidJob(f"the job's {name} must be a {kind.__name__}, got {raw[name]!r}.")
        for name in ("workers", "seed"):
            if not isinstance(raw[name], int) or isinstance(raw[name], bool):
                raise InvalidJob(f"the job's {name} must be an integer, got {raw[name]!r}.")
        if not isinstance(raw["timeout_s"], int | float) or isinstance(raw["timeout_s"], bool):
            raise InvalidJob(f"the job's timeout_s must be a number, got {raw['timeout_s']!r}.")
        return cls.of(raw["job_id"], raw["kind"], raw["provider"], raw["params"], workers=raw["workers"],
                      seed=raw["seed"], storage=raw["storage"], use_gpu=raw["use_gpu"],
                      timeout_s=float(raw["timeout_s"]))

    @classmethod
    def from_json(cls, text: str | bytes) -> ComputeJob:
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise InvalidJob(f"the job is not JSON ({exc}).") from None
        return cls.from_dict(raw)


@dataclass(frozen=True)
class JobResult:
    job_id: str
    kind: str
    provider: str
    metrics: dict[str, Any]
    result_dir: str
    result_hash: str  # 0x sha256 of the outputs' canonical manifest
    units: float  # GPU-seconds, or CPU-seconds where there is no GPU
    unit: str  # "gpu-seconds" | "cpu-seconds"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def validate(job: ComputeJob) -> None:
    """Checks that need no cluster: workers, ids, timeout."""
    if not isinstance(job.workers, int) or job.workers < 1:
        raise InvalidJob(f"workers must be at least 1, got {job.workers!r}.", "resources.workers")
    if not job.job_id or "/" in job.job_id:
        raise InvalidJob(f"job id {job.job_id!r} must be non-empty and contain no '/'.")
    if job.timeout_s <= 0:
        raise InvalidJob(f"timeout must be positive, got {job.timeout_s}.")
