"""The challenge as a proof the oracle checks without redoing it (compute/proof.py): an
honest node's rounds pass whatever the oracle samples; a node that skipped rounds or rows,
opened what it did not commit to, sent garbage or answered another challenge is caught, and
the chance that a node which skipped the work passes is the stated bound."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute.challenge import CUBES, P, Challenge
from compute.proof import (
    ROWS, SAMPLES, Opening, ProofError, Prover, check, leaf, merkle_path, merkle_root, merkle_verify,
    pass_probability, rounds_of, sample_rounds,
)

SMALL = Challenge(seed=11, size=48, rounds=8)


def _skipping(challenge: Challenge, skipped: set[int], share: float = 1.0, seed: int = 0) -> Prover:
    """A node that, in the rounds of `skipped` (1-based), computed only the first (1 − share) of
    the rows and made up the rest, and went on from what it committed as if it were right."""
    rng = np.random.default_rng(seed)
    a, x = (m.astype(np.int64) for m in challenge.matrices())
    rounds = []
    for r in range(1, challenge.rounds + 1):
        computed = CUBES[((a @ x) % P).astype(np.uint8)]
        if r in skipped:
            made_up = rng.integers(0, P, size=x.shape).astype(np.uint8)
            kept = int(round(challenge.size * (1 - share)))
            computed = np.vstack([computed[:kept], made_up[kept:]])
        rounds.append(computed)
        x = computed.astype(np.int64)
    return Prover(challenge, rounds)


def test_the_rounds_are_the_challenges_own() -> None:
    """rounds_of() is the chain compute.challenge runs: X ← (A·X mod P)³ mod P."""
    a, x = (m.astype(np.int64) for m in SMALL.matrices())
    for computed in rounds_of(SMALL):
        x = ((a @ x) % P) ** 3 % P
        assert np.array_equal(computed, x)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), size=st.integers(1, 40), data=st.data())
def test_any_row_of_a_and_the_first_matrix_are_made_alone_as_in_the_whole(seed: int, size: int, data) -> None:
    """The verifier makes only the rows of A it recomputes; they are the node's rows."""
    challenge = Challenge(seed=seed, size=size, rounds=1)
    a, x0 = challenge.matrices()
    rows = np.array(sorted(data.draw(st.sets(st.integers(0, size - 1), min_size=1))))
    assert np.array_equal(challenge.rows_of_a(rows), a[rows])
    assert np.array_equal(challenge.first(), x0)
    assert a.max() < P and x0.max() < P


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), size=st.integers(1, 40), rounds=st.integers(1, 12), data=st.data())
def test_an_honest_node_passes_whatever_rounds_and_rows_are_sampled(seed: int, size: int, rounds: int,
                                                                    data) -> None:
    challenge = Challenge(seed=seed, size=size, rounds=rounds)
    prover = Prover(challenge)
    requested = sorted(data.draw(st.sets(st.integers(1, rounds), min_size=1, max_size=rounds)))
    check(challenge, prover.root, requested, prover.open(requested), rows_seed=data.draw(st.integers(0, 2**32)))


@pytest.mark.parametrize("skipped_round", [1, 2, 5, 8])
def test_a_skipped_round_is_caught_when_it_is_sampled(skipped_round: int) -> None:
    prover = _skipping(SMALL, {skipped_round})
    with pytest.raises(ProofError, match=f"round {skipped_round}'s matrix is not \\(A·X mod {P}\\)³ mod {P} of the "
                                         "round before: the node did not compute it"):
        check(SMALL, prover.root, [skipped_round], prover.open([skipped_round]))
    others = [r for r in range(1, SMALL.rounds + 1) if r != skipped_round]
    check(SMALL, prover.root, others, prover.open(others))  # the rounds it did compute pass


def test_an_opening_of_what_was_not_committed_is_caught() -> None:
    prover = Prover(SMALL)
    honest = prover.open([3])[0]
    forged = bytes((b + 1) % P for b in honest.matrix)
    with pytest.raises(ProofError, match="round 3's matrix is not the one committed to"):
        check(SMALL, prover.root, [3], [Opening(3, honest.previous, honest.previous_path, forged, honest.path)])
    with pytest.raises(ProofError, match="round 2's matrix is not the one committed to"):
        check(SMALL, prover.root, [3], [Opening(3, forged, honest.previous_path, honest.matrix, honest.path)])
    with pytest.raises(ProofError, match="round 3's matrix is not the one committed to"):
        check(SMALL, prover.root, [3], [Opening(3, honest.previous, honest.previous_path, honest.matrix,
                                                honest.previous_path)])  # another leaf's path
    with pytest.raises(ProofError, match="round 3 came without round 2's matrix"):
        check(SMALL, prover.root, [3], [Opening(3, None, (), honest.matrix, honest.path)])


BAD_BYTES = {
    "too short": (b"\x00" * 10, "is not 48×48 bytes"),
    "a value of P": (bytes([P]) * 48 * 48, f"holds a value of {P} or more"),
    "garbage": (bytes(range(256)) * 9, f"holds a value of {P} or more"),
}


@pytest.mark.parametrize("case", BAD_BYTES)
def test_garbage_bytes_fail_in_one_sentence(case: str) -> None:
    data, says = BAD_BYTES[case]
    prover = Prover(SMALL)
    honest = prover.open([4])[0]
    with pytest.raises(ProofError, match=says):
        check(SMALL, prover.root, [4], [Opening(4, honest.previous, honest.previous_path, data, honest.path)])


def test_an_answer_for_another_seed_or_other_rounds_is_refused() -> None:
    other = Prover(Challenge(seed=SMALL.seed + 1, size=SMALL.size, rounds=SMALL.rounds))
    with pytest.raises(ProofError, match="not the one committed to"):
        check(SMALL, other.root, [2], Prover(SMALL).open([2]))
    with pytest.raises(ProofError, match="not the one committed to"):  # the leaves name the seed they answer
        check(SMALL, other.root, [2], other.open([2]))
    prover = Prover(SMALL)
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
    if count > 1:
        wrong = data.draw(st.integers(0, count - 1).filter(lambda i: i != index))
        assert not merkle_verify(root, leaves[wrong], index, count, path)
    assert not merkle_verify(root, leaves[index], count, count, path)  # past the last leaf
    assert not merkle_verify(root, leaves[index], index, count, [*path, b"\x00" * 32])  # a step too many


def test_the_oracle_samples_distinct_rounds_within_the_challenge() -> None:
    for _ in range(50):
        rounds = sample_rounds(SMALL)
        assert len(rounds) == len(set(rounds)) == min(SAMPLES, SMALL.rounds)
        assert all(1 <= r <= SMALL.rounds for r in rounds)


def test_the_stated_bounds() -> None:
    for rounds in (8, 32):
        assert pass_probability(rounds, SAMPLES, skipped=rounds) < 2.0**-32  # skipped the work
        assert pass_probability(rounds, SAMPLES, skipped=0) == pytest.approx(1.0)
        bounds = [pass_probability(rounds, SAMPLES, skipped=s) for s in range(rounds + 1)]
        assert all(later <= earlier for earlier, later in itertools.pairwise(bounds))
    assert pass_probability(32, SAMPLES, skipped=16) == pytest.approx(1820 / 35960)  # half the rounds: C(16,4)/C(32,4)
    half_rows = pass_probability(32, SAMPLES, skipped=32, skipped_rows=0.5)
    assert half_rows == pytest.approx(0.5 ** (ROWS * SAMPLES))  # half of every round's rows: 2^-32


@pytest.mark.parametrize(("skipped", "share"), [({2, 4, 6, 8}, 1.0), (set(range(1, 9)), 0.25)])
def test_a_cheat_is_caught_as_often_as_the_bound_says(skipped: set[int], share: float) -> None:
    """Many challenges against a node that skipped half the rounds, or a quarter of every
    round's rows: the share that passes stays within the bound, with room for chance."""
    challenge = Challenge(seed=5, size=16, rounds=8)
    prover = _skipping(challenge, skipped, share)
    trials, passed = 400, 0
    for _ in range(trials):
        requested = sample_rounds(challenge)
        try:
            check(challenge, prover.root, requested, prover.open(requested))
            passed += 1
        except ProofError:
            pass
    bound = pass_probability(challenge.rounds, SAMPLES, len(skipped), skipped_rows=share, size=challenge.size)
    assert bound < 0.02
    assert passed <= trials * bound + 12  # binomial(400, ≤ 1/70): mean ≤ 5.7, sd ≤ 2.4
