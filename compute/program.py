"""A buyer's own Ray program in a lease (kind `ray`, docs/market.md).

Outside the sandbox, the site's launcher stages the program (`stage`): it fetches the packed
code and every input from the buyer's URIs, checks each against the sha256 its spec pins
(`compute.dataplane.stage`), unpacks the code into the lease's directory, and installs the
pip requirements into the lease from wheels only, so installing runs none of the buyer's code
with the site's rights. The sandbox has no network: the lease reads its inputs from their
verified copies, and the site writes its outputs to the buyer's output URI when it ends.

Inside the sandbox, `run` starts the lease's own Ray instance (one node with exactly the CPUs
and GPUs the lease bought, on a loopback no one else shares) and runs the entrypoint with
`RAY_ADDRESS` pointing at it, as `ray job submit` runs an entrypoint against a cluster: the
buyer's unchanged `ray.init()` and Ray Train script run there. A program that uses no Ray says
`ray: false` and runs without one. The program sees:

  its code          the lease's directory, its working directory
  inputs/<name>/    each input, also as $SWARM_INPUT_<NAME>: a directory's files, or the one
                    file under its own name (inputs/digits/digits.parquet)
  $SWARM_OUTPUT_DIR where it writes its results (outputs/), which the resultHash covers
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compute import dataplane

if TYPE_CHECKING:
    from compute.lease import LeasePlan

INTERNAL = ".swarm"  # the launcher's own files in the lease's directory
PACKAGES = "packages"  # under INTERNAL: the requirements, installed for this lease
CODE = "code"  # under INTERNAL: the packed code, as fetched
STAGED = "staged"
INPUTS = "inputs"
OUTPUTS = "outputs"
PIP_TIMEOUT_S = 600.0
# What a packed program may not hold at its top: the lease's own places.
RESERVED_NAMES = (INTERNAL, INPUTS, OUTPUTS, "home", "lease.json", "run.json", "manifest.json")


class ProgramError(Exception):
    """A program that cannot be staged or run as its spec says: the buyer's to fix."""


def input_variable(name: str) -> str:
    return f"SWARM_INPUT_{name.upper()}"


def stage(plan: LeasePlan, work: Path, hidden: tuple[str, ...], log: Path) -> None:
    """Fetches, checks and unpacks the program's code and inputs and installs its requirements,
    once per lease directory; raises ProgramError naming what is wrong."""
    program = plan.program
    internal = work / INTERNAL
    if (internal / STAGED).exists():
        return
    internal.mkdir(parents=True, exist_ok=True)
    try:
        readable(program["code"]["uri"], hidden, "code")
        archive = dataplane.stage(program["code"]["uri"], program["code"]["sha256"], internal / CODE, what="code")
        if archive.is_dir():
            raise ProgramError(f"code {program['code']['uri']} is a directory; it must be the program's directory "
                               "packed as one tar, as `swarm job post` packs it")
        _unpack(archive, work)
        for name, pinned in sorted(program.get("inputs", {}).items()):
            readable(pinned["uri"], hidden, f"input {name}")
            dataplane.stage(pinned["uri"], pinned["sha256"], work / INPUTS / name, what=f"input {name}")
    except dataplane.DataPlaneError as exc:
        raise ProgramError(str(exc)) from None
    requirements = program.get("requirements") or []
    if requirements:
        _install(requirements, internal / PACKAGES, log, timeout_s=min(PIP_TIMEOUT_S, plan.wall_seconds))
    (work / OUTPUTS).mkdir(exist_ok=True)
    (internal / STAGED).touch()


def _unpack(archive: Path, work: Path) -> None:
    import tarfile

    with tarfile.open(archive) as tar:
        tops = {Path(m.name).parts[0] for m in tar.getmembers() if Path(m.name).parts}
    clash = sorted(tops & set(RESERVED_NAMES))
    if clash:
        raise ProgramError(f"the code holds {', '.join(clash)} at its top, which the lease keeps for its own "
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
        raise ProgramError(f"{what} {location} lies in what the site keeps from its leases")
    if path.exists() and not verified:
        for item in [path, *(path.rglob("*") if path.is_dir() else ())]:
            if item.stat().st_mode & 0o004 == 0:
                raise ProgramError(f"{what} {location} is not readable by every user of the site; "
                                   "make it world-readable or put it in object storage")


def writable_output(location: str, hidden: tuple[str, ...]) -> None:
    """A local output directory may not lie in what the site keeps from its leases."""
    if dataplane.is_uri(location) and not location.startswith("file://"):
        return
    path = Path(location.removeprefix("file://")).expanduser().resolve()
    if any(path.is_relative_to(Path(h).resolve()) or Path(h).resolve().is_relative_to(path) for h in hidden):
        raise ProgramError(f"output {location} lies in (or holds) what the site keeps from its leases; "
                           "choose another output")


def _install(requirements: list[str], target: Path, log: Path, timeout_s: float) -> None:
    """pip, from wheels only (installing a wheel runs none of its code), into the lease."""
    argv = [sys.executable, "-m", "pip", "install", "--only-binary=:all:", "--no-input", "--disable-pip-version-check",
            "--no-warn-script-location", "--quiet", "--target", str(target), *requirements]
    with open(log, "a") as out:
        out.write(f"installing {' '.join(requirements)}\n")
        out.flush()
        try:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, text=True, timeout=timeout_s, check=False,
                                  env=_pip_env())
        except subprocess.TimeoutExpired:
            raise ProgramError(f"the requirements ({', '.join(requirements)}) took more than {timeout_s:.0f} s to "
                               "install") from None
        out.write(done.stderr)
    if done.returncode != 0:
        errors = [line.strip() for line in done.stderr.splitlines() if line.strip().startswith("ERROR")]
        reason = (errors[0].removeprefix("ERROR:").strip() if errors else f"pip exited with {done.returncode}")
        raise ProgramError(f"the requirements ({', '.join(requirements)}) could not be installed: {reason[:300]}")


def _pip_env() -> dict[str, str]:
    """The site's own pip settings (its index, proxy, certificates), nothing else of its environment."""
    keep = ("PATH", "HOME", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy",
            "SSL_CERT_FILE")
    return {k: v for k, v in os.environ.items() if k in keep or k.startswith("PIP_")}


def chown(work: Path, uid: int) -> None:
    for path in [work, *work.rglob("*")]:
        os.chown(path, uid, uid, follow_symlinks=False)


def check_outputs(work: Path) -> None:
    outputs = work / OUTPUTS
    if outputs.is_symlink() or not outputs.is_dir():
        raise ProgramError(f"the job replaced its {OUTPUTS} directory with something else; write results into it")
    for path in outputs.rglob("*"):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise ProgramError(f"the job's outputs hold {path.relative_to(work)}, a link or a special file; "
                               "outputs are regular files only")


def publish(work: Path, result: str, hidden: tuple[str, ...]) -> None:
    """The outputs and their manifest, to the buyer's output URI (`<output>/<compute job id>`)."""
    from compute.manifest import MANIFEST

    try:
        writable_output(result, hidden)
        dataplane.upload(work / OUTPUTS, dataplane.join(result, OUTPUTS), what="result")
        dataplane.upload(work / MANIFEST, dataplane.join(result, MANIFEST), what="result's manifest")
    except dataplane.DataPlaneError as exc:
        raise ProgramError(str(exc)) from None


# ── inside the sandbox ──────────────────────────────────────────────────────────────


def run(work: Path, start_ray) -> int:
    """Runs the entrypoint against the lease's own Ray instance; returns its exit status."""
    from compute.lease import LeasePlan

    plan = LeasePlan.read(work)
    program: dict[str, Any] = plan.program
    # Ray's workers start with the raylet's environment: the program's packages, its code and
    # its variables must be there before Ray starts, as the entrypoint's own.
    paths = [str(work / INTERNAL / PACKAGES), str(work), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    os.environ.update(program.get("env", {}))
    os.environ["SWARM_OUTPUT_DIR"] = str(work / OUTPUTS)
    for name in program.get("inputs", {}):
        os.environ[input_variable(name)] = str(work / INPUTS / name)
    env = dict(os.environ)
    if program.get("ray", True):  # a plain program (`ray: false`) is spared the start of a Ray it would not use
        env["RAY_ADDRESS"] = start_ray(plan).address_info["gcs_address"]
    done = subprocess.run(["/bin/sh", "-c", program["entrypoint"]], cwd=work, env=env, check=False)
    return done.returncode
