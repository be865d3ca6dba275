"""The buyer's side of serving (docs/architecture.md §12): a serving spec read into the site's
order (`order_from_spec`) and a provider's site found from the chain (`site_of`); the client that
deploys, calls and signs is provider.serving_client's `ServingClient`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ledger.client import Swarm
from ledger.errors import InvalidInput
from provider.client import SiteAddress
from provider.serving import ServeOrder


def site_of(swarm: Swarm, home: Path, provider: str) -> SiteAddress:
    """Where `provider`'s site is, from its registered spec; InvalidInput when it has none."""
    from ledger import stake
    from market.sites import site_address

    info = stake.provider_info(swarm, provider)
    address = site_address(home, info.address, "0x" + info.spec_hash.hex()) if info.registered else None
    if address is None:
        raise InvalidInput(f"Provider {provider} has no site registered; choose a provider that serves one.")
    return address


# ── a buyer's serving spec ───────────────────────────────────────────────────────────

SPEC_FIELDS = {
    "task": "predict or generate",
    "model": "a built-in model's name (mlp, tiny-transformer), a checkpoint's path or URI, or {uri, sha256}",
    "seed": "a whole number: a built-in model's weights",
    "replicas": "the most replicas, a whole number from 1",
    "min_replicas": "the fewest replicas, a whole number from 1",
    "replica_cpus": "CPUs of each replica",
    "replica_gpus": "GPUs of each replica",
    "memory_gb": "memory of each replica, in GB",
    "max_batch_size": "the largest batch a replica answers at once",
    "max_batch_wait_s": "the longest a request waits for its batch to fill, in seconds",
    "max_tokens": "the most tokens a completion may ask for",
    "price": "{per_request: SWARM} or, for generate, {per_token: SWARM}",
    "duration": "how long it serves (30m, 2h, 1d) or ends_at, unix seconds",
    "ends_at": "unix seconds when it stops serving",
}


def order_from_spec(spec: Any, now: float | None = None) -> ServeOrder:
    """A buyer's serving spec (a mapping, as YAML or JSON gives it) as the order a site reads;
    InvalidInput names the field and what it may be."""
    from compute.errors import InvalidJob
    from ledger.units import parse_amount
    from market.spec import parse_runtime

    now = time.time() if now is None else now
    if not isinstance(spec, dict):
        raise InvalidInput("a serving spec is a mapping of " + ", ".join(SPEC_FIELDS) + ".")
    unknown = sorted(set(map(str, spec)) - set(SPEC_FIELDS))
    if unknown:
        raise InvalidInput(f"the serving spec has no field {unknown[0]}; its fields are "
                           f"{', '.join(SPEC_FIELDS)}.")

    def field(name: str, default: Any, kind: type | tuple[type, ...]) -> Any:
        value = spec.get(name, default)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise InvalidInput(f"the serving spec's {name} must be {SPEC_FIELDS[name]}, got {value!r}.")
        return value

    model = spec.get("model", "mlp")
    uri, sha256 = (model.get("uri"), model.get("sha256")) if isinstance(model, dict) else (model, "")
    if not isinstance(uri, str) or not isinstance(sha256, str):
        raise InvalidInput(f"the serving spec's model must be {SPEC_FIELDS['model']}, got {model!r}.")
    if not sha256 and "/" in uri:  # a checkpoint here or in object storage: pinned now, by its contents
        from compute import dataplane

        located = uri if dataplane.is_uri(uri) else str(Path(uri).expanduser().resolve())
        uri, sha256 = located, dataplane.digest(located, "checkpoint")
    price = spec.get("price")
    units = ("per_request", "per_token")
    if not isinstance(price, dict) or len(price) != 1 or next(iter(price)) not in units:
        raise InvalidInput(f"the serving spec's price must be {SPEC_FIELDS['price']}, got {price!r}.")
    (unit, amount), = price.items()
    wei = parse_amount(amount, f"price {unit}")
    if "ends_at" in spec and "duration" in spec:
        raise InvalidInput("give the serving spec a duration or an ends_at, not both.")
    ends_at = field("ends_at", 0, int) if "ends_at" in spec else 0
    if not ends_at:
        try:
            ends_at = int(now) + (parse_runtime(spec.get("duration", "1h")) or 0)
        except ValueError:
            raise InvalidInput(f"the serving spec's duration must be {SPEC_FIELDS['duration']}, got "
                               f"{spec.get('duration')!r}.") from None
    order = ServeOrder(
        task=field("task", "predict", str), model=uri, sha256=sha256.removeprefix("sha256:"),
        replicas=field("replicas", 1, int), min_replicas=field("min_replicas", 1, int),
        replica_cpus=float(field("replica_cpus", 1.0, (int, float))),
        replica_gpus=float(field("replica_gpus", 0.0, (int, float))),
        memory_gb=float(field("memory_gb", 1.0, (int, float))),
        max_batch_size=field("max_batch_size", 32, int),
        max_batch_wait_s=float(field("max_batch_wait_s", 0.01, (int, float))),
        max_tokens=field("max_tokens", 64, int), ends_at=ends_at,
        price_per_request=wei if unit == "per_request" else 0,
        price_per_token=wei if unit == "per_token" else 0,
        seed=field("seed", 0, int))
    try:
        order.check(now)
    except InvalidJob as exc:
        raise InvalidInput(f"the serving spec is refused: {exc}") from None
    return order
