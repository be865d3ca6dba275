"""The simulated providers: their strategies, hardware, prices, stakes and running state.

Every price and cost is in SWARM per device-hour — a GPU's, or one core's for a CPU node (read
1 SWARM as 1 USD to compare with clouds). A provider stakes `STAKE_HOURS` hours of its real
hardware's market rent, and its costs are fractions of that rent, so an honest provider's
return on stake is about the same whatever it runs, and strategies compare fairly across
hardware. What the challenge measures on that hardware comes from bench/econ/measured.py:
measured where bench/results holds it, assumed otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bench.econ.measured import Throughputs
from compute.reference import precisions, reference_gflops

WEI = 10**18

# Market rent of one device-hour, SWARM: a GPU's (marketplace prices, rounded), or one core's on
# a CPU node (about a cloud vCPU-hour on demand).
PRICE_PER_GPU_HOUR = {"H100": 2.50, "A100": 1.40, "L40S": 1.00, "L4": 0.45, "RTX4090": 0.40,
                      "A10": 0.60, "T4": 0.30, "V100": 0.50, "cpu": 0.05}
# The real hardware of honest, lazy and fraudulent providers: a tenth CPU nodes, the only
# hardware whose challenge is measured so far, the rest GPUs in these shares.
CPU_SHARE = 0.10
GPU_MIX = {"H100": 0.15, "A100": 0.20, "L40S": 0.10, "L4": 0.15, "RTX4090": 0.15,
           "A10": 0.10, "T4": 0.10, "V100": 0.05}
HARDWARE_MIX = {"cpu": CPU_SHARE} | {model: (1 - CPU_SHARE) * share for model, share in GPU_MIX.items()}
# (real, declared): the challenge's fp32 throughput ratio is under 0.5 for each (0.42, 0.45, 0.47).
MISDECLARED = (("T4", "A100"), ("L4", "H100"), ("A10", "H100"))
# (real, declared) that look alike in fp32 (ratios 1.23, 0.81 and 1.60), which the fp32
# challenge alone could not tell apart; in the declared model's tensor-core precision they
# measure 0.17, 0.05 (a V100 has no bf16: it computes the bf16 challenge in fp32) and 0.40.
MISDECLARED_SUBTLE = (("RTX4090", "H100"), ("V100", "A100"), ("A10", "A100"))

GPUS_PER_PROVIDER = 8  # devices: GPUs, or a CPU node's cores
STAKE_HOURS = 500  # stake = 500 hours of the real hardware's rent (≈ 3 weeks of full use)
AMORTIZATION = 0.35  # × rent, every hour the hardware is in the network: purchase, hosting, network
IDLE_POWER = 0.03  # × rent, per GPU-hour online and idle
LOAD_POWER = 0.12  # × rent, per GPU-hour running a job
CHEAP_HOSTING = 0.25  # × rent: a lazy provider's amortization (no redundant power or network)


@dataclass(frozen=True)
class Strategy:
    """How a provider behaves: availability, and how it cuts corners."""

    name: str
    online: tuple[float, float]  # fraction of the epoch it answers probes, uniform in this range
    abandon_p: float = 0.0  # each job it takes is abandoned with this chance
    fake_job_p: float = 0.0  # each job it takes is answered with a made-up result with this chance
    fake_challenge_p: float = 0.0  # each epoch, the challenge answered with a made-up checksum
    amortization: float = AMORTIZATION
    pairs: tuple[tuple[str, str], ...] = ()  # (real, declared) models; empty: declares the truth


HONEST = Strategy("honest", online=(0.99, 1.0))
LAZY = Strategy("lazy", online=(0.40, 0.70), abandon_p=0.2, amortization=CHEAP_HOSTING)
MISDECLARING = Strategy("misdeclaring", online=(0.99, 1.0), pairs=MISDECLARED)
FRAUDULENT = Strategy("fraudulent", online=(0.99, 1.0), fake_job_p=0.25, fake_challenge_p=0.05)
MISDECLARING_SUBTLE = Strategy("misdeclaring (fp32-alike)", online=(0.99, 1.0), pairs=MISDECLARED_SUBTLE)

STRATEGIES = (HONEST, LAZY, MISDECLARING, FRAUDULENT, MISDECLARING_SUBTLE)
GOAL_STRATEGIES = ("honest", "lazy", "misdeclaring", "fraudulent", "misdeclaring (fp32-alike)")
# Shares of the network: mostly honest, 10 % for each cheat the matrix targets.
DEFAULT_MIX = {"honest": 0.65, "lazy": 0.10, "misdeclaring": 0.10, "fraudulent": 0.10,
               "misdeclaring (fp32-alike)": 0.05}


@dataclass
class Network:
    """Every provider's fixed traits and running state, as arrays aligned by provider index."""

    strategy: np.ndarray  # int: index into STRATEGIES
    real_model: list[str]
    declared_model: list[str]
    gpus: np.ndarray
    stake_wei: list[int]  # what is left after slashes
    initial_stake_wei: list[int]
    jailed_until: np.ndarray  # int: the last epoch it sits out; -1: never jailed
    tombstoned: np.ndarray
    successes: np.ndarray
    failures: np.ndarray
    epochs_staked: np.ndarray
    performance: np.ndarray  # the last epoch's scores, as the market reads them
    reliability: np.ndarray
    throughput: Throughputs  # what the challenge measures on each real model: measured or assumed
    addresses: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.real_model)

    def rent(self, models: list[str]) -> np.ndarray:
        return np.array([PRICE_PER_GPU_HOUR[m] for m in models])

    def judged_ratio(self, rng: np.random.Generator | None = None) -> np.ndarray:
        """What the oracle judges (oracle/epoch.py): the weaker of fp32 and the declared model's
        tensor-core precision, each the real hardware's throughput in it (a GPU without that
        precision computes in fp32) ÷ the declared model's reference. With `rng`, the figures of
        one challenge each; without, the typical ones (the median measured run, or the reference)."""
        ratio = np.empty(self.n)
        pairs = np.array([f"{r}|{d}" for r, d in zip(self.real_model, self.declared_model, strict=True)])
        for pair in np.unique(pairs):
            real, declared = str(pair).split("|")
            mask = pairs == pair
            ratio[mask] = np.min([self._figures(real, p, int(mask.sum()), rng) / reference_gflops(declared, p)
                                  for p in precisions(declared)], axis=0)
        return ratio

    def _figures(self, model: str, precision: str, n: int, rng: np.random.Generator | None) -> np.ndarray:
        throughput = self.throughput.of(model, precision)
        return throughput.draw(rng, n) if rng is not None else np.full(n, throughput.gflops)

    def of(self, name: str) -> np.ndarray:
        """Mask of the providers following the strategy `name`."""
        return self.strategy == [s.name for s in STRATEGIES].index(name)

    def traits(self, attribute: str) -> np.ndarray:
        """A strategy attribute per provider (`online`, `abandon_p`, …)."""
        values = [getattr(s, attribute) for s in STRATEGIES]
        return np.array([values[k] for k in self.strategy])


def build_network(providers: int, mix: dict[str, float], rng: np.random.Generator,
                  throughput: Throughputs) -> Network:
    """`providers` providers in the shares of `mix` (at least one of each strategy it names),
    whose hardware measures `throughput` on the challenge."""
    names = [s.name for s in STRATEGIES]
    counts = {name: max(1, round(providers * share)) for name, share in mix.items() if share > 0}
    counts[HONEST.name] += providers - sum(counts.values())
    strategy = np.concatenate([np.full(c, names.index(name)) for name, c in counts.items()])
    models = list(HARDWARE_MIX)
    real, declared = [], []
    for k in strategy.tolist():
        pairs = STRATEGIES[k].pairs
        if pairs:
            r, d = pairs[rng.integers(len(pairs))]
        else:
            r = d = models[rng.choice(len(models), p=list(HARDWARE_MIX.values()))]
        real.append(r)
        declared.append(d)
    n = len(strategy)
    gpus = np.full(n, GPUS_PER_PROVIDER)
    stake = [round(g * PRICE_PER_GPU_HOUR[r] * STAKE_HOURS * 100) * WEI // 100
             for g, r in zip(gpus.tolist(), real, strict=True)]
    return Network(
        strategy=strategy, real_model=real, declared_model=declared, gpus=gpus,
        stake_wei=list(stake), initial_stake_wei=list(stake),
        jailed_until=np.full(n, -1), tombstoned=np.zeros(n, dtype=bool),
        successes=np.zeros(n, dtype=np.int64), failures=np.zeros(n, dtype=np.int64),
        epochs_staked=np.zeros(n, dtype=np.int64),
        performance=np.ones(n), reliability=np.full(n, 0.5),  # the market's neutral offer for the unscored
        throughput=throughput,
        addresses=[f"0x{i + 1:040x}" for i in range(n)],
    )
