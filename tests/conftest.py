"""Shared fixtures: one real anvil and one deployment per test session; every test runs
inside an EVM snapshot that is reverted afterwards."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from anvil import AnvilConfig, AnvilNode, RpcClient, dev_account, dev_accounts
from anvil.node import free_port
from ledger import governance
from ledger.chain import Chain, connect
from ledger.client import Swarm
from ledger.deploy import DeployResult, deploy, error_decoder
from ledger.jobs import job_info
from ledger.results import sign_result
from ledger.tx import Sender


@pytest.fixture(scope="session")
def swarm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("swarm-home")


@pytest.fixture(scope="session")
def anvil_node(swarm_home: Path) -> Iterator[AnvilNode]:
    node = AnvilNode(AnvilConfig(home=swarm_home, port=free_port()))
    node.start()
    yield node
    node.stop()


@pytest.fixture(scope="session")
def rpc(anvil_node: AnvilNode) -> RpcClient:
    return anvil_node.rpc


@pytest.fixture(scope="session")
def chain(anvil_node: AnvilNode) -> Chain:
    return connect(anvil_node.config.url)


@pytest.fixture(scope="session")
def deployed(chain: Chain, swarm_home: Path) -> DeployResult:
    return deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), swarm_home)


@pytest.fixture
def swarm(chain: Chain, deployed: DeployResult, rpc: RpcClient) -> Iterator[Swarm]:
    """The deployed contracts, with chain state restored after the test."""
    snapshot = rpc.snapshot()
    yield Swarm(chain, deployed.deployment)  # fresh senders: nonces re-read after each revert
    rpc.revert(snapshot)


@functools.cache
def _dev_keys() -> dict[str, bytes]:
    return {account.address: account.key for account in dev_accounts()}


def provider_signature(swarm: Swarm, job_id: int, result_hash: bytes, units: int) -> bytes:
    """What job `job_id`'s provider, one of anvil's dev accounts, signs to vouch for its result."""
    info = job_info(swarm, job_id)
    return sign_result(_dev_keys()[info.provider], swarm.chain.chain_id, swarm.market.address, info.terms,
                       result_hash, units)


def grant_role(swarm: Swarm, contract: str, role: str, account: str) -> None:
    """Grants `contract`'s `role` to `account` as its admin does: through the deployment's
    timelock, scheduled and executed at once (a devnet's timelock has no delay)."""
    proposer = swarm.sender(dev_account(0).key)
    call = governance.admin_call(swarm, contract, "grantRole", swarm.read(contract, role), account)
    governance.enact(swarm, proposer, call)


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str


def _cli_env(swarm_home: Path, anvil_node: AnvilNode) -> dict[str, str]:
    return {
        "SWARM_HOME": str(swarm_home),
        "SWARM_RPC_URL": anvil_node.config.url,
        "SWARM_ANVIL_PORT": str(anvil_node.config.port),
        "COLUMNS": "200",
    }


@pytest.fixture
def cli(swarm_home: Path, anvil_node: AnvilNode):
    """Runs the `swarm` command line in this process against the session's chain: the same
    code from argument parsing to exit code, without an interpreter start per command (the
    entry point itself runs as a real process in tests/test_startup.py and cli_process)."""
    from click.testing import CliRunner

    from scripts.cli import run as run_cli

    def run(*args: str, env: dict[str, str] | None = None, input: str = "") -> CliResult:
        """`input` is standard input, which is never a terminal, so no command can stop at a prompt."""
        runner = CliRunner()
        with runner.isolation(input=input, env=_cli_env(swarm_home, anvil_node) | (env or {})) as (
            out,
            err,
            _,
        ):
            code = run_cli(list(args))
            sys.stdout.flush()
            sys.stderr.flush()
            return CliResult(code, out.getvalue().decode(), err.getvalue().decode())

    return run


@pytest.fixture
def cli_process(swarm_home: Path, anvil_node: AnvilNode):
    """Runs the real `swarm` command in its own process: for commands that start Ray in the
    caller (the market, the oracle, provider nodes), which must not share this process."""

    def run(*args: str, env: dict[str, str] | None = None, input: str = "") -> CliResult:
        full_env = os.environ | _cli_env(swarm_home, anvil_node) | (env or {})
        done = subprocess.run(
            [sys.executable, "-m", "scripts.cli", *args],
            check=False, input=input, capture_output=True, text=True, env=full_env, timeout=120,
        )
        return CliResult(done.returncode, done.stdout, done.stderr)

    return run


def one_line_error(result: CliResult) -> str:
    """Asserts the shape every user error has: exit 1, one line on stderr, no traceback."""
    assert result.code == 1, (result.code, result.stdout, result.stderr)
    text = result.stderr.strip()
    assert "Traceback" not in text, text
    assert len(text.splitlines()) == 1, text
    assert text.startswith("error: "), text
    return text


# ── the ledger database, on both backends ────────────────────────────────────
pytest_plugins = ["tests.postgres", "tests.object_store", "tests.ray_cluster", "tests.sites"]


# ── heavy session fixtures: their users run together, and they stop after the last ───────
# A Ray cluster idling beside the demo or the fault suite costs them a fair share of two
# cores, so the modules that use the session's Ray cluster run as one block, then those that
# use its network of sites, and each stops as soon as its last test is done. The modules with
# neither follow, and last the end-to-end runs whose services keep time (an epoch of seconds,
# a window of faults, probes with timeouts): by then the light lane beside them, which compiles
# the contracts and runs their fuzzing first, has finished (a clean `make test`: the fault seed
# took 158 s with it beside, 118 s without).
HEAVY = ("ray_cluster", "site_network")
END_TO_END = ("tests.faults.test_faults", "tests.test_demo", "tests.test_docs")
_LAST_USER = pytest.StashKey[list[str]]()

# `make test` runs two pytest processes side by side: `-m light` takes these modules, which
# need no Ray and no site — the chain, the ledger, the command line, a plain lease, pure logic —
# and `-m "not light"` everything else, in the order above, so no two Ray tests ever share the
# machine's two cores. A new module runs with the heavy ones unless it is named here (or a test of
# it is marked `light`, as test_program marks its plain programs, whose leases start no Ray).
LIGHT = {
    f"tests.{name}"
    for name in (
        "test_abi",
        "test_anvil",
        "test_bad_input",
        "test_challenge",
        "test_contract_gate",
        "test_dashboard",
        "test_dashboard_reports",
        "test_demo_clock",
        "test_device_commitment",
        "test_deploy",
        "test_econ",
        "test_governance",
        "test_hostile_lease",
        "test_indexer",
        "test_job_cli",
        "test_jobs",
        "test_keys",
        "test_layers",
        "test_lease",
        "test_lease_network",
        "test_ledger_schema",
        "test_local_stores",
        "test_logs",
        "test_market_offers",
        "test_matcher",
        "test_merkle",
        "test_mesh",
        "test_mesh_register",
        "test_object_store",
        "test_oracle_config",
        "test_oracle_determinism",
        "test_ownership",
        "test_provider_api",
        "test_proof",
        "test_hostile_challenge",
        "test_provider_cli",
        "test_batch_tuner",
        "test_canary",
        "test_receipts",
        "test_serving_escrow",
        "test_serve_order",
        "test_collector_specs",
        "test_report_bounds",
        "test_results",
        "test_rewards",
        "test_sandbox",
        "test_scoring",
        "test_site_auth",
        "test_site_tls",
        "test_slashing",
        "test_spec",
        "test_staking",
        "test_startup",
        "test_tables",
        "test_tx",
        "test_units",
        "test_venv_install",
    )
}


def pytest_itemcollected(item: pytest.Item) -> None:
    assert isinstance(item, pytest.Function)  # every test here is a function, in its module
    if item.module.__name__ in LIGHT:
        item.add_marker(pytest.mark.light)


# Each lane imports only the modules that can hold its tests: importing the others (torch, peft and
# transformers for the runners' tests, hypothesis for the chain's) took each lane's collection about
# 10 of its 17 s. A module not in LIGHT whose source says `mark.light` may hold light tests, so the
# light lane reads it; the heavy lane leaves out LIGHT and the modules marked light whole.
_MARKED_LIGHT = re.compile(r"mark\.light\b")
_WHOLLY_LIGHT = re.compile(r"^pytestmark\s*=\s*pytest\.mark\.light\b", re.MULTILINE)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    lane = config.option.markexpr
    if lane not in ("light", "not light") or collection_path.suffix != ".py" \
            or not collection_path.name.startswith("test_"):
        return None
    root = Path(__file__).parents[1]
    if not collection_path.is_relative_to(root):  # a test file outside the project: pytest decides
        return None
    module = ".".join(collection_path.relative_to(root).with_suffix("").parts)
    if module in LIGHT:
        ignored = lane == "not light"
    elif lane == "light":
        ignored = not _MARKED_LIGHT.search(collection_path.read_text())
    else:
        ignored = bool(_WHOLLY_LIGHT.search(collection_path.read_text()))
    return True if ignored else None  # None: what --ignore and the other plugins say still holds


# ── tests that need a GPU ──────────────────────────────────────────────────────────────
# A test marked `gpu` runs wherever a CUDA device is present. Elsewhere it is deselected before
# the run starts, and the run's summary says how many did not run and why: never a silent skip.
# A GPU machine lent without Ray (tools/device_check.sh) leaves out the `gpu` tests that need it
# (those using a Ray fixture, or marked `ray`), and says so in the same way; with
# SWARM_GPU_TESTS=ray it runs only those, once it has installed its kit's Ray.
_NO_GPU = pytest.StashKey[tuple[int, str]]()
_NO_RAY = pytest.StashKey[tuple[int, list[str]]]()


def _no_cuda_reason() -> str | None:
    """Why this machine cannot run the `gpu` tests, or None when it can."""
    import torch

    from compute.nvml import gpu_snapshot

    if torch.cuda.is_available():
        return None
    snapshot = gpu_snapshot()
    nvml = f"NVML sees {snapshot.gpus} GPU(s)" + (f" ({snapshot.error})" if snapshot.error else "")
    build = f"torch {torch.__version__} was built without CUDA" if torch.version.cuda is None else \
        f"torch {torch.__version__} finds no CUDA device"
    return f"{build}; {nvml}"


def pytest_collection_finish(session: pytest.Session) -> None:
    """After `-m` chose the run's tests: the `gpu` ones among them leave it where no GPU is."""
    gpu = [item for item in session.items if item.get_closest_marker("gpu")]
    reason = _no_cuda_reason() if gpu else None
    if reason is not None:
        session.config.hook.pytest_deselected(items=gpu)
        session.items[:] = [item for item in session.items if not item.get_closest_marker("gpu")]
        session.testscollected = len(session.items)
        session.config.stash[_NO_GPU] = (len(gpu), reason)
        return
    rayless = [item for item in gpu
               if item.get_closest_marker("ray") or set(HEAVY) & set(getattr(item, "fixturenames", ()))]
    if gpu and os.environ.get("SWARM_GPU_TESTS") == "ray":
        ran = [item for item in gpu if item not in rayless]
        session.config.hook.pytest_deselected(items=ran)
        session.items[:] = [item for item in session.items if item not in ran]
        session.testscollected = len(session.items)
    elif gpu and importlib.util.find_spec("ray") is None:
        session.config.hook.pytest_deselected(items=rayless)
        session.items[:] = [item for item in session.items if item not in rayless]
        session.testscollected = len(session.items)
        session.config.stash[_NO_RAY] = (len(rayless), [item.nodeid for item in rayless])


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _NO_GPU in config.stash:
        count, reason = config.stash[_NO_GPU]
        terminalreporter.write_sep("=", f"{count} gpu tests did NOT run: no CUDA device here", yellow=True)
        terminalreporter.write_line(f"{reason}. They run wherever a GPU is present (tests marked gpu).")
    if _NO_RAY in config.stash:
        count, names = config.stash[_NO_RAY]
        terminalreporter.write_sep("=", f"{count} gpu tests did NOT run: no Ray here", yellow=True)
        for name in names:
            terminalreporter.write_line(f"  {name}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def group(item: pytest.Function) -> int:
        module = item.module.__name__
        if module in END_TO_END:
            return len(HEAVY) + 1
        used = {name for i in by_module[module] for name in i.fixturenames}
        return next((rank for rank, name in enumerate(HEAVY) if name in used), len(HEAVY))

    functions = cast("list[pytest.Function]", items)  # each one checked by pytest_itemcollected
    by_module: dict[str, list[pytest.Function]] = {}
    for item in functions:
        by_module.setdefault(item.module.__name__, []).append(item)
    functions.sort(key=group)  # stable: the order within each group is kept
    for name in HEAVY:
        users = [item for item in functions if name in item.fixturenames]
        if users:
            users[-1].stash.setdefault(_LAST_USER, []).append(name)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    from tests.ray_cluster import release_ray_cluster
    from tests.sites import release_site_network

    release = {"ray_cluster": release_ray_cluster, "site_network": release_site_network}
    for name in item.stash.get(_LAST_USER, []):
        release[name]()


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty ledger database: a SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return request.getfixturevalue("postgres_server").create_database()

