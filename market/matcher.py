"""Match open jobs to provider offers (docs/architecture.md §5): hard constraints, then the
cheapest useful work.

A provider is feasible for a job when it is staked above the minimum, not jailed, scores at
least the job's floor, asks no more than the job's price cap, has the job's GPU model (if one
is named) with enough VRAM, and has free capacity for the whole gang: multi-worker jobs are
placed on one provider (one placement group), never split. A job of one node runs on one
machine, so the provider's largest machine must hold it. A job of `nodes` N > 1 runs one
node's share (its workers with their CPUs, GPUs and memory) on each of N separate machines,
so the provider's site must run leases across machines and have N machines that each hold a
share; a site that did not say what its machines are is offered no such job. Feasible
providers are ranked by expected cost per unit of useful work, price ÷ measured performance,
then by reliability (higher first), then by address so that the result does not depend on
input order.

Jobs are taken by priority (higher first), then in input order; each assignment consumes the
provider's free capacity, so nothing is oversubscribed. A job with `replicas: k` goes to k
distinct providers or to none. A job left unmatched gets an `Explanation`: how many providers
each constraint ruled out, counted independently, with capacity counted against what is left
at the end of the round (capacity only shrinks during a round, so a provider that lacked it
when the job's turn came still lacks it then).

Speed: providers that can never take a job (unstaked, jailed) are left out of the index; the
rest sit in per-GPU-model lists sorted once by rank, so a job scans from the cheapest and
stops at the first fits. Providers whose capacity runs out are dropped from the lists lazily,
a scan stops where the rank bound proves every later provider is over the job's price cap,
and a job whose requirements already failed (at the same or a higher price cap) is rejected
without a scan — valid because capacity never grows within a round.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

# Constraint names, in the order an explanation lists them.
CONSTRAINTS = ("stake", "jailed", "gpu_model", "vram", "score", "price", "nodes", "capacity")

_HINTS = {
    "stake": "they are not staked above the minimum",
    "jailed": "they are jailed",
    "gpu_model": "they offer a different GPU model",
    "vram": "their GPUs have less VRAM than each worker needs",
    "score": "their score is below the job's min_score",
    "price": "they ask more than the job's max_price_per_unit",
    "nodes": "their sites cannot place all {nodes} of the job's nodes on separate machines, each holding "
             "one node's workers, or do not run jobs across machines",
    "capacity": "they lack free capacity for the whole gang of workers on one provider, or a machine that "
                "holds it",
}


def _hint(constraint: str, job: JobRequest) -> str:
    """Why a constraint rules providers out, in the buyer's terms for this job."""
    if constraint == "capacity" and job.nodes > 1:
        return f"they lack free capacity for all {job.nodes} nodes' workers together"
    return _HINTS[constraint].format(nodes=job.nodes)


# A scan that steps over more exhausted providers than this (plus 1/16 of the list, so that
# rebuilding stays amortized) rebuilds its candidate list without them.
_COMPACT_AFTER = 16


@dataclass(frozen=True, slots=True)
class Machine:
    """One live node of a provider's site, as its site reports it: what a lease's node may take."""

    cpus: float
    gpus: float
    memory_gb: float


@dataclass(frozen=True, slots=True)
class ProviderOffer:
    """What one provider offers this round: free capacity, its asking price and its track record.

    `vram_gb` is per GPU; `measured_perf` is measured throughput relative to the model's
    reference (1.0 = as fast as the reference table says); `score` and `reliability` are 0..1.
    """

    address: str
    gpu_model: str
    gpus: int
    vram_gb: float
    cpus: int
    memory_gb: float
    price_per_unit: int
    stake_ok: bool
    jailed: bool
    score: float
    measured_perf: float
    reliability: float
    node_cpus: float = math.inf  # the largest machine's: one run of a job runs on one machine
    node_gpus: float = math.inf
    priced: bool = True  # False: it declared no price and asks the market's default
    # Each live machine of its site (None: the site did not say), and whether the site runs a
    # job across machines: what a job of several nodes needs.
    machines: tuple[Machine, ...] | None = None
    across_nodes: bool = False

    def __post_init__(self) -> None:
        if self.measured_perf <= 0:
            raise ValueError(f"provider {self.address}: measured_perf must be > 0, got {self.measured_perf}")

    @property
    def cost_per_useful_unit(self) -> float:
        """Expected cost of one unit of reference work: price ÷ measured performance."""
        return self.price_per_unit / self.measured_perf


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One open job's resource needs and limits; `gpu_model=None` takes any model.

    `workers` run on each of the job's `nodes` machines, so one node's share is `workers` ×
    the per-worker needs and the job holds `nodes` × that (`total_*`).
    `vram_gb_per_worker` is spread over the worker's `gpus_per_worker` GPUs, so a provider
    qualifies when `vram_gb × gpus_per_worker ≥ vram_gb_per_worker`.
    """

    job_id: int
    workers: int
    gpus_per_worker: int
    gpu_model: str | None
    vram_gb_per_worker: float
    cpus_per_worker: int
    memory_gb: float
    max_price_per_unit: int
    min_score: float = 0.0
    priority: int = 0
    replicas: int = 1
    nodes: int = 1

    def __post_init__(self) -> None:
        # Every worker needs a CPU (a Ray worker holds one); the index relies on it.
        if min(self.workers, self.replicas, self.cpus_per_worker, self.nodes) < 1 or self.gpus_per_worker < 0:
            raise ValueError(
                f"job {self.job_id}: workers, replicas, nodes and cpus_per_worker must be ≥ 1, "
                "gpus_per_worker ≥ 0"
            )

    @property
    def share(self) -> Machine:
        """One node's share: what each of the job's machines must hold."""
        return Machine(self.workers * self.cpus_per_worker, self.workers * self.gpus_per_worker,
                       self.workers * self.memory_gb)

    @property
    def total_gpus(self) -> int:
        return self.nodes * (self.workers * self.gpus_per_worker)

    @property
    def total_cpus(self) -> int:
        return self.nodes * (self.workers * self.cpus_per_worker)

    @property
    def total_memory_gb(self) -> float:
        return self.nodes * (self.workers * self.memory_gb)

    @property
    def vram_gb_per_gpu(self) -> float:
        """VRAM each GPU must have (infinite when a CPU-only job asks for VRAM)."""
        if self.gpus_per_worker == 0:
            return float("inf") if self.vram_gb_per_worker > 0 else 0.0
        return self.vram_gb_per_worker / self.gpus_per_worker


def spans(machines: tuple[Machine, ...] | None, across_nodes: bool, share: Machine, nodes: int) -> bool:
    """Whether a site can run a job of `nodes` nodes: it runs jobs across machines and has that
    many machines that each hold one node's `share`. Machines are what each node has, not what
    is free on it: a site's running leases are known only as its totals (as with `node_cpus`)."""
    if not across_nodes or machines is None:
        return False
    holding = sum(m.cpus >= share.cpus and m.gpus >= share.gpus and m.memory_gb >= share.memory_gb
                  for m in machines)
    return holding >= nodes


@dataclass(frozen=True, slots=True)
class Assignment:
    job_id: int
    provider: str
    price_per_unit: int


@dataclass(frozen=True)
class Explanation:
    """Why a job matched nothing: providers ruled out per constraint (counted independently)."""

    job_id: int
    providers: int
    ruled_out: dict[str, int]
    text: str

    @property
    def constraint(self) -> str | None:
        """The constraint that ruled out the most providers (None when none ruled any out)."""
        worst = max(CONSTRAINTS, key=lambda name: self.ruled_out[name])
        return worst if self.ruled_out[worst] else None


@dataclass(frozen=True)
class MatchResult:
    assignments: list[Assignment]
    unmatched: dict[int, Explanation] = field(default_factory=dict)


def rank_key(offer: ProviderOffer) -> tuple[float, float, str]:
    """Sort key: cheapest useful work first, then the more reliable, then by address."""
    return (offer.cost_per_useful_unit, -offer.reliability, offer.address)


def match(jobs: Sequence[JobRequest], providers: Sequence[ProviderOffer]) -> MatchResult:
    """Assign each job (higher priority first, then input order) to its best feasible provider(s)."""
    book = _Book(providers)
    order = sorted(range(len(jobs)), key=lambda i: -jobs[i].priority)  # stable: FIFO within a priority
    assignments: list[Assignment] = []
    failed: list[JobRequest] = []
    for i in order:
        job = jobs[i]
        chosen = book.place(job)
        if chosen is None:
            failed.append(job)
            continue
        for p in chosen:
            assignments.append(Assignment(job.job_id, book.address[p], book.price[p]))
    return MatchResult(assignments, _Explainer(providers, book).explain_all(failed))


class _Book:
    """The eligible providers in rank order, indexed by GPU model, with their free capacity."""

    def __init__(self, providers: Sequence[ProviderOffer]) -> None:
        eligible = sorted((o for o in providers if o.stake_ok and not o.jailed), key=rank_key)
        self.address = [o.address for o in eligible]
        self.price = [o.price_per_unit for o in eligible]
        self.cost = [o.cost_per_useful_unit for o in eligible]
        self.score = [o.score for o in eligible]
        self.vram = [o.vram_gb for o in eligible]
        self.model = [o.gpu_model for o in eligible]
        self.perf = [o.measured_perf for o in eligible]
        self.free_gpus = [o.gpus for o in eligible]
        self.free_cpus = [o.cpus for o in eligible]
        self.free_memory = [o.memory_gb for o in eligible]
        self.node_cpus = [o.node_cpus for o in eligible]
        self.node_gpus = [o.node_gpus for o in eligible]
        self.machines = [o.machines for o in eligible]
        self.across = [o.across_nodes for o in eligible]
        # Candidate lists per (GPU model or None for any, whether the job needs GPUs): a job
        # that needs GPUs never wants a provider with none left, nor a CPU job one with no CPUs.
        self._lists: dict[tuple[str | None, bool], list[int]] = {}
        by_model: dict[str | None, list[int]] = {None: list(range(len(eligible)))}
        for p, model in enumerate(self.model):
            by_model.setdefault(model, []).append(p)
        self._by_model = by_model
        # The slowest provider in a list bounds price from below: price ≥ cost × min_perf.
        self._min_perf = {m: min((self.perf[p] for p in ps), default=1.0) for m, ps in by_model.items()}
        self._failed: dict[tuple, float] = {}

    def _candidates(self, model: str | None, needs_gpus: bool) -> list[int]:
        key = (model, needs_gpus)
        found = self._lists.get(key)
        if found is None:
            found = self._lists[key] = list(self._by_model.get(model, ()))
        return found

    def _exhausted(self, p: int, needs_gpus: bool) -> bool:
        return (self.free_gpus[p] <= 0) if needs_gpus else (self.free_cpus[p] <= 0)

    def place(self, job: JobRequest) -> list[int] | None:
        """The best `job.replicas` feasible providers, their capacity consumed; None if too few."""
        need_g, need_c, need_m = job.total_gpus, job.total_cpus, job.total_memory_gb
        vram, min_score, cap = job.vram_gb_per_gpu, job.min_score, job.max_price_per_unit
        nodes = job.nodes
        signature = (job.gpu_model, need_g, need_c, need_m, vram, min_score, job.replicas, nodes)
        if cap <= self._failed.get(signature, -1.0):
            return None  # the same needs already failed at an equal or higher price cap
        needs_gpus = need_g > 0
        candidates = self._candidates(job.gpu_model, needs_gpus)
        cost_bound = cap / self._min_perf.get(job.gpu_model, 1.0)
        free_g, free_c, free_m = self.free_gpus, self.free_cpus, self.free_memory
        cost, price, score, vram_of = self.cost, self.price, self.score, self.vram
        node_c, node_g = self.node_cpus, self.node_gpus
        chosen: list[int] = []
        exhausted = 0
        for p in candidates:
            if cost[p] > cost_bound:
                break  # every provider from here on asks more than the cap
            if (free_g[p] <= 0) if needs_gpus else (free_c[p] <= 0):
                exhausted += 1
                continue
            if (
                free_g[p] >= need_g
                and free_c[p] >= need_c
                and free_m[p] >= need_m
                and price[p] <= cap
                and score[p] >= min_score
                and vram_of[p] >= vram
                and (
                    (node_c[p] >= need_c and node_g[p] >= need_g) if nodes == 1
                    else spans(self.machines[p], self.across[p], job.share, nodes)
                )
            ):
                chosen.append(p)
                if len(chosen) == job.replicas:
                    break
        if exhausted > _COMPACT_AFTER + len(candidates) // 16:
            alive = [p for p in candidates if not self._exhausted(p, needs_gpus)]
            self._lists[(job.gpu_model, needs_gpus)] = alive
        if len(chosen) < job.replicas:
            self._failed[signature] = max(cap, self._failed.get(signature, -1.0))
            return None
        for p in chosen:
            free_g[p] -= need_g
            free_c[p] -= need_c
            free_m[p] -= need_m
        return chosen


class _Explainer:
    """Counts, per constraint, the providers that rule a job out; vectorized over providers."""

    def __init__(self, providers: Sequence[ProviderOffer], book: _Book) -> None:
        self.n = len(providers)
        after = zip(book.address, book.free_gpus, book.free_cpus, book.free_memory, strict=True)
        left = {a: (g, c, m) for a, g, c, m in after}
        free = [left.get(o.address, (o.gpus, o.cpus, o.memory_gb)) for o in providers]
        self.free_gpus = np.array([f[0] for f in free], dtype=np.int64)
        self.free_cpus = np.array([f[1] for f in free], dtype=np.int64)
        self.free_memory = np.array([f[2] for f in free], dtype=np.float64)
        self.node_cpus = np.array([o.node_cpus for o in providers], dtype=np.float64)
        self.node_gpus = np.array([o.node_gpus for o in providers], dtype=np.float64)
        self.unstaked = sum(not o.stake_ok for o in providers)
        self.jailed = sum(o.jailed for o in providers)
        self.model_count: dict[str, int] = {}
        for o in providers:
            self.model_count[o.gpu_model] = self.model_count.get(o.gpu_model, 0) + 1
        self.prices = np.sort(np.array([o.price_per_unit for o in providers], dtype=np.float64))
        self.scores = np.sort(np.array([o.score for o in providers], dtype=np.float64))
        self.vrams = np.sort(np.array([o.vram_gb for o in providers], dtype=np.float64))
        self.model_of = [o.gpu_model for o in providers]
        self.vram_of = np.array([o.vram_gb for o in providers], dtype=np.float64)
        self.price_of = np.array([o.price_per_unit for o in providers], dtype=np.float64)
        self.score_of = np.array([o.score for o in providers], dtype=np.float64)
        self.eligible_of = np.array([o.stake_ok and not o.jailed for o in providers], dtype=bool)
        self.machines_of = [(o.machines, o.across_nodes) for o in providers]
        self._capacity: dict[tuple, int] = {}
        self._models: dict[str, np.ndarray] = {}
        self._spanning: dict[tuple[Machine, int], np.ndarray] = {}
        self._everyone: np.ndarray = np.ones(self.n, dtype=bool)

    def _model_mask(self, model: str) -> np.ndarray:
        mask = self._models.get(model)
        if mask is None:
            mask = self._models[model] = np.array([m == model for m in self.model_of], dtype=bool)
        return mask

    def explain_all(self, jobs: Iterable[JobRequest]) -> dict[int, Explanation]:
        return {job.job_id: self.explain(job) for job in jobs}

    def explain(self, job: JobRequest) -> Explanation:
        n = self.n
        ruled_out = {
            "stake": self.unstaked,
            "jailed": self.jailed,
            "gpu_model": 0 if job.gpu_model is None else n - self.model_count.get(job.gpu_model, 0),
            "vram": int(np.searchsorted(self.vrams, job.vram_gb_per_gpu, side="left")),
            "score": int(np.searchsorted(self.scores, job.min_score, side="left")),
            "price": n - int(np.searchsorted(self.prices, job.max_price_per_unit, side="right")),
            "nodes": n - int(self._spans(job).sum()),
            "capacity": self._lacking_capacity(job),
        }
        return Explanation(job.job_id, n, ruled_out, self._sentence(job, ruled_out))

    def _lacking_capacity(self, job: JobRequest) -> int:
        key = (job.total_gpus, job.total_cpus, job.total_memory_gb, job.nodes == 1)
        count = self._capacity.get(key)
        if count is None:
            count = self._capacity[key] = self.n - int(self._fits(job).sum())
        return count

    def _fits(self, job: JobRequest) -> np.ndarray:
        """Providers with the job's whole gang free; for a job of one node, also a machine with
        its CPUs and GPUs (a job of several nodes is held to its machines by `_spans`)."""
        gpus, cpus = job.total_gpus, job.total_cpus
        free = (self.free_gpus >= gpus) & (self.free_cpus >= cpus) & (self.free_memory >= job.total_memory_gb)
        return free & (self.node_gpus >= gpus) & (self.node_cpus >= cpus) if job.nodes == 1 else free

    def _spans(self, job: JobRequest) -> np.ndarray:
        """Providers whose sites can place each of the job's nodes on a machine of its own (every
        provider, for a job of one node)."""
        if job.nodes == 1:
            return self._everyone
        key = (job.share, job.nodes)
        mask = self._spanning.get(key)
        if mask is None:
            mask = self._spanning[key] = np.array(
                [spans(machines, across, job.share, job.nodes) for machines, across in self.machines_of],
                dtype=bool,
            )
        return mask

    def _feasible(self, job: JobRequest) -> int:
        """Providers that pass every constraint now (only nonzero when replicas ask for more)."""
        ok = (
            self.eligible_of
            & (self.vram_of >= job.vram_gb_per_gpu)
            & (self.score_of >= job.min_score)
            & (self.price_of <= job.max_price_per_unit)
            & self._fits(job)
            & self._spans(job)
        )
        if job.gpu_model is not None:
            ok &= self._model_mask(job.gpu_model)
        return int(ok.sum())

    def _sentence(self, job: JobRequest, ruled_out: dict[str, int]) -> str:
        if self.n == 0:
            return f"Job {job.job_id} matched no provider: no providers are offering capacity."
        worst = max(CONSTRAINTS, key=lambda name: ruled_out[name])
        if job.replicas > 1 and (feasible := self._feasible(job)) > 0:
            return (
                f"Job {job.job_id} matched no provider: only {feasible} of {self.n} providers qualify "
                f"but it asks for {job.replicas} replicas on distinct providers."
            )
        if worst == "gpu_model" and job.gpu_model is not None and self.model_count.get(job.gpu_model, 0):
            return self._among_model(job, job.gpu_model)
        return (
            f"Job {job.job_id} matched no provider: {worst} ruled out the most, "
            f"{ruled_out[worst]} of {self.n} providers ({_hint(worst, job)})."
        )

    def _among_model(self, job: JobRequest, model: str) -> str:
        """Other models always outnumber the one asked for; name what stopped that model's providers."""
        mask = self._model_mask(model)
        among = {
            "stake or jail": int((mask & ~self.eligible_of).sum()),
            "vram": int((mask & (self.vram_of < job.vram_gb_per_gpu)).sum()),
            "score": int((mask & (self.score_of < job.min_score)).sum()),
            "price": int((mask & (self.price_of > job.max_price_per_unit)).sum()),
            "nodes": int((mask & ~self._spans(job)).sum()),
            "capacity": int((mask & ~self._fits(job)).sum()),
        }
        worst = max(among, key=lambda name: among[name])
        hint = "they are unstaked or jailed" if worst == "stake or jail" else _hint(worst, job)
        return (
            f"Job {job.job_id} matched no provider: of the {int(mask.sum())} {model} providers, "
            f"{worst} ruled out the most, {among[worst]} ({hint})."
        )
