"""The benchmark challenge on a real Ray cluster: a node that does the work verifies, a
tampered checksum or a node slower than its declared GPU is caught, and the checksum
depends on the seed alone — not on the node that computed it."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import replace

import numpy as np
import pytest

from compute.challenge import MAX_SIZE, P, Challenge, expected_checksum, run_challenge, run_on_provider, verify
from compute.errors import ComputeError, ProviderFault
from compute.placement import provider_nodes
from compute.reference import reference_gflops
from tests.ray_cluster import PROVIDER_A, PROVIDER_B, PROVIDER_C

TIMEOUT_S = 120  # other test sessions share this machine's two cores


@pytest.fixture(scope="module")
def challenge() -> Challenge:
    return Challenge(seed=secrets.randbits(63))


@pytest.fixture(scope="module")
def answer_of_b(ray_cluster, challenge):
    return run_on_provider(PROVIDER_B, challenge, TIMEOUT_S)


def test_a_correct_challenge_on_a_provider_verifies(challenge, answer_of_b) -> None:
    assert answer_of_b.node_id in {n["NodeID"] for n in provider_nodes(PROVIDER_B)}
    assert (answer_of_b.device, answer_of_b.gpus) == ("cpu", 0)
    verdict = verify(challenge, answer_of_b, declared_model="cpu")
    assert verdict.checksum_ok and not verdict.misdeclared and verdict.passed, verdict.reason
    assert verdict.measured_gflops == pytest.approx(challenge.flops / answer_of_b.seconds / 1e9)


def test_a_tampered_checksum_is_caught(challenge, answer_of_b) -> None:
    flipped = ("0" if answer_of_b.checksum[0] != "0" else "1") + answer_of_b.checksum[1:]
    verdict = verify(challenge, replace(answer_of_b, checksum=flipped), declared_model="cpu")
    assert not verdict.checksum_ok and not verdict.passed
    assert "checksum mismatch" in verdict.reason


def test_an_answer_to_another_seed_is_caught(challenge) -> None:
    other = run_challenge(Challenge(seed=challenge.seed + 1))
    assert not verify(challenge, other, declared_model="cpu").checksum_ok


def test_a_node_declaring_h100_but_measuring_cpu_throughput_is_misdeclared(challenge, answer_of_b) -> None:
    verdict = verify(challenge, answer_of_b, declared_model="NVIDIA H100 80GB HBM3")
    assert verdict.checksum_ok  # it did the work, on a CPU
    assert verdict.reference_gflops == reference_gflops("H100")
    assert verdict.ratio < 0.5 and verdict.misdeclared and not verdict.passed
    assert "misdeclared" in verdict.reason


def test_identical_seeds_give_identical_checksums_on_two_providers(ray_cluster, challenge, answer_of_b) -> None:
    answer_of_c = run_on_provider(PROVIDER_C, challenge, TIMEOUT_S)
    assert answer_of_c.node_id in {n["NodeID"] for n in provider_nodes(PROVIDER_C)}
    assert answer_of_c.checksum == answer_of_b.checksum == expected_checksum(challenge)


def test_a_different_seed_gives_a_different_checksum() -> None:
    small = Challenge(seed=11, size=96, rounds=3)
    assert run_challenge(small).checksum != run_challenge(replace(small, seed=12)).checksum
    assert run_challenge(small).checksum == run_challenge(small).checksum


def test_the_float32_rounds_equal_exact_integer_arithmetic() -> None:
    small = Challenge(seed=5, size=160, rounds=6)
    a, x = (m.astype(np.int64) for m in small.matrices())
    for _ in range(small.rounds):
        x = (a @ x) % P
        x = x**3 % P
    exact = hashlib.sha256(x.astype("<i4").tobytes()).hexdigest()
    assert run_challenge(small).checksum == exact


def test_challenges_too_large_for_exact_float32_sums_are_refused() -> None:
    assert Challenge(seed=1, size=MAX_SIZE).size == MAX_SIZE
    with pytest.raises(ComputeError, match="exact sums"):
        Challenge(seed=1, size=MAX_SIZE + 1)


def test_an_unknown_declared_model_is_refused(challenge, answer_of_b) -> None:
    with pytest.raises(ComputeError, match="no reference throughput for GPU model 'Voodoo 3'"):
        verify(challenge, answer_of_b, declared_model="Voodoo 3")


def test_a_provider_with_no_node_faults_at_the_timeout(ray_cluster) -> None:
    # How soon after the timeout it gives up is measured in bench/failfast.py.
    with pytest.raises(ProviderFault, match="did not answer the challenge within 2 s"):
        run_on_provider("0x000000000000000000000000000000000000dEaD", Challenge(seed=1, size=64, rounds=1), 2)


def test_provider_a_answers_on_one_of_its_two_nodes(ray_cluster) -> None:
    result = run_on_provider(PROVIDER_A, Challenge(seed=3, size=128, rounds=2), TIMEOUT_S)
    assert result.node_id in {n["NodeID"] for n in provider_nodes(PROVIDER_A)}
    assert result.checksum == expected_checksum(Challenge(seed=3, size=128, rounds=2))
