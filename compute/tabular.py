"""Datasets a buyer brings as files: Parquet, CSV or JSON Lines, one example per row.

A table the built-in runners train on holds the class in a `label` column (an integer from 0)
and the features in every other column, all numbers (examples/digits/prepare.py writes one).
A dataset is one file or a directory of files in one format; the format is the files' suffix.

`train` streams a table through Ray Data (`read`): each worker iterates its own shard of the
training split, and no process holds the whole table. `finetune` and `infer`, which run as one
task, read it whole with pyarrow (`read_table`). Nothing here imports torch, Ray or pyarrow
until a table is read, so the market checks a dataset's format with it when a spec is posted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compute.catalog import DATASETS
from compute.errors import InvalidJob
from compute.node import DATA_FOOTER_READERS

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data
    import torch

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "json", ".ndjson": "json"}
KNOWN = "Parquet (.parquet), CSV (.csv) or JSON Lines (.jsonl)"
LABEL = "label"


def is_named(dataset: str) -> bool:
    """True for a built-in dataset's name, False for a file the buyer brings."""
    return dataset in DATASETS


def format_of(location: str) -> str | None:
    """The format a file's suffix says; None for a location with no suffix (a directory).
    A suffix that is none of the known formats is refused with the fix."""
    suffix = Path(location.rstrip("/").split("?")[0]).suffix.lower()
    if not suffix:
        return None
    if suffix not in FORMATS:
        raise InvalidJob(f"dataset {location} is in an unknown format ({suffix}); give {KNOWN}, "
                         "or a directory of such files")
    return FORMATS[suffix]


def files_of(path: str | Path) -> tuple[str, list[str]]:
    """(format, files) of a dataset file or directory on this machine, its files in name order."""
    path = Path(path)
    if not path.exists():
        raise InvalidJob(f"dataset {path} does not exist")
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
    if not files:
        raise InvalidJob(f"dataset {path} is an empty directory; give {KNOWN}")
    formats = {format_of(str(f)) for f in files}
    fmt = formats.pop() if len(formats) == 1 else None
    if fmt is None:
        raise InvalidJob(f"dataset {path} holds files of no single known format; give {KNOWN}, "
                         "one format per dataset")
    return fmt, [str(f) for f in files]


def read(path: str | Path) -> ray.data.Dataset:
    """The dataset as a Ray Data dataset, read by the cluster's tasks a file each: one block per
    file, however many CPUs the cluster has, so its rows split and shuffle alike on every site."""
    import ray.data

    for name, value in DATA_FOOTER_READERS.items():  # read when the reader is made, in this process
        os.environ.setdefault(name, value)
    kind, files = files_of(path)
    reader = {"parquet": ray.data.read_parquet, "csv": ray.data.read_csv, "json": ray.data.read_json}[kind]
    return reader(files, override_num_blocks=len(files), **({"lines": True} if kind == "json" else {}))


def read_table(path: str | Path) -> pa.Table:
    """The whole dataset as one pyarrow table."""
    import pyarrow as pa
    import pyarrow.csv
    import pyarrow.json
    import pyarrow.parquet

    kind, files = files_of(path)
    reader = {
        "parquet": pyarrow.parquet.read_table,
        "csv": pyarrow.csv.read_csv,
        "json": pyarrow.json.read_json,
    }[kind]
    try:
        return pa.concat_tables([reader(f) for f in files], promote_options="default")
    except (pa.ArrowException, OSError) as exc:
        raise InvalidJob(f"dataset {path} cannot be read as {kind}: {str(exc).splitlines()[0]}") from None


def features_of(columns: list[str], path: str | Path, labelled: bool = True) -> list[str]:
    """The feature columns of a table: all but `label`, which a training table must have."""
    if labelled and LABEL not in columns:
        raise InvalidJob(f"dataset {path} has no {LABEL!r} column; a training table holds the class "
                         f"(an integer from 0) in {LABEL!r} and the features in the other columns")
    features = [c for c in columns if c != LABEL]
    if not features:
        raise InvalidJob(f"dataset {path} has no feature columns beside {LABEL!r}")
    return features


def arrays(batch: dict[str, Any], features: list[str], path: str | Path = "the dataset") -> tuple[Any, Any]:
    """(float32 features, int64 labels or None) of a batch of columns as numpy arrays."""
    import numpy as np

    try:
        x = np.stack([np.asarray(batch[c], dtype=np.float32) for c in features], axis=1)
        y = np.asarray(batch[LABEL], dtype=np.int64) if LABEL in batch else None
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidJob(f"dataset {path} has a column that is not a number ({exc}); every feature "
                         f"and {LABEL!r} must be numeric") from None
    return x, y


def tensors(path: str | Path, limit: int = 0, labelled: bool = True,
            features: list[str] | None = None) -> tuple[torch.Tensor, torch.Tensor | None, list[str]]:
    """(inputs, labels, feature columns) of a whole dataset file as tensors, its first `limit` rows
    if `limit` is set; `features` picks and orders the columns (a model's own, for inference)."""
    import torch

    table = read_table(path)
    if limit:
        table = table.slice(0, limit)
    columns = features_of(table.column_names, path, labelled)
    if features is not None:
        missing = [c for c in features if c not in table.column_names]
        if missing:
            raise InvalidJob(
                f"dataset {path} lacks the column(s) {', '.join(missing)} the model was trained on"
            )
        columns = features
    wanted = [*columns, LABEL] if LABEL in table.column_names else columns
    x, y = arrays({c: table.column(c).to_numpy() for c in wanted}, columns, path)
    labels = None if y is None else torch.from_numpy(y.copy())  # writable, as torch wants
    if labelled and labels is not None and len(labels) and int(labels.min()) < 0:
        raise InvalidJob(f"dataset {path} has a negative {LABEL}; classes are integers from 0")
    return torch.from_numpy(x), labels, columns
