"""Who may build on a job's result (`model: job:<id>`): its own buyer, and anyone once the job
was posted with `publish: true`. The buyer's API refuses anything else before it sends a
transaction, and the market service will not match a job posted around the API that tries."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlmodel import Session

from anvil import dev_account
from ledger.client import Swarm
from ledger.db import migrate, open_engine
from ledger.jobs import JobStatus, job_info, post_job
from ledger.specs import store_spec
from market.buyer import Buyer
from market.migrations import MARKET
from market.records import MarketJob
from market.service import MarketConfig, MarketService
from market.spec import SpecError, validate_spec
from oracle.migrations import ORACLE

OWNER, STRANGER = 5, 6


def spec(**changes) -> dict:
    base = {"kind": "train", "model": "mlp", "dataset": "synthetic-classification",
            "resources": {"workers": 1}, "max_price_per_unit": "0.001", "max_units": 100,
            "deadline": int(time.time()) + 7_200}
    return base | changes


def tune_of(job_id: int) -> dict:
    return spec(kind="finetune", model=f"job:{job_id}")


@pytest.fixture
def buyers(swarm: Swarm, swarm_home: Path, tmp_path: Path) -> dict[int, Buyer]:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    return {a: Buyer(swarm, swarm.sender(dev_account(a).key), swarm_home, db) for a in (OWNER, STRANGER)}


def test_a_job_builds_on_its_buyers_own_results_and_on_published_ones_only(swarm: Swarm, buyers) -> None:
    own = buyers[OWNER].post(spec()).job_ids[0]
    private = buyers[STRANGER].post(spec()).job_ids[0]
    published = buyers[STRANGER].post(spec(publish=True)).job_ids[0]

    assert buyers[OWNER].post(tune_of(own)).job_ids
    assert buyers[OWNER].post(tune_of(published)).job_ids
    nonce = swarm.chain.w3.eth.get_transaction_count(dev_account(OWNER).address)
    with pytest.raises(
        SpecError,
        match=rf"spec field model job:{private} is another buyer's result, which that "
        "buyer did not publish",
    ) as refused:
        buyers[OWNER].post(tune_of(private))
    assert refused.value.field == "model"
    with pytest.raises(SpecError, match="model job:999 names no job of this market"):
        buyers[OWNER].post(tune_of(999))
    assert swarm.chain.w3.eth.get_transaction_count(dev_account(OWNER).address) == nonce, "nothing was sent"
    assert buyers[STRANGER].post(tune_of(private)).job_ids, "its own buyer builds on it"


def test_the_market_does_not_run_a_job_posted_around_the_api_on_anothers_result(
        swarm: Swarm, swarm_home: Path, buyers, tmp_path: Path) -> None:
    private = buyers[STRANGER].post(spec()).job_ids[0]
    borrowing = validate_spec(tune_of(private))
    digest = store_spec(swarm_home, borrowing.canonical())
    job_id, _ = post_job(swarm, swarm.sender(dev_account(OWNER).key), digest, borrowing.max_price_per_unit,
                         borrowing.max_units, borrowing.deadline)
    engine = open_engine(f"sqlite:///{tmp_path / 'market.db'}")
    migrate(engine, MARKET, ORACLE)
    market = MarketService(swarm, swarm.sender(dev_account(0).key), engine, swarm_home,
                           MarketConfig())
    try:
        market.tick()
        market.tick()
    finally:
        market.close(wait=True)
    assert job_info(swarm, job_id).status == JobStatus.POSTED, "never assigned"
    with Session(engine) as session:
        record = session.get(MarketJob, (swarm.chain.chain_id, job_id))
    assert record is not None and record.state == "queued" and record.explanation is not None
    assert f"model job:{private} is another buyer's result" in record.explanation
    assert "cancel it for a full refund" in record.explanation
