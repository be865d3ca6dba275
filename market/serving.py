"""The buyer's side of serving (docs/architecture.md §12): a serving spec read into the site's
order (`order_from_spec`) and a provider's site found from the chain (`site_of`); the client that
deploys, calls and signs is wire.serving's `ServingClient`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from compute import dataplane
from compute.errors import InvalidJob
from compute.serve_order import ServeOrder
from ledger import stake
from ledger.client import Swarm
from ledger.errors import InvalidInput
from ledger.units import parse_amount
from market.spec import parse_runtime
from wire.client import SiteAddress


def site_of(swarm: Swarm, home: Path, provider: str) -> SiteAddress:
    """Where `provider`'s site is, from its registered spec; InvalidInput when it has none."""
    from market.sites import site_address  # web3 and SQLModel: `swarm serve` reads the chain alone until here

    info = stake.provider_info(swarm, provider)
    address = site_address(home, info.address, "0x" + info.spec_hash.hex()) if info.registered else None
    if address is None:
        raise InvalidInput(f"Provider {provider} has no site registered; choose a provider that serves one.")
    return address


# ── a buyer's serving spec ───────────────────────────────────────────────────────────
# A serving spec is an order (`compute.serve_order`) in the buyer's notation for three of its
# terms, written out here before the order's one parser reads it.
NOTATION = {
    "model": "a built-in model's name, a checkpoint's path or URI, or {uri, sha256}",
    "price": "{per_request: SWARM} or, for generate, {per_token: SWARM}",
    "duration": "how long it serves (30m, 2h, 1d), or ends_at, unix seconds",
}
WRITTEN_OUT = ("checkpoint", "price_per_request", "price_per_token")  # what the notation stands for


def spec_fields() -> tuple[str, ...]:
    """The fields of a serving spec: the order's, in the buyer's notation."""
    return (*(f for f in ServeOrder.fields() if f not in WRITTEN_OUT), "price", "duration")


def order_from_spec(spec: Any, now: float | None = None) -> ServeOrder:
    """A buyer's serving spec (a mapping, as YAML or JSON gives it) as the order a site reads;
    InvalidInput names the field and what it may be."""
    now = time.time() if now is None else now
    if not isinstance(spec, dict):
        raise InvalidInput(f"a serving spec is a mapping of {', '.join(spec_fields())}.")
    unknown = sorted(set(map(str, spec)) - set(spec_fields()))
    if unknown:
        raise InvalidInput(f"the serving spec has no field {unknown[0]}; its fields are "
                           f"{', '.join(spec_fields())}.")
    raw = {k: v for k, v in spec.items() if k not in NOTATION}
    raw |= _model(spec["model"]) if "model" in spec else {}
    raw |= _price(spec.get("price"))
    raw["ends_at"] = _ends_at(spec, now)
    try:
        return ServeOrder.parse(raw, now)
    except InvalidJob as exc:
        raise InvalidInput(f"the serving spec is refused: {exc}") from None


def _model(model: Any) -> dict[str, Any]:
    """A built-in model's name, or the checkpoint: pinned as given, or pinned now by its contents."""
    if isinstance(model, dict):
        return {"checkpoint": model}
    if not isinstance(model, str):
        raise InvalidInput(f"the serving spec's model must be {NOTATION['model']}, got {model!r}.")
    if "/" not in model:
        return {"model": model}
    located = model if dataplane.is_uri(model) else str(Path(model).expanduser().resolve())
    return {"checkpoint": {"uri": located, "sha256": dataplane.digest(located, "checkpoint")}}


def _price(price: Any) -> dict[str, int]:
    units = ("per_request", "per_token")
    if not isinstance(price, dict) or len(price) != 1 or next(iter(price)) not in units:
        raise InvalidInput(f"the serving spec's price must be {NOTATION['price']}, got {price!r}.")
    (unit, amount), = price.items()
    return {f"price_{unit}": parse_amount(amount, f"price {unit}")}


def _ends_at(spec: dict[str, Any], now: float) -> Any:
    if "ends_at" in spec and "duration" in spec:
        raise InvalidInput("give the serving spec a duration or an ends_at, not both.")
    if "ends_at" in spec:
        return spec["ends_at"]  # the order's parser checks it
    try:
        return int(now) + (parse_runtime(spec.get("duration", "1h")) or 0)
    except ValueError:
        raise InvalidInput(f"the serving spec's duration must be {NOTATION['duration']}, got "
                           f"{spec.get('duration')!r}.") from None
