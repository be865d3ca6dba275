"""The incentive simulation (bench/econ) on a short run: cheating earns less than honest work,
fraud loses money, and the real oracle pays out exactly the emission every epoch."""

from __future__ import annotations

import pytest

from bench.econ.network import MISDECLARED, MISDECLARED_SUBTLE
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
    for cheat in ("lazy", "misdeclaring", "fraudulent", "misdeclaring (fp32-alike)"):
        assert returns[cheat] < returns["honest"], returns


def test_a_misdeclared_gpu_of_every_kind_loses_money() -> None:
    """Every (real, declared) pair, those that look alike in fp32 included (an RTX 4090 as an
    H100, a V100 or an A10 as an A100): the tensor-core challenge catches them and the
    misrepresentation slashes take more than they earn."""
    params = Params(epochs=40, providers=120, utilization=UTILIZATION)
    summary = summarize([simulate(params, seed=3, config=load_config())], params)
    pairs = summary["misdeclared_pairs"]
    assert set(pairs) == {f"{r} as {d}" for r, d in MISDECLARED + MISDECLARED_SUBTLE}, pairs
    assert all(p["max"] < 0 for p in pairs.values()), pairs
    assert summary["goals"]["misdeclaring (fp32-alike) < 0"] and summary["goals"]["misdeclaring < 0"]


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
