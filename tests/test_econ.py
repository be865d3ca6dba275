"""The incentive simulation (bench/econ) on a short run: cheating earns less than honest work,
fraud loses money, and the real oracle pays out exactly the emission every epoch; the
challenge's figures are those bench/results measured, and assumed only where it has none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.econ.measured import load_throughputs
from bench.econ.network import MISDECLARED, MISDECLARED_SUBTLE
from bench.econ.simulate import MODELS, Params, Run, simulate, summarize
from compute.reference import reference_gflops
from oracle.config import load_config

UTILIZATION = 0.6


@pytest.fixture(scope="module")
def short_run() -> tuple[Params, Run]:
    params = Params(epochs=40, providers=60, utilization=UTILIZATION)
    return params, simulate(params, seed=7, config=load_config())


def test_every_cheating_strategy_returns_less_on_stake_than_honest_work(short_run) -> None:
    params, run = short_run
    returns = {name: s["return_pct"]["mean"] for name, s in summarize([run], params)["strategies"].items()}
    for cheat in ("lazy", "misdeclaring", "fraudulent", "misdeclaring (fp32-alike)"):
        assert returns[cheat] < returns["honest"], returns


def test_a_misdeclared_gpu_of_every_kind_loses_money() -> None:
    """Every (real, declared) pair, those that look alike in fp32 included (an RTX 4090 as an
    H100, a V100 or an A10 as an A100): the tensor-core challenge catches them and the
    misrepresentation slashes take more than they earn."""
    params = Params(epochs=40, providers=120, utilization=UTILIZATION)
    summary = summarize([simulate(params, seed=3, config=load_config())], params)
    pairs = summary["misdeclared_pairs"]
    assert set(pairs) == {f"{r} as {d}" for r, d in MISDECLARED + MISDECLARED_SUBTLE}, pairs
    assert all(p["max"] < 0 for p in pairs.values()), pairs
    assert summary["goals"]["misdeclaring (fp32-alike) < 0"] and summary["goals"]["misdeclaring < 0"]


def test_fraud_loses_money_and_is_tombstoned(short_run) -> None:
    params, run = short_run
    fraud = summarize([run], params)["strategies"]["fraudulent"]
    assert fraud["return_pct"]["mean"] < 0
    assert fraud["slashed"] > 0 and fraud["tombstoned"] > 0


def test_each_epoch_pays_out_exactly_the_configured_emission(short_run) -> None:
    _, run = short_run
    emission = load_config().emission.emission_wei(UTILIZATION)
    assert run.emissions == [emission] * 40
    assert run.reward_sums == run.emissions


def _results(tmp_path: Path, gpu_tflops: dict[str, float] | None, bf16_s: tuple[float, ...] = ()) -> Path:
    """A bench/results of the CPU challenge's two runs and, with `gpu_tflops`, an H100's median
    TFLOPS at the production shape, and in bf16 the seconds of each run when given."""
    (tmp_path / "challenge.json").write_text(json.dumps({
        "workload": {"size": 1024, "rounds": 32, "gflop": 68.72},
        "node": {"device_name": "AMD EPYC"},
        "provider": {"round_trip_all": [1.0, 2.0]},
    }))
    each_run = {"rounds_all": [s - 0.001 for s in bf16_s], "commit_all": [0.001] * len(bf16_s)}
    gpu = {"ran": False, "reason": "no CUDA device"} if gpu_tflops is None else {
        "ran": True, "model": "H100", "gpu": {"name": "NVIDIA H100 80GB HBM3"}, "runs": 3,
        "shapes": [{"precision": p, "size": 2048, "rounds": 32, "stride": 1, "node_tflops": t}
                   | (each_run if p == "bf16" else {}) for p, t in gpu_tflops.items()]
        + [{"precision": "fp32", "size": 8192, "rounds": 16, "stride": 1, "node_tflops": 60.0}],
    }
    (tmp_path / "gpu.json").write_text(json.dumps(gpu))
    return tmp_path


def test_the_challenge_figures_are_measured_where_bench_results_hold_them_and_assumed_elsewhere(
    tmp_path: Path,
) -> None:
    gflop = 2 * 2048**3 * 32 / 1e9
    runs_s = (gflop / 98_940, gflop / 49_470)  # bf16: 0.2 and 0.1 of the H100's reference
    results = _results(tmp_path, {"fp32": 10.05, "bf16": 80.0}, runs_s)
    found = load_throughputs(["cpu", "H100", "A100"], results)
    cpu = found.of("cpu", "fp32")
    assert cpu.measured and cpu.runs == (68.72, 34.36) and cpu.reference_gflops == reference_gflops("cpu")
    h100 = found.of("H100", "fp32"), found.of("H100", "bf16")
    assert all(t.measured for t in h100)  # at the production shape only (the first), not 8192 × 16
    assert len(h100[0].runs) == 1 and len(h100[1].runs) == 2  # each run's figure, where the file has them
    assert [round(t.gflops / t.reference_gflops, 2) for t in h100] == [0.3, 0.15]
    a100 = found.of("A100", "bf16")
    assert not a100.measured and a100.gflops == a100.reference_gflops and a100.source.startswith("assumed")
    assert found.files == {"challenge.json": "the CPU in fp32, 2 runs",
                           "gpu.json": "H100 in fp32, bf16; every other GPU is assumed"}

    nothing = load_throughputs(["cpu", "H100"], tmp_path / "missing")
    assert not any(t.measured for t in nothing.table.values())
    assert nothing.files["gpu.json"].startswith("measured nothing")


def test_an_honest_gpu_measured_under_half_its_reference_is_slashed_as_misdeclared(tmp_path: Path) -> None:
    """The simulation judges what was measured, not the reference: were an H100 to measure 0.3
    of its reference (bench/gpu.py on a real one), an honest provider on it would lose money."""
    params = Params(epochs=30, providers=80, utilization=UTILIZATION)
    slow = load_throughputs(MODELS, _results(tmp_path, {"fp32": 10.05, "bf16": 148.4}))
    by_hardware = summarize([simulate(params, seed=5, config=load_config(), throughput=slow)], params)[
        "honest_by_hardware"]
    assert by_hardware["H100"]["measured"] and by_hardware["H100"]["mean"] < 0, by_hardware
    assert by_hardware["cpu"]["measured"] and by_hardware["cpu"]["mean"] > 0, by_hardware
    assert not by_hardware["A100"]["measured"] and by_hardware["A100"]["mean"] > 0, by_hardware


def test_a_gpus_run_counts_in_each_precision_at_that_precisions_own_production_shape() -> None:
    """The H200's recorded run (bench/results/gpu.json) was challenged at 8192 × 62 in fp32 and
    8192 × 928 in bf16: both are its production shapes, and both are taken as measured."""
    from bench.econ.measured import RESULTS

    run = json.loads((RESULTS / "gpu.json").read_text())
    found = load_throughputs(["H200"], RESULTS)
    for precision in ("fp32", "bf16"):
        production = next(s for s in run["shapes"] if s["precision"] == precision)
        throughput = found.of("H200", precision)
        assert throughput.measured and f"× {production['rounds']} on NVIDIA H200" in throughput.source
        assert throughput.gflops == pytest.approx(production["node_tflops"] * 1000, rel=0.05)
