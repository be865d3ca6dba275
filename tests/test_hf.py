"""Hugging Face transformers checkpoints on a real Ray cluster: small GPT-2 and BERT
classifiers built offline (compute.hf.make_tiny), served by the infer runner over a table of
texts, with a checkpoint or a table that cannot serve refused as the buyer's fault."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from compute import hf
from compute.data import write_reviews
from compute.dispatch import run_job
from compute.errors import InvalidJob
from compute.jobs import ComputeJob
from compute.manifest import OUTPUT_DIR, result_hash
from tests.ray_cluster import PROVIDER_B, PROVIDER_C


@pytest.fixture(scope="module")
def reviews(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_reviews(tmp_path_factory.mktemp("reviews") / "reviews.parquet", seed=3, n=120)


def corpus(table: Path) -> list[str]:
    return hf.texts(table)[0]


def infer_job(storage: Path, job_id: str, provider: str, checkpoint: Path, table: Path) -> ComputeJob:
    return ComputeJob.of(
        job_id=job_id,
        kind="infer",
        provider=provider,
        storage=str(storage),
        timeout_s=240,
        seed=1,
        params={"checkpoint": str(checkpoint), "dataset_path": str(table), "batch_size": 32},
    )


@pytest.mark.parametrize(("architecture", "provider"), [("gpt2", PROVIDER_B), ("bert", PROVIDER_C)])
def test_a_transformers_checkpoint_serves_a_table_of_texts_as_it_does_locally(
        ray_cluster, tmp_path: Path, reviews: Path, architecture: str, provider: str) -> None:
    model_dir = hf.make_tiny(
        tmp_path / architecture, corpus(reviews), classes=2, architecture=architecture, seed=4
    )
    assert json.loads((model_dir / hf.CONFIG).read_text())["model_type"] == architecture
    result = run_job(infer_job(tmp_path / "runs", f"hf-{architecture}", provider, model_dir, reviews))

    outputs = Path(result.result_dir) / OUTPUT_DIR
    predictions, logits = np.load(outputs / "predictions.npy"), np.load(outputs / "logits.npy")
    assert predictions.shape == (120,) and logits.shape == (120, 2)
    # What the provider's node computed is what the same checkpoint computes here.
    model, tokenizer = hf.load(model_dir)
    texts, labels = hf.texts(reviews)
    assert labels is not None
    with torch.no_grad():
        local = model(**hf.encode(tokenizer, texts[:40])).logits
    assert np.allclose(logits[:40], local.numpy(), atol=1e-5)
    assert result.metrics["accuracy"] == pytest.approx(
        float((predictions == labels.numpy()).mean()), abs=1e-6
    )
    assert result.metrics["model"] == architecture and result.metrics["placement"]["provider"] == provider
    assert result.result_hash == result_hash(Path(result.result_dir))


def test_a_checkpoint_that_cannot_load_or_a_table_without_texts_is_the_buyers_to_fix(
        ray_cluster, tmp_path: Path, reviews: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / hf.CONFIG).write_text(json.dumps({"model_type": "gpt2"}))  # no tokenizer, no weights
    with pytest.raises(InvalidJob, match="cannot be loaded"):
        run_job(infer_job(tmp_path / "runs", "hf-broken", PROVIDER_B, broken, reviews))

    model_dir = hf.make_tiny(tmp_path / "gpt2", corpus(reviews), classes=2)
    numbers = tmp_path / "numbers.csv"
    numbers.write_text("a,label\n" + "1,0\n" * 10)
    with pytest.raises(InvalidJob, match="has no 'text' column"):
        run_job(infer_job(tmp_path / "runs", "hf-no-text", PROVIDER_B, model_dir, numbers))
    assert not (tmp_path / "runs" / "hf-no-text").exists(), "refused before any work"


def train_job(storage: Path, job_id: str, provider: str, model: Path, table: Path, epochs: int) -> ComputeJob:
    return ComputeJob.of(
        job_id=job_id,
        kind="train",
        provider=provider,
        storage=str(storage),
        timeout_s=300,
        seed=2,
        params={"model": str(model), "dataset": str(table), "epochs": epochs, "batch_size": 16, "lr": 0.003},
    )


def test_a_transformers_classifier_trains_on_a_table_of_texts_and_serves_what_it_learned(
        ray_cluster, tmp_path: Path, reviews: Path) -> None:
    base = hf.make_tiny(tmp_path / "bert", corpus(reviews), classes=2, architecture="bert", seed=5)
    before = {p.name: p.read_bytes() for p in base.iterdir()}
    model, tokenizer = hf.load(base)
    untrained = hf.evaluate(model, tokenizer, *hf.texts(reviews))["accuracy"]
    result = run_job(train_job(tmp_path / "runs", "hf-train", PROVIDER_B, base, reviews, epochs=6))
    assert [h["epoch"] for h in result.metrics["history"]] == [1, 2, 3, 4, 5, 6]
    assert result.metrics["dataset_read"] == "whole"  # a small table: read by the driver, not streamed
    assert result.metrics["val_accuracy"] >= 0.85 > untrained + 0.2, (untrained, result.metrics["history"])

    outputs = Path(result.result_dir) / OUTPUT_DIR
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in outputs.iterdir()}
    assert json.loads((outputs / "metrics.json").read_text())["params"]["model"] == "bert"
    assert {p.name: p.read_bytes() for p in base.iterdir()} == before, "the buyer's checkpoint is untouched"
    # What it learned is a transformers checkpoint like any other: infer serves it from the job's result.
    served = run_job(
        infer_job(tmp_path / "runs", "hf-train-infer", PROVIDER_C, Path(result.result_dir), reviews)
    )
    assert served.metrics["accuracy"] >= 0.85


def finetune_job(storage: Path, job_id: str, provider: str, base: Path, table: Path) -> ComputeJob:
    return ComputeJob.of(
        job_id=job_id,
        kind="finetune",
        provider=provider,
        storage=str(storage),
        timeout_s=240,
        seed=1,
        params={
            "base_checkpoint": str(base),
            "dataset": str(table),
            "epochs": 4,
            "batch_size": 16,
            "lr": 0.01,
        },
    )


def test_lora_tunes_a_transformers_classifier_whose_adapter_loads_with_peft_on_the_same_base(
        ray_cluster, tmp_path: Path, reviews: Path) -> None:
    from peft import PeftModel

    base = hf.make_tiny(tmp_path / "gpt2", corpus(reviews), classes=2, architecture="gpt2", seed=4)
    model, tokenizer = hf.load(base)
    texts, labels = hf.texts(reviews)
    before = hf.evaluate(model, tokenizer, texts, labels)["accuracy"]
    result = run_job(finetune_job(tmp_path / "runs", "hf-lora", PROVIDER_B, base, reviews))

    assert result.metrics["val_accuracy"] >= 0.8 > before + 0.2, (before, result.metrics["history"])
    total = sum(p.numel() for p in model.parameters())
    assert 0 < result.metrics["trainable_parameters"] < total // 10, "only the adapters and the head train"
    outputs = Path(result.result_dir) / OUTPUT_DIR
    adapter = outputs / "adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())["target_modules"] == ["c_attn"]
    # The adapter on the untouched base computes what the merged model in the outputs computes.
    with_adapter = PeftModel.from_pretrained(hf.load(base)[0], adapter).merge_and_unload().eval()
    merged, merged_tokenizer = hf.load(outputs)
    with torch.no_grad():
        ids = hf.encode(tokenizer, texts[:30])
        assert torch.allclose(
            with_adapter(**ids).logits, merged(**hf.encode(merged_tokenizer, texts[:30])).logits, atol=1e-5
        )
    assert hf.evaluate(merged, merged_tokenizer, texts, labels)["accuracy"] >= 0.8
    # The same seed on another provider gives the same result, byte for byte.
    again = run_job(finetune_job(tmp_path / "again", "hf-lora", PROVIDER_C, base, reviews))
    assert again.result_hash == result.result_hash


def test_a_table_a_transformers_checkpoint_cannot_learn_is_refused_before_any_work(
        ray_cluster, tmp_path: Path, reviews: Path) -> None:
    base = hf.make_tiny(tmp_path / "gpt2", corpus(reviews), classes=2)
    three = tmp_path / "three.csv"
    three.write_text("text,label\n" + "".join(f"good film {i},{i % 3}\n" for i in range(12)))
    with pytest.raises(InvalidJob, match="has class 2, but the checkpoint gpt2 classifies into 2"):
        run_job(train_job(tmp_path / "runs", "hf-three", PROVIDER_B, base, three, epochs=1))
    unlabelled = tmp_path / "unlabelled.csv"
    unlabelled.write_text("text\n" + "good film\n" * 12)
    with pytest.raises(InvalidJob, match="has no 'label' column"):
        run_job(finetune_job(tmp_path / "runs", "hf-unlabelled", PROVIDER_B, base, unlabelled))
    assert not (tmp_path / "runs").exists(), "refused before any work"
