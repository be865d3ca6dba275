"""What the benchmark challenge measures on each hardware the simulation runs: measured where
bench/results holds a measurement of it, assumed where it does not, and which is which.

- The CPU, in fp32: bench/results/challenge.json (`make bench-challenge`), the challenge
  through a site on one core, each run timed by the oracle from the seed to the root.
- A GPU model, in each precision it is challenged in: bench/results/gpu.json (`make bench-gpu`)
  where it ran on that model — the node's throughput at the production shape (its first),
  each run's where the file has them (rounds and commitment), else the median.
- Every other model and precision is assumed to measure its reference, × N(1, NOISE) a
  challenge. The GPU references are projected from datasheets (compute/reference.py); until
  bench/gpu.py runs on a model, that model's figures are an assumption, not a measurement.

A figure is judged as the oracle judges it: ÷ the declared model's reference in the same
precision (compute.reference; the CPU's is this machine's measured core × its margin).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from compute.reference import precisions, reference_gflops

RESULTS = Path(__file__).resolve().parents[1] / "results"
NOISE = 0.05  # an assumed figure: the reference × N(1, 0.05), within ±20 %
ASSUMED = "assumed: measures its reference (a datasheet projection for a GPU), × N(1, 0.05) a challenge"


@dataclass(frozen=True)
class Throughput:
    """One model in one precision: the GFLOPS of each measured challenge, or none (assumed)."""

    model: str
    precision: str
    reference_gflops: float
    runs: tuple[float, ...] = ()
    source: str = ASSUMED

    @property
    def measured(self) -> bool:
        return bool(self.runs)

    @property
    def gflops(self) -> float:
        """The typical figure: the median measured run, or the reference."""
        return float(np.median(self.runs)) if self.runs else self.reference_gflops

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` challenges' figures: measured runs drawn at random, or the reference × noise."""
        if self.runs:
            return rng.choice(np.array(self.runs), n)
        return self.reference_gflops * np.clip(rng.normal(1.0, NOISE, n), 0.8, 1.2)

    def as_dict(self) -> dict[str, Any]:
        return {"measured": self.measured, "gflops": round(self.gflops, 2),
                "reference_gflops": round(self.reference_gflops, 2),
                "ratio": round(self.gflops / self.reference_gflops, 4),
                "runs": [round(r, 2) for r in self.runs], "source": self.source}


@dataclass(frozen=True)
class Throughputs:
    """Every simulated model's throughput per precision, and what each results file gave."""

    table: dict[tuple[str, str], Throughput]
    files: dict[str, str] = field(default_factory=dict)  # results file → what it gave, or why nothing

    def of(self, model: str, precision: str) -> Throughput:
        """`model` in `precision`; a model without that precision computes it in fp32."""
        return self.table[(model, precision if precision in precisions(model) else "fp32")]

    def as_dict(self) -> dict[str, Any]:
        models: dict[str, dict[str, Any]] = {}
        for (model, precision), throughput in self.table.items():
            models.setdefault(model, {})[precision] = throughput.as_dict()
        return {"models": models, "files": self.files}


def load_throughputs(models: Iterable[str], results: Path = RESULTS) -> Throughputs:
    """The throughput of `models` in each precision they are challenged in: measured where
    `results` holds it, assumed otherwise."""
    models = list(dict.fromkeys(models))
    table = {(m, p): Throughput(m, p, reference_gflops(m, p)) for m in models for p in precisions(m)}
    files = {}
    for name, read in (("challenge.json", _cpu_runs), ("gpu.json", _gpu_runs)):
        found, said = read(_json(results / name))
        table |= {key: value for key, value in found.items() if key in table}
        unused = sorted({model for model, _ in found} - set(models))
        files[name] = said + (f"; {', '.join(unused)} not simulated" if unused else "")
    return Throughputs(table, files)


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _positive(value: Any) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


def _cpu_runs(data: dict[str, Any] | None) -> tuple[dict[tuple[str, str], Throughput], str]:
    """The CPU's fp32 runs from bench/challenge.py's results: the challenge's GFLOP over each
    round trip the oracle timed through a site."""
    assumed = "holds no oracle-timed CPU runs: the CPU is assumed"
    if data is None:
        return {}, assumed
    try:
        gflop = data["workload"]["gflop"]
        trips = [t for t in data["provider"]["round_trip_all"] if _positive(t)]
        shape = f"{data['workload']['size']} × {data['workload']['rounds']}"
        cpu = str(data["node"].get("device_name") or "a CPU")
    except (TypeError, KeyError, AttributeError):
        return {}, assumed
    if not _positive(gflop) or not trips:
        return {}, assumed
    runs = tuple(gflop / t for t in trips)
    source = (f"measured: bench/results/challenge.json, {len(runs)} challenges of {shape} through a site on "
              f"one core of {cpu}, each timed by the oracle from the seed to the root")
    return {("cpu", "fp32"): Throughput("cpu", "fp32", reference_gflops("cpu"), runs, source)}, \
        f"the CPU in fp32, {len(runs)} runs"


def _gpu_runs(data: dict[str, Any] | None) -> tuple[dict[tuple[str, str], Throughput], str]:
    """A GPU model's runs from bench/gpu.py's results: the node's throughput at the production
    shape, one median a precision."""
    if data is None or not data.get("ran"):
        reason = (data or {}).get("reason") or "no results"
        return {}, f"measured nothing ({reason}): every GPU is assumed"
    try:
        model = str(data["model"])
        name = str(data.get("gpu", {}).get("name") or model)
        production: dict[str, dict[str, Any]] = {}  # each precision's first shape is the oracle's for it
        for s in data["shapes"]:
            production.setdefault(s["precision"], s)
        found = {}
        for p, s in production.items():
            shape = (s["size"], s["rounds"], s["stride"])
            if p not in precisions(model) or not _positive(s.get("node_tflops")):
                continue
            gflop = 2 * s["size"] ** 3 * s["rounds"] / 1e9
            runs = tuple(gflop / (r + c) for r, c in zip(s.get("rounds_all") or (), s.get("commit_all") or (),
                                                         strict=False) if _positive(r + c))
            said = f"{len(runs)} challenges" if runs else f"the median of {data.get('runs', '?')} challenges"
            source = (f"measured: bench/results/gpu.json, {said} of {shape[0]} × {shape[1]} on {name}, "
                      "timed on the node from the seed to the root")
            runs = runs or (s["node_tflops"] * 1e3,)
            found[(model, p)] = Throughput(model, p, reference_gflops(model, p), runs, source)
    except (TypeError, KeyError, IndexError, AttributeError):
        return {}, "holds no throughput at the production shape: every GPU is assumed"
    taken = ", ".join(p for _, p in found) or "no precision"
    return found, f"{model} in {taken}; every other GPU is assumed"
