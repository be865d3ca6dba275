"""The chain's answers a provider's site needs to authorize a signed request
(`provider.auth.Authority`): who holds MATCHER_ROLE, who sits on the oracle committee,
and what a job is on chain — its provider, its buyer, its status, the spec hash it was
posted with and its result hash."""

from __future__ import annotations

import threading
import time
from functools import cached_property

from ledger.client import Swarm
from ledger.jobs import job_info
from provider.auth import JobView


class ChainAuthority:
    """Reads the answers from the deployment `swarm` is connected to, at the latest block.

    Roles are kept for `ttl_s` (a site is polled for a lease's status often, and roles change
    rarely): a role granted or revoked counts from at most that long after. Jobs are read afresh."""

    def __init__(self, swarm: Swarm, ttl_s: float = 1.0) -> None:
        self.swarm = swarm
        self.ttl_s = ttl_s
        self._cache: dict[tuple, tuple[float, object]] = {}
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

    def job(self, job_id: int) -> JobView | None:
        """Read afresh each time: a job's status and provider change as the market moves it."""
        info = job_info(self.swarm, job_id)
        if info.status == 0:
            return None
        spec_hash, block = self._posted(job_id)
        return JobView(
            info.provider, info.buyer, info.status.name.lower(), spec_hash, block, info.result_hash
        )

    def _cached(self, key: tuple, read):
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
