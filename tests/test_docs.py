"""docs/operations.md is a script: every ```sh block runs, in order, in a throwaway SWARM_HOME —
a devnet the blocks start themselves, provider sites with Ray clusters of their own (one
provider's in a SWARM_HOME of its own, joined from another), a throwaway PostgreSQL ledger,
and an anvil with a non-devnet chain id standing in for a real chain. Every
`swarm <group> <command>` the guide mentions is run by a block, or by the test file named in
ELSEWHERE."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlmodel import Session, select

from anvil import AnvilConfig, AnvilNode, dev_account
from anvil.node import free_port
from compute import cluster
from compute.node import RayHome, stop_session
from ledger.db import open_ledger
from ledger.keys import Keystore
from oracle.epoch import MIN_CHALLENGES
from oracle.records import ChallengeRecord, OracleEpoch, ProbeSample, ProviderScore

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "operations.md"
REAL_CHAIN_ID = 424242
PASSWORD = "docs-test-password"
BLOCK_TIMEOUT_S = 240

# Commands the guide shows only as configuration (a systemd unit, a long-running service):
# the test file that runs each one for real.
ELSEWHERE = {
    "swarm oracle run": "tests/test_oracle_cli.py",
    "swarm dashboard": "tests/test_dashboard.py",
    "swarm provider mesh": "tests/test_mesh.py",  # network namespaces stand in for the machines
}

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
INLINE = re.compile(r"`([^`\n]+)`")
MENTION = re.compile(r"\bswarm((?:[ \t]+[a-z][a-z|-]*)+)")


def blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block of `text`: (language, body)."""
    return [(m[1], m[2]) for m in FENCE.finditer(text)]


def sh_blocks(text: str) -> list[str]:
    return [body for lang, body in blocks(text) if lang == "sh"]


def commands_in(text: str) -> set[str]:
    """The `swarm <group> <command>` (or `swarm <command>`) named in `text`, resolved
    against the real command tree; `a|b` alternatives count as each."""
    import click

    from scripts.cli import cli

    ctx = click.Context(cli)
    found = set()
    for match in MENTION.finditer(text):
        words = match[1].split()
        for first in words[0].split("|"):
            command = cli.get_command(ctx, first)
            if command is None:
                continue
            if not hasattr(command, "commands"):  # a top-level command: `swarm dashboard`
                found.add(f"swarm {first}")
                continue
            for second in (words[1].split("|") if len(words) > 1 else []):
                if second in command.commands:
                    found.add(f"swarm {first} {second}")
    return found


def mentioned(text: str) -> set[str]:
    """Commands named in any fenced block or inline code span."""
    code = [body for _, body in blocks(text)]
    prose = FENCE.sub("", text)
    code += INLINE.findall(prose)
    return set().union(*(commands_in(c) for c in code))


# ── the static check: nothing in the guide goes untested ─────────────────────

def test_every_swarm_command_in_the_guide_is_run_by_it_or_by_a_named_test() -> None:
    text = GUIDE.read_text()
    run = set().union(*(commands_in(b) for b in sh_blocks(text)))
    assert {"swarm provider serve", "swarm provider join", "swarm chain deploy", "swarm oracle sign",
            "swarm ledger sync"} <= run
    untested = mentioned(text) - run - set(ELSEWHERE)
    assert not untested, f"docs/operations.md mentions commands nothing runs: {sorted(untested)}"
    for command, test_file in ELSEWHERE.items():
        source = (ROOT / test_file).read_text()
        argv = ", ".join(f'"{word}"' for word in command.split()[1:])
        assert command in source or argv in source, f"{test_file} does not run `{command}`"


def test_the_guide_blocks_are_one_command_a_line() -> None:
    for body in sh_blocks(GUIDE.read_text()):
        for line in body.splitlines():
            assert not line.rstrip().endswith("\\"), f"a continued line in an sh block: {line}"


# ── the run: every sh block, in order ────────────────────────────────────────

@dataclass(frozen=True)
class Stage:
    home: Path  # the market's, the oracle's and the trial network's SWARM_HOME
    provider_home: Path  # the provider's head machine's
    worker_home: Path  # another machine of the same provider
    env: dict[str, str]


@pytest.fixture
def real_chain(tmp_path: Path) -> Iterator[AnvilNode]:
    """An anvil with chain id 424242: not a devnet, so only keystores and SWARM_DEPLOYER_KEY sign."""
    node = AnvilNode(AnvilConfig(home=tmp_path / "real-chain", port=free_port(), chain_id=REAL_CHAIN_ID))
    node.start()
    yield node
    node.stop()


@pytest.fixture
def stage(tmp_path: Path, real_chain: AnvilNode, postgres_server) -> Iterator[Stage]:
    """The placeholders the guide names, and an environment free of this session's settings. The
    site's user is made first, under the lock the light tests take to make it, so that the guide's
    `useradd` never races theirs."""
    from tests.site_user import ensure_user, site_unit

    ensure_user(site_unit().user)
    home, provider_home, worker_home = (
        tmp_path / "swarm",
        tmp_path / "provider",
        tmp_path / "provider-machine-2",
    )
    for path in (home, provider_home, worker_home):
        path.mkdir()
    dropped = ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_") and k not in dropped}
    env |= {
        "SWARM_HOME": str(home),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "200",
        "PORT": str(free_port()),
        "PROVIDER_HOME": str(provider_home),
        "WORKER_HOME": str(worker_home),
        "SITE_PORT": str(free_port()),
        "RPC_URL": real_chain.config.url,
        "DEPLOYER_KEY": "0x" + dev_account(0).key.hex(),
        "PROVIDER_KEY": "0x" + dev_account(5).key.hex(),
        "MATCHER_KEY": "0x" + dev_account(7).key.hex(),
        "DB_URL": postgres_server.create_database("operations_guide"),
        "PASSWORD": PASSWORD,
    }
    stage = Stage(home, provider_home, worker_home, env)
    yield stage
    _clean_up(stage)


def _clean_up(stage: Stage) -> None:
    """After a failed block: stop what the guide started and left running (only these homes')."""
    serve = stage.provider_home / "serve.pid"
    if serve.exists():  # the provider's site, started in the background: SIGTERM stops its cluster
        stop_session(int(serve.read_text()), 120)
    for home in (stage.worker_home, stage.provider_home, stage.home):
        for record in (home / "ray" / "nodes").glob("*.json"):
            stop_session(json.loads(record.read_text())["pid"], 60)
    if (stage.home / "sites.json").exists():
        subprocess.run(
            ["swarm", "cluster", "down"], check=False, env=stage.env, capture_output=True, timeout=180
        )
    for home in (stage.provider_home, *(stage.home / "sites").glob("*")):
        cluster.stop(RayHome.of(home))  # a site killed before it could stop its own
    if (stage.home / "anvil" / "anvil.pid").exists():
        subprocess.run(
            ["swarm", "chain", "down"],
            check=False,
            env=stage.env | {"SWARM_ANVIL_PORT": stage.env["PORT"]},
            capture_output=True,
            timeout=60,
        )


def _run(block: str, env: dict[str, str], number: int) -> str:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], check=False, env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    assert done.returncode == 0, (
        f"sh block {number} of docs/operations.md failed (exit {done.returncode}):\n{block}\n"
        f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    )
    return done.stdout


def test_the_operations_guide_runs_block_by_block(stage: Stage) -> None:
    text = GUIDE.read_text()
    outputs = [_run(block, stage.env, n) for n, block in enumerate(sh_blocks(text), start=1)]
    everything = "\n".join(outputs)

    own_token = stage.provider_home / "ray" / "auth_token"
    assert own_token.stat().st_mode & 0o777 == 0o600
    # copied, to its own
    assert (stage.worker_home / "ray" / "auth_token").read_text() == own_token.read_text()
    tokens = [own_token, *(stage.home / "sites").glob("*/ray/auth_token")]
    assert len(tokens) == 2 and not (stage.home / "ray" / "auth_token").exists()  # no token outside the sites
    assert not any(t.read_text() in everything for t in tokens)  # no token is ever printed
    assert PASSWORD not in everything
    private_keys = ("DEPLOYER_KEY", "PROVIDER_KEY", "MATCHER_KEY")
    assert all(stage.env[name][2:] not in everything for name in private_keys)  # no private key is printed
    assert f"https://127.0.0.1:{stage.env['SITE_PORT']}" in everything  # the site printed where it serves
    # the provider's second machine joined, and left
    assert "Joined" in everything and "has left" in everything

    deployment = json.loads((stage.home / "deployments" / f"{REAL_CHAIN_ID}.json").read_text())
    keys = {k.name: k.address for k in Keystore(stage.home / "keys").list()}
    (provider,) = Keystore(stage.provider_home / "keys").list()  # the provider's key, on its machine only
    assert "provider" not in keys and provider.address == dev_account(5).address
    assert deployment["deployer"] == dev_account(0).address
    assert deployment["params"]["threshold"] == 2
    assert sorted(deployment["params"]["committee"]) == sorted(keys[f"oracle-{i}"] for i in (1, 2, 3))
    assert deployment["params"]["treasury"] == keys["treasury"] != deployment["deployer"]
    assert "SwarmTimelock" in deployment["addresses"]
    assert "Cancelled operation" in everything and "Executed JobMarket.setDisputeWindow(120)" in everything

    engine = open_ledger(stage.env["DB_URL"])
    try:
        with Session(engine) as session:
            epoch = session.get(OracleEpoch, (REAL_CHAIN_ID, 1))
            assert epoch is not None and epoch.state == "aggregated"
            signers = {s[0].lower() for s in epoch.signatures}
            assert signers == {keys["oracle-1"].lower(), keys["oracle-2"].lower()}  # 2 of 3, each on its own
            scored = session.exec(select(ProviderScore.provider)
                                  .where(ProviderScore.chain_id == REAL_CHAIN_ID)).all()
            assert [a.lower() for a in scored] == [provider.address.lower()]
            # the site served the challenge the aggregator signed with a committee member's key
            challenged = session.exec(select(ChallengeRecord)
                                      .where(ChallengeRecord.chain_id == REAL_CHAIN_ID)).all()
            assert len(challenged) == MIN_CHALLENGES  # `swarm oracle close` takes enough to judge speed
            assert all(c.provider.lower() == provider.address.lower() and c.proof_ok for c in challenged)
            # and its probe: one sample per node of the site, none for a site that did not answer
            probed = session.exec(select(ProbeSample).where(ProbeSample.chain_id == REAL_CHAIN_ID)).all()
            assert probed and all(sample.node_id for sample in probed)
    finally:
        engine.dispose()
    # the trial is stopped: the provider's site and its cluster, the local sites and theirs
    assert not (stage.home / "sites.json").exists()
    assert not (stage.provider_home / "ray" / "cluster.json").exists()
    assert not list((stage.home / "sites").glob("*/ray/cluster.json"))
