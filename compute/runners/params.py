"""Reading a job's `params` into a runner's typed settings, with errors that name the key.

Every check here is pure (no torch, no Ray), so the market validates a spec with the very
code its runner will use, without loading either."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from compute.catalog import DATASET_FOR, MODEL_ARGS, MODEL_NAMES
from compute.errors import InvalidJob
from compute.jobs import ComputeJob
from compute.tabular import KNOWN, format_of, is_named

P = TypeVar("P")
KIND_OF = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}

PRECISIONS = ("fp32", "bf16")
MAX_SAMPLES = 1_000_000
QUANTIZE = (None, "int8")
SEARCHES = ("random", "grid", "bayes")
DISTRIBUTIONS = ("uniform", "loguniform", "choice", "grid", "randint")
# Model sizes the dataset fixes; the others are searchable.
DATA_SHAPED = {"in_features", "classes", "vocab", "seq_len"}
TRAINING_DEFAULTS: dict[str, Any] = {"lr": 1e-2, "weight_decay": 0.0, "batch_size": 64}
FLOAT_KEYS = {"lr", "weight_decay"}  # the others are whole numbers


def parse_params(cls: type[P], job: ComputeJob) -> P:
    """`cls(**job.params)` after checking every key is known and every value has the
    type of its default (an int is accepted where a float is expected)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(job.params) - set(fields))
    if unknown:
        raise InvalidJob(
            f"job {job.job_id}: unknown {job.kind} parameter(s) {', '.join(unknown)}; "
            f"known ones are {', '.join(fields)}."
        )
    for key, value in job.params.items():
        _check_type(job, key, value, fields[key].default)
    return cls(**job.params)


def _check_type(job: ComputeJob, key: str, value: Any, default: Any) -> None:
    if default is None:  # an optional setting: the runner checks its values
        return
    expected: tuple[type, ...] = (int, float) if isinstance(default, float) else (type(default),)
    if isinstance(value, bool) and bool not in expected or not isinstance(value, expected):
        raise InvalidJob(
            f"job {job.job_id}: {job.kind} parameter {key} must be {KIND_OF[expected[-1]]}, got {value!r}."
        )


def require(condition: bool, job: ComputeJob, message: str) -> None:
    """Raises InvalidJob(`job <id>: <message>`) unless `condition` holds."""
    if not condition:
        raise InvalidJob(f"job {job.job_id}: {message}")


def require_loop(params: TrainParams | FinetuneParams, job: ComputeJob) -> None:
    """What every training loop's parameters must hold: samples, epochs, batch size, rate."""
    require(10 <= params.samples <= MAX_SAMPLES or params.samples == 0, job,
            f"samples must be between 10 and {MAX_SAMPLES} (or 0: all of a file), got {params.samples}.")
    require(params.epochs >= 1, job, f"epochs must be at least 1, got {params.epochs}.")
    require(params.batch_size >= 1, job, f"batch_size must be at least 1, got {params.batch_size}.")
    require(params.lr > 0, job, f"lr must be positive, got {params.lr}.")


# ── train, finetune, infer ──────────────────────────────────────────────────────────

def check_dataset(job: ComputeJob, dataset: str, model: str) -> None:
    """A built-in dataset the model trains on, or a table (compute.tabular) for the MLP."""
    if is_named(dataset):
        require(dataset == DATASET_FOR[model], job, f"model {model} trains on {DATASET_FOR[model]}, not {dataset}.")
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


def require_precision(precision: str, job: ComputeJob) -> None:
    require(precision in PRECISIONS, job, f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}.")


@dataclass(frozen=True)
class TrainParams:
    model: str = "mlp"
    dataset: str = ""  # a built-in dataset's name, or the path of a table in the lease
    samples: int = 0  # rows: 0 is 1024 of a built-in dataset, or every row of a table
    epochs: int = 3
    batch_size: int = 32
    lr: float = 1e-3
    precision: str = "fp32"
    max_failures: int = 2

    @property
    def brought(self) -> bool:
        """True when `model` is a transformers checkpoint the buyer brings, not a built-in model."""
        return self.model not in MODEL_NAMES

    @classmethod
    def from_job(cls, job: ComputeJob) -> TrainParams:
        params = parse_params(cls, job)
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
        return sized(cls(**(asdict(params) | {"dataset": dataset})), is_named(dataset), 1024)


@dataclass(frozen=True)
class FinetuneParams:
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
    def from_job(cls, job: ComputeJob) -> FinetuneParams:
        params = parse_params(cls, job)
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
    checkpoint: str = ""
    dataset_path: str = ""
    quantize: str | None = None
    batch_size: int = 64
    memory_budget_mb: float = 256.0
    precision: str = "fp32"

    @classmethod
    def from_job(cls, job: ComputeJob) -> InferParams:
        params = parse_params(cls, job)
        require(bool(params.checkpoint), job, "checkpoint is required; give a train job's result directory.")
        require(bool(params.dataset_path), job, f"dataset_path is required; give a .npy array or a table: {KNOWN}.")
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


# ── tune: its settings and search space ─────────────────────────────────────────────

@dataclass(frozen=True)
class TuneParams:
    model: str = "mlp"
    dataset: str | None = None  # a built-in dataset's name (default: the model's), or a table in the lease
    samples: int = 0  # rows: 0 is 1024 of a built-in dataset, or every row of a table
    search_space: Any = None
    search: str = "random"
    num_samples: int = 8
    max_epochs_per_trial: int = 4
    time_budget_s: float | None = None  # default: the job's timeout
    max_concurrent_trials: int | None = None  # default: as many as the provider has room for


def _model_int_keys(model: str) -> set[str]:
    return set(MODEL_ARGS[model]) - DATA_SHAPED


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _check_values(job: ComputeJob, name: str, values: list[Any]) -> None:
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


def _dimension(job: ComputeJob, name: str, entry: Any, allowed: set[str]) -> tuple[str, list[Any]]:
    require(name in allowed, job,
            f"search_space has unknown hyperparameter {name!r}; searchable ones are {', '.join(sorted(allowed))}.")
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


def parse_space(job: ComputeJob, params: TuneParams) -> dict[str, tuple[str, list[Any]]]:
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


def parse_tune(job: ComputeJob) -> tuple[TuneParams, dict[str, tuple[str, list[Any]]]]:
    """All checks of a tune job; nothing here touches Ray."""
    params = parse_params(TuneParams, job)
    require(params.model in MODEL_NAMES, job,
            f"unknown model {params.model!r}; choose one of {', '.join(MODEL_NAMES)}.")
    dataset = params.dataset or DATASET_FOR[params.model]
    check_dataset(job, dataset, params.model)
    params = sized(dataclasses.replace(params, dataset=dataset), is_named(dataset), 1024)
    require(params.search in SEARCHES, job, f"unknown search {params.search!r}; choose one of {', '.join(SEARCHES)}.")
    require(params.samples == 0 or params.samples >= 10, job,
            f"samples must be at least 10 (or 0: every row of the table), got {params.samples}.")
    require(params.num_samples >= 1, job, f"num_samples must be at least 1, got {params.num_samples}.")
    require(params.max_epochs_per_trial >= 1, job,
            f"max_epochs_per_trial must be at least 1, got {params.max_epochs_per_trial}.")
    budget = params.time_budget_s
    require(budget is None or _is_number(budget) and 0 < budget <= job.timeout_s, job,
            f"time_budget_s must be a number in (0, {job.timeout_s:g}] (the job's timeout), got {budget!r}.")
    concurrent = params.max_concurrent_trials
    require(concurrent is None or _is_int(concurrent) and concurrent >= 1, job,
            f"max_concurrent_trials must be a whole number ≥ 1, got {concurrent!r}.")
    return params, parse_space(job, params)
