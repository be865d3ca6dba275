"""Datasets that build offline from a seed, and dataset files buyers supply (compute.tabular).

`synthetic-classification`: Gaussian blobs over dense features (for the MLP).
`synthetic-sequences`: token sequences whose class is a function of their tokens (for the
tiny transformer). The same seed gives the same data on every machine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from compute import tabular
from compute.catalog import DATASETS
from compute.errors import InvalidJob


def synthetic_classification(seed: int, n: int = 2048, features: int = 16, classes: int = 4):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, size=(classes, features))
    labels = rng.integers(0, classes, size=n)
    x = centers[labels] + rng.normal(0, 1, size=(n, features))
    return torch.tensor(x, dtype=torch.float32), torch.tensor(labels, dtype=torch.long)


def synthetic_sequences(seed: int, n: int = 2048, seq_len: int = 16, vocab: int = 64, classes: int = 4):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, size=(n, seq_len))
    labels = (tokens[:, : seq_len // 2].sum(axis=1) // 7) % classes
    return torch.tensor(tokens, dtype=torch.long), torch.tensor(labels, dtype=torch.long)


def write_digits(path: Path) -> Path:
    """scikit-learn's handwritten digits (1,797 8×8 images, shipped with the package) as a Parquet
    table: `px_0` … `px_63` (0–16) and the `label` (0–9), as examples/digits/prepare.py writes them."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from sklearn.datasets import load_digits

    digits = load_digits()
    columns = {f"px_{i}": pa.array(digits.data[:, i].astype("float32")) for i in range(digits.data.shape[1])}
    columns["label"] = pa.array(digits.target.astype("int64"))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def load_dataset(name: str, seed: int, n: int = 2048):
    """(inputs, labels) of a named synthetic dataset, or of a table's first `n` rows (all if 0)."""
    if name == "synthetic-classification":
        return synthetic_classification(seed, n)
    if name == "synthetic-sequences":
        return synthetic_sequences(seed, n)
    if name in DATASETS or not Path(name).exists():
        raise InvalidJob(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)} or give a table.")
    inputs, labels, _ = tabular.tensors(name, limit=n)
    return inputs, labels


def read_inputs(
    path: str | Path, features: list[str] | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(inputs, labels or None) for batch inference: a .npy array, one row per input, or a table
    (compute.tabular) whose `features` columns are the inputs and whose `label`, if it has one,
    the expected classes."""
    path = Path(path)
    if not path.exists():
        raise InvalidJob(
            f"dataset file {path} does not exist; give a .npy array or a table: {tabular.KNOWN}."
        )
    if path.suffix != ".npy":
        inputs, labels, _ = tabular.tensors(path, labelled=False, features=features)
        return inputs, labels
    array = np.load(path, allow_pickle=False)
    return torch.from_numpy(array), None


REVIEW_WORDS = (
    ("awful", "dull", "poor", "boring", "weak", "dreadful", "clumsy", "tedious"),  # label 0
    ("great", "lovely", "superb", "moving", "sharp", "brilliant", "warm", "gripping"),  # label 1
)
REVIEW_FILLER = (
    "the",
    "film",
    "plot",
    "was",
    "and",
    "acting",
    "story",
    "a",
    "really",
    "quite",
    "music",
    "ending",
    "cast",
    "script",
    "felt",
    "very",
)


def write_reviews(path: Path, seed: int = 0, n: int = 400) -> Path:
    """Short film reviews as a table of `text` and `label` (0 negative, 1 positive): filler words
    and two words of the review's sentiment, in an order drawn from `seed`. A text classifier
    learns them in a few epochs; the same seed gives the same table on every machine."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(REVIEW_WORDS), size=n)
    rows = []
    for label in labels:
        words = list(rng.choice(REVIEW_FILLER, size=int(rng.integers(4, 9)))) + \
            list(rng.choice(REVIEW_WORDS[label], size=2))
        rng.shuffle(words)
        rows.append(" ".join(words))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": pa.array(rows), "label": pa.array(labels.astype("int64"))}), path)
    return path
