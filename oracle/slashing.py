"""The slashing matrix: which providers an epoch slashes, by how much, and for how long.

Four rows, severest first — fraud > misrepresentation > abandonment > downtime. A provider
gets at most one decision an epoch, from the severest row it triggers: a tombstone already
says everything a downtime slash would. Evidence is required: a provider the oracle sent no
probe is not slashed for downtime (an oracle outage must not slash the network), and a
provider with no judged challenge figure this epoch (oracle/epoch.py: the best of at least two
challenges, this epoch's and the previous one's) is not slashed for misrepresentation.

A provider already jailed is serving time for a standing condition, so it is not slashed
again for downtime or misrepresentation while it sits out; fraud and abandoned jobs are new
acts and are slashed. A tombstoned provider is out for good: it gets no decision at all
(its tombstone already took what a slash would), and no reward.

Correlated failures: when more than `slashing.correlation.threshold` of the epoch's scored
providers are hit by downtime, abandonment or misrepresentation, each of those slashes is
multiplied by min(max_multiplier, 1 + factor × fraction hit), rounded to whole bps (halves up) and
capped at the vault's `slashing.max_bps`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from eth_utils import keccak

from ledger.reports import (
    MAX_DEFERRED_PER_REPORT,
    MAX_JAIL_SECONDS,
    MAX_SLASHES_PER_REPORT,
    MAX_TOMBSTONES_PER_REPORT,
    Slash,
    reason_bytes,
)
from oracle.config import OracleConfig, load_config

if TYPE_CHECKING:
    from oracle.scoring import EpochInputs, Measures

ROWS = ("fraud", "misrepresentation", "abandonment", "downtime")  # severest first
CORRELATED = frozenset({"misrepresentation", "abandonment", "downtime"})

# The reasons logged on chain (bytes32): ≤ 31 ASCII characters each.
REASONS = {
    "fraud:proof": "fraud: challenge proof refuted",
    "fraud:replication": "fraud: replication mismatch",
    "fraud:canary": "fraud: serving canary mismatch",
    "misrepresentation": "hardware misrepresentation",
    "abandonment": "job abandonment",
    "downtime": "downtime",
}


@dataclass(frozen=True)
class SlashDecision:
    provider_index: int
    provider: str
    row: str  # one of ROWS
    bps: int  # of the provider's stake, correlation multiplier and cap applied
    jail_seconds: int  # 0: no jail
    tombstone: bool
    reason: str  # ≤ 31 ASCII characters, for the report's bytes32
    detail: str  # one sentence with the numbers behind it

    def to_slash(self, evidence_hash: bytes | None = None) -> Slash:
        """The report's slash entry; the evidence defaults to the keccak of `detail`."""
        evidence = keccak(text=self.detail) if evidence_hash is None else evidence_hash
        return Slash(self.provider, self.bps, reason_bytes(self.reason), evidence, self.jail_seconds,
                     self.tombstone)


@dataclass(frozen=True)
class MatrixRow:
    """One row of the matrix as text, for docs and `swarm oracle show`."""

    row: str
    detection: str
    slash: str
    jail: str
    recovery: str


def slashing_matrix(
    inputs: EpochInputs,
    measures: Measures,
    config: OracleConfig,
    *,
    devnet: bool = False,
    epoch_length_s: float | None = None,
) -> list[SlashDecision]:
    """Every slash the epoch orders, in provider order, one per provider at most.

    Jail time is `jail_epochs` × `epoch_length_s`, by default the configured epoch length
    (the devnet's with `devnet`).
    """
    s = config.slashing
    n = len(inputs.providers)
    jailed = np.asarray(inputs.jailed, dtype=bool)
    refuted = ~np.asarray(inputs.challenge_ok, dtype=bool)
    mismatch = np.asarray(inputs.replication_mismatch, dtype=bool)
    canary = (np.zeros(n, dtype=bool) if inputs.canary_mismatch is None
              else np.asarray(inputs.canary_mismatch, dtype=bool))
    abandoned = np.asarray(inputs.abandoned, dtype=np.int64)
    with np.errstate(invalid="ignore"):
        triggered = {
            "downtime": ~jailed & (measures.samples >= s.downtime.min_samples)
                    & (measures.uptime < s.downtime.below_uptime),
            "abandonment": abandoned > 0,
            "misrepresentation": ~jailed & ~refuted & (measures.ratio < s.misrepresentation.below_ratio),
            "fraud": refuted | mismatch | canary,
        }
    row_of: np.ndarray = np.full(n, -1, dtype=np.int8)
    for severity in range(len(ROWS) - 1, -1, -1):  # the severest row applied last wins
        name = ROWS[severity]
        if _active(config, name):
            row_of[triggered[name]] = severity
    row_of[tombstones(inputs)] = -1

    hit = int(np.isin(row_of, [ROWS.index(r) for r in CORRELATED]).sum())
    fraction = hit / n if n else 0.0
    multiplier = s.correlation.multiplier(fraction)
    epoch_s = epoch_length_s or config.epoch.timing(devnet).length_s

    decisions = []
    for i in np.flatnonzero(row_of >= 0).tolist():
        name = ROWS[row_of[i]]
        row = s.row(name)
        bps = row.bps
        if name == "abandonment":  # bps per job lost, up to the row's cap
            bps = min(s.abandonment.max_bps, s.abandonment.bps * int(abandoned[i]))
        correlated = name in CORRELATED and multiplier > 1.0
        if correlated:
            bps = math.floor(bps * multiplier + 0.5)  # to whole bps, halves up
        bps = min(bps, s.max_bps)
        jail_seconds = 0 if row.tombstone else round(row.jail_epochs * epoch_s)
        if not (bps or jail_seconds or row.tombstone):
            continue  # a penalty that rounds to nothing is no slash: a report may not carry an empty one
        key = _fraud_key(refuted[i], mismatch[i]) if name == "fraud" else name
        evidence = _evidence(key, i, inputs, measures, config)
        consequence = _consequence(bps, jail_seconds, row.tombstone)
        if correlated:
            consequence += f" (×{multiplier:.2f}: {hit:,} of {n:,} providers were hit this epoch)"
        decisions.append(SlashDecision(
            provider_index=i,
            provider=inputs.providers[i],
            row=name,
            bps=bps,
            jail_seconds=jail_seconds,
            tombstone=row.tombstone,
            reason=REASONS[key],
            detail=f"{evidence}: {consequence}.",
        ))
    return decisions


def _fraud_key(refuted: bool, mismatch: bool) -> str:
    """Which fraud a provider's row records, the first that applies: a refuted proof, a
    replication mismatch, else a canary mismatch."""
    return "fraud:proof" if refuted else "fraud:replication" if mismatch else "fraud:canary"


def tombstones(inputs: EpochInputs) -> np.ndarray:
    """Which providers are tombstoned, as a bool array (all False when the inputs do not say)."""
    if inputs.tombstoned is None:
        return np.zeros(len(inputs.providers), dtype=bool)
    return np.asarray(inputs.tombstoned, dtype=bool)


def _active(config: OracleConfig, name: str) -> bool:
    """A row with no slash, no jail and no tombstone is switched off."""
    row = config.slashing.row(name)
    return row.bps > 0 or row.jail_epochs > 0 or row.tombstone


def _evidence(key: str, i: int, inputs: EpochInputs, measures: Measures, config: OracleConfig) -> str:
    s = config.slashing
    if key == "fraud:proof":
        return "Its benchmark challenge answer did not prove the work (a wrong commitment, opening or row)"
    if key == "fraud:replication":
        return "A replicated job's result from it differed from the other replicas'"
    if key == "fraud:canary":
        return ("A serving lease of its answered the oracle's canary requests unlike the model it serves "
                "(canary_results holds the seed and its answers)")
    if key == "misrepresentation":
        # A ratio of 0 (no answer in time, a GPU that is not the one declared) was judged against
        # no recorded reference: naming one would be this member's own, and the detail differ.
        reference = f"{measures.reference_gflops[i]:,.0f} GFLOPS " if measures.ratio[i] > 0 else ""
        return (f"It measured {inputs.measured_gflops[i]:,.1f} GFLOPS, {measures.ratio[i]:.2f}× the "
                f"{reference}reference of its declared {inputs.declared_model[i]}, "
                f"under {s.misrepresentation.below_ratio:g}×")
    if key == "abandonment":
        jobs = int(inputs.abandoned[i])
        return (f"It abandoned {jobs} job{'s' if jobs != 1 else ''} this epoch "
                f"at {s.abandonment.bps} bps each "
                f"(at most {s.abandonment.max_bps})")
    return (f"It answered {measures.answered[i]:,} of {measures.samples[i]:,} probes "
            f"({measures.uptime[i]:.1%} uptime), "
            f"under the {s.downtime.below_uptime:.0%} downtime threshold")


def _consequence(bps: int, jail_seconds: int, tombstone: bool) -> str:
    text = f"slashed {bps} bps ({bps / 100:g}% of stake)" if bps else "not slashed"
    if tombstone:
        return text + ", tombstoned for ever"
    if jail_seconds:
        return text + f", jailed {_duration(jail_seconds)}"
    return text


def _duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def matrix_rows(config: OracleConfig, *, devnet: bool = False) -> list[MatrixRow]:
    """The matrix with the configured numbers, severest row first."""
    s = config.slashing
    c = s.correlation
    epoch_s = config.epoch.timing(devnet).length_s
    detection = {
        "fraud": "the benchmark challenge's proof is refuted (a wrong commitment or opening, garbage, "
                 "another seed's answer), a replicated job's result differs from its replicas', or a "
                 "serving lease answers the oracle's canaries unlike the model it names",
        "misrepresentation": f"challenge throughput, timed by the oracle (a late answer counts as 0), under "
        f"{s.misrepresentation.below_ratio:g}× the reference of the declared GPU model",
        "abandonment": "a job lost through the provider's own fault this epoch",
        "downtime": f"uptime under {s.downtime.below_uptime:.0%} of the epoch's probes (at least "
        f"{s.downtime.min_samples} sent)",
    }
    correlated = (f"; ×min({c.max_multiplier:g}, 1 + {c.factor:g} × f) when a fraction f > {c.threshold:g} "
                  "of providers is hit at once")
    rows = []
    for name in ROWS:
        row = s.row(name)
        slash = f"{row.bps} bps"
        if name == "abandonment":
            slash = f"{s.abandonment.bps} bps a job, at most {s.abandonment.max_bps} bps"
        if name in CORRELATED:
            slash += correlated
        jail = ("tombstoned for ever" if row.tombstone
                else f"{row.jail_epochs} epoch{'s' if row.jail_epochs != 1 else ''} "
                     f"({_duration(row.jail_epochs * epoch_s)})" if row.jail_epochs else "none")
        rows.append(MatrixRow(name, detection[name], slash, jail, row.recovery))
    return rows


MATRIX_ROWS: tuple[MatrixRow, ...] = tuple(matrix_rows(load_config()))  # with the packaged defaults


# ── what one report carries ─────────────────────────────────────────────────
# A report may order at most MAX_SLASHES_PER_REPORT slashes (MAX_TOMBSTONES_PER_REPORT
# tombstones), one per provider, so that finalizing it always fits in a block. The oracle
# never drops a decision to stay within that: what does not fit is deferred, stored with the
# epoch's record, and carried into the next epoch's report, severest and oldest first. A
# provider with a deferred slash and a new decision gets one merged slash: the basis points
# added (the vault caps them), the longer jail, a tombstone if either has one.
# The report names the providers whose slashes it defers, at most MAX_DEFERRED_PER_REPORT of
# them (the first in that same order, `held` in the record): the vault holds their stake
# until the next report may arrive, so none of them can withdraw before its slash lands.
# Every entry orders a penalty (bps, a jail or a tombstone): the distributor refuses an empty one.

SEVERITY = {row: rank for rank, row in enumerate(ROWS)}


def schedule_slashes(carried: list[dict], decided: list[dict]) -> list[dict]:
    """This epoch's slash entries: those in the report first (sorted by provider, with
    `deferred` false), then those carried to the next epoch (`deferred` true), in the order
    they will be taken; `held` marks the deferred ones the report names, whose stake the
    vault holds meanwhile.

    `carried` are the previous epoch's deferred entries, `decided` this epoch's decisions;
    each entry is the record's JSON form of a slash (provider, bps, reason, evidence_hash,
    jail_seconds, tombstone, row, detail, decided_epoch). An entry that orders nothing is left out."""
    by_provider: dict[str, dict] = {}
    for entry in [*carried, *decided]:
        entry = {**entry, "jail_seconds": min(int(entry["jail_seconds"]), MAX_JAIL_SECONDS)}
        key = entry["provider"].lower()
        earlier = by_provider.get(key)
        by_provider[key] = entry if earlier is None else _merge(earlier, entry)
    queue = sorted(
        (e for e in by_provider.values() if e["bps"] > 0 or e["jail_seconds"] > 0 or e["tombstone"]),
        key=lambda e: (
            not e["tombstone"],
            e["decided_epoch"],
            SEVERITY.get(e["row"], len(ROWS)),
            int(e["provider"], 16),
        ),
    )
    now: list[dict] = []
    later: list[dict] = []
    tombstones = 0
    for entry in queue:
        fits = len(now) < MAX_SLASHES_PER_REPORT and (
            not entry["tombstone"] or tombstones < MAX_TOMBSTONES_PER_REPORT
        )
        if fits:
            tombstones += entry["tombstone"]
            now.append({**entry, "deferred": False, "held": False})
        else:
            later.append({**entry, "deferred": True, "held": len(later) < MAX_DEFERRED_PER_REPORT})
    return sorted(now, key=lambda e: int(e["provider"], 16)) + later


def _merge(earlier: dict, later: dict) -> dict:
    """One slash for a provider with two pending decisions; nothing of either is lost."""
    severest = (
        earlier if SEVERITY.get(earlier["row"], len(ROWS)) <= SEVERITY.get(later["row"], len(ROWS)) else later
    )
    evidence = (
        "0x"
        + keccak(
            bytes.fromhex(earlier["evidence_hash"][2:]) + bytes.fromhex(later["evidence_hash"][2:])
        ).hex()
    )
    return {
        **severest,
        "bps": min(10_000, int(earlier["bps"]) + int(later["bps"])),
        "jail_seconds": max(int(earlier["jail_seconds"]), int(later["jail_seconds"])),
        "tombstone": bool(earlier["tombstone"] or later["tombstone"]),
        "evidence_hash": evidence,
        "detail": f"{earlier['detail']} Then: {later['detail']}",
        "decided_epoch": min(earlier["decided_epoch"], later["decided_epoch"]),
    }
