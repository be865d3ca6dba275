"""The oracle keeps every report within RewardDistributor's bounds without dropping a slash:
what does not fit waits for the next epoch, merged with anything new for the same provider,
and the report names (and so holds) the first of those it defers; no entry is ever empty."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.reports import (
    MAX_DEFERRED_PER_REPORT,
    MAX_JAIL_SECONDS,
    MAX_SLASHES_PER_REPORT,
    MAX_TOMBSTONES_PER_REPORT,
)
from oracle.slashing import ROWS, schedule_slashes

PROVIDERS = [f"0x{i:040x}" for i in range(1, 400)]


@st.composite
def decisions(draw, epoch: int) -> list[dict]:
    chosen = draw(st.lists(st.sampled_from(PROVIDERS), unique=True, max_size=330))
    out = []
    for provider in chosen:
        row = draw(st.sampled_from(ROWS))
        out.append({
            "provider": provider, "bps": draw(st.integers(1, 5_000)), "reason": row, "row": row,
            "evidence_hash": "0x" + draw(st.binary(min_size=32, max_size=32)).hex(),
            "jail_seconds": draw(st.sampled_from([0, 3_600, 2**64 - 1])),
            "tombstone": row == "fraud", "detail": f"{row} in epoch {epoch}", "decided_epoch": epoch,
        })
    return out


def _in_report(entries: list[dict]) -> list[dict]:
    return [e for e in entries if not e["deferred"]]


@settings(max_examples=60, deadline=None)
@given(first=decisions(1), second=decisions(2), third=decisions(3))
def test_every_report_fits_and_no_decision_is_ever_dropped(first, second, third) -> None:
    carried: list[dict] = []
    applied: dict[str, int] = {}
    for decided in (first, second, third):
        entries = schedule_slashes(carried, decided)
        now = _in_report(entries)
        assert len(now) <= MAX_SLASHES_PER_REPORT
        assert sum(e["tombstone"] for e in now) <= MAX_TOMBSTONES_PER_REPORT
        keys = [int(e["provider"], 16) for e in now]
        assert keys == sorted(set(keys)), "sorted by provider, no duplicates"
        assert all(e["jail_seconds"] <= MAX_JAIL_SECONDS for e in entries)
        # Every provider with a pending decision is either in this report or still queued.
        pending = {e["provider"] for e in carried} | {e["provider"] for e in decided}
        assert {e["provider"] for e in entries} == pending
        later = [e for e in entries if e["deferred"]]
        held = [e for e in later if e["held"]]
        assert held == later[:MAX_DEFERRED_PER_REPORT], "the report names the first deferred, in queue order"
        assert not any(e["held"] for e in now)
        for e in now:
            applied[e["provider"]] = applied.get(e["provider"], 0) + 1
        carried = later
    # The queue drains: with no new decisions, later epochs apply everything left, each
    # taking a full report (or all that is left) until it is empty.
    for _ in range(len(PROVIDERS)):
        if not carried:
            break
        entries = schedule_slashes(carried, [])
        now = _in_report(entries)
        assert now, "a non-empty queue always makes progress"
        carried = [e for e in entries if e["deferred"]]
    assert carried == []


def test_a_deferred_slash_merges_with_a_new_one_without_losing_either() -> None:
    old = {"provider": PROVIDERS[0], "bps": 300, "reason": "downtime", "row": "downtime",
           "evidence_hash": "0x" + "11" * 32, "jail_seconds": 3_600, "tombstone": False,
           "detail": "down", "decided_epoch": 1}
    new = {**old, "bps": 5_000, "row": "fraud", "reason": "fraud", "tombstone": True, "jail_seconds": 0,
           "evidence_hash": "0x" + "22" * 32, "detail": "cheated", "decided_epoch": 2}
    (merged,) = schedule_slashes([old], [new])
    assert merged["bps"] == 5_300 and merged["jail_seconds"] == 3_600 and merged["tombstone"]
    assert merged["row"] == "fraud" and merged["decided_epoch"] == 1 and not merged["deferred"]
    assert merged["evidence_hash"] not in (old["evidence_hash"], new["evidence_hash"])
    assert "down" in merged["detail"] and "cheated" in merged["detail"]


def test_tombstones_and_older_decisions_go_first_when_the_report_is_full() -> None:
    def entry(i: int, epoch: int, tombstone: bool = False) -> dict:
        row = "fraud" if tombstone else "downtime"
        return {
            "provider": PROVIDERS[i],
            "bps": 10,
            "reason": row,
            "row": row,
            "evidence_hash": "0x" + "00" * 32,
            "jail_seconds": 0,
            "tombstone": tombstone,
            "detail": "",
            "decided_epoch": epoch,
        }

    carried = [entry(i, 1) for i in range(150)]
    decided = [entry(150 + i, 2) for i in range(100)] + [entry(300 + i, 2, True) for i in range(10)]
    entries = schedule_slashes(carried, decided)
    now = {e["provider"] for e in entries if not e["deferred"]}
    assert {PROVIDERS[300 + i] for i in range(MAX_TOMBSTONES_PER_REPORT)} <= now
    assert {PROVIDERS[i] for i in range(150)} <= now, "older decisions before newer ones"
    assert len(now) == MAX_SLASHES_PER_REPORT


def test_beyond_the_deferred_bound_the_oldest_are_held_first_and_the_rest_still_queued() -> None:
    many = [f"0x{i:040x}" for i in range(1, 451)]

    def entry(provider: str, epoch: int) -> dict:
        return {"provider": provider, "bps": 10, "reason": "downtime", "row": "downtime",
                "evidence_hash": "0x" + "00" * 32, "jail_seconds": 0, "tombstone": False, "detail": "",
                "decided_epoch": epoch}

    older, newer = [entry(p, 1) for p in many[150:]], [entry(p, 2) for p in many[:150]]
    entries = schedule_slashes(older, newer)
    later = [e for e in entries if e["deferred"]]
    assert len(later) == 450 - MAX_SLASHES_PER_REPORT > MAX_DEFERRED_PER_REPORT
    held = [e for e in later if e["held"]]
    assert len(held) == MAX_DEFERRED_PER_REPORT
    assert {e["provider"] for e in held} == set(many[350:]) | set(many[:100]), "the older decisions first"


def test_an_entry_that_orders_nothing_is_left_out() -> None:
    nothing = {"provider": PROVIDERS[0], "bps": 0, "reason": "downtime", "row": "downtime",
               "evidence_hash": "0x" + "00" * 32, "jail_seconds": 0, "tombstone": False, "detail": "",
               "decided_epoch": 1}
    jail_only = {**nothing, "provider": PROVIDERS[1], "jail_seconds": 60}
    assert [e["provider"] for e in schedule_slashes([], [nothing, jail_only])] == [PROVIDERS[1]]


def test_the_oracle_bounds_are_the_distributors(swarm) -> None:
    d = swarm.distributor.functions
    on_chain = (d.MAX_SLASHES_PER_REPORT().call(), d.MAX_TOMBSTONES_PER_REPORT().call(),
                d.MAX_DEFERRED_PER_REPORT().call(), d.MAX_JAIL_SECONDS().call())
    assert on_chain == (MAX_SLASHES_PER_REPORT, MAX_TOMBSTONES_PER_REPORT, MAX_DEFERRED_PER_REPORT,
                        MAX_JAIL_SECONDS)
