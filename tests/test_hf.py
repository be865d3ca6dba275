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
from compute.errors import InvalidJob
from compute.jobs import ComputeJob, run_job
from compute.manifest import OUTPUT_DIR, result_hash
from tests.ray_cluster import PROVIDER_B, PROVIDER_C


@pytest.fixture(scope="module")
def reviews(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_reviews(tmp_path_factory.mktemp("reviews") / "reviews.parquet", seed=3, n=120)


def corpus(table: Path) -> list[str]:
    return hf.texts(table)[0]


def infer_job(storage: Path, job_id: str, provider: str, checkpoint: Path, table: Path) -> ComputeJob:
    return ComputeJob(job_id=job_id, kind="infer", provider=provider, storage=str(storage), timeout_s=240, seed=1,
                      params={"checkpoint": str(checkpoint), "dataset_path": str(table), "batch_size": 32})


@pytest.mark.parametrize(("architecture", "provider"), [("gpt2", PROVIDER_B), ("bert", PROVIDER_C)])
def test_a_transformers_checkpoint_serves_a_table_of_texts_as_it_does_locally(
        ray_cluster, tmp_path: Path, reviews: Path, architecture: str, provider: str) -> None:
    model_dir = hf.make_tiny(tmp_path / architecture, corpus(reviews), classes=2, architecture=architecture, seed=4)
    assert json.loads((model_dir / hf.CONFIG).read_text())["model_type"] == architecture
    result = run_job(infer_job(tmp_path / "runs", f"hf-{architecture}", provider, model_dir, reviews))

    outputs = Path(result.result_dir) / OUTPUT_DIR
    predictions, logits = np.load(outputs / "predictions.npy"), np.load(outputs / "logits.npy")
    assert predictions.shape == (120,) and logits.shape == (120, 2)
    # What the provider's node computed is what the same checkpoint computes here.
    model, tokenizer = hf.load(model_dir)
    texts, labels = hf.texts(reviews)
    with torch.no_grad():
        local = model(**hf.encode(tokenizer, texts[:40])).logits
    assert np.allclose(logits[:40], local.numpy(), atol=1e-5)
    assert result.metrics["accuracy"] == pytest.approx(float((predictions == labels.numpy()).mean()), abs=1e-6)
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
