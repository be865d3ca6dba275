"""The job market of one epoch: demand, who gets it, what is paid, what it costs to serve.

- Demand: `utilization` × the whole network's GPU-hours this epoch, in jobs of `JOB_GPU_HOURS`.
- Matching, a smooth stand-in for the matcher's ranking: demand goes to providers that are
  not jailed or tombstoned, in proportion to their online GPU capacity × the market's last
  read of measured performance × reliability (price ÷ performance with every provider asking
  its declared model's rent), never above a provider's online capacity.
- Payment: buyers are billed GPU-hours at the declared model's rent, capped by `max_units`
  sized for the declared model, so a provider whose GPU is slower than it declares is paid
  rent × min(1, ratio) an hour, the ratio being the weaker of fp32 and the tensor-core
  precision buyers train in; less the protocol fee. Abandoned jobs and faked results
  caught by replication are not paid.
- Costs: amortization every epoch in the network (jailed too; none once tombstoned, the
  hardware is redeployed), load power on jobs really run, idle power while online.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.econ.network import IDLE_POWER, LOAD_POWER, Network

JOB_GPU_HOURS = 4.0  # one job: e.g. 4 GPUs for an hour
REPLICATED_SHARE = 0.10  # jobs run 3-way replicated: a made-up result is outvoted, hence fraud
FEE_BPS = 250  # JobMarket's protocol fee at deployment (ledger/deploy.py)


@dataclass(frozen=True)
class JobOutcome:
    """One epoch of jobs per provider: counts for the oracle and SWARM for the books."""

    completed: np.ndarray  # jobs done and paid (faked ones that were not caught included)
    abandoned: np.ndarray  # lost through the provider's fault: unpaid, a failure, a slash
    caught: np.ndarray  # faked results outvoted by replicas: unpaid, a failure, fraud
    income: np.ndarray
    cost: np.ndarray


def allocate(demand: float, capacity: np.ndarray, appeal: np.ndarray) -> np.ndarray:
    """GPU-hours per provider: `demand` in proportion to capacity × appeal, filled to capacity."""
    hours = np.zeros(len(capacity))
    open_ = (capacity > 0) & (appeal > 0)
    remaining = demand
    while remaining > 1e-9 and open_.any():
        want = capacity * appeal * open_
        share = remaining * want / want.sum()
        full = open_ & (hours + share >= capacity)
        if not full.any():
            return hours + share
        remaining -= float((capacity[full] - hours[full]).sum())
        hours[full] = capacity[full]
        open_ &= ~full
    return hours


def run_jobs(net: Network, online: np.ndarray, serving: np.ndarray, utilization: float,
             rng: np.random.Generator) -> JobOutcome:
    """The epoch's jobs for every provider; `serving`: not jailed and not tombstoned."""
    fake_p = net.traits("fake_job_p")
    # A provider faking a share of its results has that much more room to take jobs.
    capacity = net.gpus * online * serving / (1.0 - fake_p)
    demand = utilization * float(net.gpus.sum())
    hours = allocate(demand, capacity, net.performance * net.reliability)
    jobs = rng.poisson(hours / JOB_GPU_HOURS)
    abandoned = rng.binomial(jobs, net.traits("abandon_p"))
    faked = rng.binomial(jobs - abandoned, fake_p)
    caught = rng.binomial(faked, REPLICATED_SHARE)
    completed = jobs - abandoned - caught

    rent = net.rent(net.real_model)
    rate = net.rent(net.declared_model) * np.minimum(1.0, net.judged_ratio())
    income = completed * JOB_GPU_HOURS * rate * (1 - FEE_BPS / 10_000)
    load = (jobs - faked - abandoned / 2) * JOB_GPU_HOURS  # an abandoned job ran half-way
    idle = np.maximum(0.0, net.gpus * online - load)
    cost = ~net.tombstoned * rent * (net.traits("amortization") * net.gpus
                                     + LOAD_POWER * load + IDLE_POWER * idle)
    return JobOutcome(completed, abandoned, caught, income, cost)
