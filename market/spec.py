"""The job spec a buyer writes (YAML or JSON), validated before anything goes on-chain.

A bad spec raises `SpecError` with one sentence naming the field path (`resources.workers`)
and what it may be. The kind's `params` are checked with the runner's own parsing, so a
parameter the runner would refuse is refused here. `canonical()` is the JSON that
`ledger.specs.store_spec` hashes; it loads back into an equal `JobSpec`.

How the top-level `model` and `dataset` reach the runner:
  train, tune   model → params.model (mlp | tiny-transformer; for train also a Hugging Face
                checkpoint the buyer brings), dataset → params.dataset
  finetune      model → params.base_checkpoint, dataset → params.dataset
  infer         model → params.checkpoint, dataset → params.dataset_path (a .npy array or a table)
A dataset is a built-in one's name or a table the buyer brings (compute.tabular); a checkpoint
is `job:<id>` (that job's result, which the site fetches from that job's output and checks
against the chain's resultHash) or a directory. What the buyer brings is named like a ray
job's inputs: a path or URI, pinned by its sha256 (`{uri, sha256}`) before the spec is posted,
and a site copies it into the lease and checks it before the runner reads it. Every kind's
results go to `<output>/<compute job id>` in the buyer's storage, never the market's.

A `ray` job is the buyer's own program (docs/market.md): `code`, the program's directory
packed as one tar, and `inputs`, the datasets and models it reads, are each a URI pinned by
its sha256 (`{uri, sha256}`), so the spec's hash on chain pins exactly what runs; `output` is
the URI its results go to. `params` holds the `entrypoint` (a shell command run in the code's
directory), pip `requirements`, `env`, and `ray: false` for a program that uses no Ray. A
spec as a buyer writes it may name code and inputs by a local path or an unpinned URI;
`market.storage.pin` uploads and hashes them before posting, and a site refuses a spec that
is not pinned. Each kind's parameters are the job contract's (`compute.jobs`), and a spec is
checked by reading it as a site will (`compute.order`).
"""

from __future__ import annotations

import difflib
import json
import re
import time
from datetime import datetime
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from compute.dataplane import join, normal_sha256, shown
from compute.errors import ComputeError, InvalidJob
from compute.jobs import KINDS, PARAMS, ComputeJob
from compute.order import (  # noqa: F401  (job_namespace: the market's name for it too)
    DATASET_PARAM,
    JOB_REF,
    MODEL_PARAM,
    Order,
    brought_of,
    job_namespace,
    prior_job_of,
    prior_refused,
)
from compute.reference import PEAK_FP32_TFLOPS, normalize_model
from ledger.errors import InvalidInput
from ledger.units import DECIMALS, parse_amount

# The kinds a job posted to the market runs; a `serve` lease is asked of a site directly and paid by
# receipts (market.serving), never escrowed as a job.
SPEC_KINDS = tuple(kind for kind in KINDS if kind != "serve")
DURATION = re.compile(r"(\d+)\s*([smhdw])")
SECONDS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}
GPU_MODELS = ", ".join(PEAK_FP32_TFLOPS)

# What each field may be, for the error sentence.
ALLOWED = {
    "kind": f"one of {', '.join(SPEC_KINDS)}",
    "model": "a model name for train and tune; for train also a Hugging Face checkpoint directory's path or "
    "URI; for finetune and infer, job:<id> or a checkpoint directory's path or URI (or {uri, sha256} "
    "once pinned)",
    "dataset": "a built-in dataset's name, or a table's path or URI (Parquet, CSV or JSON Lines; for infer "
               "also "
    "a .npy array), or {uri, sha256} once pinned",
    "resources": "a mapping of nodes, workers, gpus_per_worker, gpu_model, vram_gb_per_worker, "
    "cpus_per_worker and memory_gb",
    "resources.nodes": "an integer of at least 1, the number of machines the job runs on, each running "
    "resources.workers workers (above 1 only for train and ray jobs)",
    "resources.workers": "an integer of at least 1",
    "resources.gpus_per_worker": "an integer of at least 0",
    "resources.gpu_model": f"one of {GPU_MODELS}, in any case",
    "resources.vram_gb_per_worker": "a number of at least 0",
    "resources.cpus_per_worker": "a number greater than 0",
    "resources.memory_gb": "a number of at least 0",
    "max_price_per_unit": f'a token amount greater than 0 with at most {DECIMALS} decimals, like 0.5 or "2"',
    "max_units": "an integer of at least 1",
    "deadline": "a future time: ISO-8601 with a timezone (2026-12-01T12:00:00Z), a duration from now "
    "(30m, 2h, 1d12h) or unix seconds",
    "max_runtime": "how long the job may run once it starts, at most until its deadline: a duration (30m, "
    "2h, 1d12h) or seconds",
    "min_provider_score": "a number from 0 to 1",
    "priority": "an integer from 0 to 10",
    "replicas": "an integer from 1 to 3",
    "publish": "true (any buyer's job may build on this job's result as job:<id>) or false, the default",
    "seed": "an integer of at least 0",
    "params": "a mapping of the runner's parameter names to values",
    "code": "the program's directory: a local path or URI, or {uri, sha256} once pinned",
    "inputs": "a mapping of names (letters, digits, _) to a local path or URI, or {uri, sha256} once pinned",
    "output": "the URI (or, on a devnet, the directory) the job's results go to, under its compute job id",
    "sha256": "the input's sha256, 64 hex digits as sha256sum prints them (or give the path or URI alone, "
    "and `swarm job post` pins it)",
    "uri": "where the input is: a local path or a URI pyarrow opens",
}


class SpecError(InvalidInput):
    """A job spec that cannot be posted; `field` is the offending field path, if one is to blame."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class FieldError(ValueError):
    """Raised inside validators: a field path and the clause saying what is wrong with it."""

    def __init__(self, path: str, clause: str) -> None:
        super().__init__(clause)
        self.path = path
        self.clause = clause


# ── field parsers ───────────────────────────────────────────────────────────────────


def _wei(value: Any) -> int:
    allowed = ALLOWED["max_price_per_unit"]
    refusal = FieldError("max_price_per_unit", f"must be {allowed} (got {_show(value)})")
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
        raise refusal
    try:
        return parse_amount(value, "max_price_per_unit")
    except InvalidInput:
        raise refusal from None


def parse_deadline(value: Any, now: float | None = None) -> int:
    """Unix seconds of an ISO-8601 time with timezone, a duration from `now`, or unix seconds."""
    now = time.time() if now is None else now
    if isinstance(value, str) and DURATION.sub("", value).strip() == "" and DURATION.search(value):
        at = int(now) + sum(int(n) * SECONDS[u] for n, u in DURATION.findall(value))
    elif isinstance(value, (str, datetime)):
        at = _iso_seconds(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        at = value
    else:
        raise FieldError("deadline", f"must be {ALLOWED['deadline']} (got {_show(value)})")
    if at <= now:
        raise FieldError("deadline", f"must be in the future (got {_show(value)}, which is not after now)")
    return at


def parse_runtime(value: Any) -> int | None:
    """Seconds of a duration (30m, 2h, 1d12h) or a whole number of seconds; None stays None."""
    if value is None:
        return None
    if isinstance(value, str) and DURATION.sub("", value).strip() == "" and DURATION.search(value):
        seconds = sum(int(n) * SECONDS[u] for n, u in DURATION.findall(value))
    elif isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    else:
        raise FieldError("max_runtime", f"must be {ALLOWED['max_runtime']} (got {_show(value)})")
    if seconds < 1:
        raise FieldError("max_runtime", f"must be at least a second (got {_show(value)})")
    return seconds


def _iso_seconds(value: str | datetime) -> int:
    try:
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(value.strip())
    except ValueError:
        raise FieldError("deadline", f"must be {ALLOWED['deadline']} (got {_show(value)})") from None
    if moment.tzinfo is None:
        raise FieldError("deadline", f"needs a timezone, like 2026-12-01T12:00:00Z (got {_show(value)})")
    return int(moment.timestamp())


def _gpu_model(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            model = normalize_model(value)
        except ComputeError:
            model = None
        if model in PEAK_FP32_TFLOPS:
            return model
    raise FieldError("resources.gpu_model", f"must be {ALLOWED['resources.gpu_model']} (got {_show(value)})")


# ── the spec ────────────────────────────────────────────────────────────────────────

STRICT = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)
NonEmpty = Annotated[str, Field(min_length=1)]


class Resources(BaseModel):
    """What one node of the job needs: `workers` workers with these needs each. The job runs on
    `nodes` machines of one provider's site (train and ray jobs may ask for more than one), so
    it holds nodes × each of these, and a Ray Train script's num_workers is nodes × workers."""

    model_config = STRICT

    nodes: int = Field(default=1, ge=1)
    workers: int = Field(ge=1)  # on each node
    gpus_per_worker: int = Field(default=0, ge=0)
    gpu_model: Annotated[str | None, BeforeValidator(_gpu_model)] = None  # a compute.reference key
    vram_gb_per_worker: float = Field(default=0.0, ge=0)
    cpus_per_worker: float = Field(default=1.0, gt=0)
    memory_gb: float = Field(default=0.0, ge=0)  # RAM per worker

    @model_validator(mode="after")
    def _gpu_fields_need_gpus(self) -> Resources:
        for name in ("gpu_model", "vram_gb_per_worker"):
            if self.gpus_per_worker == 0 and (value := getattr(self, name)):
                clause = "applies only to GPU jobs; set resources.gpus_per_worker to 1 or more or remove it"
                raise FieldError(f"resources.{name}", f"{clause} (got {_show(value)})")
        return self


def _sha256(value: Any) -> str:
    try:
        return normal_sha256(value) if isinstance(value, str) else normal_sha256("")
    except ValueError:
        raise FieldError(
            "sha256", f"must be 64 hex digits, as sha256sum prints them (got {_show(value)})"
        ) from None


class Input(BaseModel):
    """A file or directory at a URI the buyer chose, pinned by its sha256 (`compute.dataplane.digest`)."""

    model_config = STRICT

    uri: NonEmpty
    sha256: Annotated[str, BeforeValidator(_sha256)]


Located = Input | NonEmpty  # pinned, or (before `market.storage.pin`) a local path or URI


class JobSpec(BaseModel):
    model_config = STRICT

    kind: Literal["train", "finetune", "infer", "tune", "ray"]
    model: Located | None = None  # a name, job:<id>, or a checkpoint the buyer brings
    dataset: Located | None = None  # a built-in dataset's name, or a file the buyer brings
    resources: Resources
    max_price_per_unit: Annotated[int, BeforeValidator(_wei)]  # wei per unit (GPU- or CPU-second)
    max_units: int = Field(ge=1)
    deadline: int  # unix seconds; see parse_deadline for what a spec may write
    # seconds the job may run once a site starts it (parse_runtime), enforced by the site; at most
    # the time until the deadline, which bounds it otherwise
    max_runtime: Annotated[int | None, BeforeValidator(parse_runtime)] = None
    min_provider_score: float = Field(default=0.0, ge=0, le=1)
    priority: int = Field(default=5, ge=0, le=10)
    replicas: int = Field(default=1, ge=1, le=3)
    # others' jobs may build on this one's result (job:<id>); by default only its buyer's
    publish: bool = False
    seed: int = Field(default=0, ge=0)
    params: dict[str, Any] = Field(default_factory=dict)
    code: Located | None = None  # a ray job's program directory, packed (compute.dataplane.pack)
    inputs: dict[str, Located] = Field(default_factory=dict)
    # Where the job's results (and a built-in job's checkpoints) go: <output>/<compute job id>/.
    # A ray job names one; `swarm job post` gives a built-in job without one $SWARM_HOME/results.
    output: NonEmpty | None = None

    @field_validator("deadline", mode="before")
    @classmethod
    def _deadline(cls, value: Any, info: ValidationInfo) -> int:
        return parse_deadline(value, (info.context or {}).get("now"))

    @model_validator(mode="after")
    def _params_suit_the_runner(self, info: ValidationInfo) -> JobSpec:
        if self.kind != "ray":
            for name in ("model", "dataset"):
                if getattr(self, name) is None:
                    raise FieldError(name, f"is required for a {self.kind} job; it must be {ALLOWED[name]}")
            if self.kind == "tune" and not isinstance(self.model, str):
                raise FieldError(
                    "model", f"must be a model's name for a {self.kind} job (got {_show(self.model)})"
                )
        now = (info.context or {}).get("now") or time.time()
        if self.max_runtime is not None and self.max_runtime > self.deadline - now:
            left = max(0, int(self.deadline - now))
            raise FieldError("max_runtime", f"is {self.max_runtime:,} s, longer than the {left:,} s until "
                             "the deadline; shorten it or move the deadline")
        check_params(self, now=now)
        return self

    @property
    def prior_job(self) -> int | None:
        """The job whose result this one builds on (`model: job:<id>`), if any."""
        return prior_job_of(self.kind, self.model)

    @property
    def escrow_wei(self) -> int:
        """What one run of the job may cost at most: price × units."""
        return self.max_price_per_unit * self.max_units

    def canonical(self) -> dict[str, Any]:
        """JSON-able and loadable again: the price as a token decimal string, the deadline as unix seconds."""
        data = self.model_dump(mode="json")
        data["max_price_per_unit"] = tokens(self.max_price_per_unit)
        if data.get("max_runtime") is None:  # a spec without one hashes as it did before the field
            data.pop("max_runtime", None)
        if data["resources"]["nodes"] == 1:  # likewise a spec of one node
            del data["resources"]["nodes"]
        return data

    def unpinned(self) -> list[str]:
        """The fields naming code or an input by a path or URI alone, not yet by its sha256."""
        named = [("code", self.code), *((f"inputs.{n}", v) for n, v in self.inputs.items()),
                 *((name, value) for name, value in self.brought().items())]
        return [path for path, value in named if isinstance(value, str)]

    def brought(self) -> dict[str, Input | str]:
        """A built-in kind's model and dataset that the buyer brings (not a name, not job:<id>),
        by spec field: pinned, or a path or URI until `market.storage.pin` pins it."""
        return brought_of(self.kind, self.model, self.dataset)

    def order(self, now: float | None = None) -> Order:
        """The spec as a site reads it from its canonical JSON: the job contract's typed parameters,
        resources and bounds (`compute.order`)."""
        return Order.from_spec(self.canonical(), now)

    def result_location(self, namespace: str, job_id: int) -> str | None:
        """Where the result of this spec's job `job_id` goes: `<output>/<compute job id>`."""
        return join(self.output, namespace + str(job_id)) if self.output else None

    def to_compute_job(self, job_id: str, provider: str, storage: str = "",
                       now: float | None = None, prior_result: str = "") -> ComputeJob:
        """The job one provider runs as compute job `job_id`, keeping its runs in `storage`; it
        is stopped at the deadline. `job:<id>` becomes `prior_result`, the directory that job's
        result was staged into."""
        job = self.order(now).job(job_id, provider, storage, now)
        if self.prior_job is not None and prior_result:
            job = job.with_params(**{MODEL_PARAM[self.kind]: prior_result})
        return job


def named(value: Any) -> str:
    """A spec's model or dataset as a person reads it: its name, or where it is (a pinned input's URI)."""
    uri = value.uri if isinstance(value, Input) else value.get("uri") if isinstance(value, dict) else None
    return shown(uri) if uri else str(value)


def borrowing_refused(spec: JobSpec, buyer: str, prior_buyer: str | None,
                      prior_spec: JobSpec | SpecError | None) -> str | None:
    """Why `buyer`'s job may not build on the result it names (`job:<id>`), or None if it may
    (`compute.order.prior_refused`, the rule a site applies too)."""
    published = isinstance(prior_spec, JobSpec) and prior_spec.publish
    return prior_refused(spec.prior_job, buyer, prior_buyer, published)


def tokens(wei: int) -> str:
    """Wei as an exact token decimal string ('0.5'), which parse_amount reads back to the same wei."""
    with localcontext() as ctx:
        ctx.prec = 100
        return format(Decimal(wei).scaleb(-DECIMALS).normalize(), "f")


# ── params, checked by the runner's own parsing ────────────────────────────────────────


def check_params(spec: JobSpec, now: float) -> None:
    """Reads the spec as a site will (`compute.order`: the runner's own parsing, no Ray work) and
    names the field it refuses."""
    try:
        Order.from_spec(spec.model_dump(mode="json"), now=now)
    except InvalidJob as exc:
        text = str(exc).removeprefix("job spec: ")
        if exc.field is not None:
            raise FieldError(exc.field, text.removeprefix(f"{exc.field} ").rstrip(".")) from None
        known = [*PARAMS[spec.kind].__dataclass_fields__]
        path = _blamed(spec.kind, text, known)
        raise FieldError(path, f"is not valid for a {spec.kind} job: {_clause(text)}") from None


def _blamed(kind: str, text: str, names: list[str]) -> str:
    """The spec field a runner's message is about: the parameter it names first."""
    if " trains on " in text:  # a model/dataset mismatch: the model is known, its dataset is not its kind
        return "dataset"
    found = [(m.start(), name) for name in names
             if (m := re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text))]
    if not found:
        return "params"
    name = min(found)[1]
    if name == MODEL_PARAM[kind]:
        return "model"
    if name == DATASET_PARAM[kind]:
        return "dataset"
    return f"params.{name}"


UNION_TAGS = ("Input", "str", "constrained-str")

# ── loading, and pydantic's errors as one sentence ─────────────────────────────────────


def load_spec(path: str | Path, now: float | None = None) -> JobSpec:
    """Reads and validates a spec file (.json as JSON, anything else as YAML)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "it is not UTF-8 text"
        raise SpecError(f"spec file {path} cannot be read ({reason}); "
                        "give the path of a YAML or JSON file.") from None
    fmt: Literal["yaml", "json"] = "json" if path.suffix.lower() == ".json" else "yaml"
    return parse_spec(text, fmt, source=f"spec file {path}", now=now)


def parse_spec(text: str, fmt: Literal["yaml", "json"] = "yaml", *, source: str = "the spec",
               now: float | None = None) -> JobSpec:
    """Validates spec text; `now` (unix seconds) fixes the clock that deadlines are judged by."""
    data = _decode(text, fmt, source)
    if not isinstance(data, dict):
        raise SpecError(f"{source} must hold a mapping of spec fields (kind, model, ...), "
                        f"not {_kind_of(data)}.")
    return validate_spec(data, now=now)


def validate_spec(data: dict[str, Any], now: float | None = None) -> JobSpec:
    try:
        return JobSpec.model_validate(data, context={"now": time.time() if now is None else now})
    except ValidationError as exc:
        errors = exc.errors()
        # A misspelt field is also a missing one (max_unit for max_units): name the misspelling.
        unknown = [e for e in errors if e["type"] == "extra_forbidden"]
        missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing"]
        path, message = _sentence((unknown or errors)[0], missing)
        raise SpecError(message, path) from None


def _decode(text: str, fmt: str, source: str) -> Any:
    if fmt == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            where = f"line {exc.lineno}, column {exc.colno}"
            raise SpecError(f"{source} is not valid JSON ({exc.msg} at {where}).") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "unreadable"
        raise SpecError(f"{source} is not valid YAML ({problem}{where}).") from None


def _sentence(error: ErrorDetails, missing: list[str] | None = None) -> tuple[str, str]:
    cause = (error.get("ctx") or {}).get("error")
    # A union's member is named in the location (code.Input.sha256); the spec has no such field.
    path = ".".join(str(part) for part in error["loc"] if part not in UNION_TAGS)
    if isinstance(cause, FieldError):
        where = path if path.endswith(f".{cause.path}") else cause.path
        return where, f"spec field {where} {cause.clause}."
    if error["type"] == "missing":
        allowed = ALLOWED.get(path) or ALLOWED.get(path.rsplit(".", 1)[-1], "given")
        return path, f"spec field {path} is required; it must be {allowed}."
    if error["type"] == "extra_forbidden":
        parent, _, name = path.rpartition(".")
        known = list(JobSpec.model_fields if not parent else Resources.model_fields)
        of = f" of {parent}" if parent else ""
        # The field it most likely meant: a missing one it resembles, else any known one.
        nearest = difflib.get_close_matches(name, [m for m in missing or () if m in known], n=1, cutoff=0.5) \
            or difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        if nearest:
            return path, f"spec field {path} is not a known field{of} (did you mean {nearest[0]}?)."
        return path, f"spec field {path} is not allowed; known fields{of} are {', '.join(known)}."
    top = path if path in ALLOWED else path.split(".")[0]
    return top, f"spec field {top} must be {ALLOWED.get(top, 'valid')} (got {_show(error['input'])})."


def _clause(message: str) -> str:
    """A runner's sentence as a clause to follow a colon."""
    text = message.strip().rstrip(".")
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind_of(value: Any) -> str:
    return "an empty document" if value is None else f"a {type(value).__name__}"
