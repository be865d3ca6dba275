"""What goes into a lease before its work starts, and what comes out of it after, outside the sandbox.

In: the launcher fetches what the job names from the buyer's URIs and checks each against the
sha256 its spec pins (`compute.dataplane.stage`) — a `ray` job's packed code, unpacked into the
lease's directory, and its inputs; a built-in job's model and dataset; an earlier job's result,
checked against the chain's resultHash — and installs a program's pip requirements into the
lease from wheels only, so installing runs none of the buyer's code with the site's rights.
A local path is read only if every user of the machine may read it and it lies outside what
the site keeps from its leases. Out: a program's outputs, refused if they hold a link, and
every result, written to the buyer's output.

Anything that does not match, cannot be read or cannot be written raises `InputError` with one
sentence: the buyer's to fix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

from compute import dataplane
from compute.dataplane import join, shown
from compute.errors import ComputeError
from compute.manifest import LOG as KEPT_LOG
from compute.manifest import (
    MANIFEST,
    OUTPUT_DIR,
    RECORD,
    canonical,
    manifest_hash,
    parse_record,
    record_hash,
    result_record,
)
from compute.runners.params import Located, Pinned, ProgramParams
from compute.runners.program import CODE, INPUTS, INTERNAL, OUTPUTS, PACKAGES, RESERVED_NAMES
from provider.lease import FETCHED, LOG, STAGED, untrusted
from provider.lease.plan import LeasePlan
from provider.lease.sandbox import lease_uid

PIP_TIMEOUT_S = 600.0


class InputError(ComputeError):
    """What a job names cannot be staged, read or written as its spec says: the buyer's to fix."""


def pinned(located: Located, what: str) -> Pinned:
    """`located` pinned by its sha256; InputError for a path or URI alone, which a site never
    fetches (`swarm job post` pins what a buyer names)."""
    if isinstance(located, str):
        raise InputError(f"{what} {located} is not pinned by its sha256; post the job with `swarm job post`, "
                         "which pins it")
    return located


def fetch_inputs(plan: LeasePlan, work: Path, site_dir: Path) -> None:
    """Copies into the lease the earlier result the job builds on, checked against the chain's
    resultHash of it, and the model or dataset the buyer brings, checked against its pin; once
    per lease directory (the mark is the site's, in `site_dir`, where the lease cannot write)."""
    if (site_dir / FETCHED).exists():
        return
    for item in plan.fetch:
        rel = f"{item.target}/{OUTPUT_DIR}" if item.prior else item.target
        untrusted.clear(work, rel)  # nothing an earlier attempt left there is written through
        target = work / rel
        if item.prior:
            what = f"the result of {item.prior}"
            try:
                readable(item.uri, plan.hidden, what, verified=True)
                dataplane.stage(join(item.uri, OUTPUT_DIR), outputs_hash(item.uri, item.sha256, what),
                                target, what=what)
            except dataplane.DigestMismatch:
                raise InputError(
                    f"{what} in {shown(item.uri)} is not the one the chain holds (its files do not "
                    f"hash to the resultHash {item.sha256}); restore it there, or build on "
                    "another job"
                ) from None
            except dataplane.DataPlaneError as exc:
                raise InputError(str(exc)) from None
        else:
            what = Path(item.target).name.replace("_", " ")
            try:
                readable(item.uri, plan.hidden, what)
                dataplane.stage(item.uri, item.sha256, target, what=what)
            except dataplane.DataPlaneError as exc:
                raise InputError(str(exc)) from None
    if os.geteuid() == 0:
        untrusted.chown_tree(work, lease_uid(plan.number))
    (site_dir / FETCHED).touch()


def outputs_hash(result: str, result_hash: str, what: str) -> str:
    """The hash of the outputs of the result at `result` whose resultHash the chain holds: the
    one its record names, when that record hashes to the resultHash; else the resultHash itself
    (a result with no record), which a forged record cannot change."""
    raw = dataplane.read_small(join(result, RECORD), RECORD_BYTES, what=f"the record of {what}")
    if raw is None or record_hash(raw).removeprefix("0x") != dataplane.normal_sha256(result_hash):
        return result_hash
    try:
        return parse_record(raw)["outputs"]
    except ValueError:
        return result_hash


RECORD_BYTES = 4096


def stage_program(plan: LeasePlan, work: Path, site_dir: Path) -> None:
    """Fetches, checks and unpacks a program's code and inputs and installs its requirements,
    once per lease directory: into a work directory no lease has run in yet (the mark that it
    is done is the site's, in `site_dir`), so nothing is written through what a lease left."""
    program = plan.job.params_of(ProgramParams)
    if (site_dir / STAGED).exists():
        return
    for name in os.listdir(work):  # what a staging cut short left
        untrusted.remove(work, name)
    internal = work / INTERNAL
    internal.mkdir()
    try:
        code = pinned(program.code, "code")
        readable(code.uri, plan.hidden, "code")
        archive = dataplane.stage(code.uri, code.sha256, internal / CODE, what="code")
        if archive.is_dir():
            raise InputError(
                f"code {code.uri} is a directory; it must be the program's directory packed as one "
                "tar, as `swarm job post` packs it"
            )
        _unpack(archive, work)
        for name, located in sorted(program.inputs.items()):
            given = pinned(located, f"input {name}")
            readable(given.uri, plan.hidden, f"input {name}")
            dataplane.stage(given.uri, given.sha256, work / INPUTS / name, what=f"input {name}")
    except dataplane.DataPlaneError as exc:
        raise InputError(str(exc)) from None
    if program.requirements:
        _install(list(program.requirements), internal / PACKAGES, site_dir / LOG,
                 timeout_s=min(PIP_TIMEOUT_S, plan.wall_seconds))
    (work / OUTPUTS).mkdir(exist_ok=True)
    if os.geteuid() == 0:
        untrusted.chown_tree(work, lease_uid(plan.number))
    (site_dir / STAGED).touch()


def _unpack(archive: Path, work: Path) -> None:
    import tarfile

    with tarfile.open(archive) as tar:
        tops = {Path(m.name).parts[0] for m in tar.getmembers() if Path(m.name).parts}
    clash = sorted(tops & set(RESERVED_NAMES))
    if clash:
        raise InputError(f"the code holds {', '.join(clash)} at its top, which the lease keeps for its own "
                         f"({', '.join(RESERVED_NAMES)}); rename or move it")
    dataplane.unpack(archive, work)


def readable(location: str, hidden: tuple[str, ...], what: str, verified: bool = False) -> None:
    """A local path is read only if it is not in what the site keeps from its leases (a
    keystore, the cluster's token) and every user of the site's machine may read it — unless
    it is `verified`: an earlier job's result, kept only if it hashes to the chain's resultHash,
    which a lease wrote with its own user's rights."""
    if dataplane.is_uri(location) and not location.startswith("file://"):
        return
    path = Path(location.removeprefix("file://")).expanduser().resolve()
    if any(path.is_relative_to(Path(h).resolve()) for h in hidden):
        raise InputError(f"{what} {location} lies in what the site keeps from its leases")
    if path.exists() and not verified:
        for item in [path, *(path.rglob("*") if path.is_dir() else ())]:
            if item.stat().st_mode & 0o004 == 0:
                raise InputError(f"{what} {location} is not readable by every user of the site; "
                                 "make it world-readable or put it in object storage")


def writable_output(location: str, hidden: tuple[str, ...]) -> None:
    """A local output directory may not lie in what the site keeps from its leases."""
    if dataplane.is_uri(location) and not location.startswith("file://"):
        return
    path = Path(location.removeprefix("file://")).expanduser().resolve()
    if any(path.is_relative_to(Path(h).resolve()) or Path(h).resolve().is_relative_to(path) for h in hidden):
        raise InputError(f"output {location} lies in (or holds) what the site keeps from its leases; "
                         "choose another output")


def result_binds(plan: LeasePlan) -> tuple[tuple[Path, bool], ...]:
    """A built-in job's own directory of the buyer's output, when that is a directory here:
    writable and owned by the lease's user. One in what the site keeps from its leases is refused."""
    own = plan.local_result
    if own is None:
        return ()
    writable_output(str(own.parent), plan.hidden)
    own.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:  # a job taken over from another lease is this lease's now
        untrusted.chown_tree(own, lease_uid(plan.number))
    return ((own, True),)


def _install(requirements: list[str], target: Path, log: Path, timeout_s: float) -> None:
    """pip, from wheels only (installing a wheel runs none of its code), into the lease."""
    argv = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--only-binary=:all:",
        "--no-input",
        "--disable-pip-version-check",
        "--no-warn-script-location",
        "--quiet",
        "--target",
        str(target),
        *requirements,
    ]
    with open(log, "a") as out:
        out.write(f"installing {' '.join(requirements)}\n")
        out.flush()
        try:
            done = subprocess.run(
                argv,
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                timeout=timeout_s,
                check=False,
                env=_pip_env(),
            )
        except subprocess.TimeoutExpired:
            raise InputError(
                f"the requirements ({', '.join(requirements)}) took more than {timeout_s:.0f} s to install"
            ) from None
        out.write(done.stderr)
    if done.returncode != 0:
        errors = [line.strip() for line in done.stderr.splitlines() if line.strip().startswith("ERROR")]
        reason = errors[0].removeprefix("ERROR:").strip() if errors else f"pip exited with {done.returncode}"
        raise InputError(
            f"the requirements ({', '.join(requirements)}) could not be installed: {reason[:300]}"
        )


def _pip_env() -> dict[str, str]:
    """The site's own pip settings (its index, proxy, certificates), nothing else of its environment."""
    keep = ("PATH", "HOME", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy",
            "SSL_CERT_FILE")
    return {k: v for k, v in os.environ.items() if k in keep or k.startswith("PIP_")}


# ── out of the lease ──────────────────────────────────────────────────────────────


def store_result(root: Path, rel: str, destination: str | None, hidden: tuple[str, ...],
                 beside_outputs: bool = False, log: bytes | None = None) -> tuple[str, dict | None]:
    """The result the lease left in `root/rel` (its `outputs/` and, `beside_outputs`, what lies
    beside them: a built-in job's checkpoints, anything but regular files left out) stored at
    `destination` (`<the buyer's output>/<compute job id>`, a directory or a URI) with the
    site's manifest of the outputs and, given the lease's `log`, that log and the result record
    naming both (`compute.manifest`); or, with no destination (a built-in job that wrote straight
    into the buyer's directory), those written there. Everything is read through `untrusted`, in
    one pass that hashes as it copies. Returns the job's resultHash and the record it hashes
    (None without a log: the outputs' hash is the resultHash)."""
    outputs = f"{rel}/{OUTPUT_DIR}".lstrip("/")
    if destination is None:
        entries = untrusted.copy_tree(root, outputs, None)
        manifest = [e.to_dict() for e in entries]
        untrusted.write_file(root, f"{rel}/{MANIFEST}".lstrip("/"), canonical(manifest))
        if log is None:
            return manifest_hash(manifest), None
        record = result_record(manifest_hash(manifest), log)
        untrusted.write_file(root, f"{rel}/{KEPT_LOG}".lstrip("/"), log)
        untrusted.write_file(root, f"{rel}/{RECORD}".lstrip("/"), record)
        return record_hash(record), json.loads(record)
    import pyarrow as pa

    writable_output(destination, hidden)
    untrusted.check_tree(root, outputs)  # refused before anything is written: nothing half-stored
    try:
        sink = _sink(destination)
        entries = untrusted.copy_tree(root, outputs, lambda path: sink(f"{OUTPUT_DIR}/{path}"))
        if beside_outputs:
            untrusted.copy_tree(root, rel, sink, skip=frozenset({OUTPUT_DIR, MANIFEST, KEPT_LOG, RECORD}),
                                lenient=True)
        manifest = [e.to_dict() for e in entries]
        with sink(MANIFEST) as f:
            f.write(canonical(manifest))
        if log is None:
            return manifest_hash(manifest), None
        record = result_record(manifest_hash(manifest), log)
        with sink(KEPT_LOG) as f:
            f.write(log)
        with sink(RECORD) as f:  # last: a result with its record is whole
            f.write(record)
    except (pa.ArrowException, ValueError) as exc:  # the store's refusal: OSError, as a local disk's
        raise OSError(str(exc)) from None
    return record_hash(record), json.loads(record)


def store_log(destination: str, hidden: tuple[str, ...], log: bytes) -> None:
    """A failed lease's log, kept in its directory of the buyer's output (`<output>/<compute job
    id>/log`) for the buyer to read after the site has forgotten the lease; it is no result and
    no hash covers it."""
    import pyarrow as pa

    writable_output(destination, hidden)
    try:
        with _sink(destination)(KEPT_LOG) as f:
            f.write(log)
    except (pa.ArrowException, ValueError) as exc:  # the store's refusal: OSError, as a local disk's
        raise OSError(str(exc)) from None


def _sink(destination: str) -> Callable[[str], IO[bytes]]:
    """Opens each file of a result for writing under `destination`: a directory of this machine
    (made anew, never written through a link) or a URI of any store pyarrow reaches."""
    import pyarrow.fs as pafs

    fs, root = dataplane.filesystem(destination)
    if isinstance(fs, pafs.LocalFileSystem):
        Path(root).mkdir(parents=True, exist_ok=True)
        return lambda path: untrusted.create(Path(root), path)

    def remote(path: str) -> IO[bytes]:
        target = f"{root.rstrip('/')}/{path}"
        fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        return fs.open_output_stream(target)

    return remote
