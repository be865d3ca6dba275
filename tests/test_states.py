"""The market's job states and the oracle's epoch states: each record moves only as its table
allows (`market.records.MARKET_MOVES`, `oracle.records.EPOCH_MOVES`), checked on a real ledger
database before anything changes, and a move the table does not name is refused in a sentence
naming the record and both states."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from core.states import IllegalMove
from ledger.db import open_ledger
from market.migrations import MARKET
from market.records import (
    FINAL_STATES,
    MARKET_MOVES,
    MARKET_STATES,
    MarketJob,
    MarketState,
    MarketTransition,
    add_new,
    move,
)
from oracle.migrations import ORACLE
from oracle.records import EPOCH_MOVES, ORACLE_STATES, EpochState, OracleEpoch, move_epoch

pytestmark = pytest.mark.light

CHAIN = 31337
_ids = itertools.count(1)  # every example gets a record of its own in the module's database


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    path: Path = tmp_path_factory.mktemp("states") / "ledger.db"
    engine = open_ledger(f"sqlite:///{path}", MARKET, ORACLE)
    yield engine
    engine.dispose()


def _job(session: Session, state: MarketState) -> MarketJob:
    job_id = next(_ids)
    record = MarketJob(chain_id=CHAIN, job_id=job_id, group_id=job_id, state=state)
    session.add(record)
    session.commit()
    return record


def _transitions(session: Session, job_id: int) -> list[MarketTransition]:
    return list(session.exec(select(MarketTransition).where(MarketTransition.job_id == job_id)))


def _epoch(session: Session, state: EpochState) -> OracleEpoch:
    record = OracleEpoch(chain_id=CHAIN, epoch=next(_ids), state=state, window_start=0.0, window_end=1.0,
                         from_block=0, to_block=1, rewards_root="0x" + "00" * 32)
    session.add(record)
    session.commit()
    return record


# ── the market ───────────────────────────────────────────────────────────────
def test_the_market_stores_the_same_state_strings_as_before_so_no_migration_is_needed() -> None:
    assert MARKET_STATES == ("queued", "assigned", "running", "ran", "completed", "disputed",
                             "settled", "failed", "cancelled", "expired", "reclaimed")
    assert {"settled", "failed", "cancelled", "expired", "reclaimed"} == FINAL_STATES


@settings(max_examples=200, deadline=None)
@given(before=st.sampled_from(MarketState), after=st.sampled_from(MarketState))
def test_a_job_makes_exactly_the_moves_its_table_names(engine: Engine, before: MarketState,
                                                       after: MarketState) -> None:
    with Session(engine) as session:
        record = _job(session, before)
        if after in MARKET_MOVES.table[before]:
            move(session, record, after, "a test's move", tx_hash="0x" + "ab" * 32, provider="0xp")
            session.refresh(record)
            assert record.state == after
            [row] = _transitions(session, record.job_id)
            assert (row.from_state, row.to_state, row.detail, row.tx_hash, row.provider) == (
                before, after, "a test's move", "0x" + "ab" * 32, "0xp")
        else:
            with pytest.raises(IllegalMove):
                move(session, record, after, "a test's move")
            session.refresh(record)
            assert record.state == before, "a refused move changes nothing"
            assert _transitions(session, record.job_id) == []


@given(first=st.sampled_from(MarketState))
@settings(max_examples=50, deadline=None)
def test_a_new_job_starts_queued_and_in_no_other_state(engine: Engine, first: MarketState) -> None:
    with Session(engine) as session:
        job_id = next(_ids)
        record = MarketJob(chain_id=CHAIN, job_id=job_id, group_id=job_id, state=first)
        if first == MarketState.QUEUED:
            add_new(session, record, "seen posted on chain")
            session.commit()
            [row] = _transitions(session, job_id)
            assert (row.from_state, row.to_state) == (None, "queued")
        else:
            with pytest.raises(IllegalMove, match=f"job {job_id} cannot start as {first}"):
                add_new(session, record, "seen posted on chain")
            session.commit()
            assert session.get(MarketJob, (CHAIN, job_id)) is None


def test_an_illegal_market_move_is_refused_in_a_sentence_naming_the_job_and_both_states(
    engine: Engine,
) -> None:
    with Session(engine) as session:
        record = _job(session, MarketState.SETTLED)
        with pytest.raises(IllegalMove) as refused:
            move(session, record, MarketState.RUNNING, "run it again")
    assert str(refused.value) == (
        f"job {record.job_id} cannot move from settled to running: market.records.MARKET_MOVES has no "
        "such move."
    )


def test_a_final_job_is_reopened_only_by_the_chain_showing_it_open_again() -> None:
    """The market itself takes no step out of a final state; only a chain that shows the job open
    once more (a devnet restarted from an older state) moves it back, and never to a lease
    running, to expiry or to another final state."""
    reopened = {MarketState.QUEUED, MarketState.ASSIGNED, MarketState.RAN, MarketState.COMPLETED,
                MarketState.DISPUTED}
    for final in FINAL_STATES:
        assert MARKET_MOVES.table[final] == reopened, final


def test_a_lease_starts_only_from_assigned_and_a_job_expires_only_from_queued() -> None:
    assert {b for b, a in MARKET_MOVES.moves() if a == MarketState.RUNNING} == {MarketState.ASSIGNED}
    assert {b for b, a in MARKET_MOVES.moves() if a == MarketState.EXPIRED} == {MarketState.QUEUED}


def test_every_market_state_is_reached_from_a_new_job() -> None:
    assert _reached(MARKET_MOVES.table) == set(MarketState)


# ── the oracle ───────────────────────────────────────────────────────────────
def test_the_oracle_stores_the_same_state_strings_as_before() -> None:
    assert ORACLE_STATES == ("aggregated", "signed", "submitted", "finalized")


@settings(max_examples=50, deadline=None)
@given(before=st.sampled_from(EpochState), after=st.sampled_from(EpochState))
def test_an_epoch_makes_exactly_the_moves_its_table_names(engine: Engine, before: EpochState,
                                                          after: EpochState) -> None:
    with Session(engine) as session:
        record = _epoch(session, before)
        if after in EPOCH_MOVES.table[before]:
            move_epoch(session, record, after)
            session.refresh(record)
            assert record.state == after
        else:
            refusal = f"epoch {record.epoch} cannot move from {before} to {after}"
            with pytest.raises(IllegalMove, match=refusal):
                move_epoch(session, record, after)
            session.refresh(record)
            assert record.state == before, "a refused move changes nothing"


def test_an_illegal_epoch_move_is_refused_in_a_sentence_naming_the_epoch_and_both_states(
    engine: Engine,
) -> None:
    with Session(engine) as session:
        record = _epoch(session, EpochState.FINALIZED)
        with pytest.raises(IllegalMove) as refused:
            move_epoch(session, record, EpochState.AGGREGATED)
    assert str(refused.value) == (
        f"epoch {record.epoch} cannot move from finalized to aggregated: oracle.records.EPOCH_MOVES has "
        "no such move."
    )


def test_an_epoch_goes_forward_one_step_at_a_time_and_back_only_to_be_submitted_again() -> None:
    forward = [(None, "aggregated"), ("aggregated", "signed"), ("signed", "submitted"),
               ("submitted", "finalized"), ("signed", "finalized")]
    back: list[tuple[str | None, str]] = [("submitted", "signed"), ("finalized", "signed"),
                                          ("finalized", "submitted")]
    assert EPOCH_MOVES.moves() == set(forward + back)


def test_a_state_the_enum_does_not_know_is_never_a_legal_move() -> None:
    assert not MARKET_MOVES.allows("limbo", MarketState.QUEUED)
    assert not MARKET_MOVES.allows(MarketState.QUEUED, "limbo")
    with pytest.raises(IllegalMove, match="epoch 4 cannot move from limbo to signed"):
        EPOCH_MOVES.check(4, "limbo", EpochState.SIGNED)


def _reached(table) -> set:
    reached: set = set()
    frontier = set(table[None])
    while frontier:
        reached |= frontier
        frontier = {after for before in frontier for after in table.get(before, ())} - reached
    return reached
