"""The serving order: what a buyer asks a site to serve (docs/architecture.md §12), typed once from
the buyer's spec to the lease's runner, as `compute.jobs` types a job.

An order is the serve runner's own parameters (`ServeParams`: the task, the built-in model, the
replicas and their resources, batching, `max_tokens`), less the three a site sets when it plans
the lease (where the checkpoint is staged, the ingress's socket, the runner's clock), and the
order's terms: when it ends, its price, the buyer's checkpoint pinned by its sha256, each
replica's memory and the seed of a built-in model's weights. Every field and its default is one
of these two classes', written once.

`ServeOrder.parse` reads an order from a mapping: a buyer's spec once the market has written its
notation out (`market.serving.order_from_spec`: a path pinned, a price in SWARM, a duration), or
the JSON a site receives (`read`). Every check is here, with errors that name the field; a site
reads what it receives with the very code the buyer's spec was checked with.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from compute.catalog import MODEL_NAMES
from compute.errors import InvalidJob
from compute.runners.params import KIND_OF, Pinned, Scope, ServeParams

FORMAT = 2  # the wire's version: a site refuses any other
MAX_SERVING_S = 30 * 86_400
MAX_PRICE = 2**128 - 1
STAGED_CHECKPOINT = "inputs/checkpoint"  # where a site stages an order's checkpoint, in the lease
# The runner's parameters a site sets as it plans the lease, never the buyer.
SITE_SET = ("checkpoint", "socket", "ends_at")
RUNNER_FIELDS = tuple(f.name for f in dataclasses.fields(ServeParams) if f.name not in SITE_SET)


@dataclass(frozen=True)
class ServeOrder:
    """What a buyer asks a site to serve: the runner's parameters and the order's terms."""

    runner: ServeParams  # its checkpoint, socket and ends_at are the site's to set (`params`)
    ends_at: int  # unix seconds: the lease stops serving then
    price_per_request: int = 0  # wei a request; or
    price_per_token: int = 0  # wei a generated token, for task generate
    checkpoint: Pinned | None = None  # the buyer's model; None serves the built-in `runner.model`
    memory_gb: float = 1.0  # each replica's
    seed: int = 0  # a built-in model's weights

    # The runner's fields, read through the order.
    @property
    def task(self) -> str:
        return self.runner.task

    @property
    def replicas(self) -> int:
        return self.runner.replicas

    @property
    def replica_cpus(self) -> float:
        return self.runner.replica_cpus

    @property
    def replica_gpus(self) -> float:
        return self.runner.replica_gpus

    @property
    def max_tokens(self) -> int:
        return self.runner.max_tokens

    @property
    def model(self) -> str:
        """What is served: the checkpoint's URI, or the built-in model's name."""
        return self.checkpoint.uri if self.checkpoint else self.runner.model

    @property
    def sha256(self) -> str:
        """The checkpoint's pin ("" for a built-in model)."""
        return self.checkpoint.sha256 if self.checkpoint else ""

    @property
    def price(self) -> int:
        """The least a request may cost: its price, or one token's."""
        return self.price_per_request or self.price_per_token

    # ── reading and writing ─────────────────────────────────────────────────────────
    @classmethod
    def fields(cls) -> tuple[str, ...]:
        """The keys of an order's mapping, the runner's first."""
        own = tuple(f.name for f in dataclasses.fields(cls) if f.name != "runner")
        return RUNNER_FIELDS + own

    @classmethod
    def parse(cls, raw: Any, now: float | None = None) -> ServeOrder:
        """The order `raw` holds; InvalidJob names the field and what it may be. `now` checks
        that ends_at lies ahead (None: a record read back, whose lease may have ended)."""
        if not isinstance(raw, Mapping):
            raise InvalidJob(f"a serving order is a mapping of {', '.join(cls.fields())}.")
        unknown = sorted(set(map(str, raw)) - set(cls.fields()))
        if unknown:
            raise InvalidJob(f"the serving order has no field {unknown[0]}; its fields are "
                             f"{', '.join(cls.fields())}.", unknown[0])
        own = {f.name: f for f in dataclasses.fields(cls) if f.name != "runner"}
        if "ends_at" not in raw:
            raise InvalidJob("the serving order needs ends_at: when it stops serving, in unix seconds.",
                             "ends_at")
        for name in ("ends_at", "memory_gb", "seed"):
            if name in raw:
                _check_type(name, raw[name], own[name].type)
        checkpoint = None if raw.get("checkpoint") is None else Pinned.parse(raw["checkpoint"], "checkpoint")
        terms = {k: raw[k] for k in ("memory_gb", "seed") if k in raw}  # the others take their defaults
        order = cls(
            runner=_runner({k: raw[k] for k in RUNNER_FIELDS if k in raw}, checkpoint, raw["ends_at"]),
            ends_at=raw["ends_at"], checkpoint=checkpoint,
            price_per_request=_wei(raw, "price_per_request"), price_per_token=_wei(raw, "price_per_token"),
            **terms)
        order.check(now)
        return order

    @classmethod
    def read(cls, body: bytes, now: float | None = None) -> ServeOrder:
        """The order in a site request's body (`to_json`); InvalidJob names what is wrong."""
        now = time.time() if now is None else now
        try:
            raw = json.loads(body)
        except ValueError:
            raise InvalidJob("the serving order is not JSON.") from None
        if not isinstance(raw, dict) or raw.pop("format", None) != FORMAT:
            raise InvalidJob(f"the serving order must be a JSON object of format {FORMAT}.")
        return cls.parse(raw, now)

    def as_dict(self) -> dict[str, Any]:
        """The order's mapping, as `parse` reads it (the prices as strings: JSON's numbers are not
        all exact at 128 bits)."""
        runner = {k: getattr(self.runner, k) for k in RUNNER_FIELDS}
        return runner | {
            "ends_at": self.ends_at, "price_per_request": str(self.price_per_request),
            "price_per_token": str(self.price_per_token), "memory_gb": self.memory_gb, "seed": self.seed,
            "checkpoint": dataclasses.asdict(self.checkpoint) if self.checkpoint else None}

    def to_json(self) -> bytes:
        return json.dumps({"format": FORMAT} | self.as_dict(), sort_keys=True, separators=(",", ":")).encode()

    # ── checks and the runner's parameters ──────────────────────────────────────────
    def check(self, now: float | None) -> None:
        """What an order must hold beyond its fields' types (the runner's own were checked as it
        was read); `now` None leaves out the clock."""
        if (self.price_per_request > 0) == (self.price_per_token > 0) or \
                not 0 <= max(self.price_per_request, self.price_per_token) <= MAX_PRICE:
            raise InvalidJob("give one price: price_per_request, or price_per_token for a text model, in "
                             "wei.", "price")
        if self.price_per_token and self.task != "generate":
            raise InvalidJob("price_per_token is for task generate; price a predict lease per request.",
                             "price")
        if self.checkpoint and not ("://" in self.checkpoint.uri or self.checkpoint.uri.startswith("/")):
            raise InvalidJob("a checkpoint is {uri, sha256}: where it lies and the sha256 of its contents.",
                             "checkpoint")
        if not self.checkpoint and self.runner.model not in MODEL_NAMES:
            raise InvalidJob(f"model must be one of {', '.join(MODEL_NAMES)}, or a checkpoint pinned by its "
                             "sha256.", "model")
        if now is not None and not now + 10 <= self.ends_at <= now + MAX_SERVING_S:
            raise InvalidJob(f"ends_at must lie from 10 s to {MAX_SERVING_S // 86_400} days ahead, got "
                             f"{self.ends_at} (now {now:.0f}).", "ends_at")
        if not 0 < self.memory_gb <= 1024:
            raise InvalidJob("memory_gb must be from 0 to 1024 per replica.", "memory_gb")

    def params(self, checkpoint: str) -> ServeParams:
        """The runner's parameters for a lease that stages the checkpoint at `checkpoint`."""
        staged = checkpoint if self.checkpoint else ""
        return replace(self.runner, checkpoint=staged, ends_at=float(self.ends_at))


def _runner(raw: dict[str, Any], checkpoint: Pinned | None, ends_at: int) -> ServeParams:
    """The runner's parameters, read and checked by the runner's own parse: as if the checkpoint
    were staged (it is fetched and checked later), with no socket of the buyer's choosing."""
    staged = {"checkpoint": STAGED_CHECKPOINT if checkpoint else "", "ends_at": float(ends_at)}
    try:
        runner = ServeParams.parse(raw | staged, Scope("serve", ServeParams.KIND))
    except InvalidJob as exc:  # the order's fault, not a job's: its sentence without the job's name
        raise InvalidJob(str(exc).removeprefix("job serve: "), exc.field) from None
    return replace(runner, checkpoint="", ends_at=0.0)


def _check_type(name: str, value: Any, annotation: Any) -> None:
    kind: tuple[type, ...] = (int, float) if annotation == "float" else (int,)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InvalidJob(f"the serving order's {name} must be {KIND_OF[kind[-1]]}, got {value!r}.", name)


def _wei(raw: Mapping[str, Any], name: str) -> int:
    value = raw.get(name, 0)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():  # as the wire writes them
        return int(value)
    raise InvalidJob(f"{name} is a whole number of wei, got {value!r}.", "price")
