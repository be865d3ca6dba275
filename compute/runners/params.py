"""Each runner's typed parameters, read from a job's raw `params` with errors that name the key.

These classes are the arms of the job contract's tagged union (`compute.jobs.Params`): a
`ComputeJob` carries one of them, and its kind is that class's `KIND`. Every check here is
pure (no torch, no Ray), so the market validates a spec with the very code its runner will
use, and a site parses what it receives with it again, without loading either."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

from compute.catalog import DATASET_FOR, MODEL_ARGS, MODEL_NAMES
from compute.dataplane import normal_sha256
from compute.errors import InvalidJob
from compute.tabular import KNOWN, format_of, is_named

P = TypeVar("P")
KIND_OF = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}

PRECISIONS = ("fp32", "bf16")
# How a train job's workers share the model: each holds all of it and their gradients are averaged
# (DDP), or each holds a shard of its parameters, gradients and optimizer state, gathered layer by
# layer as it computes (FSDP), for a model too large for one device.
PARALLELISMS = ("ddp", "fsdp")
MAX_SAMPLES = 1_000_000
QUANTIZE = (None, "int8")
SEARCHES = ("random", "grid", "bayes")
DISTRIBUTIONS = ("uniform", "loguniform", "choice", "grid", "randint")
# Model sizes the dataset fixes; the others are searchable.
DATA_SHAPED = {"in_features", "classes", "vocab", "seq_len"}
TRAINING_DEFAULTS: dict[str, Any] = {"lr": 1e-2, "weight_decay": 0.0, "batch_size": 64}
FLOAT_KEYS = {"lr", "weight_decay"}  # the others are whole numbers


@dataclass(frozen=True)
class Scope:
    """Whose parameters are read, for the errors: the job's id and kind, and its timeout."""

    job_id: str
    kind: str
    timeout_s: float = math.inf


def parse_params(cls: type[P], raw: Mapping[str, Any], scope: Scope) -> P:
    """`cls(**raw)` after checking every key is known and every value has the type of its
    default (an int is accepted where a float is expected)."""
    if not isinstance(raw, Mapping):
        raise InvalidJob(f"job {scope.job_id}: {scope.kind} parameters must be a mapping, got {_show(raw)}.",
                         "params")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(str(k) for k in set(raw) - set(fields))
    if unknown:
        raise InvalidJob(
            f"job {scope.job_id}: unknown {scope.kind} parameter(s) {', '.join(unknown)}; "
            f"known ones are {', '.join(fields)}."
        )
    for key, value in raw.items():
        _check_type(scope, key, value, fields[key].default)
    return cls(**raw)


def _check_type(scope: Scope, key: str, value: Any, default: Any) -> None:
    if default is None:  # an optional setting: the runner checks its values
        return
    expected: tuple[type, ...] = (int, float) if isinstance(default, float) else (type(default),)
    if (isinstance(value, bool) and bool not in expected) or not isinstance(value, expected):
        raise InvalidJob(
            f"job {scope.job_id}: {scope.kind} parameter {key} must be {KIND_OF[expected[-1]]}, got "
            f"{value!r}."
        )


class Named(Protocol):
    """Whatever names the job a message is about: a `Scope`, or the `ComputeJob` itself."""

    @property
    def job_id(self) -> str: ...


def require(condition: bool, job: Named, message: str) -> None:
    """Raises InvalidJob(`job <id>: <message>`) unless `condition` holds."""
    if not condition:
        raise InvalidJob(f"job {job.job_id}: {message}")


def require_loop(params: TrainParams | FinetuneParams, job: Scope) -> None:
    """What every training loop's parameters must hold: samples, epochs, batch size, rate."""
    require(10 <= params.samples <= MAX_SAMPLES or params.samples == 0, job,
            f"samples must be between 10 and {MAX_SAMPLES} (or 0: all of a file), got {params.samples}.")
    require(params.epochs >= 1, job, f"epochs must be at least 1, got {params.epochs}.")
    require(params.batch_size >= 1, job, f"batch_size must be at least 1, got {params.batch_size}.")
    require(params.lr > 0, job, f"lr must be positive, got {params.lr}.")


# ── train, finetune, infer ──────────────────────────────────────────────────────────

def check_dataset(job: Scope, dataset: str, model: str) -> None:
    """A built-in dataset the model trains on, or a table (compute.tabular) for the MLP."""
    if is_named(dataset):
        require(
            dataset == DATASET_FOR[model],
            job,
            f"model {model} trains on {DATASET_FOR[model]}, not {dataset}.",
        )
        return
    require(not dataset.endswith(".npy"), job, f"dataset {dataset} is a .npy array, which only infer reads; "
                                               f"give a table: {KNOWN}.")
    try:
        format_of(dataset)
    except InvalidJob as exc:
        raise InvalidJob(f"job {job.job_id}: {exc}.") from None
    require(model == "mlp", job, f"model {model} takes token sequences ({DATASET_FOR[model]}); "
                                 f"a table of features trains the mlp.")


def is_location(model: str) -> bool:
    """True for a path or URI (what a buyer brings: `./model`, `s3://…`), not a bare name."""
    return "/" in model


def sized(params: P, named: bool, default: int) -> P:
    """`samples` 0 means every row of a table, or `default` rows of a built-in dataset."""
    if named and params.samples == 0:  # type: ignore[attr-defined]
        return dataclasses.replace(params, samples=default)  # type: ignore[type-var]
    return params


def require_precision(precision: str, job: Scope) -> None:
    require(
        precision in PRECISIONS, job, f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}."
    )


@dataclass(frozen=True)
class TrainParams:
    KIND: ClassVar[str] = "train"

    model: str = "mlp"
    dataset: str = ""  # a built-in dataset's name, or the path of a table in the lease
    samples: int = 0  # rows: 0 is 1024 of a built-in dataset, or every row of a table
    epochs: int = 3
    batch_size: int = 32
    lr: float = 1e-3
    precision: str = "fp32"
    max_failures: int = 2
    parallelism: str = "ddp"  # PARALLELISMS

    @property
    def brought(self) -> bool:
        """True when `model` is a transformers checkpoint the buyer brings, not a built-in model."""
        return self.model not in MODEL_NAMES

    @classmethod
    def parse(cls, raw: Mapping[str, Any], job: Scope) -> TrainParams:
        params = parse_params(cls, raw, job)
        require(params.model in MODEL_NAMES or is_location(params.model), job,
                f"unknown model {params.model!r}; choose one of {', '.join(MODEL_NAMES)}, or give a "
                "transformers checkpoint's directory as a path or URI (./model, s3://…).")
        if params.brought:
            require(bool(params.dataset) and not is_named(params.dataset), job,
                    "a transformers checkpoint trains on a table of texts; give one as the dataset.")
            try:
                format_of(params.dataset)
            except InvalidJob as exc:
                raise InvalidJob(f"job {job.job_id}: {exc}.") from None
            dataset = params.dataset
        else:
            dataset = params.dataset or DATASET_FOR[params.model]
            check_dataset(job, dataset, params.model)
        require_loop(params, job)
        require_precision(params.precision, job)
        require(params.max_failures >= 0, job, f"max_failures must be 0 or more, got {params.max_failures}.")
        require(params.parallelism in PARALLELISMS, job,
                f"parallelism must be one of {', '.join(PARALLELISMS)}, got {params.parallelism!r}.")
        return sized(cls(**(asdict(params) | {"dataset": dataset})), is_named(dataset), 1024)


@dataclass(frozen=True)
class FinetuneParams:
    KIND: ClassVar[str] = "finetune"

    base_checkpoint: str = ""
    dataset: str = ""  # default: the base model's dataset
    samples: int = 0  # rows: 0 is 512 of a built-in dataset, or every row of a table
    epochs: int = 2
    batch_size: int = 32
    lr: float = 5e-3
    lora_rank: int = 4
    lora_alpha: float = 8.0
    precision: str = "fp32"

    @classmethod
    def parse(cls, raw: Mapping[str, Any], job: Scope) -> FinetuneParams:
        params = parse_params(cls, raw, job)
        require(bool(params.base_checkpoint), job,
                "base_checkpoint is required; give a train job's result directory.")
        if params.dataset and not is_named(params.dataset):
            check_dataset(job, params.dataset, "mlp")
        require_loop(params, job)
        require(params.lora_rank >= 1, job, f"lora_rank must be at least 1, got {params.lora_rank}.")
        require(params.lora_alpha > 0, job, f"lora_alpha must be positive, got {params.lora_alpha}.")
        require_precision(params.precision, job)
        return sized(params, not params.dataset or is_named(params.dataset), 512)


@dataclass(frozen=True)
class InferParams:
    KIND: ClassVar[str] = "infer"

    checkpoint: str = ""
    dataset_path: str = ""
    quantize: str | None = None
    batch_size: int = 64
    memory_budget_mb: float = 256.0
    precision: str = "fp32"

    @classmethod
    def parse(cls, raw: Mapping[str, Any], job: Scope) -> InferParams:
        params = parse_params(cls, raw, job)
        require(bool(params.checkpoint), job, "checkpoint is required; give a train job's result directory.")
        require(
            bool(params.dataset_path),
            job,
            f"dataset_path is required; give a .npy array or a table: {KNOWN}.",
        )
        if not params.dataset_path.endswith(".npy"):
            try:
                format_of(params.dataset_path)
            except InvalidJob as exc:
                raise InvalidJob(f"job {job.job_id}: {exc}.") from None
        require(params.quantize in QUANTIZE, job,
                f"quantize must be absent or 'int8', got {params.quantize!r}.")
        require(params.batch_size >= 1, job, f"batch_size must be at least 1, got {params.batch_size}.")
        require(params.memory_budget_mb > 0, job,
                f"memory_budget_mb must be positive, got {params.memory_budget_mb}.")
        require_precision(params.precision, job)
        require(not (params.quantize and params.precision == "bf16"), job,
                "quantize int8 and precision bf16 do not go together; choose one.")
        return params


# ── serve: a model answering requests ───────────────────────────────────────────────

TASKS = ("predict", "generate")
MAX_REPLICAS = 64
MAX_BATCH = 1_024
MAX_TOKENS = 4_096


@dataclass(frozen=True)
class ServeParams:
    """A model served on Ray Serve in a lease (`compute.runners.serve`) until `ends_at`.

    `checkpoint` is a staged model: a train job's result directory (a built-in model) or a
    transformers checkpoint directory; without one, the built-in `model` is served with the
    weights `seed` gives it. `predict` answers one input per request with the model's outputs;
    `generate` (a transformers causal LM) completes a prompt greedily, up to `max_tokens`
    tokens. Replicas autoscale from `min_replicas` to `replicas`, each with `replica_cpus` CPUs
    and `replica_gpus` GPUs; each batches concurrent requests, up to `max_batch_size` of them
    and waiting at most `max_batch_wait_s`, both adapted to the load (`compute.serving`)."""

    KIND: ClassVar[str] = "serve"

    task: str = "predict"
    model: str = "mlp"
    checkpoint: str = ""
    replicas: int = 1
    min_replicas: int = 1
    replica_cpus: float = 1.0
    replica_gpus: float = 0.0
    max_batch_size: int = 32
    max_batch_wait_s: float = 0.01
    max_tokens: int = 64
    ends_at: float = 0.0  # unix seconds: the runner stops serving then
    socket: str = "serve.sock"  # where the ingress listens, in the lease's work directory

    @classmethod
    def parse(cls, raw: Mapping[str, Any], job: Scope) -> ServeParams:
        params = parse_params(cls, raw, job)
        require(params.task in TASKS, job, f"task must be one of {', '.join(TASKS)}, got {params.task!r}.")
        require(bool(params.checkpoint) or params.model in MODEL_NAMES, job,
                f"model must be one of {', '.join(MODEL_NAMES)} when no checkpoint is given, got "
                f"{params.model!r}.")
        require(params.task == "predict" or bool(params.checkpoint), job,
                "task generate needs a checkpoint: a transformers causal language model.")
        require(1 <= params.min_replicas <= params.replicas <= MAX_REPLICAS, job,
                f"replicas must be from min_replicas (at least 1) to {MAX_REPLICAS}, got min_replicas "
                f"{params.min_replicas} and replicas {params.replicas}.")
        require(params.replica_cpus > 0 and params.replica_gpus >= 0, job,
                "replica_cpus must be positive and replica_gpus not negative.")
        require(1 <= params.max_batch_size <= MAX_BATCH, job,
                f"max_batch_size must be from 1 to {MAX_BATCH}, got {params.max_batch_size}.")
        require(0 <= params.max_batch_wait_s <= 1, job,
                f"max_batch_wait_s must be from 0 to 1 second, got {params.max_batch_wait_s}.")
        require(1 <= params.max_tokens <= MAX_TOKENS, job,
                f"max_tokens must be from 1 to {MAX_TOKENS}, got {params.max_tokens}.")
        require(params.ends_at > 0, job, "ends_at must be the time the lease ends, in unix seconds.")
        require(bool(re.fullmatch(r"[A-Za-z0-9._-]{1,64}", params.socket)), job,
                f"socket must be a plain file name, got {params.socket!r}.")
        return params


# ── tune: its settings and search space ─────────────────────────────────────────────

@dataclass(frozen=True)
class TuneParams:
    KIND: ClassVar[str] = "tune"

    model: str = "mlp"
    dataset: str | None = None  # a built-in dataset's name (default: the model's), or a table in the lease
    samples: int = 0  # rows: 0 is 1024 of a built-in dataset, or every row of a table
    search_space: Any = None
    search: str = "random"
    num_samples: int = 8
    max_epochs_per_trial: int = 4
    time_budget_s: float | None = None  # default: the job's timeout
    max_concurrent_trials: int | None = None  # default: as many as the provider has room for

    @classmethod
    def parse(cls, raw: Mapping[str, Any], job: Scope) -> TuneParams:
        return parse_tune(raw, job)[0]

    def space(self) -> dict[str, tuple[str, list[Any]]]:
        """The search space, dimension by dimension: (distribution, its arguments)."""
        return parse_space(Scope("search", self.KIND), self)


def _model_int_keys(model: str) -> set[str]:
    return set(MODEL_ARGS[model]) - DATA_SHAPED


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _check_values(job: Scope, name: str, values: list[Any]) -> None:
    """Every value a dimension can take must suit its hyperparameter."""
    if name == "lr":
        require(all(_is_number(v) and v > 0 for v in values), job,
                f"search_space.lr values must be numbers > 0, got {values}.")
    elif name == "weight_decay":
        require(all(_is_number(v) and v >= 0 for v in values), job,
                f"search_space.weight_decay values must be numbers ≥ 0, got {values}.")
    else:  # batch_size and the model's sizes
        require(all(_is_int(v) and v >= 1 for v in values), job,
                f"search_space.{name} values must be whole numbers ≥ 1, got {values}.")


def _dimension(job: Scope, name: str, entry: Any, allowed: set[str]) -> tuple[str, list[Any]]:
    require(
        name in allowed,
        job,
        f"search_space has unknown hyperparameter {name!r}; searchable ones are "
        f"{', '.join(sorted(allowed))}.",
    )
    require(isinstance(entry, Mapping) and len(entry) == 1 and next(iter(entry)) in DISTRIBUTIONS, job,
            f"search_space.{name} must be one of {{{', '.join(DISTRIBUTIONS)}: ...}}, got {entry!r}.")
    kind, args = next(iter(entry.items()))
    require(isinstance(args, list) and len(args) >= 1, job,
            f"search_space.{name}.{kind} must be a non-empty list, got {args!r}.")
    if kind in ("uniform", "loguniform", "randint"):
        require(len(args) == 2 and all(_is_number(a) for a in args) and args[0] < args[1], job,
                f"search_space.{name}.{kind} must be [low, high] numbers with low < high, got {args!r}.")
        if kind == "loguniform":
            require(args[0] > 0, job, f"search_space.{name}.loguniform needs low > 0, got {args[0]}.")
        if kind == "randint":
            require(all(_is_int(a) for a in args), job,
                    f"search_space.{name}.randint must be whole numbers [low, high), got {args!r}.")
        elif name not in FLOAT_KEYS:
            raise InvalidJob(f"job {job.job_id}: search_space.{name} takes whole numbers; "
                             f"use randint, choice or grid instead of {kind}.")
        _check_values(job, name, [args[0], args[1] - 1] if kind == "randint" else args)
    else:
        _check_values(job, name, args)
    return kind, args


def parse_space(job: Scope, params: TuneParams) -> dict[str, tuple[str, list[Any]]]:
    space = params.search_space
    require(isinstance(space, Mapping) and len(space) > 0, job,
            "search_space must be a non-empty mapping of hyperparameter → distribution.")
    allowed = set(TRAINING_DEFAULTS) | _model_int_keys(params.model)
    dims = {name: _dimension(job, name, entry, allowed) for name, entry in sorted(space.items())}
    if params.search == "grid":
        continuous = sorted(n for n, (kind, _) in dims.items() if kind not in ("grid", "choice"))
        require(not continuous, job, f"a grid search needs grid or choice entries; {', '.join(continuous)} "
                                     "are continuous: list their values, or use search random or bayes.")
    if params.search == "bayes":
        grids = sorted(n for n, (kind, _) in dims.items() if kind == "grid")
        require(not grids, job, f"a bayes search cannot take grid entries ({', '.join(grids)}); use choice.")
    return dims


def parse_tune(raw: Mapping[str, Any], job: Scope) -> tuple[TuneParams, dict[str, tuple[str, list[Any]]]]:
    """All checks of a tune job; nothing here touches Ray."""
    params = parse_params(TuneParams, raw, job)
    require(params.model in MODEL_NAMES, job,
            f"unknown model {params.model!r}; choose one of {', '.join(MODEL_NAMES)}.")
    dataset = params.dataset or DATASET_FOR[params.model]
    check_dataset(job, dataset, params.model)
    params = sized(dataclasses.replace(params, dataset=dataset), is_named(dataset), 1024)
    require(
        params.search in SEARCHES,
        job,
        f"unknown search {params.search!r}; choose one of {', '.join(SEARCHES)}.",
    )
    require(params.samples == 0 or params.samples >= 10, job,
            f"samples must be at least 10 (or 0: every row of the table), got {params.samples}.")
    require(params.num_samples >= 1, job, f"num_samples must be at least 1, got {params.num_samples}.")
    require(params.max_epochs_per_trial >= 1, job,
            f"max_epochs_per_trial must be at least 1, got {params.max_epochs_per_trial}.")
    budget = params.time_budget_s
    require(budget is None or (_is_number(budget) and 0 < budget <= job.timeout_s), job,
            f"time_budget_s must be a number in (0, {job.timeout_s:g}] (the job's timeout), got {budget!r}.")
    concurrent = params.max_concurrent_trials
    require(concurrent is None or (_is_int(concurrent) and concurrent >= 1), job,
            f"max_concurrent_trials must be a whole number ≥ 1, got {concurrent!r}.")
    return params, parse_space(job, params)


# ── ray: the buyer's own program ────────────────────────────────────────────────────

RAY_PARAMS = ("entrypoint", "requirements", "env", "ray", "metrics")
METRICS = "metrics.json"  # the file of its outputs a program reports its metrics in, unless it names another
# a ray job's entrypoint, requirements and env together: they travel in the lease's plan
MAX_RUN_BYTES = 16 * 1024
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Variables of the lease that a program's env may not replace.
RESERVED_ENV = ("PATH", "HOME", "PYTHONPATH", "TMPDIR", "RAY_ADDRESS")


@dataclass(frozen=True)
class Pinned:
    """A file or directory at a URI the buyer chose, pinned by its sha256 (`compute.dataplane.digest`)."""

    uri: str
    sha256: str  # 64 hex digits

    @classmethod
    def parse(cls, raw: Any, where: str) -> Pinned:
        """`{uri, sha256}`; InvalidJob blames `where` (`code`, `inputs.digits`)."""
        if not isinstance(raw, Mapping) or set(raw) != {"uri", "sha256"}:
            raise InvalidJob(f"{where} must be {{uri, sha256}}, got {_show(raw)}.", where)
        uri, sha256 = raw["uri"], raw["sha256"]
        if not isinstance(uri, str) or not uri:
            raise InvalidJob(f"{where}.uri must be a path or URI, got {_show(uri)}.", f"{where}.uri")
        try:
            return cls(uri, normal_sha256(sha256 if isinstance(sha256, str) else ""))
        except ValueError:
            raise InvalidJob(f"{where}.sha256 must be 64 hex digits, as sha256sum prints them, got "
                             f"{_show(sha256)}.", f"{where}.sha256") from None


Located = Pinned | str  # pinned, or (before the buyer posts it) a local path or URI


def located(raw: Any, where: str) -> Located:
    """A path or URI, or once pinned `{uri, sha256}`."""
    if isinstance(raw, str) and raw:
        return raw
    return Pinned.parse(raw, where)


@dataclass(frozen=True)
class ProgramParams:
    """A `ray` job: the buyer's own program, its packed code and its inputs, each pinned."""

    KIND: ClassVar[str] = "ray"

    entrypoint: str  # a shell command, run in the code's directory
    code: Located
    requirements: tuple[str, ...] = ()  # from the package index, installed from wheels only
    env: Mapping[str, str] = field(default_factory=dict)
    ray: bool = True  # False: a plain program, which gets no Ray instance
    inputs: Mapping[str, Located] = field(default_factory=dict)
    metrics: str = METRICS  # a JSON object under outputs/: the metrics the buyer reads with the result

    @classmethod
    def parse(cls, raw: Mapping[str, Any], job: Scope) -> ProgramParams:
        """`raw` holds the spec's params (entrypoint, requirements, env, ray) with its `code`
        and `inputs`; InvalidJob names the field to blame."""
        if not isinstance(raw, Mapping):
            raise InvalidJob(f"params must be a mapping, got {_show(raw)}.", "params")
        for key in raw:
            if key not in (*RAY_PARAMS, "code", "inputs"):
                raise InvalidJob(
                    f"params.{key} is not a ray parameter; known ones are {', '.join(RAY_PARAMS)}.",
                    f"params.{key}",
                )
        entrypoint = raw.get("entrypoint")
        if not isinstance(entrypoint, str) or not entrypoint.strip():
            raise InvalidJob(
                "params.entrypoint must be the command that runs the program, e.g. 'python train.py'.",
                "params.entrypoint",
            )
        requirements = raw.get("requirements", [])
        _check_requirements(requirements)
        ray = raw.get("ray", True)
        if not isinstance(ray, bool):
            raise InvalidJob(
                "params.ray must be true (the program gets a Ray instance of the lease's own, the "
                "default) or false (a plain program).",
                "params.ray",
            )
        metrics = raw.get("metrics", METRICS)
        if not isinstance(metrics, str) or not re.fullmatch(r"[\w.-]+(/[\w.-]+)*", metrics) \
                or ".." in metrics.split("/") or len(metrics) > 200:
            raise InvalidJob("params.metrics must name a file under the program's outputs, e.g. "
                             f"{METRICS!r}, got {_show(metrics)}.", "params.metrics")
        env = raw.get("env", {})
        if not isinstance(env, Mapping) or not all(isinstance(v, str) for v in env.values()):
            raise InvalidJob("params.env must map variable names to text values.", "params.env")
        for key in env:
            if (
                not isinstance(key, str)
                or not NAME.match(key)
                or key in RESERVED_ENV
                or key.startswith("SWARM_")
            ):
                raise InvalidJob(f"params.env cannot set {_show(key)}; a name is letters, digits and _, and "
                                 f"{', '.join(RESERVED_ENV)} and SWARM_* belong to the lease.", "params.env")
        size = len(json.dumps({"entrypoint": entrypoint, "requirements": requirements, "env": env,
                               "ray": ray}).encode())
        if size > MAX_RUN_BYTES:
            raise InvalidJob(
                f"params holds {size} bytes of entrypoint, requirements and env; a ray job has at "
                f"most {MAX_RUN_BYTES} (put more in its code).",
                "params",
            )
        inputs = raw.get("inputs", {})
        if not isinstance(inputs, Mapping):
            raise InvalidJob(f"inputs must map names to a path or URI, got {_show(inputs)}.", "inputs")
        for name in inputs:
            if not isinstance(name, str) or not NAME.match(name):
                raise InvalidJob(f"inputs.{name} must be named with letters, digits and _ (it becomes the "
                                 "variable SWARM_INPUT_<NAME> of the program).", f"inputs.{name}")
        return cls(
            entrypoint=entrypoint,
            code=located(raw.get("code"), "code"),
            requirements=tuple(requirements),
            env=dict(env),
            ray=ray,
            inputs={n: located(v, f"inputs.{n}") for n, v in sorted(inputs.items())},
            metrics=metrics,
        )

    def unpinned(self) -> list[str]:
        """The fields naming code or an input by a path or URI alone, not yet by its sha256."""
        named = [("code", self.code), *((f"inputs.{n}", v) for n, v in self.inputs.items())]
        return [path for path, value in named if isinstance(value, str)]

    def as_json(self) -> dict[str, Any]:
        named = {"metrics": self.metrics} if self.metrics != METRICS else {}  # as a spec wrote it
        return {"entrypoint": self.entrypoint, "code": _pinned_json(self.code),
                "requirements": list(self.requirements), "env": dict(self.env), "ray": self.ray,
                "inputs": {n: _pinned_json(v) for n, v in self.inputs.items()}} | named


def _pinned_json(value: Located) -> Any:
    return asdict(value) if isinstance(value, Pinned) else value


def _check_requirements(requirements: Any) -> None:
    from packaging.requirements import InvalidRequirement, Requirement

    if not isinstance(requirements, list | tuple) or not all(isinstance(r, str) for r in requirements):
        raise InvalidJob("params.requirements must be a list of pip requirements, like ['pandas>=2'].",
                         "params.requirements")
    for line in requirements:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            req = None
        if req is None or req.url:
            raise InvalidJob(f"params.requirements holds {_show(line)}, which is not a requirement from the "
                             "package index (name, extras and version only).", "params.requirements")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
