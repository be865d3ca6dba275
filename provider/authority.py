"""The chain's answers a provider's site needs to authorize a signed request
(`provider.auth.Authority`): who holds MATCHER_ROLE, who sits on the oracle committee,
and what a job is on chain — its provider, its buyer, its status, the spec hash it was
posted with, its result hash and its price; and the terms a site signs a lease's outcome
under (`terms_to_sign`), read from the chain right before it signs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import cached_property

from ledger import serving
from ledger.client import Swarm
from ledger.jobs import job_info
from ledger.results import JobTerms
from provider.auth import JobView, WontSign


class ChainAuthority:
    """Reads the answers from the deployment `swarm` is connected to, at the latest block.

    Roles are kept for `ttl_s` (a site is polled for a lease's status often, and roles change
    rarely): a role granted or revoked counts from at most that long after. Jobs are read afresh."""

    def __init__(self, swarm: Swarm, ttl_s: float = 1.0) -> None:
        self.swarm = swarm
        self.ttl_s = ttl_s
        self._cache: dict[tuple[str, str], tuple[float, bool]] = {}  # (question, address): (when, answer)
        self._lock = threading.Lock()
        from eth_utils import event_abi_to_log_topic

        (posted,) = [e for e in swarm.market.abi if e.get("type") == "event" and e["name"] == "JobPosted"]
        self._job_posted = "0x" + event_abi_to_log_topic(posted).hex()
        data_fields = [i["name"] for i in posted["inputs"] if not i["indexed"]]
        self._spec_word = data_fields.index("specHash")  # its 32-byte word in the event's data

    def is_matcher(self, address: str) -> bool:
        return self._cached(("matcher", address), lambda: bool(
            self.swarm.read("JobMarket", "hasRole", self._matcher_role, address)))

    @cached_property
    def _matcher_role(self) -> bytes:
        """Read when first needed, so a site starts while its chain node is briefly away."""
        return self.swarm.read("JobMarket", "MATCHER_ROLE")

    def is_committee_member(self, address: str) -> bool:
        return self._cached(
            ("member", address), lambda: bool(self.swarm.read("RewardDistributor", "isSigner", address))
        )

    def serving_spendable(self, buyer: str, provider: str) -> int:
        """What `buyer`'s deposit for `provider` in the serving escrow may still spend, read afresh."""
        return serving.account(self.swarm, buyer, provider).spendable

    def job(self, job_id: int) -> JobView | None:
        """Read afresh each time: a job's status and provider change as the market moves it."""
        info = job_info(self.swarm, job_id)
        if info.status == 0:
            return None
        spec_hash, block = self._posted(job_id)
        return JobView(
            info.provider, info.buyer, info.status.name.lower(), spec_hash, block, info.result_hash,
            info.price_per_unit,
        )

    def _cached(self, key: tuple[str, str], read: Callable[[], bool]) -> bool:
        """A role's answer read at most every `ttl_s`."""
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < self.ttl_s:
                return hit[1]
        value = read()
        with self._lock:
            self._cache[key] = (now, value)
            if len(self._cache) > 10_000:
                self._cache.clear()
        return value

    def _posted(self, job_id: int) -> tuple[bytes, bytes]:
        """The spec hash of the job's JobPosted event (the job's record does not keep it) and its block's
        hash."""
        logs = self.swarm.chain.rpc("eth_getLogs", {
            "address": self.swarm.market.address,
            "fromBlock": hex(self.swarm.deployment.block_number),
            "toBlock": "latest",
            "topics": [self._job_posted, "0x" + job_id.to_bytes(32, "big").hex()],
        })
        if not logs:
            return b"", b""
        start = 2 + 64 * self._spec_word
        return bytes.fromhex(logs[0]["data"][start:start + 64]), bytes.fromhex(logs[0]["blockHash"][2:])


def terms_to_sign(swarm: Swarm, provider: str, job_id: int, agreed_price: int = 0) -> JobTerms:
    """The job's provider and price as the chain holds them now, which the provider's signature
    binds; raises WontSign when the job is not `provider`'s, or its price is under what the site
    agreed to run it for (`agreed_price`, the price it started the lease at) or, with none known,
    under the market's floor."""
    info = job_info(swarm, job_id)
    if info.provider.lower() != provider.lower():
        raise WontSign(
            f"Job {job_id} is assigned to {info.provider} on chain, not to this site's provider {provider}, "
            "so the site signs nothing for it."
        )
    floor = max(agreed_price, int(swarm.read("JobMarket", "minPricePerUnit")))
    if info.price_per_unit < floor:
        raise WontSign(
            f"Job {job_id} is assigned at {info.price_per_unit} wei per unit on chain, under the {floor} wei "
            "the site agreed to run it for, so the site signs nothing for it."
        )
    return JobTerms(job_id, info.provider, info.price_per_unit)
