"""Who may ask a provider's site for what: every request is EIP-712-signed (`wire.request`), and
only the chain says whose signature counts. The site recovers the signer and asks the chain,
through an `Authority`:

  lease.start                          the matcher (MATCHER_ROLE), for a job the chain shows
                                       assigned to this provider, with the spec hash the chain
                                       holds;
  lease.status, lease.logs,            the matcher, or the job's buyer;
  lease.result
  lease.stop                           the matcher;
  probe, challenge                     a member of the oracle committee;
  serve.deploy                         a buyer whose deposit for this provider in the serving
                                       escrow can still spend (provider.serving);
  serve.stop                           anyone: the site stops a serving lease for its buyer only.

Anything else is refused with a status and one sentence (`Refused`), before anything runs. No
secret is shared between the market, the oracle and the sites: a signature and the chain are
all a site needs. `Authority` is what a site asks of the chain; `provider.authority.ChainAuthority`
answers it from a node.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from compute.errors import ComputeError
from core.errors import Refused
from core.local_store import StoreSchema, open_store
from wire.request import ACTIONS, MAX_VALIDITY_S, ORACLE_ACTIONS, SiteRequest


class WontSign(ComputeError):
    """The site will not sign a lease's outcome: the chain shows the job assigned otherwise than
    the site agreed to run it (to another provider, or at a lower price). The lease then fails
    as no fault of the provider's, and the job is refunded."""


@dataclass(frozen=True)
class JobView:
    """What the chain says of a job, as far as a site needs it."""

    provider: str
    buyer: str
    status: str  # posted, assigned, completed, disputed, settled, failed, cancelled, reclaimed
    spec_hash: bytes
    posted_in: bytes = b""  # the hash of the block the job was posted in: with its id, the job's identity
    result_hash: bytes = bytes(32)  # the result the chain holds for it (zero before one)
    price_per_unit: int = 0  # wei per unit, as the job is assigned (0 before an assignment)


class Authority(Protocol):
    """The chain's answers a site needs to authorize a request."""

    def is_matcher(self, address: str) -> bool: ...

    def is_committee_member(self, address: str) -> bool: ...

    def job(self, job_id: int) -> JobView | None: ...

    def serving_spendable(self, buyer: str, provider: str) -> int: ...


class NonceBook:
    """The nonces each signer has used, kept until their requests expire (in SQLite, so a site
    that restarts still refuses a replay)."""

    SCHEMA = StoreSchema((
        ("""CREATE TABLE IF NOT EXISTS nonces (signer TEXT, nonce TEXT, expires_at INTEGER,
            PRIMARY KEY (signer, nonce))""",),
        # 2: every request first forgets the expired nonces, found by their expiry, not by a scan
        ("CREATE INDEX nonces_expiry ON nonces (expires_at)",),
    ))

    def __init__(self, path: Path) -> None:
        self._db = open_store(path, self.SCHEMA)
        self._lock = threading.Lock()

    def use(self, signer: str, nonce: int, expires_at: int, now: int) -> bool:
        """Records the nonce; False if the signer has used it already."""
        with self._lock:
            self._db.execute("DELETE FROM nonces WHERE expires_at < ?", (now,))
            try:
                self._db.execute(
                    "INSERT INTO nonces VALUES (?, ?, ?)", (signer.lower(), str(nonce), expires_at)
                )
            except sqlite3.IntegrityError:
                return False
            return True

    def close(self) -> None:
        self._db.close()


def authorize(request: SiteRequest, signature: bytes, *, site: str, chain_id: int, market: str,
              authority: Authority, nonces: NonceBook, now: int, spec_hash: bytes | None = None) -> str:
    """The signer of `request` if this site may serve it now; raises Refused otherwise.

    `spec_hash` is the spec a lease.start brings, checked against the one the chain holds."""
    if request.action not in ACTIONS:
        raise Refused(400, f"Unknown action {request.action!r}; a site serves {', '.join(ACTIONS)}.")
    if request.expires_at < now:
        raise Refused(401, f"The request expired at {request.expires_at} (now {now}); sign a fresh one.")
    if request.expires_at > now + MAX_VALIDITY_S:
        raise Refused(
            401, f"The request is valid for longer than {MAX_VALIDITY_S} s; sign one that expires sooner."
        )
    if request.site.lower() != site.lower():
        raise Refused(403, f"The request is for the site of {request.site}, not this one ({site}).")
    signer = _recover(request, signature, chain_id, market)

    if request.action == "serve.deploy":
        if authority.serving_spendable(signer, site) <= 0:
            raise Refused(402, f"{signer} has no spendable deposit for this provider in the serving escrow; "
                               "deposit first (`swarm serve deposit`).")
    elif request.action == "serve.stop":
        pass  # the site stops a serving lease for its own buyer only
    elif request.action in ORACLE_ACTIONS:
        if not authority.is_committee_member(signer):
            raise Refused(
                403, f"{signer} is not on the oracle committee; only its members may {request.action}."
            )
    else:
        job = authority.job(request.job_id)
        if job is None:
            raise Refused(404, f"Job {request.job_id} does not exist on chain.")
        if job.provider.lower() != site.lower():
            raise Refused(403, f"Job {request.job_id} is not assigned to this site's provider on chain.")
        matcher = authority.is_matcher(signer)
        if request.action in ("lease.start", "lease.stop"):
            if not matcher:
                raise Refused(403, f"{signer} is not the market's matcher; only it may {request.action}.")
        elif not matcher and signer.lower() != job.buyer.lower():
            raise Refused(403, f"{signer} is neither the matcher nor the buyer of job {request.job_id}.")
        if request.action == "lease.start":
            if job.status != "assigned":
                raise Refused(
                    409, f"Job {request.job_id} is {job.status} on chain, not assigned; nothing to start."
                )
            if spec_hash is None or spec_hash != job.spec_hash:
                raise Refused(403, f"The spec does not hash to the one job {request.job_id} holds on chain.")
    if not nonces.use(signer, request.nonce, request.expires_at, now):
        raise Refused(409, f"Nonce {request.nonce} of {signer} was used already: a request is served once.")
    return signer


def _recover(request: SiteRequest, signature: bytes, chain_id: int, market: str) -> str:
    from eth_account import Account
    from eth_account.messages import encode_typed_data

    try:
        return Account.recover_message(encode_typed_data(full_message=request.typed_data(chain_id, market)),
                                       signature=signature)
    except Exception as exc:  # a malformed signature is the caller's error, whatever eth_account raises
        raise Refused(401, f"The request's signature is not valid ({type(exc).__name__}).") from exc
