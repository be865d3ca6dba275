"""What the market offers a pass's jobs: each provider at its declared price, or at the market's
default where it declared none, and the pass's summary says so only when some provider did."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import Session

from ledger.db import open_ledger
from ledger.indexer.models import Provider
from ledger.specs import store_spec
from ledger.units import ONE
from market.offers import Capacity, build_offers
from market.service import MarketConfig, TickReport

pytestmark = pytest.mark.light

PRICED, UNPRICED = "0x" + "11" * 20, "0x" + "22" * 20


def test_a_provider_without_a_declared_price_is_offered_at_the_default_and_counted(tmp_path: Path,
                                                                                   capsys) -> None:
    from scripts.market import _summary

    engine = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    config = MarketConfig()
    with Session(engine) as session:
        for address, price in ((PRICED, {"price_per_unit": str(5 * 10**14)}), (UNPRICED, {})):
            digest = store_spec(tmp_path, {"gpu_model": "cpu", "gpus": 1, "vram_gb": 1} | price)
            session.add(Provider(chain_id=1, address=address, spec_hash="0x" + digest.hex(), gpus=1,
                                 stake=2_000 * ONE, unbonding=0, release_time=0, jailed_until=0,
                                 slashed_total=0, registered_block=1, updated_block=1))
        session.commit()
        capacity = {a: Capacity(cpus=2, memory_gb=4) for a in (PRICED, UNPRICED)}
        offers = {o.address: o for o in build_offers(session, 1, tmp_path, 1_000 * ONE, capacity, {},
                                                     config.default_price_per_unit)}
    engine.dispose()
    assert (offers[PRICED].priced, offers[PRICED].price_per_unit) == (True, 5 * 10**14)
    default = config.default_price_per_unit
    assert (offers[UNPRICED].priced, offers[UNPRICED].price_per_unit) == (False, default)

    _summary({"assigned": 1}, TickReport(unpriced=0), config)
    assert "declared no price" not in capsys.readouterr().out, "every provider declared one: no word of it"
    _summary({"assigned": 1}, TickReport(unpriced=1), config)
    assert "1 provider(s) declared no price and ask the market's default, 0.001 SWARM per unit." in (
        capsys.readouterr().out.replace("\n", " "))
