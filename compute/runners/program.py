"""The `ray` runner: a buyer's own program, run in its lease's directory (docs/market.md).

The program runs against a Ray instance of its lease's own (one node with exactly the CPUs and
GPUs the lease bought, on a loopback no one else shares): `run` starts it and runs the
entrypoint with `RAY_ADDRESS` pointing at it, as `ray job submit` runs an entrypoint against a
cluster, so the buyer's unchanged `ray.init()` and Ray Train script run there. A program that
uses no Ray says `ray: false` and runs without one. The site stages the program into the lease
beforehand (`provider.lease.inputs`). The program sees:

  its code          the lease's directory, its working directory
  inputs/<name>/    each input, also as $SWARM_INPUT_<NAME>: a directory's files, or the one
                    file under its own name (inputs/digits/digits.parquet)
  $SWARM_OUTPUT_DIR where it writes its results (outputs/), which the resultHash covers
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from compute.runners.params import ProgramParams

INTERNAL = ".swarm"  # the site's own files in the lease's directory
PACKAGES = "packages"  # under INTERNAL: the requirements, installed for this lease
CODE = "code"  # under INTERNAL: the packed code, as fetched
INPUTS = "inputs"
OUTPUTS = "outputs"
# What a packed program may not hold at its top: the lease's own places.
RESERVED_NAMES = (INTERNAL, INPUTS, OUTPUTS, "home", "lease.json", "run.json", "manifest.json")


def input_variable(name: str) -> str:
    return f"SWARM_INPUT_{name.upper()}"


def run(program: ProgramParams, work: Path, start_ray: Callable[[], str], outputs: Path | None = None) -> int:
    """Runs the entrypoint in `work` against the lease's own Ray instance, whose address
    `start_ray` gives once it has started it; returns the entrypoint's exit status. `outputs`:
    where it writes its results, when not in `work` (a lease across nodes writes them where
    every node can)."""
    # Ray's workers start with the raylet's environment: the program's packages, its code and
    # its variables must be there before Ray starts, as the entrypoint's own.
    paths = [str(work / INTERNAL / PACKAGES), str(work), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    os.environ.update(program.env)
    os.environ["SWARM_OUTPUT_DIR"] = str(outputs or work / OUTPUTS)
    for name in program.inputs:
        os.environ[input_variable(name)] = str(work / INPUTS / name)
    env = dict(os.environ)
    if program.ray:  # a plain program is spared the start of a Ray it would not use
        env["RAY_ADDRESS"] = start_ray()
    done = subprocess.run(["/bin/sh", "-c", program.entrypoint], cwd=work, env=env, check=False)
    return done.returncode
