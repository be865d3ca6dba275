"""The slashing matrix: each row's trigger and consequences, the severest row winning, and
correlated failures costing more."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.reports import Slash, reason_bytes
from oracle.scoring import measure, score_epoch
from oracle.slashing import MATRIX_ROWS, ROWS, SlashDecision, slashing_matrix
from tests.test_scoring import CONFIG, H100, epoch, tuned

HOUR = 3600


def _only(inputs, config=CONFIG, devnet: bool = False) -> SlashDecision:
    decisions = slashing_matrix(inputs, measure(inputs, config), config, devnet=devnet)
    assert len(decisions) == 1, decisions
    return decisions[0]


def _healthy(n: int = 20, **differences):
    """`n` providers, the first one with `differences` (lists of one), the rest healthy."""
    def column(value, default):
        return [value[0]] + [default] * (n - 1)
    defaults = {"uptime": 1.0, "measured": H100, "challenge_ok": True, "abandoned": 0, "mismatch": False,
                "canary": False, "jailed": False}
    return epoch(n, **{k: column(v, defaults[k]) for k, v in differences.items()})


@pytest.mark.parametrize(
    ("differences", "row", "bps", "jail_s", "tombstone", "reason"),
    [
        ({"uptime": [0.3]}, "downtime", 10, 1 * HOUR, False, "downtime"),
        ({"abandoned": [1]}, "abandonment", 50, 2 * HOUR, False, "job abandonment"),
        ({"abandoned": [3]}, "abandonment", 150, 2 * HOUR, False, "job abandonment"),
        ({"abandoned": [40]}, "abandonment", 500, 2 * HOUR, False, "job abandonment"),
        ({"measured": [H100 * 0.3]}, "misrepresentation", 500, 24 * HOUR, False,
         "hardware misrepresentation"),
        ({"challenge_ok": [False]}, "fraud", 5000, 0, True, "fraud: challenge proof refuted"),
        ({"mismatch": [True]}, "fraud", 5000, 0, True, "fraud: replication mismatch"),
        ({"canary": [True]}, "fraud", 5000, 0, True, "fraud: serving canary mismatch"),
    ],
    ids=["downtime", "abandonment-one-job", "abandonment-per-job", "abandonment-capped", "misrepresentation",
         "fraud-checksum", "fraud-replication", "fraud-canary"],
)
def test_each_row_triggers_with_its_slash_jail_and_tombstone(
    differences, row, bps, jail_s, tombstone, reason
) -> None:
    d = _only(_healthy(**differences))
    assert (d.provider_index, d.row, d.bps, d.jail_seconds, d.tombstone) == (0, row, bps, jail_s, tombstone)
    assert d.reason == reason
    assert d.detail.endswith(".") and f"slashed {bps} bps" in d.detail


def test_a_healthy_epoch_slashes_nobody() -> None:
    inputs = _healthy(uptime=[0.5], measured=[H100 * 0.5])  # at the thresholds, not under them
    assert slashing_matrix(inputs, measure(inputs, CONFIG), CONFIG) == []


def test_the_details_carry_the_numbers() -> None:
    assert _only(_healthy(uptime=[0.3])).detail.startswith(
        "It answered 30 of 100 probes (30.0% uptime), under the 50% downtime threshold: slashed 10 bps")
    slow = _only(_healthy(measured=[H100 * 0.3]))
    assert "0.30× the 33,500 GFLOPS reference of its declared H100" in slow.detail


def test_on_a_devnet_jail_time_counts_devnet_epochs() -> None:
    assert _only(_healthy(measured=[H100 * 0.3]), devnet=True).jail_seconds == 24 * 30


@pytest.mark.parametrize(
    ("differences", "row"),
    [
        ({"uptime": [0.1], "abandoned": [2], "measured": [H100 * 0.1], "challenge_ok": [False]}, "fraud"),
        ({"uptime": [0.1], "abandoned": [2], "mismatch": [True]}, "fraud"),
        ({"uptime": [0.1], "abandoned": [2], "measured": [H100 * 0.1], "canary": [True]}, "fraud"),
        ({"uptime": [0.1], "abandoned": [2], "measured": [H100 * 0.1]}, "misrepresentation"),
        ({"uptime": [0.1], "abandoned": [2]}, "abandonment"),
    ],
)
def test_the_severest_row_wins_and_only_one_decision_is_made(differences, row) -> None:
    assert _only(_healthy(**differences)).row == row


def test_a_jailed_provider_is_not_slashed_again_for_standing_conditions() -> None:
    inputs = _healthy(uptime=[0.0], measured=[H100 * 0.1], jailed=[True])
    assert slashing_matrix(inputs, measure(inputs, CONFIG), CONFIG) == []
    assert _only(_healthy(uptime=[0.0], challenge_ok=[False], jailed=[True])).row == "fraud"
    assert _only(_healthy(uptime=[0.0], abandoned=[1], jailed=[True])).row == "abandonment"


def test_a_tombstoned_provider_gets_no_decision_and_no_reward() -> None:
    for differences in (
        {"challenge_ok": [False]},
        {"mismatch": [True]},
        {"abandoned": [2]},
        {"uptime": [0.0]},
    ):
        inputs = _healthy(jailed=[True], **differences)
        inputs = type(inputs)(**{**inputs.__dict__, "tombstoned": np.arange(20) == 0})
        scores = score_epoch(inputs, CONFIG)
        assert scores.slashes == [] and scores.reward_wei[0] == 0
        assert scores.reasons[0].startswith("tombstoned")


def test_no_probe_sent_is_no_evidence_of_downtime() -> None:
    inputs = _healthy(uptime=[1.0])
    silent = inputs.__class__(**{**inputs.__dict__, "probe_provider": inputs.probe_provider[100:],
                                 "probe_ok": inputs.probe_ok[100:]})
    assert slashing_matrix(silent, measure(silent, CONFIG), CONFIG) == []


def test_without_a_challenge_there_is_no_misrepresentation() -> None:
    inputs = _healthy(measured=[float("nan")])
    assert slashing_matrix(inputs, measure(inputs, CONFIG), CONFIG) == []


def test_correlated_failures_above_the_threshold_cost_more() -> None:
    # 3 of 10 down at once: f = 0.3 > 0.1, so ×(1 + 5 × 0.3) = ×2.5 on 10 bps.
    inputs = epoch(10, uptime=[0.2] * 3 + [1.0] * 7)
    decisions = slashing_matrix(inputs, measure(inputs, CONFIG), CONFIG)
    assert [d.bps for d in decisions] == [25, 25, 25]
    assert "(×2.50: 3 of 10 providers were hit this epoch)" in decisions[0].detail
    # 1 of 20: f = 0.05, under the threshold: the plain 10 bps.
    assert _only(_healthy(20, uptime=[0.2])).bps == 10


def test_the_correlation_multiplier_is_capped_and_so_is_the_slash() -> None:
    everyone_down = epoch(5, uptime=[0.1] * 5)
    decisions = slashing_matrix(everyone_down, measure(everyone_down, CONFIG), CONFIG)
    assert {d.bps for d in decisions} == {30}  # ×3, not ×(1 + 5 × 1)
    heavy = tuned(CONFIG, "slashing.downtime.bps", 4000)
    assert {d.bps for d in slashing_matrix(everyone_down, measure(everyone_down, heavy), heavy)} == {5000}


def test_fraud_counts_apart_and_is_not_multiplied() -> None:
    inputs = epoch(4, challenge_ok=[False] * 2 + [True] * 2, uptime=[1.0, 1.0, 0.1, 1.0])
    decisions = slashing_matrix(inputs, measure(inputs, CONFIG), CONFIG)
    # Only the downtime counts: 1 of 4, ×2.25 (with the frauds it would be 3 of 4, ×3).
    assert [(d.row, d.bps) for d in decisions] == [("fraud", 5000), ("fraud", 5000), ("downtime", 23)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10), st.integers(0, 3), st.booleans(), st.booleans(),
                          st.sampled_from([H100, H100 * 0.2, float("nan")]), st.booleans()),
                min_size=1, max_size=30))
def test_decisions_are_one_per_provider_within_the_cap_and_fit_the_report(rows) -> None:
    answered, lost, ok, mismatch, measured, jailed = zip(*rows, strict=True)
    inputs = epoch(len(rows), uptime=[a / 10 for a in answered], probes=10, abandoned=lost, challenge_ok=ok,
                   mismatch=mismatch, measured=measured, jailed=jailed)
    decisions = slashing_matrix(inputs, measure(inputs, CONFIG), CONFIG)
    indices = [d.provider_index for d in decisions]
    assert indices == sorted(set(indices))
    for d in decisions:
        assert 0 <= d.bps <= CONFIG.slashing.max_bps and d.row in ROWS
        assert d.reason.isascii() and len(d.reason) <= 31
        assert d.tombstone == (d.row == "fraud")
        if not ok[d.provider_index] or mismatch[d.provider_index]:
            assert d.row == "fraud"


def test_a_decision_becomes_the_reports_slash() -> None:
    decision = _only(_healthy(uptime=[0.3]))
    slash = decision.to_slash()
    assert isinstance(slash, Slash)
    assert (slash.provider, slash.bps, slash.reason, slash.jail_seconds, slash.tombstone) == (
        decision.provider, 10, reason_bytes("downtime"), HOUR, False)
    assert len(slash.evidence_hash) == 32
    assert decision.to_slash(b"\x07" * 32).evidence_hash == b"\x07" * 32


def test_a_switched_off_row_slashes_nobody() -> None:
    off = tuned(tuned(CONFIG, "slashing.downtime.bps", 0), "slashing.downtime.jail_epochs", 0)
    inputs = _healthy(uptime=[0.1])
    assert slashing_matrix(inputs, measure(inputs, off), off) == []


def test_a_slashed_provider_earns_nothing_this_epoch() -> None:
    scores = score_epoch(_healthy(5, abandoned=[1]), CONFIG)
    assert scores.reward_wei[0] == 0 and not scores.eligible[0]
    assert scores.reasons[0] == "slashed for abandonment"
    assert [s.row for s in scores.slashes] == ["abandonment"]
    assert sum(scores.reward_wei) == scores.emission_wei


def test_the_matrix_text_lists_every_row_severest_first_with_its_way_back() -> None:
    assert [r.row for r in MATRIX_ROWS] == ["fraud", "misrepresentation", "abandonment", "downtime"]
    by_row = {r.row: r for r in MATRIX_ROWS}
    assert by_row["fraud"].jail == "tombstoned for ever"
    assert by_row["fraud"].recovery == "none: the provider is tombstoned"
    assert by_row["misrepresentation"].jail == "24 epochs (24 h)"
    assert "register --update" in by_row["misrepresentation"].recovery
    assert by_row["downtime"].slash.startswith("10 bps; ×min(3, 1 + 5 × f)")
    assert all(r.detection and r.slash and r.jail and r.recovery for r in MATRIX_ROWS)
    assert np.all([len(r.recovery) > 0 for r in MATRIX_ROWS])
