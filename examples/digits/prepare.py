"""Writes scikit-learn's handwritten digits (1,797 8×8 images, shipped with the package) as
Parquet: one column per pixel, `px_0` … `px_63` (0–16), and the `label` (0–9).

    python examples/digits/prepare.py [OUT]      # default: digits.parquet beside this file
"""

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.datasets import load_digits


def write(path: Path) -> Path:
    digits = load_digits()
    columns = {f"px_{i}": pa.array(digits.data[:, i].astype("float32")) for i in range(digits.data.shape[1])}
    columns["label"] = pa.array(digits.target.astype("int64"))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("digits.parquet")
    print(f"wrote {write(out)}")
