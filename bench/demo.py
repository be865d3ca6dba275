"""The demo's wall time: `swarm demo --json` run several times in a fresh SWARM_HOME.

Run: make bench-demo   (or .venv/bin/python bench/demo.py --runs 3)

Each run is the real command, end to end (a fresh devnet, the contracts, a Ray cluster of
four nodes, three jobs through the market, oracle epochs, claims); the figure is the demo's
own `seconds` (from its start to its summary) and the process's wall time, median of the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anvil.node import free_port

RESULTS = Path(__file__).resolve().parent / "results" / "demo.json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    demo_s: list[float] = []
    wall_s: list[float] = []
    checks: list[bool] = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SWARM_"))}
        env |= {"SWARM_HOME": str(Path(tmp) / "swarm"), "SWARM_ANVIL_PORT": str(free_port())}
        try:
            for _ in range(args.runs):
                began = time.monotonic()
                done = subprocess.run([sys.executable, "-m", "scripts.cli", "demo", "--json"], env=env,
                                      capture_output=True, text=True, timeout=900, check=False)
                if done.returncode != 0:  # the demo's own one-sentence error, not a traceback of this script
                    sys.exit(f"run {len(wall_s) + 1}: the demo failed: {done.stderr.strip()[-2000:]}")
                wall_s.append(time.monotonic() - began)
                summary = json.loads(done.stdout)
                demo_s.append(summary["seconds"])
                checks.append(all(summary["checks"].values()))
        finally:
            subprocess.run(
                [sys.executable, "-m", "scripts.cli", "chain", "down"],
                check=False,
                env=env,
                capture_output=True,
            )
    figures = {
        "runs": args.runs,
        "demo_s": demo_s,
        "wall_s": [round(w, 1) for w in wall_s],
        "median_demo_s": statistics.median(demo_s),
        "median_wall_s": round(statistics.median(wall_s), 1),
        "all_checks_passed": all(checks),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
