"""The `resultHash`: sha256 over a canonical manifest of a job's outputs.

The manifest lists every output file under the result directory (relative path, size,
sha256), sorted by path, as canonical JSON. Files that record when or where a job ran
rather than what it produced (logs, Ray's own bookkeeping) are left out, so the same job
with the same seed gives the same hash on any provider.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST = "manifest.json"
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


def canonical(entries: list[dict]) -> bytes:
    return json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()


def manifest_hash(entries: list[dict]) -> str:
    """0x-prefixed sha256 of a manifest's canonical form: what `resultHash` is."""
    return "0x" + hashlib.sha256(canonical(entries)).hexdigest()


def result_hash(result_dir: Path) -> str:
    """Writes result_dir/manifest.json and returns its hash (see `manifest_hash`)."""
    entries = build_manifest(result_dir)
    (result_dir / MANIFEST).write_bytes(canonical(entries))
    return manifest_hash(entries)
