"""What the dashboard shows of a buyer's own program (a `ray` job): what it reported through
`ray.train.report` while it ran, charted live; its final metrics; a failed lease's last lines.
The jobs are posted, assigned, completed and charged on the session's anvil and indexed; the
market's rows are written as its service writes them; the page runs in a real headless Chromium."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlmodel import Session

from anvil import dev_account
from ledger import jobs, stake
from ledger.client import Swarm
from ledger.db import open_ledger
from ledger.indexer import Indexer
from ledger.results import sign_failure
from ledger.specs import store_spec
from ledger.units import ONE
from market.migrations import MARKET
from market.records import MarketJob, MarketTransition
from market.spec import validate_spec
from oracle.migrations import ORACLE
from tests.conftest import provider_signature
from tests.test_dashboard import _chromium, _json, _now, serving

pytestmark = pytest.mark.light  # the chain, a database and a browser: no Ray

PROVIDER = dev_account(1).address
BUYER = 5
PRICE = ONE // 2_000
UNITS = 300

# The running program: an epoch counter, two numbers worth charting, a string and a flag; one
# report's loss is NaN (a run gone wrong says so, and JSON has no NaN).
RUNNING_REPORTS = 12
FINISHED_REPORTS = 450  # more than the dashboard charts: it thins them to 200


def _running_metrics(n: int) -> dict:
    loss = float("nan") if n == 3 else round(2.0 / n, 6)
    return {"epoch": n, "loss": loss, "r2": round(1 - 1 / (n + 1), 6), "phase": "train", "done": False}


def _finished_metrics(n: int) -> dict:
    return {"loss": 2.0 / n, "val_loss": 2.2 / n, "r2": 1 - 1 / (n + 1), "mae": 0.5 / n,
            "lr": 1e-3 * 0.99**n, "rows_per_s": 1_000.0 + n}


FINAL = {  # the finished program's outputs/metrics.json
    "eval": {"r2": 0.987654321, "mae": 0.1234, "per_fold": [0.98, 0.99], "deep": {"x": 1}},
    "rows": 123_456,
    "model": "ridge",
    "coefficients": [0.5, -1.25],
}
LOG_TAIL = "\n".join([
    *(f"epoch {n}: reading columns <b>x1..x3</b>" for n in range(1, 81)),
    "Traceback (most recent call last):",
    '  File "main.py", line 12, in <module>',
    "    features = table[['x4']]",
    "KeyError: \"['x4'] not in index\"",
])


@dataclass(frozen=True)
class Programs:
    db_url: str
    chain_id: int
    running: int  # job ids
    finished: int
    crashed: int


@pytest.fixture
def programs(swarm: Swarm, swarm_home: Path, tmp_path: Path) -> Programs:
    provider = swarm.sender(dev_account(1).key)
    hardware = stake.HardwareSpec(gpu_model="H100", gpus=1, vram_gb=80, region="eu-west",
                                  price_per_unit=PRICE)
    stake.register(swarm, provider, store_spec(swarm_home, hardware.as_dict()), 1)
    stake.stake(swarm, provider, 1_000 * ONE)

    spec = validate_spec({
        "kind": "ray", "code": {"uri": "s3://code/main.tar", "sha256": "ab" * 32}, "output": "s3://results",
        "resources": {"workers": 1}, "max_price_per_unit": "0.001", "max_units": UNITS,
        "deadline": _now(swarm) + 3_600, "params": {"entrypoint": "python main.py"},
    })
    digest = store_spec(swarm_home, spec.canonical())
    buyer, matcher = swarm.sender(dev_account(BUYER).key), swarm.sender(dev_account(0).key)
    running, finished, crashed = (
        jobs.post_job(swarm, buyer, digest, spec.max_price_per_unit, spec.max_units, spec.deadline)[0]
        for _ in range(3)
    )
    for job_id in (running, finished, crashed):
        jobs.assign_job(swarm, matcher, job_id, PROVIDER, PRICE)
    result = b"\x66" * 32
    jobs.complete_job(swarm, matcher, finished, result, 200, provider_signature(swarm, finished, result, 200))
    # The crashed program's fault: charged the units its lease held, as its provider signed them.
    terms = jobs.job_info(swarm, crashed).terms
    charged = sign_failure(dev_account(1).key, swarm.chain.chain_id, swarm.market.address, terms, 20)
    jobs.charge_job(swarm, matcher, crashed, "job-failed", 20, charged)

    db_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = open_ledger(db_url, MARKET, ORACLE)
    Indexer(swarm, engine).sync()
    now = time.time()
    rows = {
        running: ("running", _reports(_running_metrics, RUNNING_REPORTS, now), {}, None, None),
        finished: ("completed", _reports(_finished_metrics, FINISHED_REPORTS, now), FINAL, None, None),
        crashed: ("completed", _reports(_running_metrics, 2, now), {}, LOG_TAIL,
                  "the program exited with 1: KeyError: \"['x4'] not in index\""),
    }
    with Session(engine) as session:
        for job_id, (state, progress, metrics, log_tail, error) in rows.items():
            session.add(MarketJob(chain_id=swarm.chain.chain_id, job_id=job_id, group_id=job_id, state=state,
                                  provider=PROVIDER, price_per_unit=PRICE, attempts=1, metrics=metrics,
                                  progress=progress, log_tail=log_tail, error=error, created_at=now,
                                  updated_at=now))
            session.add(MarketTransition(chain_id=swarm.chain.chain_id, job_id=job_id, at=now,
                                         from_state="assigned", to_state=state, provider=PROVIDER))
        session.commit()
    engine.dispose()
    return Programs(db_url, swarm.chain.chain_id, running, finished, crashed)


def _reports(metrics, count: int, now: float) -> list[dict]:
    """What market.service keeps of a lease's `ray.train.report` calls: oldest first, seen every 2 s."""
    return [{"at": now - 2 * (count - n), "metrics": metrics(n)} for n in range(1, count + 1)]


@pytest.fixture
def served(programs: Programs, swarm_home: Path) -> Iterator[str]:
    with serving(swarm_home, programs.db_url) as url:
        yield url


# ── the JSON API ──────────────────────────────────────────────────────────────


def test_api_gives_a_programs_reports_thinned_with_their_numbers_and_first_and_last_kept(
    served: str, programs: Programs
) -> None:
    detail = _json(f"{served}/api/jobs/{programs.finished}")
    numbers = [r["report"] for r in detail["progress"]]
    assert len(numbers) == 200 and numbers[0] == 1 and numbers[-1] == FINISHED_REPORTS
    gaps = {b - a for a, b in itertools.pairwise(numbers)}
    assert gaps == {2, 3}, "evenly spaced over the 450 reports"
    newest = detail["progress"][-1]
    assert newest["metrics"] == pytest.approx(_finished_metrics(FINISHED_REPORTS))
    assert isinstance(newest["at"], float)

    listed = {j["job_id"]: j for j in _json(f"{served}/api/jobs")}
    assert listed[programs.finished]["history_source"] == "reported"
    assert listed[programs.finished]["history"] == detail["progress"]


def test_api_gives_a_running_programs_reports_as_its_live_series_a_nan_by_its_name(
    served: str, programs: Programs
) -> None:
    detail = _json(f"{served}/api/jobs/{programs.running}")
    assert [r["report"] for r in detail["progress"]] == list(range(1, RUNNING_REPORTS + 1))
    assert detail["progress"][2]["metrics"]["loss"] == "nan"
    assert detail["progress"][-1]["metrics"] == _running_metrics(RUNNING_REPORTS)
    assert detail["history_source"] == "reported" and detail["log_tail"] is None
    (live,) = _json(f"{served}/api/summary")["running"]
    assert live["job_id"] == programs.running and live["history_source"] == "reported"


def test_api_flattens_a_programs_nested_metrics_one_level(served: str, programs: Programs) -> None:
    metrics = _json(f"{served}/api/jobs/{programs.finished}")["metrics"]
    assert metrics == {"eval.r2": 0.987654321, "eval.mae": 0.1234, "rows": 123_456, "model": "ridge"}


def test_api_gives_a_failed_leases_last_lines(served: str, programs: Programs) -> None:
    detail = _json(f"{served}/api/jobs/{programs.crashed}")
    assert detail["log_tail"] == LOG_TAIL
    assert detail["error"].endswith("KeyError: \"['x4'] not in index\"")
    assert _json(f"{served}/api/jobs/{programs.finished}")["log_tail"] is None


# ── the page, in a real browser ─────────────────────────────────────────────────


@pytest.fixture
def page(served: str):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(served + "/")
            yield page
        finally:
            browser.close()


def _chart_keys(page, job_id: int) -> list[str]:
    card = f'.train-card[data-job-id="{job_id}"]'
    page.wait_for_selector(f"{card} svg.reported-chart polyline", timeout=30_000)
    return page.eval_on_selector_all(f"{card} svg.reported-chart polyline",
                                     "ls => ls.map(l => l.dataset.key)")


def test_the_page_charts_a_line_per_numeric_metric_a_program_reported(page, programs: Programs) -> None:
    # The running program: loss and r2; not its epoch counter, its string or its flag.
    assert _chart_keys(page, programs.running) == ["loss", "r2"]
    legend = page.locator(f'.train-card[data-job-id="{programs.running}"] .reported-legend').inner_text()
    assert "loss" in legend and "r2" in legend and "its own low–high" in legend
    # The NaN report has no point: 11 on the loss line, 12 on r2.
    points = page.eval_on_selector_all(
        f'.train-card[data-job-id="{programs.running}"] polyline',
        "ls => ls.map(l => l.getAttribute('points').split(' ').length)",
    )
    assert points == [RUNNING_REPORTS - 1, RUNNING_REPORTS]
    # Six numbers reported: the first four, each in a colour of its own, over reports 1 to 450.
    card = f'.train-card[data-job-id="{programs.finished}"]'
    assert _chart_keys(page, programs.finished) == ["loss", "val_loss", "r2", "mae"]
    colours = page.eval_on_selector_all(f"{card} polyline", "ls => ls.map(l => l.getAttribute('stroke'))")
    assert len(set(colours)) == 4
    ticks = page.eval_on_selector_all(f"{card} svg text", "ts => ts.map(t => t.textContent)")
    assert "1" in ticks and str(FINISHED_REPORTS) in ticks
    # Each line spans the chart from its own lowest to its highest value.
    spans = page.eval_on_selector_all(
        f"{card} polyline",
        "ls => ls.map(l => { const ys = l.getAttribute('points').split(' ').map(p => +p.split(',')[1]);"
        " return [Math.min(...ys), Math.max(...ys)]; })",
    )
    assert all(span == spans[0] for span in spans) and spans[0][1] - spans[0][0] > 50
    # The jobs table marks the running program live, with its newest report.
    row = page.locator(f'#jobs tr[data-job-id="{programs.running}"]').inner_text()
    assert f"report {RUNNING_REPORTS}" in row and "live" in row


def test_the_page_charts_new_reports_while_the_program_runs(page, programs: Programs) -> None:
    card = f'.train-card[data-job-id="{programs.running}"]'
    page.wait_for_selector(f"{card} polyline", timeout=30_000)
    assert f"report {RUNNING_REPORTS} " in page.locator(card).inner_text()
    engine = open_ledger(programs.db_url, MARKET, ORACLE)
    with Session(engine) as session:  # what market.service does every few seconds while the lease runs
        record = session.get(MarketJob, (programs.chain_id, programs.running))
        assert record is not None
        more = RUNNING_REPORTS + 3
        record.progress = _reports(_running_metrics, more, time.time())
        session.add(record)
        session.commit()
    engine.dispose()
    page.wait_for_function(
        "([card, n]) => document.querySelector(card + ' polyline[data-key=\"r2\"]')"
        "?.getAttribute('points').split(' ').length === n",
        arg=[card, more], timeout=30_000,
    )
    assert f"report {more} " in page.locator(card).inner_text()


def test_the_job_panel_shows_a_programs_metrics_rounded_with_the_exact_value_on_hover(
    page, programs: Programs
) -> None:
    page.wait_for_selector(f'#jobs tr[data-job-id="{programs.finished}"]', timeout=30_000)
    page.click(f'#jobs tr[data-job-id="{programs.finished}"]')
    page.wait_for_selector("#job-metrics", timeout=30_000)
    shown = page.eval_on_selector_all(
        "#job-metrics tr",
        "rs => rs.map(r => [r.dataset.key, r.cells[1].textContent,"
        " r.querySelector('[title]')?.title ?? null])",
    )
    assert shown == [
        ["eval.r2", "0.9877", "0.987654321"],
        ["eval.mae", "0.1234", "0.1234"],
        ["rows", "123,456", "123456"],
        ["model", "ridge", None],
    ]
    assert page.locator("pre.log-tail").count() == 0


def test_the_job_panel_shows_a_failed_leases_last_lines_escaped_in_a_bounded_scrolled_box(
    page, programs: Programs
) -> None:
    page.wait_for_selector(f'#jobs tr[data-job-id="{programs.crashed}"]', timeout=30_000)
    page.click(f'#jobs tr[data-job-id="{programs.crashed}"]')
    log = page.wait_for_selector("pre.log-tail", timeout=30_000)
    assert log.text_content() == LOG_TAIL  # the <b> in the program's output is text, not markup
    assert page.locator("pre.log-tail b").count() == 0
    box = page.evaluate(
        "() => { const p = document.querySelector('pre.log-tail');"
        " return [p.clientHeight, p.scrollHeight, p.scrollTop]; }"
    )
    client, full, top = box
    assert client <= 270 and full > 2 * client, "a long log scrolls inside its box"
    assert top + client >= full - 2, "it opens at its last lines, where the error is"
