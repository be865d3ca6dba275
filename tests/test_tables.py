"""A small table `train` reads whole (compute.runners.train): its split drawn with the job's seed,
each worker's equal share, the batches of an epoch, and the tables it refuses — without Ray.
The streamed path and both paths' training are tested on a Ray cluster in tests/test_runners.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute.errors import InvalidJob
from compute.runners import train
from compute.runners.params import TrainParams


def params(path: Path, samples: int = 0) -> TrainParams:
    return TrainParams(model="mlp", dataset=str(path), samples=samples)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 300), world=st.integers(1, 4), batch=st.integers(1, 64),
       seed=st.integers(0, 2**32))
def test_every_worker_gets_an_equal_share_and_each_epoch_sees_its_share_once(
    rows: int, world: int, batch: int, seed: int
) -> None:
    table: dict[str, np.ndarray] = {"label": np.arange(rows), "x": np.arange(rows, dtype=np.float32) * 2}
    shares = [train.share_of(table, rank, world) for rank in range(world)]
    assert len({len(s["label"]) for s in shares}) == 1, "DDP's all-reduces pair up only on equal shares"
    taken = np.concatenate([s["label"] for s in shares])
    assert len(set(taken.tolist())) == len(taken) and rows - len(taken) < world
    for share in shares:
        assert np.array_equal(share["x"], share["label"] * 2), "a row's columns stay together"
        def tensors(b):
            return b["x"], b["label"]
        epoch = list(train.row_batches(share, tensors, batch, seed))
        assert all(len(labels) <= batch for _, labels in epoch)
        seen = np.concatenate([labels for _, labels in epoch]) if epoch else np.array([], dtype=int)
        assert sorted(seen.tolist()) == sorted(share["label"].tolist())
        again = np.concatenate([labels for _, labels in train.row_batches(share, tensors, batch, seed)]) \
            if epoch else seen
        assert np.array_equal(seen, again), "the same seed, the same order"


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from compute.data import write_digits

    return write_digits(tmp_path_factory.mktemp("digits") / "digits.parquet")


def test_a_small_table_is_split_by_the_jobs_seed_into_a_held_out_fifth_and_the_rest(
    digits: Path, tmp_path: Path
) -> None:
    assert train.dataset_read(params(digits)) == "whole"
    _, layout = train.table_rows(params(digits), seed=3)
    assert layout == {"features": [f"px_{i}" for i in range(64)], "classes": 10}

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "rows.parquet"  # each row's `row` column names it
    pq.write_table(pa.table({"row": np.arange(1000), "label": np.arange(1000) % 3}), table)
    rows, layout = train.table_rows(params(table), seed=3)
    assert layout == {"features": ["row"], "classes": 3}
    held, rest = set(rows["validation"]["row"].tolist()), set(rows["train"]["row"].tolist())
    assert len(held) == 200 and not held & rest and held | rest == set(range(1000))
    assert np.array_equal(rows["train"]["label"], rows["train"]["row"] % 3), "a row's columns stay together"
    same, _ = train.table_rows(params(table), seed=3)
    other, _ = train.table_rows(params(table), seed=4)
    assert np.array_equal(same["train"]["row"], rows["train"]["row"])
    assert set(other["validation"]["row"].tolist()) != held
    first, _ = train.table_rows(params(table, samples=100), seed=3)
    assert set(first["train"]["row"].tolist()) | set(first["validation"]["row"].tolist()) == set(range(100))


def test_a_table_over_the_limit_is_streamed(digits: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(train, "WHOLE_TABLE_BYTES", digits.stat().st_size - 1)
    assert train.dataset_read(params(digits)) == "streamed"
    assert train.dataset_read(TrainParams(model="mlp", dataset="synthetic-classification")) == "built-in"


@pytest.mark.parametrize(("content", "message"), [
    (b"a,b\n" + b"1,2\n" * 20, "dataset rows.csv has no 'label' column"),
    (b"a,label\n" + b"x,1\ny,0\n" * 10, "dataset rows.csv: column.s. a are not numbers"),
    (b"a,label\n" + b"1,-1\n2,0\n" * 10, "needs at least 10 rows with labels that are integers from 0"),
    (b"a,label\n" + b"1,1\n" * 5, "needs at least 10 rows"),
    (b"a,label\n" + b"1,1\n2,0\n" * 10 + b"3,\n", "needs at least 10 rows with labels that are integers"),
], ids=["no label", "a column of words", "a negative label", "too few rows", "a row without its label"])
def test_a_small_table_that_cannot_train_is_refused_in_one_sentence(
    tmp_path: Path, content: bytes, message: str
) -> None:
    (tmp_path / "rows.csv").write_bytes(content)
    with pytest.raises(InvalidJob, match=message):
        train.table_rows(params(tmp_path / "rows.csv"), seed=0)
