"""The challenge as a proof the oracle checks without redoing it (compute/proof.py): an
honest node's checkpoints pass whatever the oracle samples; a node that skipped rounds or
rows, opened what it did not commit to, sent garbage or answered another challenge is
caught, and the chance that a node which skipped the work passes is the stated bound."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute.challenge import CUBES, Challenge, P
from compute.challenge_node import checkpoints_of
from compute.proof import (
    CELLS,
    SAMPLES,
    Opening,
    ProofError,
    Prover,
    check,
    leaf,
    merkle_path,
    merkle_root,
    merkle_verify,
    opening_as_json,
    opening_from_json,
    pass_probability,
    root_from_hex,
    sample,
)

SMALL = Challenge(seed=11, size=48, rounds=8)


def _exact(challenge: Challenge) -> list[np.ndarray]:
    """The checkpoints in exact integer arithmetic: X ← (X·B mod P)³ mod P."""
    b, x = challenge.b().astype(np.int64), challenge.first().astype(np.int64)
    out = []
    for r in range(1, challenge.rounds + 1):
        x = ((x @ b) % P) ** 3 % P
        if r % challenge.stride == 0:
            out.append(x.astype(np.uint8))
    return out


def _skipping(challenge: Challenge, skipped: set[int], share: float = 1.0, seed: int = 0) -> Prover:
    """A node that, in the checkpoints of `skipped` (1-based), computed only the first
    (1 − share) of the rows and made up the rest, and went on from what it committed as if
    it were right."""
    rng = np.random.default_rng(seed)
    b, x = challenge.b().astype(np.int64), challenge.first().astype(np.int64)
    out = []
    for k in range(1, challenge.checkpoints + 1):
        for _ in range(challenge.stride):
            x = CUBES[((x @ b) % P).astype(np.uint8)].astype(np.int64)
        computed = x.astype(np.uint8)
        if k in skipped:
            made_up = rng.integers(0, P, size=x.shape).astype(np.uint8)
            kept = round(challenge.size * (1 - share))
            computed = np.vstack([computed[:kept], made_up[kept:]])
        out.append(computed)
        x = computed.astype(np.int64)
    return Prover(challenge, out)


def _honest(challenge: Challenge) -> Prover:
    return Prover(challenge, checkpoints_of(challenge))


@pytest.mark.parametrize("stride", [1, 2, 4])
def test_the_nodes_checkpoints_are_exact_integer_arithmetic(stride: int) -> None:
    challenge = Challenge(seed=5, size=160, rounds=8, stride=stride)
    computed = checkpoints_of(challenge)
    assert len(computed) == challenge.checkpoints == 8 // stride
    for got, exact in zip(computed, _exact(challenge), strict=True):
        assert np.array_equal(got, exact)


def test_a_different_seed_gives_different_rounds() -> None:
    small = Challenge(seed=11, size=96, rounds=3)
    other = Challenge(seed=12, size=96, rounds=3)
    assert not np.array_equal(checkpoints_of(small)[-1], checkpoints_of(other)[-1])
    assert np.array_equal(checkpoints_of(small)[-1], checkpoints_of(small)[-1])


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**64 - 1), size=st.integers(1, 40), data=st.data())
def test_any_row_of_the_first_matrix_is_made_alone_as_in_the_whole(seed: int, size: int, data) -> None:
    """The verifier makes only the rows of X₀ it recomputes from; they are the node's rows."""
    challenge = Challenge(seed=seed, size=size, rounds=1)
    rows = np.array(sorted(data.draw(st.sets(st.integers(0, size - 1), min_size=1))))
    assert np.array_equal(challenge.first_rows(rows), challenge.first()[rows])
    assert challenge.b().max() < P and challenge.first().max() < P


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), size=st.integers(1, 40), rounds=st.integers(1, 12),
       stride=st.sampled_from([1, 2, 3]), data=st.data())
def test_an_honest_node_passes_whatever_cells_are_sampled(seed: int, size: int, rounds: int, stride: int,
                                                          data) -> None:
    challenge = Challenge(seed=seed, size=size, rounds=rounds * stride, stride=stride)
    prover = _honest(challenge)
    cells = sorted(data.draw(st.sets(st.tuples(st.integers(1, rounds), st.integers(0, size - 1)), min_size=1,
                                     max_size=12)))
    check(challenge, prover.root, cells, prover.open(cells))
    drawn = sample(challenge)
    check(challenge, prover.root, drawn, prover.open(drawn))


@pytest.mark.parametrize("skipped", [1, 2, 5, 8])
def test_a_skipped_checkpoint_is_caught_when_it_is_sampled(skipped: int) -> None:
    prover = _skipping(SMALL, {skipped})
    cells = [(skipped, i) for i in range(SMALL.size)]
    with pytest.raises(
        ProofError,
        match=f"of checkpoint {skipped} is not 1 round\\(s\\) of \\(X·B mod {P}\\)³ mod "
        f"{P} from the row before: the node did not compute it",
    ):
        check(SMALL, prover.root, cells, prover.open(cells))
    others = [(k, i) for k in range(1, SMALL.checkpoints + 1) if k != skipped for i in (0, 7, 47)]
    check(SMALL, prover.root, others, prover.open(others))  # the checkpoints it did compute pass


def test_with_a_stride_a_skipped_round_between_checkpoints_is_caught() -> None:
    """With stride 4 the node commits only to rounds 4 and 8; a node that skipped round 6 has
    a wrong round 8, and the oracle recomputes all four rounds from round 4's row."""
    challenge = Challenge(seed=3, size=32, rounds=8, stride=4)
    b, x = challenge.b().astype(np.int64), challenge.first().astype(np.int64)
    out = []
    for r in range(1, 9):
        if r != 6:
            x = CUBES[((x @ b) % P).astype(np.uint8)].astype(np.int64)
        if r % 4 == 0:
            out.append(x.astype(np.uint8))
    prover = Prover(challenge, out)
    check(challenge, prover.root, [(1, 3)], prover.open([(1, 3)]))
    with pytest.raises(ProofError, match="row 3 of checkpoint 2 is not 4 round"):
        check(challenge, prover.root, [(2, 3)], prover.open([(2, 3)]))


def test_an_opening_of_what_was_not_committed_is_caught() -> None:
    prover = _honest(SMALL)
    honest = prover.open([(3, 5)])[0]
    forged = bytes((b + 1) % P for b in honest.data)
    with pytest.raises(ProofError, match="row 5 of checkpoint 3 is not the one committed to"):
        check(SMALL, prover.root, [(3, 5)], [Opening(3, 5, honest.previous, honest.previous_path, forged,
                                                     honest.path)])
    with pytest.raises(ProofError, match="row 5 of checkpoint 2 is not the one committed to"):
        check(
            SMALL,
            prover.root,
            [(3, 5)],
            [Opening(3, 5, forged, honest.previous_path, honest.data, honest.path)],
        )
    with pytest.raises(ProofError, match="row 5 of checkpoint 3 is not the one committed to"):
        check(SMALL, prover.root, [(3, 5)], [Opening(3, 5, honest.previous, honest.previous_path, honest.data,
                                                     honest.previous_path)])  # another leaf's path
    with pytest.raises(ProofError, match="row 5 of checkpoint 3 came without the same row of checkpoint 2"):
        check(SMALL, prover.root, [(3, 5)], [Opening(3, 5, None, (), honest.data, honest.path)])
    other_row = prover.open([(3, 6)])[0]  # an honest opening of the row next door, passed off as row 5
    with pytest.raises(ProofError, match="row 5 of checkpoint 3 is not the one committed to"):
        check(SMALL, prover.root, [(3, 5)], [Opening(3, 5, other_row.previous, other_row.previous_path,
                                                     other_row.data, other_row.path)])


BAD_BYTES = {
    "too short": (b"\x00" * 10, "is not 48 bytes"),
    "a value of P": (bytes([P]) * 48, f"holds a value of {P} or more"),
    "garbage": (bytes(range(200, 248)), f"holds a value of {P} or more"),
}


@pytest.mark.parametrize("case", BAD_BYTES)
def test_garbage_bytes_fail_in_one_sentence(case: str) -> None:
    data, says = BAD_BYTES[case]
    prover = _honest(SMALL)
    honest = prover.open([(4, 0)])[0]
    with pytest.raises(ProofError, match=says):
        check(SMALL, prover.root, [(4, 0)], [Opening(4, 0, honest.previous, honest.previous_path, data,
                                                     honest.path)])


def test_an_answer_for_another_seed_or_other_cells_is_refused() -> None:
    other = _honest(Challenge(seed=SMALL.seed + 1, size=SMALL.size, rounds=SMALL.rounds))
    mine = _honest(SMALL)
    with pytest.raises(ProofError, match="not the one committed to"):
        check(SMALL, other.root, [(2, 1)], mine.open([(2, 1)]))
    with pytest.raises(ProofError, match="not the one committed to"):  # the leaves name the seed they answer
        check(SMALL, other.root, [(2, 1)], other.open([(2, 1)]))
    with pytest.raises(ProofError, match=r"opened cells \[\(2, 1\)\]…, not the 1 asked for"):
        check(SMALL, mine.root, [(5, 1)], mine.open([(2, 1)]))


def test_openings_and_roots_travel_as_json_and_garbage_is_refused() -> None:
    prover = _honest(SMALL)
    cells = [(1, 0), (5, 9)]
    sent = [opening_from_json(opening_as_json(o)) for o in prover.open(cells)]
    check(SMALL, root_from_hex(prover.root.hex()), cells, sent)
    for garbage in (None, 7, "x", {"checkpoint": 1}, {**opening_as_json(sent[0]), "data": "!!not base64"},
                    {**opening_as_json(sent[0]), "path": ["zz"]}):
        with pytest.raises(ProofError, match="is not an opening"):
            opening_from_json(garbage)
    for not_a_root in (None, "", "00" * 31, "zz" * 32, ["00"], prover.root.hex() + "00"):
        with pytest.raises(ProofError, match="is not a 32-byte Merkle root"):
            root_from_hex(not_a_root)


@settings(max_examples=40, deadline=None)
@given(count=st.integers(1, 40), data=st.data())
def test_every_leaf_verifies_under_its_root_and_no_other_does(count: int, data) -> None:
    leaves = [leaf(SMALL, 1, i, bytes([i % 256])) for i in range(count)]
    root = merkle_root(leaves)
    index = data.draw(st.integers(0, count - 1))
    path = merkle_path(leaves, index)
    assert merkle_verify(root, leaves[index], index, count, path)
    if count > 1:
        wrong = data.draw(st.integers(0, count - 1).filter(lambda i: i != index))
        assert not merkle_verify(root, leaves[wrong], index, count, path)
    assert not merkle_verify(root, leaves[index], count, count, path)  # past the last leaf
    assert not merkle_verify(root, leaves[index], index, count, [*path, b"\x00" * 32])  # a step too many


def test_the_oracle_samples_distinct_cells_within_the_challenge() -> None:
    for challenge in (SMALL, Challenge(seed=1, size=64, rounds=32), Challenge(seed=1, size=2, rounds=3)):
        for _ in range(30):
            cells = sample(challenge)
            assert len(cells) == len(set(cells))
            assert len({k for k, _ in cells}) == min(SAMPLES, challenge.checkpoints)
            assert len(cells) >= min(CELLS, challenge.checkpoints * challenge.size)
            assert all(1 <= k <= challenge.checkpoints and 0 <= i < challenge.size for k, i in cells)


def test_the_stated_bounds() -> None:
    for checkpoints in (8, 32):
        rows = -(-CELLS // min(SAMPLES, checkpoints))  # rows per sampled checkpoint
        assert pass_probability(checkpoints, SAMPLES, checkpoints, rows) < 2.0**-32  # skipped the work
        assert pass_probability(checkpoints, SAMPLES, 0, rows) == pytest.approx(1.0)
        bounds = [pass_probability(checkpoints, SAMPLES, s, rows) for s in range(checkpoints + 1)]
        assert all(later <= earlier for earlier, later in itertools.pairwise(bounds))
    # Half the rounds of 32 skipped: C(16,16)/C(32,16).
    assert pass_probability(32, SAMPLES, 16, 2) == pytest.approx(1 / 601080390)
    half_rows = pass_probability(32, SAMPLES, 32, 2, skipped_rows=0.5)
    assert half_rows == pytest.approx(0.5 ** CELLS)  # half of every round's rows: 2^-32


@pytest.mark.parametrize(("skipped", "share"), [({2, 4, 6, 8}, 1.0), (set(range(1, 9)), 0.125)])
def test_a_cheat_is_caught_as_often_as_the_bound_says(skipped: set[int], share: float) -> None:
    """Many challenges against a node that skipped half the rounds, or an eighth of every
    round's rows: the share that passes stays within the bound, with room for chance."""
    challenge = Challenge(seed=5, size=16, rounds=8)
    prover = _skipping(challenge, skipped, share)
    trials, passed = 400, 0
    for _ in range(trials):
        cells = sample(challenge)
        try:
            check(challenge, prover.root, cells, prover.open(cells))
            passed += 1
        except ProofError:
            pass
    rows = CELLS // challenge.checkpoints
    bound = pass_probability(challenge.checkpoints, SAMPLES, len(skipped), rows, skipped_rows=share,
                             size=challenge.size)
    assert bound < 0.05
    assert passed <= trials * bound + 12  # binomial(400, < 0.05): mean < 20, sd < 4.4
