"""`swarm dashboard` over a ledger filled the way the system fills it: providers staked, jobs
posted, assigned, completed and failed on the session's anvil and indexed; the market's and
the oracle's rows as their services write them; a train run's live checkpoint. The JSON API,
/metrics and the page in a real headless Chromium all show it."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
import yaml
from prometheus_client.parser import text_string_to_metric_families
from sqlmodel import Session

from anvil import dev_account
from dashboard import create_app
from dashboard.data import latest_scores
from ledger import jobs, stake
from ledger.client import Swarm
from ledger.db import open_ledger
from ledger.indexer import Indexer
from ledger.specs import store_spec
from ledger.units import ONE, format_amount
from market.migrations import MARKET
from market.records import MarketJob, MarketTransition
from market.spec import job_namespace, validate_spec
from oracle.migrations import ORACLE
from oracle.records import OracleEpoch, ProbeSample, ProviderScore
from tests.conftest import one_line_error, provider_signature

PROVIDER_A, PROVIDER_B = dev_account(1).address, dev_account(2).address
BUYER = 5
PRICE = ONE // 2_000  # 0.0005 SWARM per unit, under examples/train.yaml's cap of 0.001
STAKE_A, STAKE_B = 1_500 * ONE, 2_000 * ONE
EXAMPLE = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples" / "train.yaml").read_text())
HISTORY = [
    {"epoch": e, "loss": round(1.2 / e, 6), "val_loss": round(1.3 / e, 6), "val_accuracy": 0.5 + 0.08 * e}
    for e in range(1, 6)
]
REWARDS = {1: {PROVIDER_A: 300 * ONE, PROVIDER_B: 500 * ONE}, 2: {PROVIDER_A: 700 * ONE, PROVIDER_B: 0}}


@dataclass(frozen=True)
class Ledger:
    db_url: str
    storage: Path
    completed: int  # job ids
    failed: int
    running: int


def _now(swarm: Swarm) -> int:
    return max(swarm.chain.timestamp(), int(time.time()))


@pytest.fixture
def ledger(swarm: Swarm, swarm_home: Path, tmp_path: Path) -> Ledger:
    for index, gpu, amount in ((1, "H100", STAKE_A), (2, "A100", STAKE_B)):
        provider = swarm.sender(dev_account(index).key)
        hardware = stake.HardwareSpec(gpu_model=gpu, gpus=1, vram_gb=80, region="eu-west",
                                      price_per_unit=PRICE)
        stake.register(swarm, provider, store_spec(swarm_home, hardware.as_dict()), 1)
        stake.stake(swarm, provider, amount)

    storage = tmp_path / "results"  # the buyer's output, a directory on this devnet
    spec = validate_spec(EXAMPLE | {"deadline": _now(swarm) + 3_600, "output": str(storage)})
    digest = store_spec(swarm_home, spec.canonical())
    buyer, matcher = swarm.sender(dev_account(BUYER).key), swarm.sender(dev_account(0).key)
    ids = [jobs.post_job(swarm, buyer, digest, spec.max_price_per_unit, spec.max_units, spec.deadline)[0]
           for _ in range(3)]
    completed, failed, running = ids
    jobs.assign_job(swarm, matcher, completed, PROVIDER_A, PRICE)
    result = b"\x55" * 32
    signature = provider_signature(swarm, completed, result, 600)
    jobs.complete_job(swarm, matcher, completed, result, 600, signature)
    jobs.assign_job(swarm, matcher, failed, PROVIDER_B, PRICE)
    jobs.fail_job(swarm, matcher, failed, "provider-lost", 100)  # its nodes vanished: the market slashes 1 %
    jobs.assign_job(swarm, matcher, running, PROVIDER_A, PRICE)

    db_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = open_ledger(db_url, MARKET, ORACLE)
    Indexer(swarm, engine).sync()
    with Session(engine) as session:
        _market_rows(session, swarm.chain.chain_id, completed, failed, running)
        _oracle_rows(session, swarm.chain.chain_id)
        session.commit()
    engine.dispose()
    _checkpoint(
        storage / f"{job_namespace(swarm.chain.chain_id, swarm.market.address)}{running}", HISTORY[:2]
    )
    return Ledger(db_url, storage, completed, failed, running)


def _market_rows(session: Session, chain_id: int, completed: int, failed: int, running: int) -> None:
    """What market.service writes: one record per job, and every transition it made."""
    now = time.time()
    paths = {
        completed: (PROVIDER_A, ["queued", "assigned", "running", "ran", "completed"]),
        failed: (PROVIDER_B, ["queued", "assigned", "running", "failed"]),
        running: (PROVIDER_A, ["queued", "assigned", "running"]),
    }
    for job_id, (provider, states) in paths.items():
        record = MarketJob(
            chain_id=chain_id,
            job_id=job_id,
            group_id=job_id,
            state=states[-1],
            provider=provider,
            price_per_unit=PRICE,
            attempts=1,
            created_at=now,
            updated_at=now,
        )
        if job_id == completed:
            record.result_hash, record.units, record.unit = "0x" + "55" * 32, 599.2, "cpu-seconds"
            record.metrics = {
                "epochs": 5,
                "loss": HISTORY[-1]["loss"],
                "val_accuracy": HISTORY[-1]["val_accuracy"],
                "history": HISTORY,
                "precision": "fp32",
            }
        if job_id == failed:
            record.lost_providers, record.error = [PROVIDER_B], f"provider {PROVIDER_B} has no live nodes."
        session.add(record)
        for before, after in zip([None, *states], states, strict=False):
            session.add(MarketTransition(chain_id=chain_id, job_id=job_id, at=now, from_state=before,
                                         to_state=after, provider=provider, detail=f"now {after}"))


def _oracle_rows(session: Session, chain_id: int) -> None:
    """What oracle.epoch writes: two epochs (one finalized), a score row per provider, one downtime slash."""
    start = time.time() - 120
    cumulative = {PROVIDER_A: 0, PROVIDER_B: 0}
    for epoch, rewards in REWARDS.items():
        slashes = (
            []
            if epoch == 1
            else [
                {
                    "provider": PROVIDER_B,
                    "bps": 10,
                    "reason": "downtime",
                    "evidence_hash": "0x" + "ab" * 32,
                    "jail_seconds": 30,
                    "tombstone": False,
                    "row": "downtime",
                    "detail": "uptime 20% under 50% of 5 probes",
                }
            ]
        )
        session.add(OracleEpoch(
            chain_id=chain_id, epoch=epoch, state="finalized" if epoch == 1 else "aggregated",
            window_start=start + 60 * (epoch - 1), window_end=start + 60 * epoch, from_block=1, to_block=2,
            utilization=0.25 * epoch, emission_wei=sum(rewards.values()), rewards_root="0x" + "11" * 32,
            slashes=slashes, created_at=start, updated_at=start,
        ))
        for provider, reward in rewards.items():
            cumulative[provider] += reward
            down = provider == PROVIDER_B and epoch == 2
            session.add(
                ProviderScore(
                    chain_id=chain_id,
                    epoch=epoch,
                    provider=provider,
                    samples=5,
                    uptime=0.2 if down else 1.0,
                    performance=1.1,
                    reliability=0.56,
                    loyalty=0.5,
                    epochs_staked=epoch,
                    weight=0.0 if down else 1e21,
                    eligible=not down,
                    reward_wei=reward,
                    cumulative_wei=cumulative[provider],
                    note="slashed this epoch" if down else "",
                )
            )
    for i in range(5):
        session.add(ProbeSample(chain_id=chain_id, provider=PROVIDER_A if i % 2 else PROVIDER_B, at=start + i,
                                ok=i != 0, latency_s=0.01))
    # The newest probe round: A's GPU node, as NVML read it.
    session.add(ProbeSample(chain_id=chain_id, provider=PROVIDER_A, at=start + 5, ok=True, latency_s=0.01,
                            node_id="gpu-node", gpus=2, gpu_utilization_pct=87.5, gpu_memory_used_mb=61_440.0,
                            gpu_temperature_c=71.0, gpu_power_w=1_090.5))


def _checkpoint(directory: Path, history: list[dict]) -> None:
    """Ray Train's layout for a run under way: checkpoint_*/state.json, newest last."""
    for epoch in range(1, len(history) + 1):
        path = directory / f"checkpoint_2026-01-01_00-00-0{epoch}.000000"
        path.mkdir(parents=True)
        (path / "state.json").write_text(
            json.dumps({"epoch": epoch, "history": history[:epoch], "units": 1.0})
        )


@contextmanager
def serving(home: Path, db_url: str) -> Iterator[str]:
    """The app under uvicorn in a thread; the socket listens before the thread starts, so no wait is
    needed."""
    app = create_app(home, db_url)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_config=None))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture
def served(ledger: Ledger, swarm_home: Path) -> Iterator[str]:
    with serving(swarm_home, ledger.db_url) as url:
        yield url


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _json(url: str):
    status, body = _get(url)
    assert status == 200, body
    return json.loads(body)


# ── the JSON API ──────────────────────────────────────────────────────────────


def test_api_shows_providers_with_their_spec_stake_scores_and_rewards(served: str) -> None:
    providers = {p["address"]: p for p in _json(f"{served}/api/providers")}
    assert set(providers) == {PROVIDER_A, PROVIDER_B}
    a, b = providers[PROVIDER_A], providers[PROVIDER_B]
    assert (a["gpu_model"], b["gpu_model"], a["gpus"], a["vram_gb"]) == ("H100", "A100", 1, 80)
    assert a["price_per_unit_wei"] == str(PRICE) and a["price_per_unit_tokens"] == "0.0005 SWARM"
    assert a["stake_wei"] == str(STAKE_A) and a["stake_tokens"] == "1,500 SWARM"
    assert int(b["stake_wei"]) == STAKE_B * 99 // 100  # the 1 % slash of the failed job
    assert a["state"] == b["state"] == "active"
    assert a["reward_total_tokens"] == "1,000 SWARM" and b["reward_total_wei"] == str(500 * ONE)
    assert a["score"]["epoch"] == 2 and a["score"]["uptime"] == 1.0 and a["score"]["share"] == 1.0
    assert b["score"]["uptime"] == 0.2 and b["score"]["eligible"] is False
    assert a["running_jobs"] == 1


def test_api_joins_chain_jobs_with_the_market_and_their_training_metrics(served: str, ledger: Ledger) -> None:
    listed = {j["job_id"]: j for j in _json(f"{served}/api/jobs")}
    assert set(listed) == {ledger.completed, ledger.failed, ledger.running}
    done = listed[ledger.completed]
    assert (done["kind"], done["model"], done["workers"], done["status"], done["market_state"]) == (
        "train", "mlp", 2, "completed", "completed")
    assert (
        done["provider"] == PROVIDER_A
        and done["price_per_unit_wei"] == str(PRICE)
        and done["units_used"] == 600
    )
    assert done["escrow_tokens"] == "3.6 SWARM" and done["escrow_open"] is True
    assert done["history"] == HISTORY and done["history_source"] == "result"
    live = listed[ledger.running]
    assert live["market_state"] == "running" and live["history_source"] == "checkpoint"
    assert [h["epoch"] for h in live["history"]] == [1, 2]  # the newest of the two checkpoints
    assert listed[ledger.failed]["status"] == "failed" and listed[ledger.failed]["escrow_open"] is False

    detail = _json(f"{served}/api/jobs/{ledger.completed}")
    assert detail["spec"]["params"]["epochs"] == 5 and detail["metrics"]["loss"] == HISTORY[-1]["loss"]
    assert [t["to_state"] for t in detail["transitions"]] == [
        "queued",
        "assigned",
        "running",
        "ran",
        "completed",
    ]


def test_an_unknown_job_is_a_404_with_one_sentence(served: str) -> None:
    status, body = _get(f"{served}/api/jobs/999")
    assert status == 404
    error = json.loads(body)["error"]
    assert error.startswith("Job 999 is not in the ledger") and error.count(".") == 1


def test_api_gives_rewards_per_provider_per_epoch_and_the_slashes(served: str, ledger: Ledger) -> None:
    epochs = _json(f"{served}/api/epochs")
    assert [e["epoch"] for e in epochs] == [1, 2]
    assert [e["utilization"] for e in epochs] == [0.25, 0.5]
    for e in epochs:
        assert {r["provider"]: int(r["reward_wei"]) for r in e["rewards"]} == REWARDS[e["epoch"]]
    assert epochs[0]["emission_tokens"] == format_amount(800 * ONE)

    slashes = _json(f"{served}/api/slashes")
    (applied,) = slashes["chain"]
    assert (applied["provider"], applied["reason"], applied["bps"], applied["job_id"]) == (
        PROVIDER_B, "provider-lost", 100, ledger.failed)
    assert applied["amount_wei"] == str(STAKE_B // 100) and applied["amount_tokens"] == "20 SWARM"
    (decided,) = slashes["oracle"]
    assert (decided["epoch"], decided["row"], decided["provider"]) == (2, "downtime", PROVIDER_B)
    assert "uptime 20%" in decided["detail"]

    summary = _json(f"{served}/api/summary")
    assert summary["providers"] == {"active": 2, "jailed": 0, "tombstoned": 0, "total": 2}
    assert summary["escrow_held_wei"] == str(2 * 36 * ONE // 10)  # the completed and the running job
    assert summary["latest_epoch"]["epoch"] == 2 and summary["emission_total_tokens"] == "1,500 SWARM"
    assert [r["job_id"] for r in summary["running"]] == [ledger.running]


def test_a_provider_gone_from_an_epoch_keeps_the_scores_it_last_earned(tmp_path: Path) -> None:
    engine = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", MARKET, ORACLE)
    with Session(engine) as session:
        session.add(
            ProviderScore(
                chain_id=1,
                epoch=1,
                provider=PROVIDER_A,
                samples=4,
                uptime=0.75,
                performance=1.0,
                reliability=0.6,
                reward_wei=5,
                cumulative_wei=5,
            )
        )
        session.add(ProviderScore(chain_id=1, epoch=2, provider=PROVIDER_A, cumulative_wei=5,
                                  note="not staked this epoch"))
        session.add(
            ProviderScore(
                chain_id=1,
                epoch=2,
                provider=PROVIDER_B,
                samples=4,
                uptime=1.0,
                performance=1.0,
                reliability=0.6,
                reward_wei=9,
                cumulative_wei=9,
            )
        )
        session.commit()
        latest = latest_scores(session, 1)
    engine.dispose()
    assert (latest[PROVIDER_A].epoch, latest[PROVIDER_A].uptime, latest[PROVIDER_A].cumulative_wei) == (
        1,
        0.75,
        5,
    )
    assert (latest[PROVIDER_B].epoch, latest[PROVIDER_B].cumulative_wei) == (2, 9)


# ── /metrics ──────────────────────────────────────────────────────────────────


def test_metrics_are_prometheus_text_read_from_the_ledger(served: str) -> None:
    status, body = _get(f"{served}/metrics")
    assert status == 200
    samples = {}
    families = {}
    for family in text_string_to_metric_families(body.decode()):
        families[family.name] = family.type
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert all(name.startswith("swarm_") for name in families)
    assert families["swarm_market_transitions"] == families["swarm_slashes"] == "counter"
    assert value("swarm_providers", state="active") == 2 and value("swarm_providers", state="jailed") == 0
    assert value("swarm_provider_stake_tokens", provider=PROVIDER_A) == 1_500
    assert value("swarm_provider_uptime", provider=PROVIDER_B) == 0.2
    assert value("swarm_provider_reward_tokens_total", provider=PROVIDER_A) == 1_000
    assert value("swarm_jobs", status="completed") == value("swarm_jobs", status="failed") == 1
    assert value("swarm_market_jobs", state="running") == 1
    assert value("swarm_escrow_tokens") == pytest.approx(7.2)
    assert value("swarm_market_transitions_total", to_state="running") == 3
    assert value("swarm_oracle_epoch") == 2 and value("swarm_oracle_epochs", state="finalized") == 1
    assert value("swarm_oracle_emission_tokens_total") == 1_500
    assert value("swarm_slashes_total", reason="provider-lost") == 1
    assert value("swarm_network_utilization") == 0.5
    assert (
        value("swarm_probe_samples_total", ok="true") == 5
        and value("swarm_probe_samples_total", ok="false") == 1
    )
    node = {"provider": PROVIDER_A, "node": "gpu-node"}
    assert value("swarm_node_gpu_utilization_pct", **node) == 87.5
    assert value("swarm_node_gpu_memory_used_mb", **node) == 61_440.0
    assert value("swarm_node_gpu_temperature_c", **node) == 71.0
    assert value("swarm_node_gpu_power_w", **node) == 1_090.5


# ── the page, in a real browser ─────────────────────────────────────────────────


def _chromium() -> str:
    for candidate in (
        "/usr/lib/chromium/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("Chromium is not installed; `make test` installs it (apt-get install chromium).")


def test_the_page_renders_the_ledger_live_in_headless_chromium(
    served: str, ledger: Ledger, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    shot = tmp_path / "dashboard.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto(served + "/")
            page.wait_for_selector(f'#jobs tr[data-job-id="{ledger.running}"]', timeout=30_000)
            page.wait_for_function(
                "([a, b]) => { const t = document.querySelector('#providers').textContent;"
                " return t.includes(a) && t.includes(b); }", arg=[PROVIDER_A, PROVIDER_B], timeout=30_000)
            assert page.locator("#rewards-chart").count() == 1
            bars = page.locator("#rewards-chart rect[data-provider]")
            assert bars.count() == 3  # epoch 1: both providers; epoch 2: only A earned
            assert page.locator("#rewards-legend").inner_text().count("…") == 2
            assert page.locator(".train-chart").count() == 2  # the finished job and the live one
            assert "provider-lost" in page.locator("#slashes").inner_text()
            # Amounts as a person reads them, every digit the API gives on hover.
            shown = page.eval_on_selector_all(".amount", "els => els.map(e => [e.textContent, e.title])")
            summary = page.evaluate("fetch('/api/summary').then(r => r.json())")
            assert summary["stake_total_tokens"] in [exact for _, exact in shown]
            for text, exact in shown:
                number, full = (float(t.split()[0].replace(",", "")) for t in (text, exact))
                decimals = len(text.split()[0].partition(".")[2])
                assert (decimals <= 2 or abs(number) < 1) and len(text) <= len(exact), (text, exact)
                assert abs(number - full) <= max(0.005, abs(full) * 1e-3), (text, exact)
            rounded = page.evaluate("['4,499.989424616 SWARM', '0.000123456789 SWARM', '12 SWARM']"
                                    ".map((t) => { const d = document.createElement('div');"
                                    " d.innerHTML = amount(t); const a = d.firstChild;"
                                    " return [a.textContent, a.title]; })")
            assert rounded == [["4,499.99 SWARM", "4,499.989424616 SWARM"],
                               ["0.0001235 SWARM", "0.000123456789 SWARM"], ["12 SWARM", "12 SWARM"]]
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert all(url.startswith(served) for url in requests), requests  # nothing loaded from elsewhere
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 50_000


# ── the command ───────────────────────────────────────────────────────────────


def test_a_busy_port_is_refused_in_one_sentence(cli, ledger: Ledger) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        refused = cli("dashboard", "--port", str(port), env={"SWARM_DB_URL": ledger.db_url})
    assert f"127.0.0.1:{port}" in one_line_error(refused) and "--port" in refused.stderr


def test_no_ledger_database_yet_is_refused_in_one_sentence(cli, tmp_path: Path) -> None:
    refused = cli("dashboard", env={"SWARM_DB_URL": f"sqlite:///{tmp_path / 'none.db'}"})
    assert "no ledger database" in one_line_error(refused) and "swarm ledger sync" in refused.stderr
