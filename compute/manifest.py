"""The `resultHash`: what a job's result is, hashed.

The manifest lists every output file under the result directory (relative path, size,
sha256), sorted by path, as canonical JSON; its sha256 is the outputs' hash. Files that
record when or where a job ran rather than what it produced (Ray's own bookkeeping) are left
out of it, so the same job with the same seed gives the same outputs' hash on any provider:
replicas are compared by it.

A lease's result also keeps what the lease printed (`log`, beside `outputs/`), and its
`result.json` names both: `{"log": {"bytes": N, "sha256": "0x…"}, "outputs": "0x…"}` as
canonical JSON. The sha256 of that record is the lease's resultHash, so the log is covered by
what the chain holds while the outputs' hash stays the same on every replica. A result with
no record (a runner run without a site) has its outputs' hash as its resultHash.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST = "manifest.json"
RECORD = "result.json"  # a lease's result record: its outputs' hash and its log's digest
LOG = "log"  # what a lease printed, kept beside its outputs
# Outputs only: anything else in a result directory is bookkeeping.
OUTPUT_DIR = "outputs"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def build_manifest(result_dir: Path) -> list[dict]:
    outputs = result_dir / OUTPUT_DIR
    entries = []
    for path in sorted(p for p in outputs.rglob("*") if p.is_file()):
        entries.append({
            "path": path.relative_to(outputs).as_posix(),
            "size": path.stat().st_size,
            "sha256": file_sha256(path),
        })
    return entries


def canonical(entries: list[dict] | dict) -> bytes:
    return json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()


def manifest_hash(entries: list[dict]) -> str:
    """0x-prefixed sha256 of a manifest's canonical form: what `resultHash` is."""
    return "0x" + hashlib.sha256(canonical(entries)).hexdigest()


def result_hash(result_dir: Path) -> str:
    """Writes result_dir/manifest.json and returns its hash (see `manifest_hash`)."""
    entries = build_manifest(result_dir)
    (result_dir / MANIFEST).write_bytes(canonical(entries))
    return manifest_hash(entries)


def result_record(outputs_hash: str, log: bytes) -> bytes:
    """A lease's result record, canonical: its sha256 is the lease's resultHash."""
    digest = "0x" + hashlib.sha256(log).hexdigest()
    return canonical({"log": {"bytes": len(log), "sha256": digest}, "outputs": outputs_hash})


def record_hash(record: bytes) -> str:
    return "0x" + hashlib.sha256(record).hexdigest()


def parse_record(raw: bytes) -> dict:
    """A result record as JSON; ValueError when it is not one."""
    found = json.loads(raw)
    if not (isinstance(found, dict) and set(found) == {"log", "outputs"} and isinstance(found["outputs"], str)
            and isinstance(found["log"], dict) and set(found["log"]) == {"bytes", "sha256"}
            and type(found["log"]["bytes"]) is int and isinstance(found["log"]["sha256"], str)):
        raise ValueError("not a result record")
    return found


def outputs_of(record: dict | None, result_hash: str | None) -> str | None:
    """The outputs' hash a result hash stands for: the record's when it is the one hashed, else
    the result hash itself (a result with no record); None when a record does not hash to it."""
    if record is None:
        return result_hash
    try:
        parse_record(canonical(record))
    except (ValueError, TypeError):
        return None
    return record["outputs"] if record_hash(canonical(record)) == result_hash else None
