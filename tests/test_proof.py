"""The challenge as a proof the oracle checks without redoing it (compute/proof.py): an
honest node's rounds pass whatever the oracle samples; a node that skipped a round, opened
what it did not commit to, or answered another challenge is caught, and the chance that a
node which skipped the work passes is the stated bound."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute.challenge import CUBES, P, Challenge
from compute.proof import (
    SAMPLES, VECTORS, Opening, ProofError, Prover, check, leaf, merkle_path, merkle_root, merkle_verify,
    pass_probability, products, sample_rounds,
)

SMALL = Challenge(seed=11, size=48, rounds=8)


def _honest(challenge: Challenge) -> Prover:
    return Prover(challenge)


def _skipping(challenge: Challenge, skipped: set[int], seed: int = 0) -> Prover:
    """A node that committed made-up products for the rounds in `skipped` (1-based) instead of
    multiplying, and went on from them as if they were right."""
    rng = np.random.default_rng(seed)
    a, x = (m.astype(np.int64) for m in challenge.matrices())
    rounds = []
    for r in range(1, challenge.rounds + 1):
        y = rng.integers(0, P, size=x.shape) if r in skipped else (a @ x) % P
        rounds.append(y.astype(np.uint8))
        x = CUBES[y.astype(np.uint8)].astype(np.int64)
    return Prover(challenge, rounds)


def test_the_rounds_are_the_challenges_own() -> None:
    """products() is the chain compute.challenge runs: Y_r = A·X mod P, X ← Y³ mod P."""
    a, x = (m.astype(np.int64) for m in SMALL.matrices())
    for y in products(SMALL):
        expected = (a @ x) % P
        assert np.array_equal(y, expected)
        x = (expected ** 3) % P


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), size=st.integers(1, 40), rounds=st.integers(1, 12),
       data=st.data())
def test_an_honest_node_passes_whatever_rounds_are_sampled(seed: int, size: int, rounds: int, data) -> None:
    challenge = Challenge(seed=seed, size=size, rounds=rounds)
    prover = _honest(challenge)
    requested = sorted(data.draw(st.sets(st.integers(1, rounds), min_size=1, max_size=rounds)))
    check(challenge, prover.root, requested, prover.open(requested))


@pytest.mark.parametrize("skipped_round", [1, 2, 5, 8])
def test_a_skipped_round_is_caught_when_it_is_sampled(skipped_round: int) -> None:
    prover = _skipping(SMALL, {skipped_round})
    with pytest.raises(ProofError, match=f"round {skipped_round}'s product is not A·X mod {P}"):
        check(SMALL, prover.root, [skipped_round], prover.open([skipped_round]), columns_seed=1)
    others = [r for r in range(1, SMALL.rounds + 1) if r not in (skipped_round, skipped_round + 1)]
    check(SMALL, prover.root, others, prover.open(others), columns_seed=1)  # the rounds it did compute pass


def test_an_opening_of_what_was_not_committed_is_caught() -> None:
    prover = _honest(SMALL)
    honest = prover.open([3])[0]
    computed = _honest(SMALL).rounds[2]
    forged = bytes((b + 1) % P for b in computed)
    with pytest.raises(ProofError, match="round 3's product is not the one committed to"):
        check(SMALL, prover.root, [3], [Opening(3, honest.previous, honest.previous_path, forged, honest.path)])
    with pytest.raises(ProofError, match="round 2's product is not the one committed to"):
        check(SMALL, prover.root, [3], [Opening(3, forged, honest.previous_path, honest.product, honest.path)])
    with pytest.raises(ProofError, match="round 3's product is not the one committed to"):
        check(SMALL, prover.root, [3], [Opening(3, honest.previous, honest.previous_path, honest.product,
                                                honest.previous_path)])  # another leaf's path


BAD_BYTES = {
    "too short": (b"\x00" * 10, "is not 48×48 bytes"),
    "a value of P": (bytes([P]) * 48 * 48, f"holds a value of {P} or more"),
    "garbage": (bytes(range(256)) * 9, f"holds a value of {P} or more"),
}


@pytest.mark.parametrize("case", BAD_BYTES)
def test_garbage_bytes_fail_in_one_sentence(case: str) -> None:
    data, says = BAD_BYTES[case]
    prover = _honest(SMALL)
    honest = prover.open([4])[0]
    with pytest.raises(ProofError, match=says):
        check(SMALL, prover.root, [4], [Opening(4, honest.previous, honest.previous_path, data, honest.path)])


def test_an_answer_for_another_seed_or_other_rounds_is_refused() -> None:
    other = _honest(Challenge(seed=SMALL.seed + 1, size=SMALL.size, rounds=SMALL.rounds))
    with pytest.raises(ProofError, match="not the one committed to"):
        check(SMALL, other.root, [2], _honest(SMALL).open([2]))
    with pytest.raises(ProofError, match="not the one committed to"):  # the leaves name the seed they answer
        check(SMALL, other.root, [2], other.open([2]))
    prover = _honest(SMALL)
    with pytest.raises(ProofError, match=r"opened rounds \[2\], not the \[5\] asked for"):
        check(SMALL, prover.root, [5], prover.open([2]))


@settings(max_examples=40, deadline=None)
@given(count=st.integers(1, 40), data=st.data())
def test_every_leaf_verifies_under_its_root_and_no_other_does(count: int, data) -> None:
    leaves = [leaf(SMALL, i, bytes([i % 256])) for i in range(1, count + 1)]
    root = merkle_root(leaves)
    index = data.draw(st.integers(0, count - 1))
    path = merkle_path(leaves, index)
    assert merkle_verify(root, leaves[index], index, count, path)
    wrong = data.draw(st.integers(0, count - 1).filter(lambda i: leaves[i] != leaves[index]) if count > 1
                      else st.just(None))
    if wrong is not None:
        assert not merkle_verify(root, leaves[wrong], index, count, path)
        assert not merkle_verify(root, leaves[index], wrong, count, path) or merkle_path(leaves, wrong) == path
    assert not merkle_verify(root, leaves[index], count, count, path)  # past the last leaf
    assert not merkle_verify(root, leaves[index], index, count, [*path, b"\x00" * 32])  # a step too many


def test_the_oracle_samples_distinct_rounds_within_the_challenge() -> None:
    for _ in range(50):
        rounds = sample_rounds(SMALL)
        assert len(rounds) == len(set(rounds)) == min(SAMPLES, SMALL.rounds)
        assert all(1 <= r <= SMALL.rounds for r in rounds)


def test_a_node_that_skipped_the_work_passes_with_probability_under_2_to_the_minus_32() -> None:
    for rounds in (8, 32):
        assert pass_probability(rounds, SAMPLES, skipped=rounds) == float(P) ** (-VECTORS * SAMPLES) < 2.0**-32
        assert pass_probability(rounds, SAMPLES, skipped=0) == pytest.approx(1.0)
        bounds = [pass_probability(rounds, SAMPLES, skipped=s) for s in range(rounds + 1)]
        assert all(later <= earlier for earlier, later in itertools.pairwise(bounds))
    assert pass_probability(32, SAMPLES, skipped=16) < 1 / 16  # half the work skipped


def test_a_node_that_skipped_half_the_rounds_is_caught_as_often_as_the_bound_says() -> None:
    """Many challenges, each a node computing only the odd rounds: the share that passes stays
    within the bound (1/70 for 4 of 8 rounds sampled), with room for chance."""
    challenge = Challenge(seed=5, size=16, rounds=8)
    prover = _skipping(challenge, {2, 4, 6, 8})
    trials, passed = 400, 0
    for _ in range(trials):
        requested = sample_rounds(challenge)
        try:
            check(challenge, prover.root, requested, prover.open(requested))
            passed += 1
        except ProofError:
            pass
    bound = pass_probability(challenge.rounds, SAMPLES, skipped=4)
    assert bound < 0.02
    assert passed <= trials * bound + 12  # binomial(400, 1/70): mean 5.7, sd 2.4
