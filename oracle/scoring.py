"""One epoch's measurements → each provider's score, weight and exact reward (docs/architecture.md §6).

Pure and vectorized: numpy arrays in, numpy arrays and Python ints out; no chain, no
database, no Ray. The epoch pipeline gathers `EpochInputs` and calls `score_epoch`.

- uptime = answered probes ÷ probes sent (0 with none sent);
- performance = challenge throughput ÷ the declared model's reference, capped at
  `weights.performance_cap`: the ratio its challenge recorded against the reference it was
  judged by when it ran, so every committee member scores the same records alike, whatever
  reference its own machine holds; an epoch without a challenge carries the previous
  epoch's figure (`previous_performance`), or 1.0 (the reference) when there is none;
- reliability = the `reliability.quantile` lower bound of the Beta posterior of job outcomes;
- loyalty = min(1, start + (1 − start) × epochs_staked ÷ ramp);
- weight = stake^a × uptime^b × performance^c × reliability^d × loyalty for eligible
  providers, 0 for the rest;
- reward = the emission split in proportion to weight, in wei, summing exactly to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import betaincinv

from compute.errors import ComputeError
from compute.reference import reference_gflops
from ledger.errors import InvalidInput
from oracle.config import OracleConfig
from oracle.slashing import SlashDecision, slashing_matrix, tombstones

# Integer weights for the exact split sum to at most this, so they and the remainders stay in int64.
WEIGHT_TOTAL = 2**62


@dataclass(frozen=True)
class EpochInputs:
    """Everything measured about the providers in one epoch, aligned to `providers`."""

    providers: list[str]
    stake_wei: Sequence[int] | np.ndarray  # weights use it as float64; rewards never do
    declared_model: list[str]  # a compute.reference model name (or one nobody knows)
    probe_provider: np.ndarray  # int: provider index of each probe sample
    probe_ok: np.ndarray  # bool: that probe got an answer
    # float64: challenge throughput (oracle/epoch.py judges it); NaN: none to judge
    measured_gflops: np.ndarray
    challenge_ok: np.ndarray  # bool: no challenge proof refuted; True when no challenge ran
    job_successes: np.ndarray  # int: over the provider's whole history (reliability)
    job_failures: np.ndarray  # int: likewise
    abandoned: np.ndarray  # int: jobs the provider lost through its own fault this epoch
    replication_mismatch: np.ndarray  # bool: a replicated job's result differed from its replicas'
    epochs_staked: np.ndarray  # int: consecutive epochs since the last unstake request (0 right after one)
    jailed: np.ndarray  # bool: jailed or tombstoned at the epoch's end
    utilization: float  # network utilization this epoch, 0..1
    previous_performance: np.ndarray | None = None  # float64: last epoch's performance; NaN: none
    tombstoned: np.ndarray | None = None  # bool: tombstoned at the epoch's end (None: nobody is)
    # float64, as the challenge behind measured_gflops recorded them when it ran: its ratio to the
    # reference it was judged against, and that reference in fp32 GFLOPS (NaN: none recorded).
    # Scoring takes them over this machine's own references (a CPU's is measured per machine), so
    # members score the same records alike. None: measured_gflops ÷ this machine's reference_table.
    recorded_ratio: np.ndarray | None = None
    recorded_reference_gflops: np.ndarray | None = None
    # bool: a serving lease's answers to the oracle's canaries were not its model's (None: none were)
    canary_mismatch: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.providers)
        per_provider = ("stake_wei", "declared_model", "measured_gflops", "challenge_ok", "job_successes",
                        "job_failures", "abandoned", "replication_mismatch", "epochs_staked", "jailed")
        for name in (*per_provider, "previous_performance", "tombstoned", "recorded_ratio",
                     "recorded_reference_gflops", "canary_mismatch"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise InvalidInput(f"epoch input {name} has {len(value):,} entries for {n:,} providers; "
                                   "give one per provider, in the providers' order.")
        if len(self.probe_provider) != len(self.probe_ok):
            raise InvalidInput(f"epoch input probe_ok has {len(self.probe_ok):,} entries for "
                               f"{len(self.probe_provider):,} probe samples; give one per sample.")
        if len(self.probe_provider) and (self.probe_provider.min() < 0 or self.probe_provider.max() >= n):
            raise InvalidInput(f"epoch input probe_provider holds indices outside 0..{n - 1}; "
                               "each sample names its provider by its index in providers.")
        for name in ("job_successes", "job_failures", "abandoned", "epochs_staked"):
            if n and np.min(getattr(self, name)) < 0:
                raise InvalidInput(f"epoch input {name} holds a negative count; counts start at 0.")
        for name in ("measured_gflops", "recorded_ratio", "recorded_reference_gflops"):
            value = getattr(self, name)
            figures = np.asarray(value if value is not None else [], dtype=np.float64)
            if np.any(figures < 0) or np.any(np.isinf(figures)):
                raise InvalidInput(f"epoch input {name} holds a negative or infinite figure; "
                                   "give figures ≥ 0, or NaN when no challenge ran.")


@dataclass(frozen=True)
class Measures:
    """Per-provider measurements before eligibility, weights and slashing."""

    samples: np.ndarray  # int64: probes sent
    answered: np.ndarray  # int64: probes answered
    uptime: np.ndarray
    reference_gflops: np.ndarray  # the one `ratio` is to; NaN: the declared model has no reference
    ratio: np.ndarray  # measured ÷ reference this epoch, uncapped; NaN: no challenge or no reference
    performance: np.ndarray
    reliability: np.ndarray
    loyalty: np.ndarray


@dataclass(frozen=True)
class EpochScores:
    providers: list[str]
    samples: np.ndarray  # probes sent to each provider
    uptime: np.ndarray
    performance: np.ndarray  # what the next epoch's previous_performance should be
    reliability: np.ndarray
    loyalty: np.ndarray
    eligible: np.ndarray
    weight: np.ndarray  # 0 for ineligible providers; relative, not normalized
    reward_wei: list[int]  # sums exactly to emission_wei
    emission_wei: int  # 0 when no provider is eligible: nothing is minted into the void
    reasons: list[str]  # why a provider is ineligible ("" when it is eligible)
    slashes: list[SlashDecision]  # at most one per provider, in provider order


def score_epoch(
    inputs: EpochInputs, config: OracleConfig, *, devnet: bool = False, epoch_length_s: float | None = None
) -> EpochScores:
    """The epoch's scores, rewards and slashes.

    Jail time is counted in epochs of `epoch_length_s`, by default the configured length
    (the devnet's with `devnet`).
    """
    measures = measure(inputs, config)
    slashes = slashing_matrix(inputs, measures, config, devnet=devnet, epoch_length_s=epoch_length_s)
    eligible, reasons = eligibility(inputs, measures, slashes, config)
    weight = weights(inputs, measures, eligible, config)
    emission = config.emission.emission_wei(inputs.utilization)
    rewards = split_rewards(emission, weight)
    return EpochScores(
        providers=list(inputs.providers),
        samples=measures.samples,
        uptime=measures.uptime,
        performance=measures.performance,
        reliability=measures.reliability,
        loyalty=measures.loyalty,
        eligible=eligible,
        weight=weight,
        reward_wei=rewards,
        emission_wei=sum(rewards),
        reasons=reasons,
        slashes=slashes,
    )


def measure(inputs: EpochInputs, config: OracleConfig) -> Measures:
    """Uptime, performance, reliability and loyalty per provider, before any judgement."""
    n = len(inputs.providers)
    samples, answered, uptime = uptimes(inputs.probe_provider, inputs.probe_ok, n)
    ratio, reference = judged(inputs)
    measured = np.asarray(inputs.measured_gflops, dtype=np.float64)
    challenge_ok = np.asarray(inputs.challenge_ok, dtype=bool)
    previous = (np.full(n, np.nan) if inputs.previous_performance is None
                else np.asarray(inputs.previous_performance, dtype=np.float64))
    # No challenge this epoch: the last known figure, else the reference (1.0) — a newcomer
    # is not scored as slow before it was ever measured.
    performance = np.where(np.isnan(measured), np.where(np.isnan(previous), 1.0, previous), ratio)
    performance = np.clip(performance, 0.0, config.weights.performance_cap)
    performance[np.isnan(reference) | ~challenge_ok] = 0.0
    return Measures(
        samples=samples,
        answered=answered,
        uptime=uptime,
        reference_gflops=reference,
        ratio=ratio,
        performance=performance,
        reliability=reliability(inputs.job_successes, inputs.job_failures, config),
        loyalty=loyalty(inputs.epochs_staked, config),
    )


def uptimes(
    probe_provider: np.ndarray, probe_ok: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(probes sent, probes answered, answered ÷ sent or 0) per provider, from the raw samples."""
    sent = np.bincount(probe_provider, minlength=n)
    answered = np.bincount(probe_provider[np.asarray(probe_ok, dtype=bool)], minlength=n)
    uptime = np.zeros(n)
    np.divide(answered, sent, out=uptime, where=sent > 0)
    return sent, answered, uptime


def judged(inputs: EpochInputs) -> tuple[np.ndarray, np.ndarray]:
    """(ratio, reference) per provider: as its challenge recorded them where it did, else
    measured ÷ this machine's `reference_table`; both NaN where the declared model has none.

    Whether a model has a reference depends only on its name, so that one question is this
    machine's to answer; how fast a challenged provider was is its record's, never recomputed
    against a reference that differs from member to member or has changed since."""
    table = reference_table(inputs.declared_model)
    measured = np.asarray(inputs.measured_gflops, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = measured / table
    reference = table
    if inputs.recorded_ratio is not None:
        recorded = np.asarray(inputs.recorded_ratio, dtype=np.float64)
        ratio = np.where(np.isnan(recorded), ratio, recorded)
    if inputs.recorded_reference_gflops is not None:
        recorded = np.asarray(inputs.recorded_reference_gflops, dtype=np.float64)
        reference = np.where(np.isnan(recorded), reference, recorded)
    unknown = np.isnan(table)
    return np.where(unknown, np.nan, ratio), np.where(unknown, np.nan, reference)


def reference_table(declared_model: Sequence[str]) -> np.ndarray:
    """Reference GFLOPS per provider; NaN for a model compute.reference does not know."""
    known: dict[str, float] = {}
    for model in set(declared_model):
        try:
            known[model] = reference_gflops(str(model))
        except ComputeError:
            known[model] = np.nan
    return np.fromiter((known[m] for m in declared_model), dtype=np.float64, count=len(declared_model))


def reliability(successes: np.ndarray, failures: np.ndarray, config: OracleConfig) -> np.ndarray:
    """The lower `quantile` bound of Beta(prior_s + successes, prior_f + failures)."""
    r = config.reliability
    a = r.prior_successes + np.asarray(successes, dtype=np.float64)
    b = r.prior_failures + np.asarray(failures, dtype=np.float64)
    return betaincinv(a, b, r.quantile)


def loyalty(epochs_staked: np.ndarray, config: OracleConfig) -> np.ndarray:
    w = config.weights
    ramp = np.asarray(epochs_staked, dtype=np.float64) / w.loyalty_ramp_epochs
    return np.minimum(1.0, w.loyalty_start + (1.0 - w.loyalty_start) * ramp)


def eligibility(
    inputs: EpochInputs, measures: Measures, slashes: Sequence[SlashDecision], config: OracleConfig
) -> tuple[np.ndarray, list[str]]:
    """Who earns this epoch, and for everyone else a short reason (several joined by '; ')."""
    n = len(inputs.providers)
    e = config.eligibility
    stake = np.asarray(inputs.stake_wei, dtype=np.float64)
    no_reference = np.isnan(measures.reference_gflops)
    tombstoned = tombstones(inputs)
    rules: list[tuple[np.ndarray, object]] = [
        (tombstoned, "tombstoned"),
        (np.asarray(inputs.jailed, dtype=bool) & ~tombstoned, "jailed"),
        (stake <= 0, "no stake"),
        (measures.samples == 0, "no probe samples"),
        ((measures.samples > 0) & (measures.uptime < e.min_uptime),
         lambda i: f"uptime {measures.uptime[i]:.2f} < {e.min_uptime:g}"),
        (no_reference, lambda i: f"no reference throughput for {inputs.declared_model[i]!r}"),
        (~no_reference & (measures.performance < e.min_performance),
         lambda i: f"performance {measures.performance[i]:.2f} < {e.min_performance:g}"),
    ]
    reasons = [""] * n
    for mask, text in rules:
        for i in np.flatnonzero(mask).tolist():
            _add(reasons, i, text(i) if callable(text) else str(text))
    for s in slashes:
        _add(reasons, s.provider_index, f"slashed for {s.row}")
    eligible = np.fromiter((not r for r in reasons), dtype=bool, count=n)
    return eligible, reasons


def _add(reasons: list[str], i: int, text: str) -> None:
    reasons[i] = f"{reasons[i]}; {text}" if reasons[i] else text


def weights(
    inputs: EpochInputs, measures: Measures, eligible: np.ndarray, config: OracleConfig
) -> np.ndarray:
    """stake^a × uptime^b × performance^c × reliability^d × loyalty; 0 for the ineligible."""
    w = config.weights
    weight = np.zeros(len(inputs.providers))
    if not eligible.any():
        return weight
    stake = np.asarray(inputs.stake_wei, dtype=np.float64)[eligible]
    # Relative to the largest stake: ratios are what count, and 1e27 wei to a power would overflow.
    weight[eligible] = (
        (stake / stake.max()) ** w.stake
        * measures.uptime[eligible] ** w.uptime
        * measures.performance[eligible] ** w.performance
        * measures.reliability[eligible] ** w.reliability
        * measures.loyalty[eligible]
    )
    return weight


def split_rewards(emission_wei: int, weight: np.ndarray) -> list[int]:
    """`emission_wei` split in proportion to `weight`, in whole wei summing exactly to it.

    Each provider gets floor(emission × wᵢ ÷ Σw); the few wei left over go one each to the
    largest fractional parts, ties to the earlier provider. The weights are first made
    integers summing to at most 2^62 (≈ 2^62 ÷ n resolution per provider, a positive weight
    never below 1), so the division is exact integer arithmetic on Python ints. With no
    positive weight nothing is paid (and the caller emits nothing).
    """
    w = np.asarray(weight, dtype=np.float64)
    n = len(w)
    if emission_wei < 0 or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("rewards split a non-negative emission by finite, non-negative weights")
    positive = w > 0
    count = int(positive.sum())
    if emission_wei == 0 or count == 0:
        return [0] * n
    scaled = np.floor((w / w.max()) * (WEIGHT_TOTAL // count)).astype(np.int64)
    scaled[positive & (scaled == 0)] = 1
    total = int(scaled.sum())
    products = scaled.astype(object) * emission_wei  # Python ints: emission × weight exceeds 64 bits
    shares = products // total
    remainders = (products - shares * total).astype(np.int64)  # < total ≤ 2^62 + n
    left = emission_wei - int(shares.sum())
    if left:
        shares[np.argsort(-remainders, kind="stable")[:left]] += 1
    return shares.tolist()
