"""The oracle's canaries for serving leases (docs/oracle.md): honest answers, checked.

Once an epoch the oracle lists each watched provider's serving leases (`GET /v1/serving`,
public), and calls every lease that serves `canary.requests` times with bodies drawn from a
fresh seed (compute.serving.canary_bodies), paying with receipts from a deposit of its own key
like any buyer, so a site cannot refuse it without refusing to be paid. It runs the model the
lease names itself — a built-in model from its seed, a checkpoint fetched and checked against
its sha256 — and compares each answer with its own (compute.serving.canary_matches). One
answer that is not the model's is fraud in the epoch's slashing matrix; the record keeps the
seed and the lease's answers, so any committee member can check the verdict (`recheck`).

What a canary does not catch: a site that tells the oracle's calls from a buyer's (the oracle's
key is public once it deposits) and answers only the oracle honestly. docs/THREAT-MODEL.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from compute import dataplane
from compute.errors import ComputeError
from compute.runners.params import Scope, ServeParams
from compute.serving import CANARY_MAX_TOKENS, canary_bodies, canary_matches, load_predictor
from ledger import serving
from ledger.client import Swarm
from ledger.errors import SwarmError
from ledger.tx import Sender
from oracle.collector import save
from oracle.config import CanaryConfig
from oracle.records import CanaryRecord
from wire.serving import ServingClient

MAX_LEASES = 64  # serving leases checked per site an epoch; a site's further ones wait for the next
MAX_ANSWER_CHARS = 65_536  # of each answer kept as evidence (a tiny transformer's logits: ~20 KB)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Served:
    """What a serving lease says it serves, from its public info."""

    lease: str
    task: str
    model: str
    sha256: str
    seed: int
    max_tokens: int
    price: int  # the most one canary call costs: its price, or max_tokens' worth of tokens

    @classmethod
    def of(cls, info: Any) -> Served:
        """The lease in a site's listing; ValueError when the entry is not one."""
        try:
            task, model, sha256 = info["task"], info["model"], info.get("sha256") or ""
            seed, max_tokens = info.get("seed", 0), info.get("max_tokens", 16)
            per_request, per_token = int(info["price_per_request"]), int(info["price_per_token"])
            lease = info["lease"]
        except (KeyError, TypeError, ValueError):
            raise ValueError("a listed lease lacks its task, model or prices") from None
        if not (isinstance(lease, str) and task in ("predict", "generate") and isinstance(model, str)
                and isinstance(sha256, str) and type(seed) is int and type(max_tokens) is int):
            raise ValueError("a listed lease's task, model, seed or max_tokens is not one")
        return cls(lease, task, model, sha256, seed, max_tokens, per_request or per_token * CANARY_MAX_TOKENS)


class Canaries:
    """Canary calls to the serving leases of watched providers, recorded in `canary_results`.

    `site_of` gives a provider's site address (or None); `sender` is the oracle's key, which pays
    for its calls from a deposit it tops up with `config.deposit` when it runs low."""

    def __init__(self, engine: Engine, swarm: Swarm, sender: Sender, home: Path, config: CanaryConfig,
                 site_of: Callable[[str], Any]) -> None:
        self.engine = engine
        self.swarm = swarm
        self.sender = sender
        self.home = home
        self.config = config
        self.site_of = site_of
        self._models: dict[tuple, Any] = {}  # the oracle's own run of each model, loaded once
        self._lock = threading.Lock()

    def run(self, providers: Iterable[str]) -> list[CanaryRecord]:
        """One round: every serving lease of every provider, one record each."""
        with self._lock:
            rows = []
            for provider in providers:
                rows.extend(self._provider(provider))
            save(self.engine, rows)
            return rows

    def _provider(self, provider: str) -> list[CanaryRecord]:
        address = self.site_of(provider)
        if address is None:
            return []  # no site: the probes count it as down
        client = ServingClient(self.swarm, self.sender, self.home, address)
        try:
            listed = client.leases()
        except (SwarmError, ComputeError, OSError, ValueError):
            return []  # a site that does not list its leases now: the probes judge whether it is up
        rows = []
        for info in listed[:MAX_LEASES] if isinstance(listed, list) else []:
            if not isinstance(info, dict) or info.get("state") != "serving":
                continue
            try:
                served = Served.of(info)
            except ValueError:
                continue  # not a lease the oracle can read; a buyer could not call it either
            rows.append(self._lease(client, provider, served))
        if any(row.paid_wei for row in rows):
            # Signs what the site claims for them now, so that it may redeem at once; a claim this
            # fails to sign is signed with the next round's.
            with contextlib.suppress(SwarmError, ComputeError, OSError):
                client.aggregate()
        return rows

    def _lease(self, client, provider: str, served: Served) -> CanaryRecord:
        seed = secrets.randbits(63)
        record = CanaryRecord(chain_id=self.swarm.chain.chain_id, provider=provider, at=time.time(),
                              lease=served.lease[:64], task=served.task, model=served.model,
                              sha256=served.sha256[:64], model_seed=served.seed, max_tokens=served.max_tokens,
                              seed=seed, outcome="unchecked")
        if served.price > self.config.max_price:
            record.reason = (f"a call costs up to {served.price} wei, over the oracle's canary limit of "
                             f"{self.config.max_price}")
            return record
        try:
            model = self._model(served)
        except Exception as exc:  # noqa: BLE001 -- a checkpoint the oracle cannot read or load: no verdict
            record.reason = f"the oracle could not run the model: {type(exc).__name__}: {exc}"[:500]
            return record
        bodies = canary_bodies(model, seed, self.config.requests)
        expected = model([model.check(body) for body in bodies])
        try:
            self._fund(client, len(bodies) * served.price)
        except (SwarmError, ComputeError) as exc:
            record.reason = f"the oracle could not pay for its calls: {exc}"[:500]
            log.warning("canaries for %s: %s", provider, record.reason)
            return record
        answers, reasons = [], []
        for body, want in zip(bodies, expected, strict=True):
            try:
                answer = client.call(served.lease, body)
            except (SwarmError, ComputeError, OSError) as exc:
                record.outcome, record.reason = "unanswered", f"a call failed: {exc}"[:500]
                break
            record.requests += 1
            record.paid_wei += answer.charged
            answers.append(_kept(answer.body))
            if answer.status != 200:
                record.outcome = "unanswered"
                record.reason = f"a call was answered {answer.status}: {_kept(answer.body)}"[:500]
                break
            matched, why = canary_matches(want, answer.body)
            record.matched += matched
            if not matched:
                reasons.append(f"canary {len(answers)}: {why}")
        record.answers = answers
        if record.outcome != "unanswered":
            record.outcome = "matched" if not reasons else "mismatched"
            record.reason = "; ".join(reasons)[:500] if reasons else \
                f"{record.matched} of {record.requests} answers were the model's"
        log.info("canaries for %s's lease %s: %s (%s)", provider, served.lease, record.outcome, record.reason)
        return record

    def _fund(self, client, needed: int) -> None:
        """Signs what the site claims, then tops the oracle's deposit up when what it can still
        spend, less what it owes, would not pay for `needed`."""
        client.aggregate()
        account = serving.account(self.swarm, self.sender.address, client.provider)
        last = client.journal.last_voucher(client.provider)
        owed = max(0, (last.cumulative if last else 0) - account.redeemed)
        if account.spendable - owed < needed:
            serving.deposit(self.swarm, self.sender, client.provider, max(self.config.deposit, needed))

    def _model(self, served: Served):
        key = (served.task, served.model, served.sha256, served.seed, served.max_tokens)
        if key not in self._models:
            self._models[key] = load(served, self.home)
        return self._models[key]


def load(served: Served, home: Path):
    """The oracle's own run of the model a lease names: a built-in model from its seed, or the
    checkpoint fetched into the oracle's home and checked against its sha256."""
    checkpoint = ""
    if served.sha256:
        target = home / "canaries" / served.sha256
        if not target.exists():
            dataplane.stage(served.model, served.sha256, target, what="the lease's checkpoint")
        leaf = served.model.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
        checkpoint = str(target / leaf if Path(leaf).suffix else target)
    params = ServeParams.parse({"task": served.task, "model": "mlp" if served.sha256 else served.model,
                                "checkpoint": checkpoint, "max_tokens": served.max_tokens, "ends_at": 1.0},
                               Scope("canary", ServeParams.KIND))
    return load_predictor(params, served.seed)


def recheck(record: CanaryRecord, home: Path) -> tuple[bool, str]:
    """A committee member's own check of a stored record: the bodies drawn again from its seed,
    the model run again, and the lease's recorded answers compared with it. (True, why) when
    every recorded answer is the model's."""
    model = load(Served(record.lease, record.task, record.model, record.sha256, record.model_seed,
                        record.max_tokens, 0), home)
    bodies = canary_bodies(model, record.seed, len(record.answers))
    expected = model([model.check(body) for body in bodies])
    for i, (want, answered) in enumerate(zip(expected, record.answers, strict=True), start=1):
        if isinstance(answered, dict) and "truncated" in answered:
            return False, f"canary {i}'s answer was too large to keep ({answered['truncated']:,} characters)"
        matched, why = canary_matches(want, answered)
        if not matched:
            return False, f"canary {i}: {why}"
    return True, f"all {len(record.answers)} recorded answers are the model's"


def _kept(body: Any) -> Any:
    """An answer as the record keeps it: whole when small, else its size and digest."""
    import json

    text = json.dumps(body, sort_keys=True)
    if len(text) <= MAX_ANSWER_CHARS:
        return body
    return {"truncated": len(text), "sha256": hashlib.sha256(text.encode()).hexdigest()}
