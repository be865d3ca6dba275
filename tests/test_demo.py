"""`swarm demo` as a user runs it: a fresh machine's SWARM_HOME, the real command.

The demo's own checks are recomputed here from its summary rather than trusted: every job
settled, each epoch's rewards equal its emission, the flaky provider slashed and jailed,
and every token of the supply held by someone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from anvil.node import free_port

FLAKY = "flaky"


def swarm(home: Path, port: int, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SWARM_"))}
    env |= {"SWARM_HOME": str(home), "SWARM_ANVIL_PORT": str(port), "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "scripts.cli", *args],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def run_demo(home: Path, port: int) -> dict:
    return json.loads(swarm(home, port, "demo", "--json", timeout=900).stdout)


def test_the_demo_runs_end_to_end_and_leaves_no_site_running(tmp_path: Path) -> None:
    home, port = tmp_path / "swarm", free_port()
    try:
        first = run_demo(home, port)
        check(first)
        # What the README says to look at next.
        train_id = str(next(j["id"] for j in first["jobs"] if j["kind"] == "train"))
        listed = json.loads(swarm(home, port, "job", "list", "--all", "--json").stdout)
        assert {j["job_id"] for j in listed["jobs"]} == {j["id"] for j in first["jobs"]}
        assert {j["market_state"] for j in listed["jobs"]} == {"settled"}
        assert "Verified" in swarm(home, port, "job", "result", train_id).stdout
        assert "settled" in swarm(home, port, "job", "status", train_id).stdout
        last = first["epochs"][-1]["epoch"]
        shown = swarm(home, port, "oracle", "show", str(last)).stdout
        assert f"Epoch {last} (finalized)" in shown and first["providers"][0]["address"] in shown
        assert "Epoch" in swarm(home, port, "oracle", "show").stdout  # the latest, whatever its state
        # The demo moved the devnet's clock on for its epochs, and says by how much; so does the chain.
        status = json.loads(swarm(home, port, "chain", "status", "--json").stdout)
        assert abs(status["clock_ahead_s"] - first["clock_ahead_s"]) <= 30, (status, first["clock_ahead_s"])
        human = swarm(home, port, "chain", "status").stdout
        assert "The chain's clock runs" in human and "ahead of this machine's" in human, human
        # The providers' sites are stopped with their Ray clusters, so the demo can run again.
        assert not (home / "sites.json").exists()
        assert not list(home.glob("sites/*/ray/cluster.json"))
        assert "No local provider sites are running" in swarm(home, port, "cluster", "status").stdout
    finally:
        subprocess.run(
            [sys.executable, "-m", "scripts.cli", "chain", "down"],
            check=False, capture_output=True,
            timeout=60,
            env=os.environ | {"SWARM_HOME": str(home), "SWARM_ANVIL_PORT": str(port)},
        )


def check(summary: dict) -> None:
    assert all(summary["checks"].values()), summary["checks"]
    jobs = {j["kind"]: j for j in summary["jobs"]}
    assert set(jobs) == {"train", "infer", "finetune"}
    for job in jobs.values():
        assert job["status"] == "settled"
        # What the buyer escrowed went to the provider, the treasury and back to the buyer.
        assert int(job["payment_wei"]) + int(job["fee_wei"]) + int(job["refund_wei"]) == int(
            job["escrow_wei"]
        )
        assert Path(job["result_dir"], "outputs").is_dir()
    providers = {p["name"]: p for p in summary["providers"]}
    assert jobs["train"]["attempts"] == 2, (
        "the flaky provider's site was killed: the job was run again elsewhere"
    )
    assert jobs["train"]["accuracy"] > 0.9, "the demo's model learns the digits (chance is 0.1)"
    assert jobs["infer"]["accuracy"] > 0.9 and jobs["finetune"]["accuracy"] > 0.5
    assert jobs["train"]["provider"] != providers[FLAKY]["address"]
    assert providers[FLAKY]["jailed"]
    assert any(s["provider"] == providers[FLAKY]["address"] for s in summary["slashes"])
    assert len(summary["epochs"]) >= 3
    # Ten times the wall clock while the services ran, more than the minute that `chain status` and
    # the demo's last line pass over: the next job's deadline counts from there.
    assert summary["clock_ahead_s"] > 60, summary["clock_ahead_s"]
    for epoch in summary["epochs"]:
        assert epoch["paid_wei"] == epoch["emission_wei"]
        # An epoch that paid nothing says why; one that paid says nothing.
        assert bool(epoch["why_unpaid"]) == (epoch["paid_wei"] == "0"), epoch
        assert epoch["paid_wei"] != "0" or epoch["why_unpaid"].startswith("no provider was")
    assert sum(int(b) for b in summary["balances"].values()) == int(summary["supply_wei"])
    assert int(providers["fast"]["rewards_wei"]) > 0 and int(providers["slow"]["rewards_wei"]) > 0
    for p in providers.values():  # every provider claimed all it earned, with one proof
        assert p["claimed_wei"] == p["rewards_wei"]
