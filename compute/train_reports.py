"""The Ray Train callback that keeps what a run reports (`compute.reports`).

Imported by Ray Train, where a lease's trainer is built, from RAY_TRAIN_CALLBACKS; it imports
Ray Train's internal callback interface (its `ReportCallback`, which sees every report).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ray.train.v2._internal.execution.callback import ReportCallback

from compute.node import REPORTS_ENV
from compute.reports import MAX_REPORTS_BYTES, scalars


class Reports(ReportCallback):
    """Appends each report's rank-0 scalars to the file SWARM_REPORTS names where the trainer
    was built; nothing where it names none."""

    def __init__(self) -> None:
        self.path = os.environ.get(REPORTS_ENV) or None

    def after_report(self, training_report: Any, metrics: list[dict[str, Any]]) -> None:
        if self.path is None or not metrics:
            return
        line = json.dumps({"at": time.time(), "metrics": scalars(metrics[0])}, allow_nan=False) + "\n"
        try:
            size = os.path.getsize(self.path)
        except OSError:
            size = 0
        if size + len(line) > MAX_REPORTS_BYTES:
            return
        with open(self.path, "a") as out:
            out.write(line)
