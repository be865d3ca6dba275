"""A lease's verdict, and the protocol that brings it from the launcher to the site.

The launcher prints its verdict as the last line of the lease's Ray job log, marked with a
key the lease never sees; the site reads it back through Ray's job API from whichever machine
ran the lease. What the lease prints is in that log too, so only a line with the key counts:
a job that prints a verdict of its own cannot pass for the launcher.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from provider.lease import OUTCOME

VERDICT = "swarm-lease-outcome: "  # the launcher's last line: its outcome, as JSON
REPORT = "swarm-lease-report: "  # a line the launcher relays: one report of the lease's Ray Train run


@dataclass(frozen=True)
class Outcome:
    """The launcher's verdict on one attempt."""

    state: str  # "succeeded" | "failed"
    attempt: int
    seconds: float
    returncode: int
    broke: str | None = None  # "memory" | "processes" | "time" | "disk" | "units": the buyer's fault
    error: str | None = None
    result_hash: str | None = None  # 0x sha256 of its result record, computed by the launcher
    # the record: the outputs' hash and the log's digest (compute.manifest)
    result_record: dict[str, Any] | None = None
    units: int = 0  # whole units, at most the job's max_units; a buyer's failure's: what it held
    unit: str = "cpu-seconds"
    metrics: dict[str, Any] = field(default_factory=dict)
    peak_memory_bytes: int = 0
    fault: str = "buyer"  # whose fault a failure is: the job's ("buyer") or the site's ("provider")
    devices: list[str] = field(default_factory=list)  # the UUIDs of the GPUs the lease was given

    def write(self, directory: Path) -> None:
        write_json(directory / OUTCOME, asdict(self))

    @classmethod
    def read(cls, directory: Path) -> Outcome | None:
        path = directory / OUTCOME
        if not path.is_file():
            return None
        return cls.parse(json.loads(path.read_text()))

    @classmethod
    def parse(cls, raw: Any) -> Outcome:
        """An outcome from JSON; TypeError or ValueError when it is not one."""
        if not isinstance(raw, dict) or not set(raw) <= {f.name for f in fields(cls)}:
            raise ValueError("not an outcome")
        return cls(**raw)


def verdict_line(key: str, outcome: Outcome) -> str:
    return f"{VERDICT}{key} {json.dumps(asdict(outcome))}"


def verdict(log: str, key: str) -> Outcome | None:
    """The outcome the launcher printed last in its Ray job's log, if it printed one: only a
    line with the lease's secret key counts."""
    mark = f"{VERDICT}{key} "
    for line in reversed(log.splitlines()):
        if key and line.startswith(mark):
            try:
                return Outcome.parse(json.loads(line[len(mark):]))
            except (ValueError, TypeError):
                return None
    return None


def report_line(key: str, report: dict[str, Any]) -> str:
    return f"{REPORT}{key} {json.dumps(report)}"


def reports(log: str, key: str) -> list[dict[str, Any]]:
    """The reports the launcher relayed in its Ray job's log, in order: only lines with the
    lease's secret key count."""
    mark = f"{REPORT}{key} "
    found = []
    for line in log.splitlines():
        if key and line.startswith(mark):
            try:
                found.append(json.loads(line[len(mark):]))
            except ValueError:
                continue
    return found


def without_verdicts(log: str, key: str) -> str:
    """The log as the buyer reads it: the launcher's verdicts and relayed reports taken out."""
    marks = (f"{VERDICT}{key} ", f"{REPORT}{key} ")
    return "".join(line for line in log.splitlines(keepends=True) if not line.startswith(marks))


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Replaces `path` at once: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    os.replace(tmp, path)
