"""The train, finetune and infer runners on a real Ray cluster: checkpoints that restore,
work that stays on the provider's nodes, recovery from a lost node (or a ProviderFault
when the provider has none left), frozen base weights under LoRA, one output per input,
and one resultHash for one job on two providers."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray
import torch
from peft import get_peft_model_state_dict
from safetensors.torch import load_file

from anvil import dev_account
from compute.checkpoints import load_model, registered_checkpoint
from compute.data import synthetic_sequences
from compute.dispatch import run_job
from compute.errors import ComputeError, InvalidJob, ProviderFault
from compute.jobs import ComputeJob, JobResult
from compute.manifest import OUTPUT_DIR, file_sha256, result_hash
from compute.placement import provider_capacity, provider_resource
from compute.runners import finetune, infer, train
from compute.runners.params import TrainParams
from tests.ray_cluster import PROVIDER_A, PROVIDER_B, PROVIDER_C

PROVIDER_D = dev_account(9).address
SMALL = {"model": "tiny-transformer", "samples": 320, "epochs": 2, "batch_size": 32, "lr": 3e-3}
# Ray Train registers a report each time its controller polls the workers (every 2 s), so
# an epoch takes about 2 s: a node can be removed after the first checkpoint, well before the last.
LONG: dict[str, Any] = {"model": "mlp", "samples": 512, "epochs": 8}
WAIT_S = 240


def job(storage: Path, job_id: str, kind: str, provider: str, **fields) -> ComputeJob:
    return ComputeJob.of(job_id=job_id, kind=kind, provider=provider, storage=str(storage), timeout_s=WAIT_S,
                         **fields)


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("results")


@pytest.fixture(scope="module")
def base(ray_cluster, storage: Path) -> JobResult:
    """A small transformer trained on provider B: the base for finetune and infer."""
    return run_job(job(storage, "base-on-b", "train", PROVIDER_B, seed=7, params=SMALL))


def checkpoints_of(result_dir: Path) -> list[Path]:
    return sorted(p for p in result_dir.glob("checkpoint_*") if p.is_dir())


def test_train_writes_a_checkpoint_every_epoch_that_restores_to_the_same_accuracy(base: JobResult) -> None:
    result_dir = Path(base.result_dir)
    assert base.metrics["epochs"] == 2 and len(base.metrics["history"]) == 2
    assert len(checkpoints_of(result_dir)) == 2  # one per epoch, kept under the job's storage
    assert base.unit == "cpu-seconds" and base.units > 0
    assert base.result_hash == result_hash(result_dir)

    model, meta = load_model(result_dir)
    assert meta["model"] == "tiny-transformer" and meta["seed"] == 7
    params = job(result_dir.parent, "x", "train", PROVIDER_B, params=SMALL).params_of(TrainParams)
    restored = train.evaluate(model, train.validation_set(params, seed=7))
    assert round(restored["accuracy"], 6) == base.metrics["val_accuracy"]
    assert round(restored["loss"], 6) == base.metrics["val_loss"]
    last = load_file(str(checkpoints_of(result_dir)[-1] / train.WEIGHTS))
    assert all(torch.equal(last[k], v) for k, v in model.state_dict().items())


def test_a_job_resumed_on_another_provider_gives_the_bytes_of_the_uninterrupted_run(
        base: JobResult, storage: Path) -> None:
    """One job, one seed: run on C for one epoch, then again under its id for two, it resumes
    from its checkpoint and ends with the result hash of the uninterrupted run on B."""
    first = run_job(job(storage, "resumed-on-c", "train", PROVIDER_C, seed=7, params=SMALL | {"epochs": 1}))
    assert first.metrics["epochs"] == 1
    again = run_job(job(storage, "resumed-on-c", "train", PROVIDER_C, seed=7, params=SMALL))
    assert again.metrics["resumed_from_epoch"] == 1
    assert again.metrics["history"][0] == first.metrics["history"][0]
    assert {p["provider"] for p in again.metrics["placements"][-1]} == {PROVIDER_C}  # it did run elsewhere
    assert {p["provider"] for p in base.metrics["placements"][-1]} == {PROVIDER_B}
    # Resuming is exact, and the provider does not matter: the same bytes as the run on B.
    assert again.result_hash == base.result_hash


def test_two_workers_on_provider_a_run_only_on_its_two_nodes(ray_cluster, storage: Path) -> None:
    before = time.time()
    result = run_job(job(storage, "two-on-a", "train", PROVIDER_A, workers=2,
                         params={"model": "mlp", "samples": 512, "epochs": 2}))
    (placement,) = result.metrics["placements"]
    assert [p["rank"] for p in placement] == [0, 1]
    assert {p["provider"] for p in placement} == {PROVIDER_A}
    assert {p["node_id"] for p in placement} == {node.node_id for node in ray_cluster.nodes[PROVIDER_A]}
    assert before < result.metrics["first_step_at"] < time.time()
    assert result.metrics["val_accuracy"] > 0.9  # the blobs are easy: training did train


def test_fsdp_shards_the_model_over_provider_as_two_nodes_and_its_result_is_the_whole_model(
        ray_cluster, storage: Path) -> None:
    """`parallelism: fsdp`: each worker holds a shard of the parameters (their counts add up to the
    model's, each under it), the run learns as DDP's does, and its result is the whole model."""
    from compute.models import build_model

    params = {"model": "mlp", "samples": 512, "epochs": 2, "parallelism": "fsdp"}
    result = run_job(job(storage, "fsdp-on-a", "train", PROVIDER_A, workers=2, params=params))
    whole = sum(p.numel() for p in build_model("mlp").parameters())
    held = result.metrics["local_parameters"]
    assert result.metrics["parallelism"] == "fsdp" and len(held) == 2
    assert sum(held) == whole and max(held) < whole, (held, whole)
    assert {p["provider"] for p in result.metrics["placements"][-1]} == {PROVIDER_A}
    assert result.metrics["val_accuracy"] > 0.9
    weights = load_file(str(Path(result.result_dir) / OUTPUT_DIR / "model.safetensors"))
    assert sum(t.numel() for t in weights.values()) == whole, "the result holds every shard"


def test_bf16_precision_runs_under_autocast_and_its_checkpoints_go_to_a_pyarrow_filesystem_uri(
    ray_cluster, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("SWARM_HOME", str(tmp_path / "home"))
    remote = tmp_path / "remote"
    result = run_job(ComputeJob.of(job_id="uri-on-c", kind="train", provider=PROVIDER_C, storage=f"file://{remote}",
                                   timeout_s=WAIT_S,
                                   params={"model": "mlp", "samples": 256, "epochs": 2, "precision": "bf16"}))
    assert result.metrics["precision"] == "bf16" and result.metrics["compute_dtype"] == "bfloat16"
    recorded = (Path(result.result_dir) / OUTPUT_DIR / "metrics.json").read_text()
    assert '"precision": "bf16"' in recorded and '"compute_dtype": "bfloat16"' in recorded
    assert len(checkpoints_of(remote / "uri-on-c")) == 2
    assert Path(result.result_dir) == tmp_path / "home" / "results" / "uri-on-c"
    assert result.result_hash == result_hash(Path(result.result_dir))
    assert (Path(result.result_dir) / OUTPUT_DIR / "model.safetensors").exists()


def wait_for_first_checkpoint(result_dir: Path, running: Future) -> Path:
    """The job's first checkpoint, once Ray Train has registered it (a checkpoint written
    but not yet registered when a node dies is not one a retry resumes from)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if (found := registered_checkpoint(result_dir)) is not None:
            return found
        assert not running.done(), running.exception() or "the job ended before its first checkpoint"
        wait([running], timeout=0.05)  # ticks on the job's end, so a failure surfaces at once
    raise AssertionError("no checkpoint within the wait")


def test_a_lost_node_is_survived_by_resuming_on_the_providers_other_node(ray_cluster, storage: Path) -> None:
    lost = job(storage, "recover-on-a", "train", PROVIDER_A, seed=3, params=LONG)
    try:
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(run_job, lost)
            first = wait_for_first_checkpoint(lost.result_dir(), running)
            (where,) = json.loads((first / train.STATE).read_text())["placements"][0]
            (node,) = [n for n in ray_cluster.nodes[PROVIDER_A] if n.node_id == where["node_id"]]
            (other,) = [n for n in ray_cluster.nodes[PROVIDER_A] if n is not node]
            ray_cluster.remove_node(node)
            result = running.result(timeout=WAIT_S)
    finally:
        ray_cluster.add_node(PROVIDER_A)  # the provider gets its second node back for later tests
    assert result.metrics["resumed_from_epoch"] >= 1
    assert [p[0]["node_id"] for p in result.metrics["placements"]] == [node.node_id, other.node_id]
    assert [h["epoch"] for h in result.metrics["history"]] == list(range(1, LONG["epochs"] + 1))


def test_a_provider_losing_its_only_node_fails_with_a_provider_fault(ray_cluster, storage: Path) -> None:
    node = ray_cluster.add_node(PROVIDER_D)
    doomed = job(storage, "lost-on-d", "train", PROVIDER_D, params=LONG)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_job, doomed)
        wait_for_first_checkpoint(doomed.result_dir(), running)
        ray_cluster.remove_node(node)
        with pytest.raises(ProviderFault, match="has no live nodes left") as caught:
            # stopped, not left waiting for a node (bench/failfast.py: how soon)
            running.result(timeout=WAIT_S)
    assert caught.value.provider == PROVIDER_D
    assert not (doomed.result_dir() / OUTPUT_DIR).exists()
    assert provider_capacity(PROVIDER_D).nodes == 0
    # The trainer was cancelled: Ray removes its placement group instead of waiting for a node.
    deadline = time.monotonic() + 60
    while placement_groups_of(PROVIDER_D) and time.monotonic() < deadline:
        threading.Event().wait(0.2)
    assert placement_groups_of(PROVIDER_D) == []


def placement_groups_of(provider: str) -> list[str]:
    """Placement groups still holding (or waiting for) resources of `provider`'s nodes."""
    resource = provider_resource(provider)
    return [pg_id for pg_id, pg in ray.util.placement_group_table().items()
            if pg["state"] != "REMOVED" and any(resource in bundle for bundle in pg["bundles"].values())]


def test_finetune_trains_only_the_adapters(base: JobResult, storage: Path) -> None:
    result = run_job(job(storage, "lora-on-a", "finetune", PROVIDER_A, seed=11,
                         params={"base_checkpoint": base.result_dir, "samples": 320, "epochs": 2}))
    outputs, base_outputs = Path(result.result_dir) / OUTPUT_DIR, Path(base.result_dir) / OUTPUT_DIR
    assert result.metrics["placement"]["provider"] == PROVIDER_A
    # The base weights after training are the base checkpoint's, bit for bit.
    after = load_file(str(outputs / "model.safetensors"))
    before = load_file(str(base_outputs / "model.safetensors"))
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert file_sha256(outputs / "model.safetensors") == file_sha256(base_outputs / "model.safetensors")
    # Every adapter tensor moved away from its initial value.
    adapter = load_file(str(outputs / finetune.ADAPTER))
    fresh = finetune.attach_lora(load_model(base.result_dir)[0], "tiny-transformer", 4, 8.0, seed=11)
    initial = get_peft_model_state_dict(fresh)
    assert adapter.keys() == initial.keys() and len(adapter) == 8
    assert not any(torch.equal(adapter[k], initial[k]) for k in adapter)
    # A finetune result serves inference with its adapter merged in.
    tokens = synthetic_sequences(5, n=8)[0]
    tuned, _ = infer.load_for_inference(result.result_dir)
    assert not torch.equal(tuned(tokens), load_model(base.result_dir)[0](tokens))


@pytest.fixture
def inputs_file(tmp_path: Path) -> Path:
    path = tmp_path / "inputs.npy"
    np.save(path, synthetic_sequences(99, n=37)[0].numpy())
    return path


def test_infer_returns_one_output_per_input_with_a_batch_that_fits_memory(base, storage, inputs_file) -> None:
    result = run_job(job(storage, "infer-on-c", "infer", PROVIDER_C, params={
        "checkpoint": base.result_dir, "dataset_path": str(inputs_file),
        "batch_size": 16, "memory_budget_mb": 0.2,
    }))
    outputs = Path(result.result_dir) / OUTPUT_DIR
    predictions, logits = np.load(outputs / "predictions.npy"), np.load(outputs / "logits.npy")
    assert predictions.shape == (37,) and logits.shape == (37, 4)
    model, _ = load_model(base.result_dir)
    with torch.no_grad():
        expected = model(torch.from_numpy(np.load(inputs_file)))
    assert np.array_equal(predictions, expected.argmax(dim=1).numpy())
    assert 1 <= result.metrics["batch_size"] < 16  # the budget cut the batch
    assert result.metrics["batches"] == -(-37 // result.metrics["batch_size"])
    assert result.metrics["placement"]["provider"] == PROVIDER_C
    assert result.metrics["quantized_layers"] == 0


def test_int8_inference_still_returns_one_output_per_input(base, storage, inputs_file) -> None:
    result = run_job(job(storage, "int8-on-b", "infer", PROVIDER_B, params={
        "checkpoint": base.result_dir, "dataset_path": str(inputs_file), "quantize": "int8"}))
    outputs = Path(result.result_dir) / OUTPUT_DIR
    predictions, logits = np.load(outputs / "predictions.npy"), np.load(outputs / "logits.npy")
    assert predictions.shape == (37,) and logits.shape == (37, 4) and np.isfinite(logits).all()
    assert result.metrics["quantize"] == "int8"
    assert result.metrics["quantized_layers"] == 13  # every Linear: 6 per block, 2 blocks, and the head


def test_a_job_past_its_timeout_is_stopped(ray_cluster, storage: Path) -> None:
    slow = ComputeJob.of("slow-on-b", "train", PROVIDER_B, storage=str(storage), timeout_s=6, params=LONG)
    with pytest.raises(ComputeError, match="ran past its timeout of 6 s") as caught:
        run_job(slow)
    assert not isinstance(caught.value, ProviderFault)  # the provider is still there
    assert not (slow.result_dir() / OUTPUT_DIR).exists()
    assert placement_groups_of(PROVIDER_B) == []  # aborted: the workers' resources are free again


@pytest.mark.parametrize(
    ("kind", "params", "message"),
    [
        ("train", {"epochz": 3}, "unknown train parameter.s. epochz"),
        ("train", {"precision": "fp16"}, "precision must be one of fp32, bf16"),
        ("train", {"parallelism": "zero3"}, "parallelism must be one of ddp, fsdp, got 'zero3'"),
        ("train", {"model": "mlp", "dataset": "synthetic-sequences"}, "mlp trains on synthetic-class"),
        ("train", {"epochs": "3"}, "parameter epochs must be an integer"),
        ("train", {"epochs": 0}, "epochs must be at least 1, got 0"),
        ("train", {"lr": 0}, "lr must be positive"),
        ("finetune", {"base_checkpoint": "c", "samples": 5}, "samples must be between 10 and"),
        ("finetune", {}, "base_checkpoint is required"),
        ("finetune", {"base_checkpoint": "/nonexistent"}, "no model checkpoint at /nonexistent"),
        ("infer", {"checkpoint": "/nonexistent", "dataset_path": "x.npy"}, "no model checkpoint"),
        ("infer", {"checkpoint": "c", "dataset_path": "x.npy", "quantize": "int4"}, "quantize must be"),
    ],
)
def test_bad_params_fail_before_any_ray_work(ray_cluster, tmp_path: Path, kind: str, params: dict,
                                             message: str) -> None:
    with pytest.raises(InvalidJob, match=message):  # refused as the job is read, or by its runner
        run_job(ComputeJob.of("bad", kind, PROVIDER_B, storage=str(tmp_path), params=params))
    assert not (tmp_path / "bad").exists()


# ── tables the buyer brings (compute.tabular) ─────────────────────────────────────────


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """scikit-learn's digits as Parquet (examples/digits/prepare.py), CSV and JSON Lines."""
    import pyarrow.csv
    import pyarrow.parquet as pq

    from compute.data import write_digits

    directory = tmp_path_factory.mktemp("digits")
    parquet = write_digits(directory / "digits.parquet")
    table = pq.read_table(parquet)
    pyarrow.csv.write_csv(table, directory / "digits.csv")
    rows = table.to_pylist()
    (directory / "digits.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"parquet": parquet, "csv": directory / "digits.csv", "jsonl": directory / "digits.jsonl"}


TABLE = {"model": "mlp", "epochs": 3, "batch_size": 32, "lr": 3e-3}


@pytest.fixture(scope="module")
def digits_model(ray_cluster, storage: Path, digits: dict[str, Path]) -> JobResult:
    with pytest.MonkeyPatch.context() as patch:  # streamed, as a table too large to read whole is
        patch.setattr(train, "WHOLE_TABLE_BYTES", 0)
        return run_job(job(storage, "digits-on-b", "train", PROVIDER_B, seed=3,
                           params=TABLE | {"dataset": str(digits["parquet"])}))


def test_train_streams_a_parquet_table_through_ray_data_and_learns_it(digits_model: JobResult) -> None:
    assert digits_model.metrics["dataset_read"] == "streamed"
    assert digits_model.metrics["val_accuracy"] > 0.9  # ten classes: chance is 0.1
    accuracies = [h["val_accuracy"] for h in digits_model.metrics["history"]]
    assert accuracies[-1] > accuracies[0]
    model, meta = load_model(digits_model.result_dir)
    assert meta["features"] == [f"px_{i}" for i in range(64)] and meta["dataset"] == "digits.parquet"
    assert meta["config"] == {"in_features": 64, "classes": 10}
    assert model.net[-1].out_features == 10


def test_the_same_table_as_csv_or_json_lines_reads_as_the_same_rows(
    ray_cluster, digits: dict[str, Path]
) -> None:
    from compute import tabular

    whole = [tabular.tensors(path) for path in digits.values()]
    for inputs, labels, features in whole[1:]:
        assert (
            torch.equal(inputs, whole[0][0]) and torch.equal(labels, whole[0][1]) and features == whole[0][2]
        )
    streamed = [tabular.read(path).materialize() for path in digits.values()]
    assert [d.num_blocks() for d in streamed] == [1, 1, 1], "a block per file, whatever the cluster's CPUs"
    rows = [d.take(3) for d in streamed]
    assert all(float(r[0]["px_10"]) == float(rows[0][0]["px_10"]) for r in rows)


def test_infer_reads_a_json_lines_table_by_the_models_columns_and_scores_it(
        digits_model: JobResult, storage: Path, digits: dict[str, Path], tmp_path: Path) -> None:
    rows = [json.loads(line) for line in digits["jsonl"].read_text().splitlines()[:50]]
    shuffled = tmp_path / "rows.jsonl"  # the columns in another order: the model's own order is used
    shuffled.write_text("".join(json.dumps(dict(reversed(list(r.items())))) + "\n" for r in rows))
    result = run_job(job(storage, "digits-infer-on-c", "infer", PROVIDER_C,
                         params={"checkpoint": digits_model.result_dir, "dataset_path": str(shuffled)}))
    predictions = np.load(Path(result.result_dir) / OUTPUT_DIR / "predictions.npy")
    expected = np.array([r["label"] for r in rows])
    assert predictions.shape == (50,)
    assert result.metrics["accuracy"] == pytest.approx(float((predictions == expected).mean()))
    assert result.metrics["accuracy"] > 0.85


def test_finetune_tunes_a_table_model_on_its_table(digits_model: JobResult, storage: Path,
                                                    digits: dict[str, Path]) -> None:
    result = run_job(
        job(
            storage,
            "digits-tune-on-b",
            "finetune",
            PROVIDER_B,
            seed=5,
            params={
                "base_checkpoint": digits_model.result_dir,
                "dataset": str(digits["parquet"]),
                "samples": 600,
                "epochs": 1,
            },
        )
    )
    _, meta = load_model(result.result_dir)
    assert meta["features"] == [f"px_{i}" for i in range(64)] and "adapter" in meta
    assert result.metrics["val_accuracy"] > 0.5


@pytest.mark.parametrize(("name", "content", "message"), [
    ("digits.xlsx", b"PK", "unknown format .\\.xlsx.; give Parquet"),
    ("words.csv", b"a,label\n" + b"x,1\ny,0\n" * 10, "column.s. a are not numbers"),
])
def test_a_table_that_cannot_train_is_the_buyers_to_fix(
    ray_cluster, tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(InvalidJob, match=message):
        run_job(ComputeJob.of("bad-table", "train", PROVIDER_B, storage=str(tmp_path), timeout_s=WAIT_S,
                              params={"model": "mlp", "dataset": str(tmp_path / name)}))
    assert not (tmp_path / "bad-table" / OUTPUT_DIR).exists()
