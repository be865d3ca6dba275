"""One pass of the market service's loop (docs/architecture.md §5): what every phase of it reads
and writes — the ledger session, the open jobs as the chain shows them, the market's records of
them, the chain's time and the pass's report — and the move each phase records a transition with.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlmodel import Session

from ledger.indexer.models import Job
from ledger.tx import TxReceipt
from market.records import MarketJob, MarketState, move

if TYPE_CHECKING:
    from market.service import MarketService

log = logging.getLogger(__name__)


@dataclass
class TickReport:
    """What one pass did; `unmatched` maps job ids to why no provider took them."""

    counts: dict[str, int] = field(default_factory=dict)
    unmatched: dict[int, str] = field(default_factory=dict)
    running: int = 0
    unpriced: int = 0  # staked providers offered this pass at the market's default price

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1


@dataclass
class Tick:
    """One pass over every open job. `jobs` is the pass's view of the chain: what the service
    sends in it is noted there (a completion, say) but never written to the indexer's rows."""

    market: MarketService
    session: Session
    jobs: dict[int, Job]
    records: dict[int, MarketJob]  # one for each of `jobs`
    now: int  # the chain's time as the pass began
    report: TickReport

    def move(self, record: MarketJob, state: MarketState, detail: str, receipt: TxReceipt | None = None,
             provider: str | None = None) -> None:
        """Moves a record, as `market.records.MARKET_MOVES` allows, and logs the transition."""
        before = record.state
        move(self.session, record, state, detail, receipt.tx_hash if receipt else None,
             provider or record.provider)
        log.info("job %s: %s → %s: %s", record.job_id, before, state, detail)
