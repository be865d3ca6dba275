"""The dashboard's reads: providers, jobs, epochs and slashes from the ledger database,
joined with the stored specs and, for a train job under way, its newest Ray Train checkpoint.

What a job's program wrote (its metrics, its `ray.train.report` calls, its last log lines) is the
buyer's and is read as such: scalars only, bounded, a NaN or infinity as its name.

Every amount leaves here twice: `<name>_wei`, a decimal string (wei outgrow JavaScript's
numbers), and `<name>_tokens`, formatted as SWARM for people.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import and_, or_
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlmodel import Session, col, func, select

from ledger.db import database_errors, open_ledger, redact
from ledger.deploy import Deployment
from ledger.errors import SwarmError
from ledger.indexer.models import Cursor, Epoch, Job, Provider, SlashRow
from ledger.indexer.queries import pick_chain
from ledger.specs import load_spec
from ledger.units import format_amount
from market.migrations import MARKET
from market.records import MarketJob, MarketTransition
from market.spec import job_namespace
from oracle.migrations import ORACLE
from oracle.records import OracleEpoch, ProbeSample, ProviderScore

PROVIDER_STATES = ("active", "jailed", "tombstoned")
JOB_STATUSES = ("posted", "assigned", "completed", "disputed", "settled", "failed", "cancelled", "reclaimed")
OPEN_STATUSES = ("posted", "assigned", "completed", "disputed")  # their escrow is still in JobMarket
CHECKPOINT_STATE = "state.json"  # compute.runners.train.STATE, inside each checkpoint_* directory
EPOCHS_SHOWN = 48  # the rewards chart's width in epochs
TRANSITIONS_SHOWN = 50
REPORTS_SHOWN = 200  # a program's reports charted, thinned evenly, the first and the newest kept
METRICS_SHOWN = 100  # a program's final metrics listed
LOG_TAIL_SHOWN = 20_000  # characters of a failed lease's last lines

Scalar = int | float | str | bool | None


@dataclass(frozen=True)
class Source:
    """The ledger the dashboard reads: one chain's rows, the specs and the run checkpoints."""

    engine: Engine
    database: str  # the URL, password redacted
    home: Path
    chain_id: int
    market: str | None  # JobMarket's address, which names the compute jobs
    specs: dict[str, dict] = field(default_factory=dict, compare=False)  # content-addressed, so never stale

    @property
    def namespace(self) -> str | None:
        return job_namespace(self.chain_id, self.market) if self.market else None

    def spec(self, spec_hash: str) -> dict | None:
        """The stored spec behind a 0x hash, or None when this SWARM_HOME does not hold it."""
        if spec_hash not in self.specs:
            try:
                self.specs[spec_hash] = load_spec(self.home, bytes.fromhex(spec_hash[2:]))
            except (SwarmError, ValueError, OSError):
                return None
        return self.specs[spec_hash]

    def session(self) -> Session:
        return Session(self.engine)


def open_source(home: Path, db_url: str, chain_id: int | None = None) -> Source:
    """Opens the ledger at `db_url` and picks the chain it indexed; refuses a ledger that is not there yet."""
    _require_sqlite_file(db_url)
    engine = open_ledger(db_url, MARKET, ORACLE)
    shown = redact(db_url)
    with database_errors(db_url), Session(engine) as session:
        cursor = pick_chain(session, chain_id, shown)
    return Source(
        engine=engine,
        database=shown,
        home=home,
        chain_id=cursor.chain_id,
        market=_market_address(home, cursor),
    )


def _require_sqlite_file(db_url: str) -> None:
    try:
        url = make_url(db_url)
    except (ArgumentError, ValueError):
        return  # open_ledger names the bad URL
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return
    if not Path(url.database).expanduser().exists():
        raise SwarmError(
            f"There is no ledger database at {url.database} yet; run `swarm ledger sync` first "
            "(or point SWARM_DB_URL or SWARM_HOME at an existing one)."
        )


def _market_address(home: Path, cursor: Cursor) -> str | None:
    """JobMarket of the deployment the ledger indexed: the deployment file, else the cursor's record."""
    indexed = cursor.contracts.split(",")
    deployment = Deployment.load(home, cursor.chain_id)
    if deployment is not None and deployment.addresses.get("JobMarket", "").lower() in indexed:
        return deployment.addresses["JobMarket"]
    return indexed[1] if len(indexed) == 3 else None  # vault,market,distributor


# ── amounts ───────────────────────────────────────────────────────────────────


def amount(name: str, wei: int | None) -> dict[str, str | None]:
    if wei is None:
        return {f"{name}_wei": None, f"{name}_tokens": None}
    return {f"{name}_wei": str(int(wei)), f"{name}_tokens": format_amount(int(wei))}


def tokens(wei: int) -> float:
    """Wei as a float of tokens, for metrics and charts (exact wei stays in the *_wei strings)."""
    return int(wei) / 10**18


# ── providers ─────────────────────────────────────────────────────────────────


def provider_state(provider: Provider) -> str:
    """Tombstoned for ever, jailed until it unjails (the vault keeps jailed_until set till then), else
    active."""
    if provider.tombstoned:
        return "tombstoned"
    return "jailed" if provider.jailed_until else "active"


def latest_scores(session: Session, chain_id: int) -> dict[str, ProviderScore]:
    """Each provider's scores from the newest epoch that measured it, with its newest cumulative reward.

    An epoch after a provider left keeps only its leaf (no samples, no performance): the
    scores shown stay those it last earned.
    """
    measured = or_(
        col(ProviderScore.samples) > 0, col(ProviderScore.performance) > 0, col(ProviderScore.reliability) > 0
    )
    scored = _newest(session, chain_id, measured)
    for provider, row in _newest(session, chain_id, None).items():
        known = scored.get(provider)
        scored[provider] = (
            row if known is None else known.model_copy(update={"cumulative_wei": row.cumulative_wei})
        )
    return scored


def _newest(session: Session, chain_id: int, where: Any) -> dict[str, ProviderScore]:
    """Per provider, its score row of the newest epoch (among rows matching `where`)."""
    newest = select(ProviderScore.provider, func.max(ProviderScore.epoch).label("epoch")).where(
        ProviderScore.chain_id == chain_id)
    latest = (
        (newest.where(where) if where is not None else newest).group_by(ProviderScore.provider).subquery()
    )
    rows = session.exec(select(ProviderScore).join(latest, and_(
        col(ProviderScore.provider) == latest.c.provider, col(ProviderScore.epoch) == latest.c.epoch))
        .where(ProviderScore.chain_id == chain_id)).all()
    return {row.provider: row for row in rows}


def epoch_weights(session: Session, chain_id: int, epochs: set[int]) -> dict[int, float]:
    """The total weight of each of `epochs`, which a provider's score is a share of."""
    if not epochs:
        return {}
    rows = session.exec(select(ProviderScore.epoch, func.sum(ProviderScore.weight))
                        .where(ProviderScore.chain_id == chain_id, col(ProviderScore.epoch).in_(epochs))
                        .group_by(col(ProviderScore.epoch))).all()
    return {int(epoch): float(total or 0.0) for epoch, total in rows}


def providers(session: Session, src: Source) -> list[dict[str, Any]]:
    rows = session.exec(select(Provider).where(Provider.chain_id == src.chain_id)
                        .order_by(col(Provider.stake).desc(), Provider.address)).all()
    scores = latest_scores(session, src.chain_id)
    totals = epoch_weights(session, src.chain_id, {row.epoch for row in scores.values()})
    running = Counter(session.exec(select(MarketJob.provider).where(
        MarketJob.chain_id == src.chain_id, MarketJob.state == "running")).all())
    out = []
    for p in rows:
        spec = src.spec(p.spec_hash) or {}
        price = spec.get("price_per_unit")
        score = scores.get(p.address)
        out.append({
            "address": p.address, "state": provider_state(p), "jailed_until": p.jailed_until or None,
            "gpus": p.gpus, "spec_hash": p.spec_hash, "spec_known": bool(spec),
            "gpu_model": spec.get("gpu_model"), "vram_gb": spec.get("vram_gb"), "region": spec.get("region"),
            **amount("price_per_unit", int(price) if price is not None else None),
            **amount("stake", p.stake), **amount("unbonding", p.unbonding),
            **amount("slashed_total", p.slashed_total),
            **amount("reward_total", score.cumulative_wei if score else 0),
            "score": _score(score, totals) if score else None,
            "running_jobs": running.get(p.address, 0),
        })
    return out


def _score(row: ProviderScore, totals: dict[int, float]) -> dict[str, Any]:
    total = totals.get(row.epoch, 0.0)
    return {
        "epoch": row.epoch, "samples": row.samples, "uptime": row.uptime, "performance": row.performance,
        "reliability": row.reliability, "loyalty": row.loyalty, "weight": row.weight,
        "share": row.weight / total if total > 0 else 0.0,  # the provider's part of the epoch's weight
        "eligible": row.eligible, "note": row.note, **amount("reward", row.reward_wei),
    }


# ── jobs ──────────────────────────────────────────────────────────────────────


def jobs(session: Session, src: Source, limit: int = 100) -> list[dict[str, Any]]:
    """The newest `limit` jobs, each with the market's record and its training history."""
    rows = session.exec(select(Job).where(Job.chain_id == src.chain_id)
                        .order_by(col(Job.job_id).desc()).limit(limit)).all()
    ids = [j.job_id for j in rows]
    records = {m.job_id: m for m in session.exec(select(MarketJob).where(
        MarketJob.chain_id == src.chain_id, col(MarketJob.job_id).in_(ids))).all()} if ids else {}
    return [_job(src, j, records.get(j.job_id)) for j in rows]


def job_detail(session: Session, src: Source, job_id: int) -> dict[str, Any] | None:
    """One job with its spec, its program's metrics and reports, a failed lease's last lines and the
    market's transitions; None if the ledger lacks it."""
    row = session.get(Job, (src.chain_id, job_id))
    if row is None:
        return None
    record = session.get(MarketJob, (src.chain_id, job_id))
    transitions = session.exec(select(MarketTransition).where(
        MarketTransition.chain_id == src.chain_id, MarketTransition.job_id == job_id)
        .order_by(col(MarketTransition.id)).limit(TRANSITIONS_SHOWN)).all()
    return _job(src, row, record) | {
        "spec": src.spec(row.spec_hash),
        "metrics": shown_metrics(record.metrics if record else None),
        "progress": reports(record.progress if record else None),
        "log_tail": _log_tail(record.log_tail if record else None),
        "result_dir": record.result_dir if record else None,
        "evidence": record.evidence if record else None,
        "lost_providers": record.lost_providers if record else [],
        "transitions": [
            {
                "at": t.at,
                "from_state": t.from_state,
                "to_state": t.to_state,
                "provider": t.provider,
                "detail": t.detail,
                "tx_hash": t.tx_hash,
            }
            for t in transitions
        ],
    }


def _named(value: Any) -> Any:
    """A model or dataset the buyer brought is shown by where it is (a pinned input's URI)."""
    return value.get("uri") if isinstance(value, dict) else value


def _job(src: Source, job: Job, record: MarketJob | None) -> dict[str, Any]:
    spec = src.spec(job.spec_hash) or {}
    resources = spec.get("resources") or {}
    history, source = training_history(src, job, record, spec)
    return {
        "job_id": job.job_id,
        "kind": spec.get("kind"),
        "model": _named(spec.get("model")),
        "dataset": _named(spec.get("dataset")),
        "workers": resources.get("workers"),
        "replicas": spec.get("replicas", 1),
        "epochs_planned": (spec.get("params") or {}).get("epochs"),
        "status": job.status,
        "market_state": record.state if record else None,
        "buyer": job.buyer,
        "provider": job.provider,
        "spec_hash": job.spec_hash,
        **amount("price_per_unit", job.price_per_unit),
        **amount("max_price_per_unit", job.max_price_per_unit),
        "units_used": job.units_used,
        "max_units": job.max_units,
        "measured_units": record.units if record else None,
        "unit": record.unit if record else None,
        **amount("escrow", job.escrow),
        "escrow_open": job.status in OPEN_STATUSES,
        **amount("payment", job.payment),
        **amount("refund", job.refund),
        "deadline": job.deadline,
        "dispute_end": job.dispute_end or None,
        "result_hash": job.result_hash,
        "fail_reason": job.fail_reason,
        "attempts": record.attempts if record else 0,
        "error": record.error if record else None,
        "explanation": record.explanation if record else None,
        "history": history,
        "history_source": source,
        "updated_at": record.updated_at if record else None,
    }


def training_history(
    src: Source, job: Job, record: MarketJob | None, spec: dict
) -> tuple[list[dict], str | None]:
    """What to chart: per-epoch loss and accuracy from the finished run's metrics, else from the newest
    checkpoint of a train run; else what the job's program reported (`ray.train.report`), by report."""
    finished = ((record.metrics or {}) if record else {}).get("history")
    if isinstance(finished, list) and finished:
        return finished, "result"
    if spec.get("kind") == "train" and record is not None and record.state in ("assigned", "running"):
        state = newest_checkpoint_state(src, job.job_id, spec.get("output"))
        if state and state.get("history"):
            return state["history"], "checkpoint"
    reported = reports(record.progress if record else None)
    if reported:
        return reported, "reported"
    return [], None


def reports(progress: Any) -> list[dict[str, Any]]:
    """A program's reports, oldest first: `{report, at, metrics}`, `report` its number from 1 among all
    it made, thinned to REPORTS_SHOWN."""
    if not isinstance(progress, list):
        return []
    numbered = [
        {"report": number, "at": _seconds(entry.get("at")), "metrics": _scalars(entry["metrics"])}
        for number, entry in enumerate(progress, 1)
        if isinstance(entry, dict) and isinstance(entry.get("metrics"), dict)
    ]
    return thinned(numbered, REPORTS_SHOWN)


def thinned(entries: list, most: int) -> list:
    """At most `most` of `entries`, evenly spaced, the first and the last among them."""
    if len(entries) <= most:
        return entries
    step = (len(entries) - 1) / (most - 1)
    return [entries[round(i * step)] for i in range(most)]


def shown_metrics(metrics: Any) -> dict[str, Scalar]:
    """A run's final metrics as a table: its scalars, and those one level down as `outer.inner`."""
    if not isinstance(metrics, dict):
        return {}
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            flat.update((f"{key}.{inner}", v) for inner, v in value.items() if _is_scalar(v))
        elif _is_scalar(value):
            flat[str(key)] = value
    return _scalars(dict(list(flat.items())[:METRICS_SHOWN]))


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (int, float, str, bool))


def _scalars(values: dict) -> dict[str, Scalar]:
    """The scalar entries, a float that is no number (NaN, ±infinity) by its name: JSON has none."""
    return {
        str(k): str(v) if isinstance(v, float) and not math.isfinite(v) else v
        for k, v in values.items()
        if _is_scalar(v)
    }


def _seconds(value: Any) -> float | None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if number and math.isfinite(value) else None


def _log_tail(text: Any) -> str | None:
    return text[-LOG_TAIL_SHOWN:] if isinstance(text, str) and text else None


def newest_checkpoint_state(src: Source, job_id: int, output: str | None) -> dict | None:
    """The `state.json` of the newest checkpoint Ray Train kept for the job (the one furthest in
    epochs), in the buyer's output when that is a directory here (a devnet's); the dashboard
    holds no key to a buyer's object storage."""
    if src.namespace is None or not isinstance(output, str) or "://" in output:
        return None
    newest: tuple[int, float, dict] | None = None
    for path in (Path(output) / f"{src.namespace}{job_id}").glob(f"checkpoint_*/{CHECKPOINT_STATE}"):
        try:
            state = json.loads(path.read_text())
            key = (int(state.get("epoch", 0)), path.stat().st_mtime)
        except (OSError, ValueError, TypeError, AttributeError):
            continue  # being written or removed by Ray Train right now; the next poll reads it
        if newest is None or key > newest[:2]:
            newest = (*key, state)
    return newest[2] if newest else None


def running_jobs(session: Session, src: Source) -> list[dict[str, Any]]:
    ids = session.exec(
        select(MarketJob.job_id)
        .where(col(MarketJob.chain_id) == src.chain_id, col(MarketJob.state) == "running")
        .order_by(col(MarketJob.job_id))
    ).all()
    out = []
    for job_id in ids:
        detail = job_detail(session, src, job_id)
        if detail is not None:
            out.append(
                {
                    k: detail[k]
                    for k in (
                        "job_id",
                        "kind",
                        "model",
                        "provider",
                        "workers",
                        "epochs_planned",
                        "attempts",
                        "history",
                        "history_source",
                    )
                }
            )
    return out


# ── epochs, slashes ───────────────────────────────────────────────────────────


def epochs(session: Session, src: Source, limit: int = EPOCHS_SHOWN) -> list[dict[str, Any]]:
    """The newest `limit` oracle epochs, oldest first, each with the reward of every provider it scored."""
    records = list(reversed(session.exec(select(OracleEpoch).where(OracleEpoch.chain_id == src.chain_id)
                                         .order_by(col(OracleEpoch.epoch).desc()).limit(limit)).all()))
    if not records:
        return []
    first = records[0].epoch
    scores = session.exec(select(ProviderScore).where(ProviderScore.chain_id == src.chain_id,
                                                      ProviderScore.epoch >= first)
                          .order_by(col(ProviderScore.epoch), col(ProviderScore.provider))).all()
    by_epoch: dict[int, list[ProviderScore]] = {}
    for s in scores:
        by_epoch.setdefault(s.epoch, []).append(s)
    on_chain = {e.epoch: e for e in session.exec(select(Epoch).where(Epoch.chain_id == src.chain_id,
                                                                    Epoch.epoch >= first)).all()}
    return [{
        "epoch": r.epoch, "state": r.state,
        "chain_status": on_chain[r.epoch].status if r.epoch in on_chain else None,
        "window_start": r.window_start, "window_end": r.window_end, "utilization": r.utilization,
        **amount("emission", r.emission_wei), "rewards_root": r.rewards_root, "signatures": len(r.signatures),
        "slashes": len(r.slashes),
        "rewards": [{"provider": s.provider, **amount("reward", s.reward_wei), "eligible": s.eligible}
                    for s in by_epoch.get(r.epoch, [])],
    } for r in records]


def slashes(session: Session, src: Source, limit: int = 100) -> dict[str, list[dict[str, Any]]]:
    """Slashes the vault applied (chain), and the slashing decisions of the oracle's epochs with their
    reasons."""
    rows = session.exec(select(SlashRow).where(SlashRow.chain_id == src.chain_id)
                        .order_by(col(SlashRow.block_number).desc(), col(SlashRow.log_index).desc())
                        .limit(limit)).all()
    chain = [{
        "provider": s.provider, "reason": s.reason, "bps": s.bps, **amount("amount", s.amount),
        **amount("to_treasury", s.to_treasury), "epoch": s.epoch, "job_id": s.job_id,
        "block_number": s.block_number, "tx_hash": s.tx_hash, "evidence_hash": s.evidence_hash,
    } for s in rows]
    decided = session.exec(select(OracleEpoch).where(OracleEpoch.chain_id == src.chain_id)
                           .order_by(col(OracleEpoch.epoch).desc()).limit(limit)).all()
    oracle = [{
        "epoch": r.epoch, "state": r.state, "provider": s.get("provider"), "row": s.get("row"),
        "detail": s.get("detail"), "reason": s.get("reason"), "bps": s.get("bps"),
        "jail_seconds": s.get("jail_seconds"), "tombstone": bool(s.get("tombstone")),
        "evidence_hash": s.get("evidence_hash"),
    } for r in decided for s in r.slashes]
    return {"chain": chain, "oracle": oracle}


# ── the whole picture ─────────────────────────────────────────────────────────


def summary(session: Session, src: Source) -> dict[str, Any]:
    cursor = session.get(Cursor, src.chain_id)
    provider_rows = session.exec(select(Provider).where(Provider.chain_id == src.chain_id)).all()
    states = Counter(provider_state(p) for p in provider_rows)
    job_rows = session.exec(select(Job.status, Job.escrow).where(Job.chain_id == src.chain_id)).all()
    statuses = Counter(status for status, _ in job_rows)
    market = Counter(session.exec(select(MarketJob.state).where(MarketJob.chain_id == src.chain_id)).all())
    oracle_rows = session.exec(select(OracleEpoch).where(OracleEpoch.chain_id == src.chain_id)
                               .order_by(col(OracleEpoch.epoch))).all()
    latest = oracle_rows[-1] if oracle_rows else None
    slash_amounts = session.exec(select(SlashRow.amount).where(SlashRow.chain_id == src.chain_id)).all()
    return {
        "chain_id": src.chain_id,
        "market": src.market,
        "database": src.database,
        "indexed_block": cursor.block_number if cursor else None,
        "indexed_at": cursor.updated_at if cursor else None,
        "providers": {state: states.get(state, 0) for state in PROVIDER_STATES}
        | {"total": len(provider_rows)},
        **amount("stake_total", sum(p.stake for p in provider_rows)),
        "jobs": {status: statuses.get(status, 0) for status in JOB_STATUSES} | {"total": len(job_rows)},
        "market_jobs": dict(sorted(market.items())),
        **amount("escrow_held", sum(e for s, e in job_rows if s in OPEN_STATUSES)),
        "latest_epoch": None
        if latest is None
        else {
            "epoch": latest.epoch,
            "state": latest.state,
            "utilization": latest.utilization,
            **amount("emission", latest.emission_wei),
        },
        **amount("emission_total", sum(r.emission_wei for r in oracle_rows)),
        "slashes": {"count": len(slash_amounts), **amount("amount", sum(slash_amounts))},
        "running": running_jobs(session, src),
    }


def latest_gpu_telemetry(session: Session, chain_id: int) -> list[ProbeSample]:
    """The newest probe round's samples of nodes whose GPUs NVML read."""
    newest = session.exec(select(func.max(ProbeSample.at)).where(ProbeSample.chain_id == chain_id)).one()
    if newest is None:
        return []
    return list(session.exec(select(ProbeSample).where(
        ProbeSample.chain_id == chain_id, ProbeSample.at == newest, ProbeSample.gpus > 0)))


def probe_counts(session: Session, chain_id: int) -> dict[bool, int]:
    rows = session.exec(select(ProbeSample.ok, func.count()).where(ProbeSample.chain_id == chain_id)
                        .group_by(col(ProbeSample.ok))).all()
    return {bool(ok): int(n) for ok, n in rows}
