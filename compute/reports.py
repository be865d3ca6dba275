"""What a Ray Train program reports (`ray.train.report`) while it runs, kept for its buyer.

A lease's environment names `compute.train_reports.Reports` in RAY_TRAIN_CALLBACKS, which Ray
Train reads where a trainer is built, and the file it appends to in SWARM_REPORTS (the lease's
own work directory): one JSON line per report, `{"at": unix seconds, "metrics": {...}}`, rank
0's scalar metrics (`scalars`). The buyer's script is unchanged. The launcher relays the lines
to the site (`provider.lease.launch`), which hands them to the market as the lease runs; the
market keeps them for the buyer's `swarm job status` and the dashboard's chart.
"""

from __future__ import annotations

import math
from typing import Any

MAX_REPORTS_BYTES = 1 << 20  # what one run appends at most; later reports are left out
MAX_KEYS = 32
MAX_KEY_CHARS = 64
MAX_TEXT_CHARS = 200


def scalars(metrics: Any) -> dict[str, Any]:
    """The scalar metrics of one report, JSON-safe: numbers (finite), booleans, short strings
    and nulls, under short names, at most MAX_KEYS of them."""
    if not isinstance(metrics, dict):
        return {}
    kept: dict[str, Any] = {}
    for name, value in metrics.items():
        if len(kept) == MAX_KEYS:
            break
        if not isinstance(name, str) or len(name) > MAX_KEY_CHARS:
            continue
        if isinstance(value, bool) or value is None:
            kept[name] = value
        elif isinstance(value, int | float) and math.isfinite(value):
            kept[name] = value if isinstance(value, int) and abs(value) < 2**53 else float(value)
        elif isinstance(value, str):
            kept[name] = value[:MAX_TEXT_CHARS]
        elif hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # a numpy or torch scalar
            found = scalars({name: value.item()})
            kept.update(found)
    return kept
