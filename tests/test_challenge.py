"""The benchmark challenge's definition and verdict (compute/challenge.py): what a challenge
may be, and how the throughput the oracle timed is judged against the declared model's
reference. Its proof is tests/test_proof.py; a site serving it, tests/test_site.py; hostile
answers through the oracle's collector, tests/test_hostile_challenge.py."""

from __future__ import annotations

import pytest

from compute.challenge import MAX_SIZE, MISDECLARED_RATIO, Challenge, judge
from compute.errors import ComputeError
from compute.reference import CPU_REFERENCE_GFLOPS, reference_gflops


def test_challenges_too_large_for_exact_float32_sums_or_malformed_are_refused() -> None:
    assert Challenge(seed=1, size=MAX_SIZE).size == MAX_SIZE
    for bad, says in (({"size": MAX_SIZE + 1}, "exact sums"), ({"size": 0}, "exact sums"),
                      ({"rounds": 0}, "rounds must be at least 1"), ({"rounds": 8, "stride": 3}, "must divide"),
                      ({"stride": 0}, "must divide"), ({"seed": -1}, "seed must be in"),
                      ({"seed": 1 << 64}, "seed must be in")):
        with pytest.raises(ComputeError, match=says):
            Challenge(**({"seed": 1} | bad))
    assert Challenge(seed=1, rounds=8, stride=4).checkpoints == 2
    assert Challenge(seed=1, size=64, rounds=3).flops == 2 * 64**3 * 3
    assert Challenge(seed=9, size=64, rounds=4, stride=2).params() == {"size": 64, "rounds": 4, "stride": 2}


def test_the_oracles_timing_is_judged_against_the_declared_model() -> None:
    challenge = Challenge(seed=1, size=1024, rounds=8)
    honest = judge(challenge, seconds=challenge.flops / 100e9, declared_model="cpu")  # 100 GFLOPS on a CPU
    assert honest.measured_gflops == pytest.approx(100.0)
    assert honest.reference_gflops == CPU_REFERENCE_GFLOPS and not honest.misdeclared
    assert honest.reason.startswith("ok: 100.0 GFLOPS")
    claimed = judge(challenge, seconds=challenge.flops / 100e9, declared_model="NVIDIA H100 80GB HBM3")
    assert claimed.reference_gflops == reference_gflops("H100")
    assert claimed.ratio < MISDECLARED_RATIO and claimed.misdeclared and "misdeclared" in claimed.reason
    assert judge(challenge, seconds=0.0, declared_model="cpu").measured_gflops == 0.0


def test_an_unknown_declared_model_is_refused() -> None:
    with pytest.raises(ComputeError, match="no reference throughput for GPU model 'Voodoo 3'"):
        judge(Challenge(seed=1), seconds=1.0, declared_model="Voodoo 3")
