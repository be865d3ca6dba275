"""Commands load only what they use. Each command here runs for real, in a fresh
interpreter, against the session's chain; what it imported is read at exit.

No command that needs only the chain or the ledger may import torch, Ray, scipy or the
dashboard's server; the three that must answer at once (`swarm --help`, `provider status`,
`token balance`) may not import web3, eth-account or SQLAlchemy either, which is what keeps
them under half a second (bench/startup.py measures it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from anvil import AnvilConfig, AnvilNode, dev_account
from anvil.node import free_port
from ledger.client import Swarm

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "ray", "scipy", "dashboard", "uvicorn", "fastapi")
SLOW_TO_LOAD = ("web3", "eth_account", "sqlalchemy", "sqlmodel", "alembic", *HEAVY)
NOUNS = ("chain", "keys", "provider", "job", "ledger", "token", "demo", "cluster", "market", "oracle",
         "dashboard")

PROBE = """
import atexit, json, sys
out = sys.argv[1]
def report():
    with open(out, "w") as f:
        json.dump(sorted({name.split(".")[0] for name in sys.modules}), f)
atexit.register(report)
sys.argv = ["swarm", *sys.argv[2:]]
from scripts.cli import main
main()
"""

P = 7  # the provider's dev account
B = 5  # the buyer's


@pytest.fixture
def run(swarm: Swarm, swarm_home: Path, anvil_node: AnvilNode, tmp_path: Path):
    """`swarm ARGS` in a fresh interpreter: (exit code, output, top-level modules it imported)."""
    counter = iter(range(1_000))

    def run(*args: str, env: dict[str, str] | None = None, input: str = "") -> tuple[int, str, set[str]]:
        out = tmp_path / f"modules-{next(counter)}.json"
        full_env = os.environ | {
            "SWARM_HOME": str(swarm_home),
            "SWARM_RPC_URL": anvil_node.config.url,
            "SWARM_ANVIL_PORT": str(anvil_node.config.port),
            "SWARM_DB_URL": f"sqlite:///{tmp_path / 'ledger.db'}",
            "COLUMNS": "200",
        } | (env or {})
        done = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], cwd=ROOT, input=input,
                              capture_output=True, text=True, env=full_env, timeout=120, check=False)
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, done.stdout + done.stderr, set(json.loads(out.read_text()))

    return run


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(set(names) & modules)


def test_help_loads_none_of_the_heavy_libraries(run) -> None:
    for args in (("--help",), *((noun, "--help") for noun in NOUNS)):
        code, output, modules = run(*args)
        assert code == 0, (args, output)
        assert "Usage:" in output
        assert loaded(modules, SLOW_TO_LOAD if args == ("--help",) else HEAVY) == [], args


def test_the_instant_reads_load_neither_web3_nor_sqlalchemy(run) -> None:
    provider = dev_account(P).address
    assert run("ledger", "sync")[0] == 0  # so that status reads the ledger database too
    code, output, modules = run("token", "balance", "--account", str(B))
    assert code == 0 and "SWARM" in output, output
    assert loaded(modules, SLOW_TO_LOAD) == []
    code, output, modules = run("provider", "status", provider, "--json")
    assert code == 0 and json.loads(output)["provider"] == provider, output
    assert json.loads(output)["claimable_wei"] == "0"  # read from the (synced) ledger
    assert loaded(modules, SLOW_TO_LOAD) == []


def test_chain_and_keys_commands_load_none_of_the_heavy_libraries(run, swarm: Swarm, tmp_path: Path) -> None:
    commands: list[tuple[tuple[str, ...], dict[str, str], str]] = [
        (("chain", "status"), {}, ""),
        (("chain", "deploy"), {}, ""),  # reuses the session's deployment
        (("keys", "new", "--name", "fresh"), {"SWARM_HOME": str(tmp_path / "home")}, ""),
        (("keys", "import", "--name", "imported"), {"SWARM_HOME": str(tmp_path / "home")}, "0x" + "11" * 32),
        (("keys", "list"), {"SWARM_HOME": str(tmp_path / "home")}, ""),
        (("token", "transfer", dev_account(6).address, "1", "--account", str(B)), {}, ""),
    ]
    for args, env, stdin in commands:
        code, output, modules = run(*args, env={"SWARM_KEY_PASSWORD": "correct horse"} | env, input=stdin)
        assert code == 0, (args, output)
        assert loaded(modules, HEAVY) == [], args
    own = AnvilNode(AnvilConfig(home=tmp_path / "own", port=free_port()))
    env = {"SWARM_HOME": str(own.config.home), "SWARM_ANVIL_PORT": str(own.config.port),
           "SWARM_RPC_URL": own.config.url}
    try:
        for args in (("chain", "up"), ("chain", "down")):
            code, output, modules = run(*args, env=env)
            assert code == 0, (args, output)
            assert loaded(modules, HEAVY) == [], args
    finally:
        own.stop()


def test_provider_commands_load_none_of_the_heavy_libraries(run, swarm: Swarm, rpc) -> None:
    steps = [
        (("register", "--gpu-model", "H100", "--gpus", "1", "--vram-gb", "80"), 0),
        (("stake", "1500"), 0),
        (("unstake", "100"), 0),
        (("status",), 0),
        (("unjail",), 1),  # refused: not jailed
        (("claim",), 1),  # refused: the ledger holds no finalized rewards
    ]
    for args, expected in steps:
        code, output, modules = run("provider", *args, "--account", str(P))
        assert code == expected, (args, output)
        assert loaded(modules, HEAVY) == [], args
    rpc.increase_time(int(swarm.read("StakingVault", "unbondingPeriod")) + 1)
    code, output, modules = run("provider", "withdraw", "--account", str(P))
    assert code == 0, output
    assert loaded(modules, HEAVY) == []


def test_job_ledger_and_oracle_commands_load_none_of_the_heavy_libraries(run, swarm: Swarm, tmp_path) -> None:
    spec = yaml.safe_load((ROOT / "examples" / "train.yaml").read_text())
    spec["deadline"] = max(swarm.chain.timestamp(), int(time.time())) + 3_600
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    code, output, modules = run("job", "post", str(path), "--account", str(B), "--json")
    assert code == 0, output
    assert loaded(modules, HEAVY) == []
    job_id = str(json.loads(output)["job_ids"][0])
    steps = [
        (("job", "status", job_id), 0),
        (("job", "list", "--account", str(B)), 0),
        (("job", "reclaim", job_id, "--account", str(B)), 1),  # refused: the deadline is an hour away
        (("job", "dispute", job_id, "--account", str(B)), 1),  # refused: not completed
        (("job", "result", job_id), 1),  # refused: no result yet
        (("job", "cancel", job_id, "--account", str(B)), 0),
        (("ledger", "sync"), 0),
        (("ledger", "show", "jobs"), 0),
        (("oracle", "show"), 1),  # refused: no epoch has been run
    ]
    for args, expected in steps:
        code, output, modules = run(*args)
        assert code == expected, (args, output)
        assert loaded(modules, HEAVY) == [], args
