"""What a posted job spec asks a site to run, read from the spec's canonical JSON.

A buyer's spec (`market.spec`) is stored as canonical JSON under the keccak hash the chain
holds. A site receives those bytes, checks their hash against the chain, and reads them here:
the kind's typed parameters (the job contract's arm, `compute.jobs.Params`), the resources,
the bounds (units, deadline), where results go, and what the buyer brings. The market's own
terms in the spec (price, priority, replicas, score floor) are the market's and are not read.
Everything is checked as a stranger's: a site may be sent a spec posted around `swarm job
post`, so a bad one raises `InvalidJob` with one sentence and, where one is to blame, the
spec field (`InvalidJob.field`).

The resources describe one node: a spec with `nodes: N` (train and ray jobs only) runs
`workers` workers on each of N machines of the provider's site, N × workers in all.

How a spec's top-level `model` and `dataset` reach the runner:
  train, tune   model → params.model, dataset → params.dataset
  finetune      model → params.base_checkpoint, dataset → params.dataset
  infer         model → params.checkpoint, dataset → params.dataset_path
A `ray` job's `code` and `inputs` are its program's own parameters (`ProgramParams`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from compute.catalog import MODEL_NAMES
from compute.dataplane import join
from compute.errors import InvalidJob
from compute.jobs import PARAMS, ComputeJob, Params
from compute.runners.params import RAY_PARAMS, Located, Pinned, ProgramParams, Scope, TuneParams, located
from compute.tabular import is_named

JOB_REF = "job:"
MODEL_PARAM = {"train": "model", "tune": "model", "finetune": "base_checkpoint", "infer": "checkpoint"}
DATASET_PARAM = {"train": "dataset", "tune": "dataset", "finetune": "dataset", "infer": "dataset_path"}


# The kinds whose runs may span several machines (`resources.nodes` above 1): a Ray Train gang
# or the buyer's own Ray program. infer and finetune run as one task, and tune's trials on one.
ACROSS_NODES_KINDS = ("train", "ray")


@dataclass(frozen=True)
class Resources:
    """What the job asks of one provider: `nodes` machines, each running `workers` workers with
    these needs each. `cpus` and `gpus` are one node's share, what a lease takes of each of its
    machines; the `total_` properties are what the whole job holds."""

    workers: int = 1  # on each node
    cpus_per_worker: float = 1.0
    gpus_per_worker: int = 0
    memory_gb: float = 0.0  # RAM per worker
    nodes: int = 1  # machines of the provider's site, each holding one node's share

    @property
    def cpus(self) -> float:
        """One node's CPUs: its workers × cpus_per_worker."""
        return self.workers * self.cpus_per_worker

    @property
    def gpus(self) -> int:
        """One node's GPUs: its workers × gpus_per_worker."""
        return self.workers * self.gpus_per_worker

    @property
    def total_workers(self) -> int:
        """The job's workers on all its nodes: what a Ray Train run's `num_workers` is."""
        return self.nodes * self.workers

    @property
    def total_cpus(self) -> float:
        return self.nodes * self.cpus

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus


@dataclass(frozen=True)
class Order:
    """A job as a site runs it: typed parameters, resources and bounds, from the posted spec."""

    params: Params  # a built-in kind's names what the buyer brings by its URI until the site places it
    resources: Resources
    max_units: int
    deadline: int  # unix seconds
    seed: int = 0
    max_runtime: int | None = None  # seconds it may run once started (the deadline bounds it too)
    output: str | None = None  # where results go: <output>/<compute job id>
    publish: bool = False  # others' jobs may build on this one's result
    # a built-in kind's model and dataset, by field
    brought: Mapping[str, Located] = field(default_factory=dict)
    prior_job: int | None = None  # the job whose result it builds on (model: job:<id>)

    @property
    def kind(self) -> str:
        return self.params.KIND

    @classmethod
    def read(cls, spec: bytes, now: float | None = None) -> Order:
        """The order in a posted spec's bytes."""
        try:
            raw = json.loads(spec)
        except ValueError:
            raise InvalidJob("the spec is not JSON.") from None
        return cls.from_spec(raw, now)

    @classmethod
    def from_spec(cls, raw: Any, now: float | None = None) -> Order:
        """Reads a spec's fields (its canonical JSON); its params are read by the runner's own parsing.
        With `now`, what the params bound by the job's run time (a search's time budget) is judged
        against the time from `now` to the deadline, as when the spec is posted; a site reads the
        spec without a clock."""
        if not isinstance(raw, Mapping):
            raise InvalidJob("a spec is a mapping of spec fields (kind, model, ...).")
        kind = raw.get("kind")
        if kind not in PARAMS:
            raise InvalidJob(f"kind must be one of {', '.join(PARAMS)}, got {kind!r}.", "kind")
        deadline = _whole(raw, "deadline", 0, None)
        scope = Scope("spec", kind, math.inf if now is None else max(1.0, deadline - now))
        base: dict[str, Any] = {
            "resources": _resources(raw.get("resources"), kind),
            "max_units": _whole(raw, "max_units", 1, None),
            "deadline": deadline,
            "seed": _whole(raw, "seed", 0, 0),
            "max_runtime": None if raw.get("max_runtime") is None else _whole(raw, "max_runtime", 1, None),
            "output": _output(raw.get("output")),
            "publish": _flag(raw, "publish"),
        }
        params = raw.get("params", {})
        if not isinstance(params, Mapping):
            raise InvalidJob(f"params must be a mapping, got {type(params).__name__}.", "params")
        if kind == ProgramParams.KIND:
            return cls(params=_program(raw, params, scope), **base)
        return cls(params=_built_in(kind, raw, params, scope), brought=_brought(kind, raw),
                   prior_job=prior_job_of(kind, raw.get("model")), **base)

    def unpinned(self) -> list[str]:
        """The spec fields naming code or an input by a path or URI alone, not by its sha256."""
        if isinstance(self.params, ProgramParams):
            return self.params.unpinned()
        return [name for name, value in self.brought.items() if isinstance(value, str)]

    def pinned(self) -> dict[str, Pinned]:
        """What the buyer brings that is pinned by its sha256, by spec field (`unpinned` names the rest)."""
        return {name: value for name, value in self.brought.items() if isinstance(value, Pinned)}

    def result_location(self, namespace: str, job_id: int) -> str | None:
        """Where the result of this order's job `job_id` goes: `<output>/<compute job id>`."""
        return join(self.output, namespace + str(job_id)) if self.output else None

    def run_seconds(self, now: float) -> float:
        """How long a run started at `now` may take: to the deadline, and at most max_runtime."""
        left = max(1.0, self.deadline - now)
        return left if self.max_runtime is None else min(left, float(self.max_runtime))

    def job(self, job_id: str, provider: str, storage: str = "", now: float | None = None) -> ComputeJob:
        """The job one provider runs as compute job `job_id`, keeping its runs in `storage`; it is
        stopped at the deadline, so a search's time budget is at most the time left until then."""
        now = time.time() if now is None else now
        timeout = self.run_seconds(now)
        params = self.params
        if (
            isinstance(params, TuneParams)
            and params.time_budget_s is not None
            and params.time_budget_s > timeout
        ):
            params = replace(params, time_budget_s=timeout)
        # A Ray Train gang spans every node: its num_workers is the job's total.
        return ComputeJob(job_id=job_id, provider=provider, params=params,
                          workers=self.resources.total_workers, seed=self.seed, storage=storage,
                          use_gpu=self.resources.gpus_per_worker > 0, timeout_s=timeout)


def prior_job_of(kind: str, model: Any) -> int | None:
    """The job whose result a finetune or infer spec builds on (`model: job:<id>`), if any."""
    if kind not in ("finetune", "infer") or not isinstance(model, str) or not model.startswith(JOB_REF):
        return None
    ref = model[len(JOB_REF):]
    if not (ref.isascii() and ref.isdigit()):
        raise InvalidJob(f"model must name a job by its number, as job:<id> (got {model!r}).", "model")
    return int(ref)


def prior_refused(prior_job: int | None, buyer: str, prior_buyer: str | None, published: bool) -> str | None:
    """Why `buyer`'s job may not build on the result of `prior_job` (`job:<id>`), or None if it
    may: a job builds on its own buyer's results, and on another buyer's only if that job was
    posted with `publish: true`. `prior_buyer` is None when the chain has no such job."""
    if prior_job is None:
        return None
    if prior_buyer is None:
        return (f"model job:{prior_job} names no job of this market; give the number of a job whose result "
                "it uses")
    if prior_buyer.lower() == buyer.lower() or published:
        return None
    return (
        f"model job:{prior_job} is another buyer's result, which that buyer did not publish; build on your "
        "own jobs' results, or on a job posted with publish: true"
    )


def job_namespace(chain_id: int, market_address: str) -> str:
    """The prefix of a deployment's compute job ids (`31337-5fbdb231-`), so that results of
    a redeployed market, or of another chain, never mix with older ones in one SWARM_HOME."""
    return f"{chain_id}-{market_address.lower().removeprefix('0x')[:8]}-"


def brought_of(kind: str, model: Any, dataset: Any) -> dict[str, Any]:
    """A built-in kind's model and dataset that the buyer brings (not a name, not job:<id>), by
    spec field: pinned, or a path or URI until the buyer's post pins it."""
    found: dict[str, Any] = {}
    if kind in ("finetune", "infer") and model is not None and not (
            isinstance(model, str) and model.startswith(JOB_REF)):
        found["model"] = model
    if kind == "train" and model is not None and model not in MODEL_NAMES:
        found["model"] = model  # a transformers checkpoint
    if (
        kind != ProgramParams.KIND
        and dataset is not None
        and not (isinstance(dataset, str) and is_named(dataset))
    ):
        found["dataset"] = dataset
    return found


def _built_in(kind: str, raw: Mapping[str, Any], params: Mapping[str, Any], scope: Scope) -> Params:
    for name in ("code", "inputs"):
        if raw.get(name):
            raise InvalidJob(f"{name} applies only to a ray job, not a {kind} job.", name)
    names = {MODEL_PARAM[kind]: "model", DATASET_PARAM[kind]: "dataset"}
    known = [f for f in PARAMS[kind].__dataclass_fields__ if f not in names]
    for key in params:
        if key in names:
            raise InvalidJob(
                f"params.{key} is set by the top-level {names[key]} field; remove it from params.",
                f"params.{key}",
            )
        if key not in known:
            raise InvalidJob(f"params.{key} is not a {kind} parameter; known ones are {', '.join(known)}.",
                             f"params.{key}")
    given = {}
    for param, name in names.items():
        value = raw.get(name)
        if value is None:
            raise InvalidJob(f"{name} is required for a {kind} job.", name)
        given[param] = located(value, name)
    if kind == "tune" and not isinstance(given["model"], str):
        raise InvalidJob(f"model must be a model's name for a {kind} job.", "model")
    runner = {**params, **{p: v.uri if isinstance(v, Pinned) else v for p, v in given.items()}}
    return PARAMS[kind].parse(runner, scope)


def _brought(kind: str, raw: Mapping[str, Any]) -> dict[str, Located]:
    return {name: located(value, name) for name, value in brought_of(kind, raw.get("model"),
                                                                      raw.get("dataset")).items()}


def _program(raw: Mapping[str, Any], params: Mapping[str, Any], scope: Scope) -> ProgramParams:
    for name in ("model", "dataset"):
        if raw.get(name) is not None:
            raise InvalidJob(
                f"{name} does not apply to a ray job; name what the program reads under inputs.", name
            )
    for name in ("code", "output"):
        if raw.get(name) is None:
            raise InvalidJob(f"{name} is required for a ray job.", name)
    for key in params:
        if key not in RAY_PARAMS:
            raise InvalidJob(f"params.{key} is not a ray parameter; known ones are {', '.join(RAY_PARAMS)}.",
                             f"params.{key}")
    return ProgramParams.parse({**params, "code": raw["code"], "inputs": raw.get("inputs") or {}}, scope)


def _resources(raw: Any, kind: str) -> Resources:
    if not isinstance(raw, Mapping):
        raise InvalidJob(
            "resources must be a mapping of nodes, workers, cpus_per_worker, gpus_per_worker and memory_gb.",
            "resources",
        )
    nodes = _whole(raw, "nodes", 1, 1, "resources.")
    if nodes > 1 and kind not in ACROSS_NODES_KINDS:
        raise InvalidJob(
            f"resources.nodes must be 1 for kind {kind}, which runs on one machine (got {nodes}); only "
            f"{' and '.join(ACROSS_NODES_KINDS)} jobs run across machines, so remove it or set it to 1.",
            "resources.nodes",
        )
    return Resources(workers=_whole(raw, "workers", 1, None, "resources."),
                     cpus_per_worker=_number(raw, "cpus_per_worker", 1.0, positive=True),
                     gpus_per_worker=_whole(raw, "gpus_per_worker", 0, 0, "resources."),
                     memory_gb=_number(raw, "memory_gb", 0.0, positive=False),
                     nodes=nodes)


def _whole(raw: Mapping[str, Any], name: str, minimum: int, default: int | None, prefix: str = "") -> int:
    value = raw.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidJob(
            f"{prefix}{name} must be an integer of at least {minimum}, got {value!r}.", prefix + name
        )
    return value


def _number(raw: Mapping[str, Any], name: str, default: float, positive: bool) -> float:
    value = raw.get(name, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        bound = "greater than 0" if positive else "of at least 0"
        raise InvalidJob(f"resources.{name} must be a number {bound}, got {value!r}.", f"resources.{name}")
    return float(value)


def _flag(raw: Mapping[str, Any], name: str) -> bool:
    value = raw.get(name, False)
    if not isinstance(value, bool):
        raise InvalidJob(f"{name} must be true or false, got {value!r}.", name)
    return value


def _output(value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidJob(f"output must be a URI or directory, got {value!r}.", "output")
    return value
