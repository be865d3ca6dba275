"""The market's side of the providers' sites (docs/architecture.md §5): where each site is,
what it has, and a lease followed from its start to the provider's signed result.

A provider's site is found from the chain alone: the provider's registered hardware spec
names its URL and its certificate's fingerprint. Every request the market sends is signed
with the matcher's key, which the site checks against MATCHER_ROLE on chain; the market holds
no Ray connection and no secret of any provider.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compute.errors import InvalidJob, ProviderFault
from compute.manifest import outputs_of
from core.errors import Refused
from ledger.client import Swarm
from ledger.tx import Sender
from market.matcher import Machine
from market.offers import Capacity, declared
from wire.client import SiteAddress, SiteClient, SiteUnreachable

INFO_TIMEOUT_S = 3.0
CAPACITY_TTL_S = 2.0  # how long a site's reported capacity is trusted before it is asked again
POLL_S = 0.5
LOST_AFTER_S = 6.0  # a site that does not answer (or fails to) for this long has lost the lease
# A site whose chain node is down says so (503): no one's fault, followed for this long.
CHAIN_DOWN_S = 120.0
# A lease its site has not started (its Ray job pending: no room on the site) after this long
# is stopped and the job given to another provider: every lease the market follows ends.
PENDING_LIMIT_S = 120.0
# The most machines a site's answer may list; a longer list is not read (no job of several
# nodes is offered to it).
MAX_MACHINES = 4_096

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseResult:
    """A lease that succeeded: what its provider signed."""

    provider: str
    result_hash: str  # 0x…
    units: int
    unit: str
    signature: str  # 0x…, the provider's over (jobId, provider, price, resultHash, units)
    metrics: dict
    result_dir: str  # where the site stored the results: <the buyer's output>/<compute job id>
    # the hash of its outputs alone, which replicas agree on; None when its record does not hash to
    # result_hash (what the provider signed then stands for nothing replicas could share)
    outputs_hash: str | None = None


def site_address(home: Path, provider: str, spec_hash: str) -> SiteAddress | None:
    """Where `provider`'s site is, from its registered hardware spec (stored in `home`)."""
    spec = declared(home, spec_hash)
    if not spec.get("site_url") or not spec.get("site_fingerprint"):
        return None
    return SiteAddress(provider, spec["site_url"], spec["site_fingerprint"])


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
        return site_address(self.home, provider, spec_hash)

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
        answers = self._pool.map(lambda p: self._ask(wanted[p]), stale)
        for provider, capacity in zip(stale, answers, strict=True):
            self._capacity[provider] = (now, capacity)
        return {p: c for p in wanted if (c := self._capacity.get(p, (0, None))[1]) is not None}

    def _ask(self, address: SiteAddress) -> Capacity | None:
        try:
            info = self.client(address, INFO_TIMEOUT_S).info()
        except (SiteUnreachable, Refused, ValueError) as exc:
            log.debug("the site of %s did not say what it holds: %s", address.provider, exc)
            return None
        if str(info.get("provider", "")).lower() != address.provider.lower():
            return None  # another provider's site at this address
        return capacity_of(info.get("capacity") or {})

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def capacity_of(reported: Any) -> Capacity | None:
    """The capacity in a site's `/v1/info` answer, or None (the site offers nothing) when its
    totals cannot be read. A site that does not list its machines, or lists them in a form not
    read here, is taken as not saying: it is offered jobs of one node as before, and no job
    of several; one that does not say it runs leases across machines does not."""
    if not isinstance(reported, Mapping):
        return None
    try:
        cpus, gpus, memory_gb = (float(reported.get(name, 0)) for name in ("cpus", "gpus", "memory_gb"))
        node_cpus, node_gpus = (float(reported.get(name, math.inf)) for name in ("node_cpus", "node_gpus"))
    except (TypeError, ValueError):
        return None
    if any(math.isnan(v) for v in (cpus, gpus, memory_gb, node_cpus, node_gpus)):
        return None
    return Capacity(cpus, gpus, memory_gb, node_cpus, node_gpus, machines=_machines(reported.get("machines")),
                    across_nodes=reported.get("across_nodes") is True)


def _machines(listed: Any) -> tuple[Machine, ...] | None:
    """Each machine a site lists (`{cpus, gpus, memory_gb}`), or None when the list is missing
    or malformed: finite, non-negative numbers only."""
    if not isinstance(listed, list) or len(listed) > MAX_MACHINES:
        return None
    machines = []
    for entry in listed:
        if not isinstance(entry, Mapping):
            return None
        values = [entry.get(name) for name in ("cpus", "gpus", "memory_gb")]
        numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(numbers) != 3 or not all(math.isfinite(v) and v >= 0 for v in numbers):
            return None
        machines.append(Machine(*numbers))
    return tuple(machines)


class LeaseFailed(InvalidJob):
    """The job failed on its site by its own fault; `log_tail` is the last of what it printed."""

    def __init__(self, message: str, log_tail: str | None = None) -> None:
        super().__init__(message)
        self.log_tail = log_tail


class ChargedFailure(LeaseFailed):
    """The job failed by its own fault after its lease held `units`, which its provider signed
    for: the market charges them (JobMarket.chargeJob) and refunds the rest."""

    def __init__(self, message: str, units: int, unit: str, signature: str,
                 log_tail: str | None = None) -> None:
        super().__init__(message, log_tail)
        self.units, self.unit, self.signature = units, unit, signature


# what follow_lease hands on of a running lease: the reports its Ray Train run made since the last
Progress = Callable[[list[dict]], None]


class _Reports:
    """The reports of one lease handed on once each, from statuses that show the latest few of
    how many there are (`provider.agent.LeaseStatus.reports`, `reported`)."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress, self.seen, self.attempt = progress, 0, 0

    def take(self, status: dict) -> None:
        if self.progress is None:
            return
        attempt, count, shown = int(status.get("attempt") or 0), int(status.get("reported") or 0), \
            status.get("reports") or []
        if attempt != self.attempt:
            self.attempt, self.seen = attempt, 0  # an attempt relays its own, from its first
        fresh = shown[max(0, len(shown) - (count - self.seen)):] if count > self.seen else []
        self.seen = max(self.seen, count)
        if fresh:
            self.progress([r for r in fresh if isinstance(r, dict)])


def follow_lease(client: SiteClient, job_id: int, spec: bytes, prior: bytes | None, stop: threading.Event,
                 lost_after_s: float = LOST_AFTER_S, pending_limit_s: float = PENDING_LIMIT_S,
                 progress: Progress | None = None) -> LeaseResult:
    """Starts the job's lease on its site and follows it to its end, handing `progress` what its
    Ray Train run reports as it comes.

    `prior` is the spec of the job whose result this one builds on (`job:<id>`), if any.
    Raises ProviderFault when the site stops answering (or fails to answer) for `lost_after_s`
    (CHAIN_DOWN_S while it says its chain node is down), leaves the lease pending for
    `pending_limit_s`, or reports it lost the lease's node too often — asking the site to stop
    the lease first, so a lease the market gave up on does not hold the site — and InvalidJob
    when the job failed by its own doing (it broke a limit of its lease, or its code failed) or
    the site would not run or sign it for the assignment the chain shows (another provider, a
    price under its asking): no fault of the provider's, so the job fails without a slash."""
    provider = client.site.provider
    silent_since: float | None = None
    pending_since: float | None = None
    started = False
    reported = _Reports(progress)
    while not stop.is_set():
        try:
            status = client.status(job_id) if started else client.start_lease(job_id, spec, prior)
            started, silent_since = True, None
        except (SiteUnreachable, Refused) as exc:
            if isinstance(exc, Refused) and exc.status in (400, 403, 404, 409):
                raise InvalidJob(f"job {job_id}: the site of {provider} refused it: {exc}") from None
            # Silent, or failing to answer: the lease is lost only if that lasts.
            silent_since = silent_since or time.monotonic()
            limit = CHAIN_DOWN_S if isinstance(exc, Refused) and exc.status == 503 else lost_after_s
            if time.monotonic() - silent_since > limit:
                _stop_quietly(client, job_id)
                what = "failed" if isinstance(exc, Refused) else "stopped answering"
                raise ProviderFault(
                    provider, f"job {job_id}: the site of {provider} {what} for {limit:.0f} s ({exc})"
                ) from None
            stop.wait(POLL_S)
            continue
        state = status["state"]
        reported.take(status)
        if state == "pending":
            pending_since = pending_since or time.monotonic()
            if time.monotonic() - pending_since > pending_limit_s:
                _stop_quietly(client, job_id)
                raise ProviderFault(provider, f"job {job_id}: the site of {provider} did not start its lease "
                                              f"in {pending_limit_s:.0f} s")
        else:
            pending_since = None
        if state == "succeeded":
            return LeaseResult(
                provider,
                status["result_hash"],
                int(status["units"]),
                status["unit"],
                status["signature"],
                status.get("metrics") or {},
                status.get("result_uri") or "",
                outputs_of(status.get("result_record"), status["result_hash"]),
            )
        if state in ("failed", "stopped"):
            if status.get("fault") == "provider":
                raise ProviderFault(provider, f"job {job_id}: {status.get('error')}")
            error = f"job {job_id} failed on the site of {provider}: {status.get('error')}"
            tail = status.get("log_tail") if isinstance(status.get("log_tail"), str) else None
            if state == "failed" and int(status.get("units") or 0) > 0 and status.get("signature"):
                raise ChargedFailure(error, int(status["units"]), str(status.get("unit")),
                                     status["signature"], tail)
            raise LeaseFailed(error, tail)
        stop.wait(POLL_S)
    raise ProviderFault(provider, f"job {job_id}: the market stopped following it")


def _stop_quietly(client: SiteClient, job_id: int) -> None:
    """Asks the site to stop a lease the market gives up on; a site that does not answer has
    lost it anyway."""
    with contextlib.suppress(SiteUnreachable, Refused, ValueError):
        client.stop(job_id)
