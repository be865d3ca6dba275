"""A lease's own costs on the machine that runs it: starting one, and storing a large result.

Run: make bench-lease   (or .venv/bin/python bench/lease.py --runs 5)

  start    From the launcher's call (`provider.lease.launch.launch`, as the site's Ray job makes
           it) to the first line of a buyer's plain program inside the sandbox: its code fetched,
           checked and unpacked, its sandbox built, its limits set, Python started. A program
           with no Ray of its own, so the figure is the lease's, not Ray's.
  publish  From the program's last line to the launcher's return, for a program that leaves a
           1 GiB output: the sandbox torn down, the outputs read (no link followed), hashed and
           copied to the buyer's output (a directory on the same disk) with their manifest.

Both run as root on this machine, in directories under /var/tmp; medians of `--runs` after a
warm-up. The same script runs against an earlier checkout (`--project`) for a before/after.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results" / "lease.json"
START = """
import time, pathlib, os
pathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'started').write_text(repr(time.time()))
"""
PUBLISH = """
import os, pathlib, time
chunk = os.urandom(2**20)
with open(pathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'weights.bin'), 'wb') as f:
    for _ in range({mib}):
        f.write(chunk)
pathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'ended').write_text(repr(time.time()))
"""


def plan_for(store: Path, code: str, number: int, result: Path):
    from compute.jobs import ComputeJob
    from provider.lease.plan import LeasePlan
    from tests.programs import pinned_code

    program = {"entrypoint": "python main.py", "requirements": [], "env": {}, "ray": False,
               "code": pinned_code(store, {"main.py": code})}
    return LeasePlan(job_id=number, number=number, job=ComputeJob.of(f"job-{number}", "ray", "", program),
                     cpus=1, gpus=0, memory_bytes=2 * 2**30, wall_seconds=600, max_units=10_000,
                     result=str(result))


def bench(runs: int, mib: int) -> dict:
    from provider.lease.launch import launch

    start_s, publish_s = [], []
    root = Path(tempfile.mkdtemp(prefix="swarm-bench-lease-", dir="/var/tmp"))
    try:
        for run in range(runs + 1):  # the first is a warm-up
            result = root / "results" / f"start-{run}"
            plan = plan_for(root / "store", START + f"# run {run}\n", 2 * run + 1, result)
            called = time.time()
            outcome = launch(root / "leases" / f"start-{run}", plan)
            assert outcome.state == "succeeded", outcome.error
            started = float((result / "outputs" / "started").read_text())

            result = root / "results" / f"publish-{run}"
            plan = plan_for(root / "store", PUBLISH.format(mib=mib) + f"# run {run}\n", 2 * run + 2, result)
            outcome = launch(root / "leases" / f"publish-{run}", plan)
            returned = time.time()
            assert outcome.state == "succeeded", outcome.error
            ended = float((result / "outputs" / "ended").read_text())
            assert (result / "outputs" / "weights.bin").stat().st_size == mib * 2**20
            print(f"run {run}: start {started - called:.3f} s, publish {returned - ended:.3f} s", flush=True)
            if run:
                start_s.append(started - called)
                publish_s.append(returned - ended)
            shutil.rmtree(root / "results", ignore_errors=True)
            shutil.rmtree(root / "leases", ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"runs": runs, "output_mib": mib,
            "start_s": round(statistics.median(start_s), 3), "start_all": [round(x, 3) for x in start_s],
            "publish_s": round(statistics.median(publish_s), 3),
            "publish_all": [round(x, 3) for x in publish_s]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mib", type=int, default=1024, help="the published output's size")
    parser.add_argument("--project", type=Path, default=ROOT, help="the checkout whose launcher to measure")
    parser.add_argument("--label", default="this checkout")
    args = parser.parse_args()
    sys.path.insert(0, str(args.project.resolve()))
    figures = bench(args.runs, args.mib) | {"label": args.label}
    print(json.dumps(figures, indent=2))
    RESULTS.parent.mkdir(exist_ok=True)
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    saved[args.label] = figures
    RESULTS.write_text(json.dumps(saved, indent=2) + "\n")


if __name__ == "__main__":
    main()
