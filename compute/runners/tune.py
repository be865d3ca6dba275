"""The `tune` runner: a Ray Tune search over a buyer's search space, every trial pinned
to the job's provider, ASHA stopping the weak trials early, the whole search inside the
job's time budget.

params:
  model            "mlp" | "tiny-transformer"
  dataset          a synthetic dataset matching the model (default: the model's own), or for the
                   mlp a table the buyer brings (compute.tabular), which the MLP is sized to
  samples          examples in the dataset (a fifth is held out for validation); 0: 1024 of a
                   built-in dataset, every row of a table
  search_space     name → {"uniform": [lo, hi]} | {"loguniform": [lo, hi]} | {"choice": [...]}
                   | {"grid": [...]} | {"randint": [lo, hi]} (hi excluded, as in Ray Tune);
                   names are lr, weight_decay, batch_size, or the model's own sizes
  search           "random" | "grid" (every point of the grid/choice entries) | "bayes" (Optuna TPE)
  num_samples      trials to draw (random, bayes)
  max_epochs_per_trial, time_budget_s (≤ the job's timeout), max_concurrent_trials

Outputs: best_config.json, trials.json (each trial's config, epochs and final accuracy,
best first) and the best trial's model (with its feature columns, for a table). Where a
trial ran is bookkeeping, kept out of the outputs so the resultHash does not depend on node
ids; it is in the job's metrics.
With trials running side by side, ASHA's stop decisions depend on which trial reports
first, so two runs of a job can stop different trials; one trial at a time
(max_concurrent_trials=1) makes a random or grid search repeat exactly.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search.basic_variant import BasicVariantGenerator
from ray.tune.stopper import Stopper
from torch import nn

from compute import tabular
from compute.accounting import BusyTimer, usage
from compute.catalog import DATASET_FOR
from compute.checkpoints import load_model, save_model
from compute.data import load_dataset
from compute.device import device_name, task_device
from compute.errors import ComputeError, InvalidJob
from compute.jobs import ComputeJob, JobResult
from compute.manifest import OUTPUT_DIR, result_hash
from compute.models import build_model
from compute.placement import LABEL, PIN, label_selector, provider_capacity, provider_resource
from compute.runners.params import TRAINING_DEFAULTS, TuneParams
from compute.runners.supervise import lost_provider, provider_gone

METRIC, MODE = "accuracy", "max"


@dataclass(frozen=True)
class TrialSetup:
    """What every trial shares; the trial's config carries only the searched values."""

    model: str
    dataset: str
    samples: int
    seed: int
    max_epochs: int
    use_gpu: bool
    # a table's (features, labels); None: a built-in dataset
    rows: tuple[torch.Tensor, torch.Tensor] | None = None
    features: tuple[str, ...] = ()  # a table's feature columns, in the model's input order
    classes: int = 0

    @property
    def shape(self) -> dict[str, int]:
        """The model's data-shaped sizes: a table's columns and classes (a built-in dataset's are the model's
        own)."""
        return {"in_features": len(self.features), "classes": self.classes} if self.rows is not None else {}

    @property
    def extra(self) -> dict[str, Any]:
        """What a saved model records beside its config: a table's columns, which infer and finetune read by
        name."""
        return {"features": list(self.features)} if self.rows is not None else {}


def table_setup(path: str, samples: int) -> dict[str, Any]:
    """A table's rows, columns and classes for the trials; a table with too few rows is the buyer's to fix."""
    x, y, features = tabular.tensors(path, limit=samples)
    if y is None or len(y) < 10:
        raise InvalidJob(
            f"dataset {Path(path).name} needs at least 10 rows with labels that are integers from 0"
        )
    return {"rows": (x, y), "features": tuple(features), "classes": int(y.max()) + 1}


def _domain(kind: str, args: list[Any], search: str) -> Any:
    """The Ray Tune domain of one entry; a grid search walks its choices too."""
    if kind == "grid" or (kind == "choice" and search == "grid"):
        return tune.grid_search(args)
    if kind == "choice":
        return tune.choice(args)
    return {"uniform": tune.uniform, "loguniform": tune.loguniform, "randint": tune.randint}[kind](*args)


# ── one trial ───────────────────────────────────────────────────────────────────────

def _canonical(config: Mapping[str, Any]) -> str:
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


def trial_seed(job_seed: int, config: Mapping[str, Any]) -> int:
    """The same config of the same job starts from the same weights on any node."""
    digest = hashlib.sha256(f"{job_seed}:{_canonical(config)}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _split(setup: TrialSetup):
    x, y = setup.rows if setup.rows is not None else load_dataset(setup.dataset, setup.seed, setup.samples)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(setup.seed))
    cut = len(y) - len(y) // 5
    return (x[order[:cut]], y[order[:cut]]), (x[order[cut:]], y[order[cut:]])


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def _trial(config: dict[str, Any], setup: TrialSetup) -> None:
    """Trains one config for up to max_epochs, reporting validation accuracy each epoch."""
    settings = TRAINING_DEFAULTS | config
    model_config = {k: int(v) for k, v in config.items() if k not in TRAINING_DEFAULTS} | setup.shape
    seed = trial_seed(setup.seed, config)
    torch.manual_seed(seed)
    device = task_device(setup.use_gpu)
    (x, y), (vx, vy) = _split(setup)
    x, y, vx, vy = x.to(device), y.to(device), vx.to(device), vy.to(device)
    model = build_model(setup.model, **model_config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(settings["lr"]),
                                 weight_decay=float(settings["weight_decay"]))
    batch = int(settings["batch_size"])
    shuffle = torch.Generator().manual_seed(seed)
    runtime = ray.get_runtime_context()
    where = {"provider": runtime.get_node_labels().get(LABEL), "node_id": runtime.get_node_id(),
             "device_name": device_name(device)}
    busy = BusyTimer()  # the billed time: training and evaluation, not checkpoint writes
    for epoch in range(1, setup.max_epochs + 1):
        with busy:
            model.train()
            for idx in torch.randperm(len(y), generator=shuffle).split(batch):
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
                loss.backward()
                optimizer.step()
            accuracy = _accuracy(model, vx, vy)
        with tempfile.TemporaryDirectory() as directory:
            save_model(model, setup.model, model_config, Path(directory), trial_seed=seed, **setup.extra)
            tune.report(
                {METRIC: accuracy, "loss": loss.item(), "epoch": epoch, "busy_s": busy.seconds} | where,
                checkpoint=tune.Checkpoint.from_directory(directory),
            )


# ── the search ──────────────────────────────────────────────────────────────────────

class ProviderGone(Stopper):
    """Ends the search once the provider has no live node: its pinned trials could never start."""

    def __init__(self, provider: str, poll_s: float = 1.0) -> None:
        self.provider, self.poll_s, self._checked, self.gone = provider, poll_s, 0.0, False

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        if not self.gone and time.monotonic() - self._checked >= self.poll_s:
            self._checked = time.monotonic()
            self.gone = provider_gone(self.provider)
        return self.gone


def _trainable(job: ComputeJob, setup: TrialSetup):
    bundle = {"CPU": 1, provider_resource(job.provider): PIN} | ({"GPU": 1} if job.use_gpu else {})
    resources = tune.PlacementGroupFactory([bundle], bundle_label_selector=[label_selector(job.provider)])
    return tune.with_resources(tune.with_parameters(_trial, setup=setup), resources)


def _search_alg(params: TuneParams, seed: int, concurrent: int):
    if params.search == "bayes":
        from ray.tune.search.optuna import OptunaSearch

        # TuneConfig.max_concurrent_trials wraps a Searcher in Ray's ConcurrencyLimiter.
        return OptunaSearch(metric=METRIC, mode=MODE, seed=seed), concurrent
    # A variant generator takes its limit itself (TuneConfig's would be ignored).
    return BasicVariantGenerator(max_concurrent=concurrent, random_state=seed), None


def _tuner(job: ComputeJob, params: TuneParams, dims: dict, setup: TrialSetup, storage: Path,
           stopper: Stopper) -> tune.Tuner:
    concurrent = params.max_concurrent_trials or max(1, provider_capacity(job.provider).max_workers)
    search_alg, limit = _search_alg(params, job.seed, concurrent)
    return tune.Tuner(
        _trainable(job, setup),
        param_space={name: _domain(kind, args, params.search) for name, (kind, args) in dims.items()},
        tune_config=tune.TuneConfig(
            metric=METRIC, mode=MODE,
            search_alg=search_alg,
            scheduler=ASHAScheduler(max_t=params.max_epochs_per_trial, grace_period=1),
            num_samples=1 if params.search == "grid" else params.num_samples,
            max_concurrent_trials=limit,
            time_budget_s=params.time_budget_s or job.timeout_s,
            # A trial's process takes the next trial (every trial asks the same resources): a new
            # one per trial costs seconds to start, more than a small trial takes to train.
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name="tune", storage_path=str(storage.resolve()), verbose=0, stop=stopper,
            # Every epoch's model is kept (they are small): a num_to_keep forces an experiment
            # snapshot on each report.
            checkpoint_config=tune.CheckpointConfig(num_to_keep=None),
            # a lost node: retry on another of the provider's
            failure_config=tune.FailureConfig(max_failures=1),
        ),
    )


def _trial_rows(grid, dims: dict) -> list[tuple[dict[str, Any], Any]]:
    """(row for trials.json, its Ray result), best first, ties broken by the config."""
    rows = []
    for result in grid:
        if result.error is not None or not result.metrics or METRIC not in result.metrics:
            continue
        config = {k: result.config[k] for k in dims}
        rows.append(({"config": config, METRIC: result.metrics[METRIC],
                      "epochs": result.metrics["training_iteration"]}, result))
    return sorted(rows, key=lambda row: (-row[0][METRIC], _canonical(row[0]["config"])))


def run(job: ComputeJob) -> JobResult:
    params = job.params_of(TuneParams)
    dims = params.space()
    dataset = params.dataset or DATASET_FOR[params.model]
    table = {} if tabular.is_named(dataset) else table_setup(dataset, params.samples)
    setup = TrialSetup(
        params.model, dataset, params.samples, job.seed, params.max_epochs_per_trial, job.use_gpu, **table
    )
    result_dir = job.result_dir()
    outputs = result_dir / OUTPUT_DIR
    outputs.mkdir(parents=True, exist_ok=True)
    stopper = ProviderGone(job.provider)
    started = time.monotonic()
    grid = _tuner(job, params, dims, setup, result_dir / "ray", stopper).fit()
    if stopper.gone:
        raise lost_provider(job)
    rows = _trial_rows(grid, dims)
    if not rows:
        first = next((r.error for r in grid if r.error is not None), None)
        raise ComputeError(
            f"job {job.job_id}: no trial of the search finished an epoch"
            + (f" (first error: {str(first).splitlines()[0]})." if first else "; raise time_budget_s.")
        )
    (best, best_result) = rows[0]
    with best_result.checkpoint.as_directory() as directory:
        model, meta = load_model(directory)
    save_model(model, params.model, meta["config"], outputs, trial_seed=meta["trial_seed"], **setup.extra)
    (outputs / "best_config.json").write_text(json.dumps(best["config"], sort_keys=True, indent=2))
    (outputs / "trials.json").write_text(json.dumps([row for row, _ in rows], sort_keys=True, indent=2))
    # Each trial holds one GPU (use_gpu) or one CPU while it trains.
    used = usage([r.metrics.get("busy_s", 0.0) for r in grid if r.metrics], job.use_gpu)
    return JobResult(
        job_id=job.job_id,
        kind=job.kind,
        provider=job.provider,
        metrics={
            "best_config": best["config"],
            "best_accuracy": best[METRIC],
            "trials": len(grid),
            "trials_finished": len(rows),
            "search": params.search,
            "device_name": best_result.metrics.get("device_name"),
            "wall_s": time.monotonic() - started,
            "trial_placements": sorted(
                (
                    {"provider": r.metrics.get("provider"), "node_id": r.metrics.get("node_id")}
                    for r in grid
                    if r.metrics
                ),
                key=_canonical,
            ),
        },
        result_dir=str(result_dir),
        result_hash=result_hash(result_dir),
        units=used.amount,
        unit=used.unit,
    )
