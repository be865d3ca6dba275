"""Content-addressed specs: the JSON a keccak256 on-chain hash stands for.

Provider hardware specs and buyers' job specs are stored as canonical JSON under
$SWARM_HOME/specs/<hash>.json, so anyone holding the hash can read and check the spec.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ledger.abi import keccak256 as keccak
from ledger.errors import SwarmError


def canonical(spec: dict[str, Any]) -> bytes:
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def spec_hash(spec: dict[str, Any]) -> bytes:
    return keccak(canonical(spec))


def store_spec(home: Path, spec: dict[str, Any]) -> bytes:
    """Writes `spec` under its hash (once) and returns the hash."""
    digest = spec_hash(spec)
    path = spec_path(home, digest)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(canonical(spec))
        tmp.replace(path)
    return digest


def load_spec(home: Path, digest: bytes) -> dict[str, Any]:
    path = spec_path(home, digest)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SwarmError(f"No spec with hash 0x{digest.hex()} in {path.parent}.") from None
    if keccak(raw) != digest:
        raise SwarmError(f"{path} does not hash to its name; the file was altered.")
    return json.loads(raw)


def spec_path(home: Path, digest: bytes) -> Path:
    return home / "specs" / f"0x{digest.hex()}.json"
