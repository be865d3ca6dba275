"""Talking to a provider's site: every request signed with the caller's key, every connection
pinned to the certificate fingerprint the provider registered on chain (`wire.tls`).

Used by the market (to start, follow and stop leases), the oracle (probes and challenges) and
a buyer (a lease's status, logs and result). A refusal comes back as `Refused` with the site's
status and sentence; a site that does not answer raises `SiteUnreachable`.
"""

from __future__ import annotations

import http.client
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from core.errors import Fault, Refused, Unavailable, UserError
from wire.request import MAX_VALIDITY_S, SiteRequest, body_hash
from wire.tls import check_peer, pinned_context

DEFAULT_TIMEOUT_S = 30.0
MAX_ANSWER_BYTES = 64 << 20  # a challenge's openings are under 1 MiB, a lease's log tail 64 KiB
VALIDITY_S = 60  # how long a request this client signs stays valid (at most MAX_VALIDITY_S)


class SiteUnreachable(Unavailable):
    """The site did not answer: down, or not at its registered address."""


class BadAnswer(Fault, ValueError):
    """The site answered with something its API never sends (a ValueError too: a parse that failed)."""


@dataclass(frozen=True)
class SiteAddress:
    """What the chain says of a site: its provider, URL and certificate fingerprint."""

    provider: str
    url: str  # https://host:port
    fingerprint: str  # sha256 of the certificate's DER, hex


class SiteClient:
    """Signs requests to one site in the domain of one deployment; `sign` signs EIP-712
    typed data with the caller's key (a `ledger.tx.Sender`'s `sign_typed_data`)."""

    def __init__(self, site: SiteAddress, sign: Callable[[dict], bytes], chain_id: int, market: str,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        parts = urlsplit(site.url)
        if parts.scheme != "https" or not parts.hostname:
            raise UserError(f"A site's URL must be https://HOST:PORT, got {site.url!r}.")
        self.site = site
        self.host, self.port = parts.hostname, parts.port or 443
        self.sign = sign
        self.chain_id = chain_id
        self.market = market
        self.timeout_s = timeout_s

    def start_lease(self, job_id: int, spec: bytes, prior: bytes | None = None) -> dict[str, Any]:
        """Starts job `job_id`'s lease from its spec as posted (canonical JSON), with the spec of
        the job whose result it builds on (`job:<id>`), if any."""
        body = json.dumps(
            {"spec": spec.decode(), "prior": prior.decode() if prior is not None else None}
        ).encode()
        return self._call("POST", f"/v1/leases/{job_id}", "lease.start", job_id, body)

    def status(self, job_id: int) -> dict[str, Any]:
        return self._call("GET", f"/v1/leases/{job_id}", "lease.status", job_id)

    def logs(self, job_id: int) -> str:
        """The last of what the lease printed (64 KiB)."""
        return self._call("GET", f"/v1/leases/{job_id}/logs", "lease.logs", job_id, text=True)

    def log_since(self, job_id: int, offset: int) -> dict[str, Any]:
        """What the lease printed from byte `offset` on: {offset, next, size, state, ended, text}."""
        return self._call("GET", f"/v1/leases/{job_id}/logs?offset={int(offset)}", "lease.logs", job_id)

    def result(self, job_id: int) -> dict[str, Any]:
        return self._call("GET", f"/v1/leases/{job_id}/result", "lease.result", job_id)

    def stop(self, job_id: int) -> dict[str, Any]:
        return self._call("POST", f"/v1/leases/{job_id}/stop", "lease.stop", job_id)

    def probe(self, timeout_s: float = 10.0) -> dict[str, Any]:
        """One answer per live node of the site, each within `timeout_s`."""
        body = json.dumps({"timeout_s": timeout_s}).encode()
        return self._call("POST", "/v1/probe", "probe", 0, body, timeout_s=timeout_s + self.timeout_s)

    def challenge_ready(
        self, params: dict[str, Any], timeout_s: float, vram_mb: float = 0.0
    ) -> dict[str, Any]:
        """Readies a challenge's worker on one of the site's nodes: its ticket, node and device
        and, on a GPU, its NVML identity and how much of `vram_mb` it allocated and wrote."""
        body = json.dumps({"params": params, "vram_mb": vram_mb, "timeout_s": timeout_s}).encode()
        return self._call(
            "POST", "/v1/challenge/ready", "challenge", 0, body, timeout_s=timeout_s + self.timeout_s
        )

    def challenge_commit(self, ticket: str, seed: int, timeout_s: float) -> tuple[dict[str, Any], float]:
        """Sends the seed; the site's answer (its root) and the seconds from sending the request
        to reading the answer, timed here. Raises SiteUnreachable if no answer came within
        `timeout_s`."""
        body = json.dumps({"ticket": ticket, "seed": seed, "timeout_s": timeout_s}).encode()
        return self._call(
            "POST", "/v1/challenge/commit", "challenge", 0, body, timeout_s=timeout_s, timed=True
        )

    def challenge_open(self, ticket: str, cells: list[tuple[int, int]], timeout_s: float) -> dict[str, Any]:
        body = json.dumps(
            {"ticket": ticket, "cells": [list(c) for c in cells], "timeout_s": timeout_s}
        ).encode()
        return self._call(
            "POST", "/v1/challenge/open", "challenge", 0, body, timeout_s=timeout_s + self.timeout_s
        )

    def info(self) -> dict[str, Any]:
        """What the site says of itself, unsigned: its provider, chain, market and capacity."""
        status, payload, _ = self._request("GET", "/v1/info", b"", {})
        try:
            answer = json.loads(payload) if status == 200 else None
        except ValueError:  # UnicodeDecodeError is one too
            answer = None
        if not isinstance(answer, dict):
            raise BadAnswer(f"The site of {self.site.provider} answered /v1/info with HTTP {status} and no "
                            f"JSON object; check that {self.site.url} is its site.")
        return answer

    def _call(self, method: str, path: str, action: str, job_id: int, body: bytes = b"", text: bool = False,
              timeout_s: float | None = None, timed: bool = False) -> Any:
        expires = int(time.time()) + min(VALIDITY_S, MAX_VALIDITY_S)
        request = SiteRequest(
            action, self.site.provider, job_id, body_hash(body), secrets.randbits(128), expires
        )
        signature = self.sign(request.typed_data(self.chain_id, self.market))
        headers = {"Swarm-Nonce": str(request.nonce), "Swarm-Expires": str(expires),
                   "Swarm-Signature": "0x" + signature.hex(), "Content-Type": "application/octet-stream"}
        status, payload, seconds = self._request(method, path, body, headers, timeout_s)
        if status != 200:
            try:
                message = json.loads(payload)["error"]
            except (ValueError, KeyError, TypeError):
                message = payload.decode(errors="replace")[:300] or f"HTTP {status}"
            raise Refused(status, message)
        try:
            answer = payload.decode() if text else json.loads(payload)
        except ValueError:  # UnicodeDecodeError is one too
            raise BadAnswer(f"The site of {self.site.provider} answered {path} with something that is not "
                               f"{'text' if text else 'JSON'}.") from None
        return (answer, seconds) if timed else answer

    def _request(self, method: str, path: str, body: bytes, headers: dict[str, str],
                 timeout_s: float | None = None) -> tuple[int, bytes, float]:
        return pinned_request(self.site, method, path, body, headers, timeout_s or self.timeout_s)


def pinned_request(site: SiteAddress, method: str, path: str, body: bytes, headers: dict[str, str],
                   timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[int, bytes, float]:
    """One request to `site` over TLS pinned to its fingerprint: the status, the payload, and the
    seconds from sending the request (the connection made and the certificate checked) to
    reading the whole answer."""
    parts = urlsplit(site.url)
    if parts.scheme != "https" or not parts.hostname:
        raise UserError(f"A site's URL must be https://HOST:PORT, got {site.url!r}.")
    connection = http.client.HTTPSConnection(parts.hostname, parts.port or 443, context=pinned_context(),
                                             timeout=timeout_s)
    try:
        connection.connect()
        check_peer(connection.sock, site.fingerprint)
        started = time.perf_counter()
        connection.request(method, path, body=body or None, headers=headers)
        response = connection.getresponse()
        payload = response.read(MAX_ANSWER_BYTES + 1)
        if len(payload) > MAX_ANSWER_BYTES:
            raise BadAnswer(f"The site of {site.provider} answered {path} with more than "
                               f"{MAX_ANSWER_BYTES >> 20} MiB; no answer of a site is that large.")
        return response.status, payload, time.perf_counter() - started
    except (TimeoutError, OSError, http.client.HTTPException) as exc:
        raise SiteUnreachable(f"The site of {site.provider} at {site.url} did not answer "
                              f"({type(exc).__name__}: {exc}).") from exc
    finally:
        connection.close()
