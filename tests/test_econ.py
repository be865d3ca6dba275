"""The incentive simulation (bench/econ) on a short run: cheating earns less than honest work,
fraud loses money, and the real oracle pays out exactly the emission every epoch."""

from __future__ import annotations

import pytest

from bench.econ.simulate import Params, Run, simulate, summarize
from oracle.config import load_config

UTILIZATION = 0.6


@pytest.fixture(scope="module")
def short_run() -> tuple[Params, Run]:
    params = Params(epochs=40, providers=60, utilization=UTILIZATION)
    return params, simulate(params, seed=7, config=load_config())


def test_every_cheating_strategy_returns_less_on_stake_than_honest_work(short_run) -> None:
    params, run = short_run
    returns = {name: s["return_pct"]["mean"] for name, s in summarize([run], params)["strategies"].items()}
    for cheat in ("lazy", "misdeclaring", "fraudulent"):
        assert returns[cheat] < returns["honest"], returns


def test_fraud_loses_money_and_is_tombstoned(short_run) -> None:
    params, run = short_run
    fraud = summarize([run], params)["strategies"]["fraudulent"]
    assert fraud["return_pct"]["mean"] < 0
    assert fraud["slashed"] > 0 and fraud["tombstoned"] > 0


def test_each_epoch_pays_out_exactly_the_configured_emission(short_run) -> None:
    _, run = short_run
    emission = load_config().emission.emission_wei(UTILIZATION)
    assert run.emissions == [emission] * 40
    assert run.reward_sums == run.emissions
