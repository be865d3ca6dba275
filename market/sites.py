"""The market's side of the providers' sites (docs/architecture.md §5): where each site is,
what it has, and a lease followed from its start to the provider's signed result.

A provider's site is found from the chain alone: the provider's registered hardware spec
names its URL and its certificate's fingerprint. Every request the market sends is signed
with the matcher's key, which the site checks against MATCHER_ROLE on chain; the market holds
no Ray connection and no secret of any provider.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from compute.errors import InvalidJob, ProviderFault
from ledger.client import Swarm
from ledger.tx import Sender
from market.offers import Capacity, declared
from provider.auth import Refused
from provider.client import SiteAddress, SiteClient, SiteUnreachable

INFO_TIMEOUT_S = 3.0
CAPACITY_TTL_S = 2.0  # how long a site's reported capacity is trusted before it is asked again
POLL_S = 0.5
LOST_AFTER_S = 6.0  # a site that does not answer for this long has lost the lease


@dataclass(frozen=True)
class LeaseResult:
    """A lease that succeeded: what its provider signed."""

    provider: str
    result_hash: str  # 0x…
    units: int
    unit: str
    signature: str  # 0x…, the provider's over (jobId, resultHash, units)
    metrics: dict
    result_dir: str  # where the site stored the results: <the buyer's output>/<compute job id>


class Sites:
    """Signed clients for the sites of registered providers, and their capacity."""

    def __init__(self, swarm: Swarm, sender: Sender, home: Path) -> None:
        self.swarm = swarm
        self.sender = sender
        self.home = home
        self._capacity: dict[str, tuple[float, Capacity | None]] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="swarm-site-info")

    def address(self, provider: str, spec_hash: str) -> SiteAddress | None:
        spec = declared(self.home, spec_hash)
        if not spec.get("site_url") or not spec.get("site_fingerprint"):
            return None
        return SiteAddress(provider, spec["site_url"], spec["site_fingerprint"])

    def client(self, address: SiteAddress, timeout_s: float = 30.0) -> SiteClient:
        return SiteClient(
            address,
            self.sender.sign_typed_data,
            self.swarm.chain.chain_id,
            self.swarm.market.address,
            timeout_s=timeout_s,
        )

    def capacities(self, providers: Iterable[tuple[str, str]]) -> dict[str, Capacity]:
        """What each provider's site reports it has, asked at most every CAPACITY_TTL_S; a site
        that does not answer, or a provider with no site, offers nothing."""
        now = time.monotonic()
        wanted = {}
        for provider, spec_hash in providers:
            address = self.address(provider, spec_hash)
            if address is not None:
                wanted[provider] = address
        stale = [p for p in wanted if now - self._capacity.get(p, (-1e9, None))[0] > CAPACITY_TTL_S]
        for provider, capacity in zip(stale, self._pool.map(lambda p: self._ask(wanted[p]), stale)):
            self._capacity[provider] = (now, capacity)
        return {p: c for p in wanted if (c := self._capacity.get(p, (0, None))[1]) is not None}

    def _ask(self, address: SiteAddress) -> Capacity | None:
        try:
            info = self.client(address, INFO_TIMEOUT_S).info()
        except (SiteUnreachable, Refused, ValueError):
            return None
        if str(info.get("provider", "")).lower() != address.provider.lower():
            return None  # another provider's site at this address
        c = info.get("capacity") or {}
        return Capacity(float(c.get("cpus", 0)), float(c.get("gpus", 0)), float(c.get("memory_gb", 0)),
                        float(c.get("node_cpus", math.inf)), float(c.get("node_gpus", math.inf)))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def follow_lease(client: SiteClient, job_id: int, spec: bytes, prior: bytes | None, stop: threading.Event,
                 lost_after_s: float = LOST_AFTER_S) -> LeaseResult:
    """Starts the job's lease on its site and follows it to its end.

    `prior` is the spec of the job whose result this one builds on (`job:<id>`), if any.
    Raises ProviderFault when the site stops answering for `lost_after_s` or reports it lost
    the lease's node too often, and InvalidJob when the job failed by its own doing (it broke a
    limit of its lease, or its code failed)."""
    provider = client.site.provider
    silent_since: float | None = None
    started = False
    while not stop.is_set():
        try:
            status = client.status(job_id) if started else client.start_lease(job_id, spec, prior)
            started, silent_since = True, None
        except SiteUnreachable as exc:
            silent_since = silent_since or time.monotonic()
            if time.monotonic() - silent_since > lost_after_s:
                raise ProviderFault(
                    provider, f"job {job_id}: the site of {provider} stopped answering ({exc})"
                )
            stop.wait(POLL_S)
            continue
        except Refused as exc:
            if exc.status in (400, 403, 404, 409):
                raise InvalidJob(f"job {job_id}: the site of {provider} refused it: {exc}") from None
            raise ProviderFault(provider, f"job {job_id}: the site of {provider} failed: {exc}") from None
        state = status["state"]
        if state == "succeeded":
            return LeaseResult(
                provider,
                status["result_hash"],
                int(status["units"]),
                status["unit"],
                status["signature"],
                status.get("metrics") or {},
                status.get("result_uri") or "",
            )
        if state in ("failed", "stopped"):
            if status.get("fault") == "provider":
                raise ProviderFault(provider, f"job {job_id}: {status.get('error')}")
            raise InvalidJob(f"job {job_id} failed on the site of {provider}: {status.get('error')}")
        stop.wait(POLL_S)
    raise ProviderFault(provider, f"job {job_id}: the market stopped following it")
