"""The tune runner on a real Ray cluster: the search's best config is the best of its
trials, every trial ran on the job's provider, the saved model is the best trial's, and
a bad search space fails before any Ray work."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import ray

from compute.checkpoints import load_model
from compute.dispatch import check_capacity
from compute.errors import InvalidJob, ProviderFault
from compute.jobs import ComputeJob, validate
from compute.manifest import build_manifest, result_hash
from compute.placement import provider_nodes
from compute.runners import tune as tune_runner
from tests.ray_cluster import PROVIDER_A, PROVIDER_B

MAX_EPOCHS = 3


def _job(tmp_path, job_id: str, provider: str = PROVIDER_A, **params) -> ComputeJob:
    base = {"model": "mlp", "samples": 512, "max_epochs_per_trial": MAX_EPOCHS, "time_budget_s": 400}
    return ComputeJob.of(
        job_id, "tune", provider, seed=7, params=base | params, storage=str(tmp_path), timeout_s=600
    )


def _run(job: ComputeJob):
    validate(job)
    check_capacity(job)
    return tune_runner.run(job)


def _key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def _read(result, name: str):
    return json.loads((Path(result.result_dir) / "outputs" / name).read_text())


@pytest.fixture(scope="module")
def random_search(ray_cluster, tmp_path_factory):
    job = _job(tmp_path_factory.mktemp("tune"), "tune-random", search="random", num_samples=6,
               search_space={"lr": {"loguniform": [1e-4, 5e-3]}, "hidden": {"choice": [8, 32]}})
    return job, _run(job)


def test_tune_returns_the_config_of_its_most_accurate_trial(random_search) -> None:
    _, result = random_search
    trials = _read(result, "trials.json")
    assert len(trials) == 6
    top = max(t["accuracy"] for t in trials)
    best = _read(result, "best_config.json")
    assert best == result.metrics["best_config"]
    assert best in [t["config"] for t in trials if t["accuracy"] == top]
    assert result.metrics["best_accuracy"] == top
    assert len({t["accuracy"] for t in trials}) > 1  # the search had something to choose between
    for trial in trials:
        assert 1e-4 <= trial["config"]["lr"] <= 5e-3 and trial["config"]["hidden"] in (8, 32)
        assert 1 <= trial["epochs"] <= MAX_EPOCHS


def test_asha_stops_weak_trials_before_their_last_epoch(random_search) -> None:
    _, result = random_search
    epochs = [t["epochs"] for t in _read(result, "trials.json")]
    assert min(epochs) < MAX_EPOCHS  # stopped early by ASHA
    assert max(epochs) == MAX_EPOCHS  # and the promising ones ran to the end


def test_every_trial_ran_on_the_jobs_provider(random_search) -> None:
    _, result = random_search
    placements = result.metrics["trial_placements"]
    assert len(placements) == 6
    assert {p["provider"] for p in placements} == {PROVIDER_A}
    assert {p["node_id"] for p in placements} <= {n["NodeID"] for n in provider_nodes(PROVIDER_A)}


def test_the_saved_model_is_the_best_trial_and_the_hash_covers_the_outputs(random_search) -> None:
    job, result = random_search
    model, meta = load_model(result.result_dir)
    best = result.metrics["best_config"]
    assert meta["config"] == {"hidden": best["hidden"]}
    assert meta["trial_seed"] == tune_runner.trial_seed(job.seed, best)
    setup = tune_runner.TrialSetup("mlp", "synthetic-classification", 512, job.seed, MAX_EPOCHS, False)
    _, (vx, vy) = tune_runner._split(setup)
    assert tune_runner._accuracy(model, vx, vy) == result.metrics["best_accuracy"]
    paths = {e["path"] for e in build_manifest(Path(result.result_dir))}
    assert paths == {"best_config.json", "trials.json", "model.safetensors", "model.json"}
    assert result.result_hash == result_hash(Path(result.result_dir))
    assert result.unit == "cpu-seconds"
    assert 0 < result.units <= result.metrics["wall_s"] * 2  # two 1-CPU nodes busy at most all along


def test_grid_search_runs_every_point_once(ray_cluster, tmp_path) -> None:
    job = _job(tmp_path, "tune-grid", provider=PROVIDER_B, search="grid", max_epochs_per_trial=1,
               search_space={"lr": {"grid": [1e-3, 1e-2]}, "batch_size": {"choice": [32, 128]}})
    result = _run(job)
    configs = [t["config"] for t in _read(result, "trials.json")]
    expected = [{"lr": lr, "batch_size": b} for lr, b in itertools.product([1e-3, 1e-2], [32, 128])]
    assert sorted(configs, key=_key) == sorted(expected, key=_key)
    assert {p["provider"] for p in result.metrics["trial_placements"]} == {PROVIDER_B}


def test_bayes_search_draws_from_the_space_through_optuna(ray_cluster, tmp_path) -> None:
    job = _job(
        tmp_path,
        "tune-bayes",
        provider=PROVIDER_B,
        search="bayes",
        num_samples=3,
        max_epochs_per_trial=1,
        search_space={"lr": {"uniform": [1e-3, 5e-2]}, "batch_size": {"randint": [16, 65]}},
    )
    trials = _read(_run(job), "trials.json")
    assert len(trials) == 3
    assert len({_key(t["config"]) for t in trials}) == 3
    for t in trials:
        assert 1e-3 <= t["config"]["lr"] <= 5e-2 and 16 <= t["config"]["batch_size"] <= 64


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"search_space": {"momentum": {"uniform": [0, 1]}}}, "unknown hyperparameter 'momentum'"),
        ({"search_space": {"lr": {"normal": [0, 1]}}}, r"search_space.lr must be one of \{uniform"),
        ({"search_space": {"lr": {"uniform": [0.1, 0.01]}}}, "low < high"),
        ({"search_space": {"lr": {"loguniform": [0, 0.1]}}}, "needs low > 0"),
        ({"search_space": {"hidden": {"uniform": [8, 64]}}}, "takes whole numbers; use randint"),
        ({"search_space": {"batch_size": {"choice": [0, 32]}}}, "whole numbers ≥ 1"),
        ({"search_space": {"lr": {"choice": []}}}, "non-empty list"),
        ({"search_space": {}}, "non-empty mapping"),
        (
            {"search": "grid", "search_space": {"lr": {"uniform": [0.001, 0.1]}}},
            "grid search needs grid or choice",
        ),
        ({"search": "bayes", "search_space": {"lr": {"grid": [0.001, 0.1]}}}, "cannot take grid entries"),
        ({"search": "evolution", "search_space": {"lr": {"grid": [0.01]}}}, "unknown search 'evolution'"),
        (
            {"time_budget_s": 10_000, "search_space": {"lr": {"grid": [0.01]}}},
            r"time_budget_s must be .* \(0, 600\]",
        ),
    ],
    ids=[
        "unknown-name",
        "unknown-distribution",
        "low-above-high",
        "loguniform-zero",
        "float-for-int",
        "zero-batch",
        "empty-choice",
        "empty-space",
        "grid-continuous",
        "bayes-grid",
        "unknown-search",
        "budget-over-timeout",
    ],
)
def test_a_bad_search_space_fails_fast_with_no_ray_work(ray_cluster, tmp_path, params, message) -> None:
    groups = len(ray.util.placement_group_table())
    with pytest.raises(InvalidJob, match=message):
        _run(_job(tmp_path, "tune-bad", **params))
    assert not (tmp_path / "tune-bad").exists()
    assert len(ray.util.placement_group_table()) == groups


def test_a_search_whose_provider_has_no_node_stops_with_a_provider_fault(ray_cluster, tmp_path) -> None:
    # run_job's capacity check refuses this job up front; the runner's own watch is what
    # ends a search whose provider loses its last node while trials wait for it.
    job = _job(tmp_path, "tune-orphan", provider="0x000000000000000000000000000000000000dEaD",
               search_space={"lr": {"grid": [0.01]}})
    with pytest.raises(ProviderFault, match="has no live nodes left"):
        tune_runner.run(job)  # not after the 400 s time budget: bench/failfast.py times it


def test_a_search_on_a_table_sizes_the_mlp_to_it_and_its_best_model_reads_the_table_by_name(
        ray_cluster, tmp_path) -> None:
    from compute import tabular
    from compute.data import write_digits

    table = write_digits(tmp_path / "digits.parquet")
    job = _job(tmp_path, "tune-table", provider=PROVIDER_B, search="grid", max_epochs_per_trial=2, samples=0,
               dataset=str(table), search_space={"lr": {"grid": [3e-3, 1e-2]}, "hidden": {"choice": [32]}})
    result = _run(job)
    assert len(_read(result, "trials.json")) == 2
    assert result.metrics["best_accuracy"] > 0.5, "the digits are learnt (chance is 0.1)"
    model, meta = load_model(result.result_dir)
    assert meta["config"] == {"hidden": 32, "in_features": 64, "classes": 10}
    assert meta["features"] == [f"px_{i}" for i in range(64)]
    # The best model scores the whole table as infer reads it: its own columns, by name.
    x, y, _ = tabular.tensors(table, features=meta["features"])
    assert y is not None
    accuracy = tune_runner._accuracy(model, x, y)
    assert accuracy > 0.5 and len(y) == 1797


def test_a_table_that_cannot_train_fails_the_search_before_any_ray_work(ray_cluster, tmp_path) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("a,b\n" + "1,2\n" * 20)
    groups = len(ray.util.placement_group_table())
    with pytest.raises(InvalidJob, match="has no 'label' column"):
        _run(
            _job(
                tmp_path, "tune-nolabel", dataset=str(rows), samples=0, search_space={"lr": {"grid": [0.01]}}
            )
        )
    assert not (tmp_path / "tune-nolabel").exists()
    assert len(ray.util.placement_group_table()) == groups
