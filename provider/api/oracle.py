"""The oracle committee's measurements of the site (docs/oracle.md): a probe of every live node
(`/v1/probe`), and the benchmark challenge readied, committed and opened over three requests
(`/v1/challenge/...`). Only a member of the committee may ask (`provider.auth`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from compute.challenge import Challenge
from compute.errors import ComputeError
from core.errors import Refused
from provider.agent import MAX_CELLS, PROBE_TIMEOUT_S
from provider.api.deps import Body, LeaseSite, SignedBy

router = APIRouter()

READY = ('{"params": {"size": N, "rounds": N, "stride": N, "precision": "fp32|bf16|fp16"}, '
         '"vram_mb": MIB, "timeout_s": SECONDS}')
COMMIT = '{"ticket": "...", "seed": N, "timeout_s": SECONDS}'
OPEN = '{"ticket": "...", "cells": [[CHECKPOINT, ROW], ...], "timeout_s": SECONDS}'
MAX_TIMEOUT_S = 600.0  # what a challenge's step may be given
DEFAULT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Readying:
    params: dict[str, Any]  # the challenge's size, rounds, stride and precision (compute.challenge)
    vram_mb: float  # what a GPU node allocates and writes before it answers
    timeout_s: float


@dataclass(frozen=True)
class Commit:
    ticket: str
    seed: int
    timeout_s: float


@dataclass(frozen=True)
class Opening:
    ticket: str
    cells: list[tuple[int, int]]  # none: the challenge ends unopened
    timeout_s: float


def probe_timeout(body: Body) -> float:
    """A probe's timeout from its body (empty for the default), within 0.1 s and a minute."""
    try:
        return min(60.0, max(0.1, float(json.loads(body or b"{}").get("timeout_s", PROBE_TIMEOUT_S))))
    except (ValueError, TypeError, AttributeError):
        raise Refused(400, 'A probe\'s body is {"timeout_s": SECONDS} or empty.') from None


def readying(body: Body) -> Readying:
    raw = _challenge_body(body, READY)
    params, vram_mb = raw.get("params"), raw.get("vram_mb", 0)
    if not isinstance(params, dict) or set(params) != {"size", "rounds", "stride", "precision"} \
            or not all(type(params[k]) is int for k in ("size", "rounds", "stride")) \
            or type(vram_mb) not in (int, float) or not 0 <= vram_mb <= 1 << 24:
        raise Refused(400, f"A challenge request's body is {READY}.")
    try:
        Challenge(seed=0, **params)
    except ComputeError as exc:
        raise Refused(400, f"The challenge cannot be readied: {exc}") from None
    return Readying(params, float(vram_mb), _timeout(raw))


def commit(body: Body) -> Commit:
    raw = _challenge_body(body, COMMIT)
    ticket, seed = raw.get("ticket"), raw.get("seed")
    if not isinstance(ticket, str) or type(seed) is not int or not 0 <= seed < 1 << 64:
        raise Refused(400, f"A challenge request's body is {COMMIT}.")
    return Commit(ticket, seed, _timeout(raw))


def opening(body: Body) -> Opening:
    raw = _challenge_body(body, OPEN)
    ticket, cells = raw.get("ticket"), raw.get("cells")
    if (
        not isinstance(ticket, str)
        or not isinstance(cells, list)
        or not 0 <= len(cells) <= MAX_CELLS
        or not all(isinstance(c, list) and len(c) == 2 and all(type(v) is int for v in c) for c in cells)
    ):
        raise Refused(400, f"A challenge request's body is {OPEN}, at most {MAX_CELLS} cells.")
    return Opening(ticket, [(c[0], c[1]) for c in cells], _timeout(raw))


def _challenge_body(body: bytes, shape: str) -> dict[str, Any]:
    try:
        raw = json.loads(body)
        if not isinstance(raw, dict):
            raise TypeError
        _timeout(raw)
        return raw
    except (ValueError, TypeError):
        raise Refused(400, f"A challenge request's body is {shape}.") from None


def _timeout(raw: dict[str, Any]) -> float:
    return min(MAX_TIMEOUT_S, max(0.1, float(raw.get("timeout_s", DEFAULT_TIMEOUT_S))))


Prober = Depends(SignedBy("probe"))
Committee = Depends(SignedBy("challenge"))


@router.post("/v1/probe", dependencies=[Prober])
def probe(timeout_s: Annotated[float, Depends(probe_timeout)], site: LeaseSite) -> dict[str, Any]:
    """One answer per live node: its clock and its GPUs, or why it did not answer in time."""
    return {"provider": site.provider, "nodes": site.probe(timeout_s)}


@router.post("/v1/challenge/ready", dependencies=[Committee])
def challenge_ready(ask: Annotated[Readying, Depends(readying)], site: LeaseSite) -> dict[str, Any]:
    """A challenge's worker placed on a node, before the oracle's clock starts: its ticket."""
    return site.challenge_ready(ask.params, ask.timeout_s, ask.vram_mb)


@router.post("/v1/challenge/commit", dependencies=[Committee])
def challenge_commit(ask: Annotated[Commit, Depends(commit)], site: LeaseSite) -> dict[str, Any]:
    """The seed sent, answered with the Merkle root of the rounds: what the oracle times."""
    return site.challenge_commit(ask.ticket, ask.seed, ask.timeout_s)


@router.post("/v1/challenge/open", dependencies=[Committee])
def challenge_open(ask: Annotated[Opening, Depends(opening)], site: LeaseSite) -> dict[str, Any]:
    """The rows the oracle samples, opened; the challenge then ends."""
    try:
        return site.challenge_open(ask.ticket, ask.cells, ask.timeout_s)
    except ValueError as exc:  # a cell the challenge does not have
        raise Refused(400, str(exc)) from None
