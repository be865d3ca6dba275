"""How long a command takes from the shell to its answer: the whole process, start-up included.

Run: make bench-startup   (or .venv/bin/python bench/startup.py --runs 10)
     .venv/bin/python bench/startup.py --swarm OTHER/.venv/bin/swarm   (another checkout's command line)

A fresh devnet in a temporary SWARM_HOME, with the contracts, a registered and staked
provider and a posted job; each command then runs `--runs` times, sequentially, and the
figure is the median wall time. The three with a target (≤ 0.5 s) come first; the others
are shown for comparison.

Then the start-up of every chain- or ledger-only command on its own: `swarm NOUN VERB --help`
loads the command's module and parses its arguments, everything a command does before its
first action, and nothing after it (median of --help-runs).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from anvil import AnvilConfig, AnvilNode, dev_address
from anvil.node import free_port

RESULTS = ROOT / "bench" / "results" / "startup.json"
PROVIDER, BUYER = 7, 5
TARGET_S = 0.5


def commands() -> list[tuple[str, list[str], bool]]:
    """(label, argv, has a target)."""
    provider = dev_address(PROVIDER)
    return [
        ("swarm --help", ["--help"], True),
        ("swarm provider status", ["provider", "status", provider], True),
        ("swarm token balance", ["token", "balance", provider], True),
        ("swarm chain status", ["chain", "status"], False),
        ("swarm job status 1", ["job", "status", "1"], False),
        ("swarm ledger show jobs", ["ledger", "show", "jobs"], False),
        ("swarm provider stake 1 (signs)", ["provider", "stake", "1", "--account", str(PROVIDER)], False),
    ]


# Every command that needs only the chain or the ledger.
LIGHT_COMMANDS = [
    "chain up", "chain down", "chain status", "chain deploy", "keys new", "keys import", "keys list",
    "token balance", "token transfer", "provider register", "provider stake", "provider unstake",
    "provider withdraw", "provider unjail", "provider claim", "provider status", "job post", "job status",
    "job list", "job cancel", "job reclaim", "job dispute", "job result", "ledger sync", "ledger show",
    "oracle show",
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--swarm", default=str(Path(sys.executable).parent / "swarm"),
                        help="The `swarm` executable to time (default: this environment's).")
    parser.add_argument("--label", default="", help="A name for this set of figures (e.g. before, after).")
    parser.add_argument("--help-runs", type=int, default=5, help="Runs of each `NOUN VERB --help` (0: skip).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "swarm"
        node = AnvilNode(AnvilConfig(home=home, port=free_port()))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SWARM_"))}
        env |= {
            "SWARM_HOME": str(home),
            "SWARM_ANVIL_PORT": str(node.config.port),
            "SWARM_RPC_URL": node.config.url,
        }

        def swarm(argv: list[str]) -> float:
            began = time.perf_counter()
            done = subprocess.run(
                [args.swarm, *argv], check=False, env=env, capture_output=True, text=True, timeout=300
            )
            elapsed = time.perf_counter() - began
            if done.returncode != 0:
                raise SystemExit(f"swarm {' '.join(argv)} failed: {done.stderr.strip()}")
            return elapsed

        try:
            setup(swarm)
            figures = {label: measure(swarm, argv, args.runs) for label, argv, _ in commands()}
            starts = {c: measure(swarm, [*c.split(), "--help"], args.help_runs) for c in LIGHT_COMMANDS
                      if args.help_runs > 0}
        finally:
            node.stop()
    report = {
        "label": args.label, "runs": args.runs, "target_s": TARGET_S,
        "median_s": {label: round(statistics.median(times), 3) for label, times in figures.items()},
        "runs_s": {label: [round(t, 3) for t in times] for label, times in figures.items()},
        "targets_met": all(statistics.median(figures[label]) <= TARGET_S for label, _, target in commands()
                           if target),
        "startup_median_s": {f"swarm {c}": round(statistics.median(times), 3) for c, times in starts.items()},
    }
    if starts:
        report["slowest_startup_s"] = max(report["startup_median_s"].values())
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    name = RESULTS.with_name(f"startup-{args.label}.json") if args.label else RESULTS
    name.write_text(json.dumps(report, indent=2) + "\n")
    print(
        json.dumps(
            {k: report[k] for k in ("label", "median_s", "targets_met", "slowest_startup_s") if k in report},
            indent=2,
        )
    )


def setup(swarm) -> None:
    """A devnet with the contracts, a staked provider and one posted job."""
    swarm(["chain", "up"])
    swarm(["chain", "deploy"])
    swarm(["provider", "register", "--gpu-model", "H100", "--gpus", "1", "--vram-gb", "80",
           "--account", str(PROVIDER)])
    swarm(["provider", "stake", "1500", "--account", str(PROVIDER)])
    swarm(["job", "post", str(ROOT / "examples" / "train.yaml"), "--account", str(BUYER)])
    swarm(["ledger", "sync"])


def measure(swarm, argv: list[str], runs: int) -> list[float]:
    swarm(argv)  # once unmeasured: the OS file cache, .pyc files
    return [swarm(argv) for _ in range(runs)]


if __name__ == "__main__":
    main()
