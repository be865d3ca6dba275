"""How much slower the starts that the heavy tests repeat become beside other CPU-bound work.

Run: make bench-startup-load   (or .venv/bin/python bench/startup_under_load.py --runs 5 --load 0,1,2,4)
     .venv/bin/python bench/startup_under_load.py --runs 1 --load 0   (a smoke run, about a minute)

`make test` runs its light lane beside its heavy one on the same cores, and the heavy lane's
wall time went from 21.5 to 48.8 minutes on another machine of the same kind: its tests start
processes over and over, and a start is mostly CPU (imports, Ray's processes). Each start is
timed as its caller sees it, until it is ready:

  cli        a fresh Python importing Swarm's command line (`import scripts.cli`): every
             `swarm` command, site, service and lease pays it;
  ray        `ray.init(num_cpus=1)` of a fresh local Ray in a fresh Python, the call alone (a
             lease's own Ray; the tests' and the sites' clusters start the same processes);
  ray+proc   the same Python's whole life: Ray's import, the start, `ray.shutdown()`;
  site       `swarm provider serve` on a devnet until it prints its URL (devnet.network, one
             site of one node: its Ray head and node, then its agent), as the demo, the fault
             suite and the site tests start theirs;
  anvil      `AnvilNode.start` until the chain answers (its keeper's Python, then anvil).

quiet, then beside N busy processes (a Python loop each, at nice 0, as the other lane's tests
and whatever else the machine runs), for each N of --load; each figure is the median of --runs
after one unmeasured run of each start (the file cache). Printed as a table with each figure's
ratio to the quiet one; all runs in bench/results/startup_under_load.json (with `--sessions
shared`, startup_under_load_shared.json).

Where the kernel groups its scheduling by session (`/proc/sys/kernel/sched_autogroup_enabled`),
a process's share of the CPU depends on the sessions around it: a site and its Ray run in
sessions of their own, the light lane of `make test` in make's, beside the heavy lane's pytest.
`--sessions own` (the default) runs each busy process in a session of its own, as other work on
the machine; `--sessions shared` runs them in this one, with the cli and ray starts, as the light
lane runs beside the heavy lane's pytest.
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from anvil import AnvilConfig, AnvilNode, dev_account
from anvil.node import free_port
from devnet.network import start_sites, stop_sites
from ledger.chain import connect
from ledger.deploy import deploy, error_decoder
from ledger.tx import Sender

RESULTS = ROOT / "bench" / "results" / "startup_under_load.json"
STARTS = ("cli", "ray", "ray+proc", "site", "anvil")
BUSY = "while True: pass"
# A fresh Ray in a fresh Python: prints how long `ray.init` took, then stops it.
RAY_INIT = """import time, ray
began = time.perf_counter()
ray.init(num_cpus=1, include_dashboard=False, configure_logging=False)
print(time.perf_counter() - began, flush=True)
ray.shutdown()
"""


def clean_env() -> dict[str, str]:
    """This environment without Swarm's or Ray's settings: each start finds its own."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SWARM_"))} | {
        "RAY_USAGE_STATS_ENABLED": "0"}


def time_cli() -> dict[str, float]:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import scripts.cli"], check=True, cwd=ROOT, env=clean_env(),
                   timeout=600)
    return {"cli": time.perf_counter() - began}


def time_ray() -> dict[str, float]:
    began = time.perf_counter()
    # Short, as Ray's sockets live there; Ray's last processes may still write as it is removed.
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="ray-", ignore_cleanup_errors=True) as temp:
        done = subprocess.run([sys.executable, "-c", RAY_INIT], check=True, capture_output=True, text=True,
                              cwd=ROOT, env=clean_env() | {"RAY_TMPDIR": temp}, timeout=600)
    return {"ray": float(done.stdout.strip().splitlines()[-1]), "ray+proc": time.perf_counter() - began}


def time_site(home: Path, rpc_url: str) -> dict[str, float]:
    began = time.perf_counter()
    try:
        start_sites(home, {1: 1}, rpc_url)
        return {"site": time.perf_counter() - began}
    finally:
        stop_sites(home)


def time_anvil(root: Path) -> dict[str, float]:
    node = AnvilNode(AnvilConfig(home=Path(tempfile.mkdtemp(dir=root)), port=free_port()))
    began = time.perf_counter()
    try:
        node.start()
        return {"anvil": time.perf_counter() - began}
    finally:
        node.stop()


def busy(count: int, own_sessions: bool) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=own_sessions)
            for _ in range(count)]


def measure(starts: list[Callable[[], dict[str, float]]], runs: int, load: int,
            own_sessions: bool = True) -> dict[str, list[float]]:
    """Each start `runs` times, one after the other, beside `load` busy processes."""
    figures: dict[str, list[float]] = {}
    loaders = busy(load, own_sessions)
    try:
        time.sleep(0.5 if load else 0.0)  # the loops are spinning before the first start
        for _ in range(runs):
            for start in starts:
                for name, seconds in start().items():
                    figures.setdefault(name, []).append(seconds)
                    print(f"  beside {load}: {name} {seconds:.2f} s", flush=True)
    finally:
        for loader in loaders:
            loader.kill()
            loader.wait()
    return figures


def table(medians: dict[int, dict[str, float]], loads: list[int]) -> str:
    quiet = medians.get(0, {})
    head = ["start".ljust(10)] + [("quiet" if n == 0 else f"beside {n}").rjust(16) for n in loads]
    lines = ["  ".join(head)]
    for name in STARTS:
        if not any(name in medians[n] for n in loads):
            continue
        cells = [name.ljust(10)]
        for n in loads:
            value = medians[n].get(name)
            ratio = f" ({value / quiet[name]:.2f}x)" if value is not None and n and quiet.get(name) else ""
            cells.append(("—" if value is None else f"{value:.2f} s{ratio}").rjust(16))
        lines.append("  ".join(cells))
    return "\n".join(lines)


def _autogroup() -> bool | None:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each start at each load (the median)")
    parser.add_argument("--load", default="0,1,2,4", help="busy processes beside, one level after another")
    parser.add_argument("--only", default="cli,ray,site,anvil", help="which starts: cli, ray, site, anvil")
    parser.add_argument("--sessions", choices=("own", "shared"), default="own",
                        help="the busy processes each in a session of its own, or all in this one")
    args = parser.parse_args()
    loads = [int(n) for n in args.load.split(",")]
    only = set(args.only.split(","))
    began = time.monotonic()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        root = Path(tmp)
        chain_node = AnvilNode(AnvilConfig(home=root / "chain", port=free_port()))
        chain_node.start()
        try:
            home = root / "network"
            if "site" in only:  # the sites' one deployment, made once
                chain = connect(chain_node.config.url)
                deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), home)
            rpc_url = chain_node.config.url
            starts = [start for name, start in (
                ("cli", time_cli), ("ray", time_ray), ("site", lambda: time_site(home, rpc_url)),
                ("anvil", lambda: time_anvil(root))) if name in only]
            measure(starts, 1, 0)  # unmeasured: the file cache, the bytecode
            runs = {load: measure(starts, args.runs, load, args.sessions == "own") for load in loads}
        finally:
            chain_node.stop()
    medians = {load: {name: round(statistics.median(values), 3) for name, values in figures.items()}
               for load, figures in runs.items()}
    report = {
        "runs": args.runs, "loads": loads, "sessions": args.sessions, "cpus": os.cpu_count(),
        "autogroup": _autogroup(), "took_s": round(time.monotonic() - began, 1),
        "median_s": {str(load): m for load, m in medians.items()},
        "ratio_to_quiet": {str(load): {name: round(v / medians[0][name], 2) for name, v in m.items()}
                           for load, m in medians.items() if load and 0 in medians},
        "runs_s": {str(load): {name: [round(v, 3) for v in values] for name, values in figures.items()}
                   for load, figures in runs.items()},
    }
    results = RESULTS if args.sessions == "own" else RESULTS.with_name(f"{RESULTS.stem}_shared.json")
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(report, indent=2) + "\n")
    print(table(medians, loads))
    print(f"({os.cpu_count()} CPUs; busy processes in {args.sessions} sessions; {args.runs} runs each; "
          f"{report['took_s']:.0f} s in all; {results})")


if __name__ == "__main__":
    main()
