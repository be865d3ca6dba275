"""Datasets that build offline from a seed, and dataset files buyers supply.

`synthetic-classification`: Gaussian blobs over dense features (for the MLP).
`synthetic-sequences`: token sequences whose class is a function of their tokens (for the
tiny transformer). The same seed gives the same data on every machine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

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


def load_dataset(name: str, seed: int, n: int = 2048):
    """(inputs, labels) of a named synthetic dataset."""
    if name == "synthetic-classification":
        return synthetic_classification(seed, n)
    if name == "synthetic-sequences":
        return synthetic_sequences(seed, n)
    raise InvalidJob(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)} or give a file path.")


def read_inputs(path: str | Path) -> torch.Tensor:
    """Inputs for batch inference from a .npy file (one row per input)."""
    path = Path(path)
    if not path.exists():
        raise InvalidJob(f"dataset file {path} does not exist; give the path of a .npy file.")
    if path.suffix != ".npy":
        raise InvalidJob(f"dataset file {path} is not a .npy array; save the inputs with numpy.save.")
    array = np.load(path, allow_pickle=False)
    return torch.from_numpy(array)
