"""The CPU reference is measured, not assumed (compute/reference.py, oracle/cpu_reference.py):
`make cpu-reference` times the challenge on one core of the oracle's machine and writes the
figure; the reference is that figure × CPU_MARGIN; without it the oracle does not start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compute.challenge import Challenge, judge
from compute.reference import (
    CPU_MARGIN,
    CPU_MEASUREMENT,
    CpuReferenceMissing,
    cpu_reference_gflops,
    read_cpu_measurement,
    reference_gflops,
)
from oracle.cpu_reference import measure, write
from tests.conftest import one_line_error

pytestmark = pytest.mark.light


def test_the_measurement_is_written_whole_and_the_reference_is_it_times_the_margin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured = measure(size=256, rounds=2, runs=3)
    assert len(measured.runs) == 3 and all(g > 0 for g in measured.runs)
    assert measured.gflops == sorted(measured.runs)[1] and measured.cpu
    path = tmp_path / "build" / "cpu-reference.json"
    write(measured, path)
    assert json.loads(path.read_text())["gflops"] == measured.gflops
    assert [p.name for p in path.parent.iterdir()] == ["cpu-reference.json"]  # no partial file left behind
    assert read_cpu_measurement(path) == measured.gflops

    monkeypatch.setattr("compute.reference.CPU_MEASUREMENT", path)
    assert cpu_reference_gflops() == reference_gflops("cpu") == measured.gflops * CPU_MARGIN
    challenge = Challenge(seed=1, size=256, rounds=2)
    verdict = judge(challenge, seconds=challenge.flops / (measured.gflops * 1e9), declared_model="cpu")
    assert verdict.ratio == pytest.approx(1 / CPU_MARGIN)  # a core like the oracle's: 2× the reference


def test_this_checkout_holds_a_positive_measurement_once_make_has_run() -> None:
    assert read_cpu_measurement(CPU_MEASUREMENT) > 0
    assert reference_gflops("cpu") == read_cpu_measurement(CPU_MEASUREMENT) * CPU_MARGIN


@pytest.mark.parametrize("content, says", [
    (None, "has not been measured on this machine"),
    ("{not json", "cannot be read"),
    ('{"gflops": 0}', "holds no positive GFLOPS figure"),
    ('{"gflops": "fast"}', "holds no positive GFLOPS figure"),
    ("[1, 2]", "holds no positive GFLOPS figure"),
])
def test_a_missing_or_unusable_measurement_names_the_make_target_instead_of_a_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None, says: str
) -> None:
    path = tmp_path / "cpu-reference.json"
    if content is not None:
        path.write_text(content)
    monkeypatch.setattr("compute.reference.CPU_MEASUREMENT", path)
    for ask in (lambda: reference_gflops("cpu"), lambda: judge(Challenge(seed=1), 1.0, "cpu")):
        with pytest.raises(CpuReferenceMissing, match=says) as refused:
            ask()
        assert "run `make cpu-reference` (a few seconds on one core), which writes" in str(refused.value)
    assert reference_gflops("H100") > 0  # a GPU's reference does not depend on it


def test_the_oracle_refuses_to_start_without_the_measurement(
    cli, swarm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("compute.reference.CPU_MEASUREMENT", tmp_path / "cpu-reference.json")
    refused = cli("oracle", "close", env={"SWARM_DB_URL": f"sqlite:///{tmp_path / 'ledger.db'}"})
    assert "The CPU reference has not been measured on this machine: run `make cpu-reference`" \
        in one_line_error(refused)
