"""Writes scikit-learn's handwritten digits (1,797 8×8 images, shipped with the package) as
Parquet: one column per pixel, `px_0` … `px_63` (0–16), and the `label` (0–9) — the table the
demo trains on too (compute.data.write_digits).

    python examples/digits/prepare.py [OUT]      # default: digits.parquet beside this file
"""

import sys
from pathlib import Path

from compute.data import write_digits

if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("digits.parquet")
    print(f"wrote {write_digits(out)}")
