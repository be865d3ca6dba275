"""The benchmark challenge's definition and verdict (compute/challenge.py): what a challenge
may be, and how the throughput the oracle timed is judged against the declared model's
reference. Its proof is tests/test_proof.py; a site serving it, tests/test_site.py; hostile
answers through the oracle's collector, tests/test_hostile_challenge.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute.challenge import (
    MAX_CHECKPOINTS,
    MAX_SIZE,
    MISDECLARED_RATIO,
    VRAM_SHARE,
    Challenge,
    Declared,
    identity_problem,
    judge,
    timed_shape,
)
from compute.errors import ComputeError
from compute.reference import cpu_reference_gflops, normalize_model, precisions, reference_gflops


def test_challenges_too_large_for_exact_float32_sums_or_malformed_are_refused() -> None:
    assert Challenge(seed=1, size=MAX_SIZE).size == MAX_SIZE
    for bad, says in (
        ({"size": MAX_SIZE + 1}, "exact sums"),
        ({"size": 0}, "exact sums"),
        ({"rounds": 0}, "rounds must be at least 1"),
        ({"rounds": 8, "stride": 3}, "must divide"),
        ({"stride": 0}, "must divide"),
        ({"seed": -1}, "seed must be in"),
        ({"seed": 1 << 64}, "seed must be in"),
        ({"precision": "int8"}, "precision must be one of"),
    ):
        with pytest.raises(ComputeError, match=says):
            Challenge(**({"seed": 1} | bad))
    assert Challenge(seed=1, rounds=8, stride=4).checkpoints == 2
    assert Challenge(seed=1, size=64, rounds=3).flops == 2 * 64**3 * 3
    assert Challenge(seed=9, size=64, rounds=4, stride=2, precision="bf16").params() == {
        "size": 64, "rounds": 4, "stride": 2, "precision": "bf16"}


def test_the_oracles_timing_is_judged_against_the_declared_model() -> None:
    challenge = Challenge(seed=1, size=1024, rounds=8)
    honest = judge(challenge, seconds=challenge.flops / 100e9, declared_model="cpu")  # 100 GFLOPS on a CPU
    assert honest.measured_gflops == pytest.approx(100.0)
    assert honest.reference_gflops == cpu_reference_gflops() and not honest.misdeclared
    assert honest.reason.startswith("ok: 100.0 fp32 GFLOPS")
    claimed = judge(challenge, seconds=challenge.flops / 100e9, declared_model="NVIDIA H100 80GB HBM3")
    assert claimed.reference_gflops == reference_gflops("H100")
    assert claimed.ratio < MISDECLARED_RATIO and claimed.misdeclared and "misdeclared" in claimed.reason
    assert judge(challenge, seconds=0.0, declared_model="cpu").measured_gflops == 0.0


def test_an_unknown_declared_model_is_refused() -> None:
    with pytest.raises(ComputeError, match="no reference throughput for GPU model 'Voodoo 3'"):
        judge(Challenge(seed=1), seconds=1.0, declared_model="Voodoo 3")


def test_every_gpu_model_a_provider_may_declare_has_a_reference_in_both_its_precisions() -> None:
    """The models a provider may register (core.hardware) are those the oracle can judge."""
    from core.hardware import GPU_MODELS

    for model in GPU_MODELS:
        assert normalize_model(f"NVIDIA {model}") == model
        assert [reference_gflops(model, p) > 0 for p in precisions(model)] == [True, True], model


def test_a_gpu_is_judged_in_its_tensor_core_precision_too() -> None:
    """An RTX 4090 declared as an H100 passes fp32 (its fp32 peak is higher) and fails bf16."""
    assert precisions("NVIDIA H100 80GB HBM3") == ("fp32", "bf16") == precisions("NVIDIA H200")
    assert precisions("T4") == ("fp32", "fp16") and precisions("cpu") == ("fp32",)
    fp32, bf16 = (Challenge(seed=1, size=2048, rounds=32, precision=p) for p in ("fp32", "bf16"))
    rtx4090 = {"fp32": reference_gflops("RTX4090"), "bf16": reference_gflops("RTX4090", "bf16")}
    as_fp32 = judge(fp32, seconds=fp32.flops / rtx4090["fp32"] / 1e9, declared_model="H100")
    as_bf16 = judge(bf16, seconds=bf16.flops / rtx4090["bf16"] / 1e9, declared_model="H100")
    assert not as_fp32.misdeclared and as_fp32.ratio == pytest.approx(1.23, abs=0.01)
    assert as_bf16.misdeclared and as_bf16.ratio == pytest.approx(0.167, abs=0.001)
    assert "bf16 GFLOPS" in as_bf16.reason
    with pytest.raises(ComputeError, match="T4 has no bf16 reference; its precisions are fp32, fp16"):
        reference_gflops("T4", "bf16")


def test_a_measured_gpus_reference_is_what_its_recorded_run_measured_times_the_margin() -> None:
    """The H200's references come from bench/results/gpu.json (a run of `make bench-gpu` on an
    H200), not a datasheet: the table's figures are that run's node throughput at the oracle's
    shape, and every model without a run keeps half its datasheet peak."""
    import json
    from pathlib import Path

    from compute.reference import ACHIEVED_FRACTION, GPU_MARGIN, MEASURED_TFLOPS, PEAK_FP32_TFLOPS

    run = json.loads((Path(__file__).resolve().parents[1] / "bench" / "results" / "gpu.json").read_text())
    assert run["ran"] and normalize_model(run["gpu"]["name"]) == run["model"] == "H200"
    oracle_shapes: dict[str, dict[str, Any]] = {}
    for shape in run["shapes"]:  # the oracle's shape comes first in each precision
        oracle_shapes.setdefault(shape["precision"], shape)
    assert {p: s["node_tflops"] for p, s in oracle_shapes.items()} == MEASURED_TFLOPS["H200"]
    for precision in ("fp32", "bf16"):
        assert reference_gflops("NVIDIA H200", precision) == pytest.approx(
            oracle_shapes[precision]["node_tflops"] * 1000 * GPU_MARGIN)
    assert reference_gflops("H100") == PEAK_FP32_TFLOPS["H100"] * 1000 * ACHIEVED_FRACTION


H100 = Declared("H100", vram_gb=80, gpu_uuids=("GPU-1111",))
HONEST_READY: dict[str, Any] = {
    "device": "cuda",
    "identity": {"name": "NVIDIA H100 80GB HBM3", "memory_total_mb": 81559.0, "uuid": "GPU-1111"},
    "vram_touched_mb": 80e9 / (1 << 20) * VRAM_SHARE,
}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"device": "cpu"}, "without a GPU, where the spec declares H100"),
        ({"identity": None}, "gave NVML no identity"),
        (
            {"identity": {**HONEST_READY["identity"], "name": "NVIDIA GeForce RTX 4090"}},
            "NVML names the node's GPU 'NVIDIA GeForce RTX 4090', not the declared H100",
        ),
        (
            {"identity": {**HONEST_READY["identity"], "memory_total_mb": 24564.0}},
            "24,564 MiB, under the declared 80 GB",
        ),
        ({"vram_touched_mb": 0.0}, "allocated 0 MiB of the declared 80 GB"),
        ({"vram_touched_mb": float("nan")}, "allocated 0 MiB of the declared 80 GB"),  # JSON lets NaN through
        (
            {"identity": {**HONEST_READY["identity"], "memory_total_mb": float("inf")}},
            "0 MiB, under the declared 80 GB",
        ),
        (
            {"identity": {**HONEST_READY["identity"], "uuid": "GPU-2222"}},
            "'GPU-2222' is none of the GPUs its spec lists",
        ),
    ],
)
def test_a_gpu_that_is_not_the_declared_one_is_named(change: dict, says: str) -> None:
    assert identity_problem(H100, HONEST_READY) is None
    problem = identity_problem(H100, HONEST_READY | change)
    assert problem is not None and says in problem


@settings(max_examples=200, deadline=None)
@given(
    ready=st.dictionaries(
        st.sampled_from(["device", "identity", "vram_touched_mb", "x"]),
        st.recursive(
            st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.sampled_from(["name", "memory_total_mb", "uuid"]), inner, max_size=3)
            ),
            max_leaves=6,
        ),
    )
)
def test_any_answer_a_node_gives_of_itself_is_judged_never_crashes(ready: dict) -> None:
    problem = identity_problem(H100, ready)
    assert isinstance(problem, str)  # none of these is an honest H100
    assert identity_problem(Declared("cpu"), ready) is None  # a CPU declaration claims no GPU


@settings(max_examples=200, deadline=None)
@given(reference=st.floats(1.0, 5e6), size=st.integers(1, 16384), seconds=st.floats(1e-6, 60.0))
def test_a_gpus_challenge_takes_its_time_at_the_reference_in_at_most_32_checkpoints(
        reference: float, size: int, seconds: float) -> None:
    shape = timed_shape(reference, size, seconds)
    challenge = Challenge(seed=1, size=shape[0], rounds=shape[1], stride=shape[2])  # a valid one
    assert challenge.size == size and 1 <= challenge.checkpoints <= MAX_CHECKPOINTS
    at_reference = challenge.flops / (reference * 1e9)
    one_round = 2 * size**3 / (reference * 1e9)
    # At least the time asked for, and over it by less than a round per checkpoint rounded up.
    assert seconds * (1 - 1e-9) <= at_reference or challenge.rounds == 1
    assert at_reference <= seconds + challenge.stride * one_round * (1 + 1e-9)


def test_an_h100s_challenge_is_two_seconds_of_its_reference_not_a_millisecond() -> None:
    """The CPU's 2048 × 32 would take an H100 about a millisecond in bf16 at its (projected)
    reference: the oracle gives a GPU a challenge as long as its clock needs."""
    assert Challenge(seed=1, size=2048, rounds=32).flops / (reference_gflops("H100", "bf16") * 1e9) < 0.002
    for precision in ("fp32", "bf16"):
        size, rounds, stride = timed_shape(reference_gflops("H100", precision), 8192, 2.0)
        seconds = Challenge(seed=1, size=size, rounds=rounds, stride=stride).flops / (
            reference_gflops("H100", precision) * 1e9)
        assert size == 8192 and 2.0 <= seconds < 2.2 and rounds // stride <= MAX_CHECKPOINTS
