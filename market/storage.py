"""The buyer's storage: what goes into it before a job is posted, and what comes out of it after.

Before: a job's code and inputs are put in the buyer's own storage and pinned by their sha256
(docs/market.md, "Your own program"). `pin(spec, base, upload_to)` turns a spec that names
code or inputs by a local path or an unpinned URI into one that names each by `{uri, sha256}`:

- a local code directory is packed (`compute.dataplane.pack`) and uploaded as
  `<upload_to>/code/<sha256>.tar`; a local file or directory input goes to
  `<upload_to>/inputs/<sha256>/<its name>`. Content-addressed, so posting the same code
  again uploads nothing new.
- a URI is read once to compute its digest, and stays where it is.

Relative paths are the spec file's (`base`); `upload_to` defaults to the spec's output
(`<output>/uploads`). Nothing passes through the market: the buyer's machine writes to the
buyer's storage, and the site reads from it.

After: a result is found under the spec's output (`result_location`) and refused unless its
files hash to the chain's resultHash (`fetch_result`); one in object storage is downloaded
beside its destination and moved in only once verified (`download_verified`). What the chain
says (that resultHash among it) this module never asks: `market.buyer` reads it and hands it in.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from pathlib import Path
from typing import Any

from compute import dataplane
from compute.manifest import (
    LOG,
    MANIFEST,
    OUTPUT_DIR,
    RECORD,
    build_manifest,
    file_sha256,
    manifest_hash,
    parse_record,
    record_hash,
)
from ledger.errors import SwarmError
from market.spec import JobSpec, SpecError, validate_spec

UPLOADS = "uploads"
DEFAULT_OUTPUT = "results"  # a built-in job's output when its spec names none: $SWARM_HOME/results


# ── before a job is posted: pinning ─────────────────────────────────────────────────
def pin(
    spec: JobSpec, base: Path, upload_to: str | None = None, default_output: str | None = None
) -> JobSpec:
    """The spec with its code and inputs (a built-in kind's model and dataset) uploaded (if local
    and there is an output or `upload_to`) and pinned; its output made absolute if it is a local
    path. A built-in job with no output gets `default_output`, whose uploads go nowhere (its
    local files are pinned where they are). Raises SpecError naming the field that cannot be pinned."""
    if not spec.unpinned() and spec.output is not None and dataplane.is_uri(spec.output):
        return spec
    output = _located(spec.output, base) if spec.output else None
    upload_to = upload_to or (dataplane.join(output, UPLOADS) if output else None)
    output = output or (default_output if spec.kind != "ray" else None)
    data: dict[str, Any] = spec.canonical() | {"output": output}
    if isinstance(spec.code, str):
        located = _located(spec.code, base)
        if not dataplane.is_uri(located):
            check_entrypoint(str(spec.params.get("entrypoint", "")), Path(located))
        data["code"] = _pin_code(located, upload_to)
    for name, value in spec.inputs.items():
        if isinstance(value, str):
            located = _located(value, base)
            data["inputs"][name] = _pin_input(f"inputs.{name}", f"input {name}", located, upload_to)
    for field, value in spec.brought().items():  # a built-in kind's model or dataset
        if isinstance(value, str):
            data[field] = _pin_input(field, field, _located(value, base), upload_to)
    return validate_spec(data, now=spec.deadline - 1)


def entrypoint_file(entrypoint: str) -> str | None:
    """The file of its code directory a ray job's entrypoint runs, where it names one:
    `python train.py …`, `bash run.sh`, `./run.sh`, `train.py`; None for a module (`python -m`),
    inline code (`-c`), an absolute path or a program found on the PATH."""
    import shlex

    try:
        words = shlex.split(entrypoint)
    except ValueError:
        return None
    if not words:
        return None
    script: str | None = words[0] if "/" in words[0] or words[0].endswith((".py", ".sh")) else None
    if re.fullmatch(r"python[\d.]*|bash|sh", Path(words[0]).name):
        script, args = None, iter(words[1:])
        for word in args:
            if word in ("-m", "-c"):
                break
            if word in ("-W", "-X", "-o", "-O"):  # an option that takes the next word
                next(args, None)
            elif not word.startswith("-"):
                script = word
                break
    return None if script is None or script.startswith("/") else script


def check_entrypoint(entrypoint: str, code: Path) -> None:
    """Refuses, before anything is uploaded or escrowed, an entrypoint whose file the local code
    directory does not have, naming the nearest file it does have."""
    import difflib

    name = entrypoint_file(entrypoint)
    if name is None or not code.is_dir() or (code / name).is_file():
        return
    have = sorted(str(p.relative_to(code)) for p in code.rglob("*") if p.is_file()
                  and p.suffix in (".py", ".sh") and "__pycache__" not in p.parts)[:1000]
    nearest = difflib.get_close_matches(name, have, n=1, cutoff=0.6)
    hint = f" (did you mean {nearest[0]}?)" if nearest else f"; it has {', '.join(have[:5]) or 'no script'}"
    raise SpecError(f"spec field params.entrypoint runs {name}, which the code directory {code} does not "
                    f"have{hint}.", "params.entrypoint")


def _located(value: str, base: Path) -> str:
    if dataplane.is_uri(value):
        return value
    return str((base / Path(value).expanduser()).resolve())


def _pin_code(location: str, upload_to: str | None) -> dict[str, str]:
    try:
        if dataplane.is_uri(location):  # an archive the buyer packed and stored already
            return {"uri": location, "sha256": dataplane.digest(location, "code")}
        archive = dataplane.pack(Path(location))
        sha = hashlib.sha256(archive).hexdigest()
        target = dataplane.join(_upload_place(upload_to, "code"), f"code/{sha}.tar")
        if not dataplane.exists(target):
            with tempfile.TemporaryDirectory() as scratch:
                packed = Path(scratch) / "code.tar"
                packed.write_bytes(archive)
                dataplane.upload(packed, target, what="packed code")
        return {"uri": target, "sha256": sha}
    except dataplane.DataPlaneError as exc:
        raise SpecError(f"spec field code cannot be pinned: {exc}.", "code") from None


def _pin_input(field: str, what: str, location: str, upload_to: str | None) -> dict[str, str]:
    """A file or directory pinned by its sha256: uploaded first if it is local and there is a
    place to upload to; a local one with none stays where it is, which a devnet's sites read."""
    try:
        sha = dataplane.digest(location, what)
        if dataplane.is_uri(location) or not upload_to:
            return {"uri": location, "sha256": sha}
        target = dataplane.join(upload_to, f"inputs/{sha}/{Path(location).name}")
        if not dataplane.exists(target):
            dataplane.upload(Path(location), target, what=what)
        return {"uri": target, "sha256": sha}
    except dataplane.DataPlaneError as exc:
        raise SpecError(f"spec field {field} cannot be pinned: {exc}.", field) from None


def _upload_place(upload_to: str | None, field: str) -> str:
    if not upload_to:
        raise SpecError(f"spec field {field} names a local path, which a site cannot read; give an output "
                        "(the uploads go next to it) or a URI of the buyer's storage.", field)
    return upload_to


# ── after a job ran: its result ─────────────────────────────────────────────────────
def result_location(output: str, namespace: str, job_id: int) -> str:
    """Where a site puts job `job_id`'s result under a spec's `output` (`namespace`: the market's,
    `market.spec.job_namespace`)."""
    return dataplane.join(output, namespace + str(job_id))


def fetch_result(job_id: int, location: str, expected: str, download_to: str | Path | None = None) -> Path:
    """Job `job_id`'s result directory, verified against `expected` (the chain's resultHash): read
    where it is when that is a local directory and no `download_to` is asked for, else downloaded
    into `download_to` (default ./job-ID), a new or empty directory (`download_verified`)."""
    if dataplane.is_uri(location) or download_to is not None:
        return download_verified(job_id, location, Path(download_to or f"job-{job_id}"), expected)
    path = Path(location)
    verify(job_id, path, expected)
    return path


def verify(job_id: int, result_dir: Path, expected: str, where: str | None = None) -> None:
    """Refuses a result that does not hash to `expected` (the chain's resultHash), naming what
    differs (and `where` the result came from, when it is not `result_dir` itself): its outputs
    and, for a lease's result, its log, both named by its record (`compute.manifest`)."""
    where = where or str(result_dir)
    if not result_dir.is_dir():
        raise SwarmError(f"The result directory of job {job_id}, {where}, is missing; it cannot be verified.")
    entries = build_manifest(result_dir)
    actual = manifest_hash(entries)
    record = result_dir / RECORD
    if record.is_file():
        outputs, log_error = _recorded(job_id, result_dir, expected, where)
    elif actual == expected:
        return
    else:
        outputs, log_error = expected, None
    if actual != outputs:
        changed = _changed_files(result_dir / MANIFEST, entries, outputs)
        raise SwarmError(
            f"The result of job {job_id} in {where} does not match its on-chain result hash {expected} "
            f"(its outputs hash to {actual}, not {outputs}{changed}); do not trust it."
        )
    if log_error:
        raise SwarmError(log_error)


def _recorded(job_id: int, result_dir: Path, expected: str, where: str) -> tuple[str, str | None]:
    """The outputs' hash a lease's result record names, once the record hashes to `expected`,
    and why its log does not match the record, if it does not."""
    raw = (result_dir / RECORD).read_bytes()
    try:
        if record_hash(raw) != expected:
            raise ValueError
        record = parse_record(raw)
    except ValueError:
        raise SwarmError(
            f"The result of job {job_id} in {where} does not match its on-chain result hash {expected} "
            f"(its {RECORD} hashes to {record_hash(raw)}); do not trust it."
        ) from None
    log = result_dir / LOG
    logged = "0x" + file_sha256(log) if log.is_file() else None
    if logged != record["log"]["sha256"]:
        return record["outputs"], (
            f"The log of job {job_id} in {where} is not the one its on-chain result hash covers "
            f"({'it is missing' if logged is None else 'it was altered'}); do not trust it."
        )
    return record["outputs"], None


def download_verified(job_id: int, location: str, target: Path, expected: str) -> Path:
    """Downloads a job's result from `location` into `target`, a new or empty directory, once its
    files hash to the chain's resultHash `expected`; returns where it is.

    The result lands in a directory of its own beside `target` and is moved into place only once
    verified, so no file that was in `target` before mixes in (and makes the provider look
    guilty), and a result that does not verify leaves nothing there. A `target` that already
    holds exactly this result is kept as it is, with nothing downloaded; one that holds anything
    else is refused."""
    import shutil

    target = target.resolve()
    if target.exists() and not target.is_dir():
        raise SwarmError(f"{target} is a file; give --download a directory for the result of job {job_id}.")
    if target.is_dir() and any(target.iterdir()):
        if _holds(target, expected):
            return target
        raise SwarmError(f"{target} is not empty, so the result of job {job_id} would mix with the files "
                         "there; give --download a new or empty directory.")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".download", dir=target.parent))
    except OSError as exc:
        raise SwarmError(f"The result of job {job_id} cannot be downloaded beside {target} ({exc.strerror}); "
                         "give --download a directory you may write.") from None
    try:
        landed = staging / "result"
        try:
            dataplane.download(location, landed, what=f"the result of job {job_id}")
        except dataplane.DataPlaneError as exc:
            reason = str(exc).strip().rstrip(".") or type(exc).__name__
            raise SwarmError(f"{reason}; check the output URI and its keys (AWS_* for s3://).") from None
        verify(job_id, landed, expected, where=dataplane.shown(location))
        try:
            landed.rename(target)  # replaces an empty directory at once
        except OSError as exc:
            raise SwarmError(f"The verified result of job {job_id} cannot be moved into {target} "
                             f"({exc.strerror}); give --download a new or empty directory.") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


KEPT_LOG_BYTES = 9 << 20  # a lease keeps at most 8 MiB of its log, and a line saying what it left out


def kept_log(job_id: int, location: str, expected: str) -> str | None:
    """The log a lease's result at `location` keeps, checked against `expected` (the chain's
    resultHash) through the result's record; None when the result has no record (no site ran it)."""
    where = dataplane.shown(location)
    try:
        raw = _read(location, RECORD, 4096, f"the record of job {job_id}")
        if raw is None:
            return None
        log = _read(location, LOG, KEPT_LOG_BYTES, f"the log of job {job_id}")
    except dataplane.DataPlaneError as exc:
        reason = clause(exc)
        raise SwarmError(f"{reason[:1].upper()}{reason[1:]}; check the output URI and its keys (AWS_* for "
                         "s3://).") from None
    try:
        if record_hash(raw) != expected:
            raise ValueError
        record = parse_record(raw)
    except ValueError:
        raise SwarmError(f"The record of job {job_id}'s result in {where} does not match its on-chain result "
                         f"hash {expected}; do not trust it.") from None
    if log is None or "0x" + hashlib.sha256(log).hexdigest() != record["log"]["sha256"]:
        raise SwarmError(f"The log of job {job_id} in {where} is not the one its on-chain result hash covers "
                         f"({'it is missing' if log is None else 'it was altered'}); do not trust it.")
    return log.decode(errors="replace")


def failed_log(job_id: int, location: str) -> str | None:
    """The log a site kept of job `job_id`'s failed lease in its directory of the buyer's output,
    if any; no hash on chain covers it."""
    try:
        log = _read(location, LOG, KEPT_LOG_BYTES, f"the log of job {job_id}")
    except dataplane.DataPlaneError:
        return None
    return log.decode(errors="replace") if log is not None else None


def _read(location: str, name: str, limit: int, what: str) -> bytes | None:
    return dataplane.read_small(dataplane.join(location, name), limit, what=what)


def clause(exc: BaseException) -> str:
    return (str(exc).strip() or type(exc).__name__).rstrip(".")


def _holds(result_dir: Path, expected: str) -> bool:
    """Whether `result_dir` holds the result that hashes to `expected` already."""
    if not (result_dir / OUTPUT_DIR).is_dir():
        return False
    try:
        verify(0, result_dir, expected)
    except (SwarmError, OSError):
        return False
    return True


def _changed_files(manifest: Path, entries: list[dict], expected: str) -> str:
    """Which outputs differ from the manifest the provider wrote, if that manifest is the one on chain."""
    try:
        raw = manifest.read_bytes()
        if "0x" + hashlib.sha256(raw).hexdigest() != expected:
            return ""
        original = {e["path"]: e["sha256"] for e in json.loads(raw)}
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    now = {e["path"]: e["sha256"] for e in entries}
    differ = sorted(p for p in original.keys() | now.keys() if original.get(p) != now.get(p))
    return f"; changed, added or removed: {', '.join('outputs/' + p for p in differ)}" if differ else ""
