"""Scoring: uptime, performance, reliability, loyalty, eligibility, and rewards that sum exactly."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.special import betaincinv

from ledger.errors import InvalidInput
from ledger.units import ONE
from oracle.config import OracleConfig, load_config
from oracle.scoring import EpochInputs, score_epoch, split_rewards

CONFIG = load_config()
H100 = 33_500.0  # compute.reference: 67 TFLOPS peak × 0.5


def tuned(config: Any, key: str, value: Any) -> Any:
    """`config` with the dotted `key` set to `value` (tests only: no validation)."""
    head, _, rest = key.partition(".")
    inner = value if not rest else tuned(getattr(config, head), rest, value)
    return config.model_copy(update={head: inner})


def epoch(
    n: int = 3,
    *,
    stake: Sequence[int] | None = None,
    models: Sequence[str] | None = None,
    uptime: Sequence[float] | None = None,
    probes: int = 100,
    measured: Sequence[float] | None = None,
    challenge_ok: Sequence[bool] | None = None,
    successes: Sequence[int] | None = None,
    failures: Sequence[int] | None = None,
    abandoned: Sequence[int] | None = None,
    mismatch: Sequence[bool] | None = None,
    canary: Sequence[bool] | None = None,
    epochs_staked: Sequence[int] | None = None,
    jailed: Sequence[bool] | None = None,
    previous: Sequence[float] | None = None,
    utilization: float = 1.0,
) -> EpochInputs:
    """An epoch of `n` healthy H100 providers (`probes` probes each), with the given differences."""
    uptime = [1.0] * n if uptime is None else uptime
    answered = [round(u * probes) for u in uptime]
    provider = np.repeat(np.arange(n, dtype=np.int32), probes)
    ok = np.concatenate([np.arange(probes) < a for a in answered]) if n else np.zeros(0, dtype=bool)
    return EpochInputs(
        providers=[f"0x{i + 1:040x}" for i in range(n)],
        stake_wei=[1000 * ONE] * n if stake is None else list(stake),
        declared_model=["H100"] * n if models is None else list(models),
        probe_provider=provider,
        probe_ok=ok,
        measured_gflops=np.array([H100] * n if measured is None else measured, dtype=np.float64),
        challenge_ok=np.array([True] * n if challenge_ok is None else challenge_ok, dtype=bool),
        job_successes=np.array([100] * n if successes is None else successes),
        job_failures=np.array([0] * n if failures is None else failures),
        abandoned=np.array([0] * n if abandoned is None else abandoned),
        replication_mismatch=np.array([False] * n if mismatch is None else mismatch, dtype=bool),
        epochs_staked=np.array([1000] * n if epochs_staked is None else epochs_staked),
        jailed=np.array([False] * n if jailed is None else jailed, dtype=bool),
        utilization=utilization,
        previous_performance=None if previous is None else np.array(previous, dtype=np.float64),
        canary_mismatch=None if canary is None else np.array(canary, dtype=bool),
    )


# ── measurements ─────────────────────────────────────────────────────────────


def test_uptime_is_answered_probes_over_probes_sent_and_zero_without_any() -> None:
    inputs = epoch(3, uptime=[1.0, 0.9, 0.0])
    scores = score_epoch(inputs, CONFIG)
    assert scores.uptime.tolist() == [1.0, 0.9, 0.0]
    lonely = EpochInputs(**{**inputs.__dict__, "probe_provider": inputs.probe_provider[:100],
                            "probe_ok": inputs.probe_ok[:100]})
    scores = score_epoch(lonely, CONFIG)
    assert scores.uptime.tolist() == [1.0, 0.0, 0.0]
    assert scores.reasons[1] == scores.reasons[2] == "no probe samples"


def test_performance_is_measured_over_reference_and_capped() -> None:
    scores = score_epoch(epoch(3, measured=[H100 * 0.8, H100 * 1.5, H100 * 7]), CONFIG)
    cap = CONFIG.weights.performance_cap
    assert scores.performance.tolist() == pytest.approx([0.8, min(1.5, cap), cap])


def test_without_a_challenge_performance_carries_the_previous_figure_else_the_reference() -> None:
    nan = float("nan")
    scores = score_epoch(epoch(3, measured=[nan, nan, H100 / 2], previous=[0.7, nan, 0.9]), CONFIG)
    assert scores.performance.tolist() == pytest.approx([0.7, 1.0, 0.5])
    assert score_epoch(epoch(1, measured=[nan]), CONFIG).performance.tolist() == [1.0]


def test_a_model_without_a_reference_is_ineligible_and_says_so() -> None:
    scores = score_epoch(epoch(2, models=["H100", "B200"]), CONFIG)
    assert scores.eligible.tolist() == [True, False]
    assert scores.reasons[1] == "no reference throughput for 'B200'"
    assert scores.reward_wei[1] == 0


def test_a_challenged_cpu_is_scored_by_its_recorded_ratio_whatever_this_machines_cpu_reference(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Members on different cores hold different CPU references; each scores the aggregator's
    records alike, by the ratio and reference recorded with each challenge."""
    nan = float("nan")
    aggregators = 40.0  # the reference the challenges were judged against when they ran
    inputs = EpochInputs(**{
        **epoch(4, models=["cpu", "cpu", "cpu", "cpu"], measured=[22.0, 36.0, 80.0, nan]).__dict__,
        "recorded_ratio": np.array([22.0 / aggregators, 36.0 / aggregators, 2.0, nan]),
        "recorded_reference_gflops": np.array([aggregators, aggregators, aggregators, nan]),
    })
    seen = []
    for gflops in (70.0, 96.0):  # two members' cores: references of 35 and 48 GFLOPS
        measurement = tmp_path / f"{gflops:g}.json"
        measurement.write_text(json.dumps({"gflops": gflops}))
        monkeypatch.setattr("compute.reference.CPU_MEASUREMENT", measurement)
        seen.append(score_epoch(inputs, CONFIG))
    first, second = seen
    assert first.performance.tolist() == second.performance.tolist() == [0.55, 0.9, 1.0, 1.0]
    assert first.weight.tolist() == second.weight.tolist()
    assert first.reward_wei == second.reward_wei and first.eligible.all()
    assert first.slashes == second.slashes == []


def test_models_are_matched_as_nvml_names_them() -> None:
    scores = score_epoch(epoch(2, models=["NVIDIA H100 80GB HBM3", "h100"]), CONFIG)
    assert scores.performance.tolist() == pytest.approx([1.0, 1.0])


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 5000), st.integers(0, 5000), st.integers(1, 500))
def test_reliability_is_below_the_posterior_mean_and_rises_with_successes(
    successes: int, failures: int, more: int
) -> None:
    def score(s: int, f: int) -> float:
        return float(score_epoch(epoch(1, successes=[s], failures=[f]), CONFIG).reliability[0])

    r = CONFIG.reliability
    a, b = r.prior_successes + successes, r.prior_failures + failures
    assert score(successes, failures) < a / (a + b)
    assert score(successes + more, failures) > score(successes, failures)
    assert score(successes, failures) == pytest.approx(betaincinv(a, b, r.quantile))


def test_a_newcomer_is_not_buried_and_a_lucky_streak_is_not_trusted() -> None:
    scores = score_epoch(epoch(3, successes=[0, 10, 1000], failures=[0, 0, 10]), CONFIG)
    newcomer, lucky, veteran = scores.reliability.tolist()
    assert newcomer == pytest.approx(0.1 ** (1 / 4))  # Beta(4, 1): the prior alone
    assert newcomer < lucky < veteran
    assert lucky == pytest.approx(0.1 ** (1 / 14))  # Beta(14, 1): 10 of 10 is not yet 1.0


def test_loyalty_starts_at_the_floor_after_an_unstake_and_ramps_to_one() -> None:
    w = CONFIG.weights
    ramp = w.loyalty_ramp_epochs
    scores = score_epoch(epoch(4, epochs_staked=[0, ramp // 2, ramp, 10 * ramp]), CONFIG)
    assert scores.loyalty.tolist() == pytest.approx(
        [w.loyalty_start, w.loyalty_start + (1 - w.loyalty_start) * (ramp // 2) / ramp, 1.0, 1.0])
    # A reset (epochs_staked back to 0 after an unstake request) earns less than staying staked.
    reset = score_epoch(epoch(2, epochs_staked=[ramp, 0]), CONFIG)
    assert reset.reward_wei[0] > reset.reward_wei[1]


# ── eligibility and weights ──────────────────────────────────────────────────


def test_the_ineligible_earn_nothing_and_each_has_a_reason() -> None:
    inputs = epoch(6, stake=[ONE, 0, ONE, ONE, ONE, ONE], uptime=[1.0, 1.0, 0.7, 1.0, 1.0, 1.0],
                   measured=[H100, H100, H100, H100 * 0.4, H100, H100], jailed=[False] * 4 + [True, False])
    scores = score_epoch(inputs, CONFIG)
    assert scores.eligible.tolist() == [True, False, False, False, False, True]
    assert scores.reasons[0] == scores.reasons[5] == ""
    assert scores.reasons[1] == "no stake"
    assert scores.reasons[2] == "uptime 0.70 < 0.8"
    assert scores.reasons[3] == "performance 0.40 < 0.5; slashed for misrepresentation"
    assert scores.reasons[4] == "jailed"
    assert [r > 0 for r in scores.reward_wei] == scores.eligible.tolist()


def test_weight_is_the_product_of_the_factors_to_their_exponents() -> None:
    inputs = epoch(2, stake=[4000 * ONE, 1000 * ONE], uptime=[1.0, 0.9], measured=[H100, H100 * 0.8],
                   successes=[100, 40], epochs_staked=[0, 10_000])
    scores = score_epoch(inputs, CONFIG)
    w = CONFIG.weights
    expected = [
        (s / 4000) ** w.stake * u ** w.uptime * p ** w.performance * r ** w.reliability * loyal
        for s, u, p, r, loyal in zip([4000, 1000], [1.0, 0.9], [1.0, 0.8], scores.reliability,
                                     [w.loyalty_start, 1], strict=True)
    ]
    assert scores.weight.tolist() == pytest.approx(expected)


@settings(max_examples=50, deadline=None)
@given(st.floats(0.5, 0.99), st.floats(0.01, 0.5), st.integers(1, 6))
def test_a_faster_provider_earns_strictly_more(ratio: float, faster_by: float, others: int) -> None:
    """Up to the reference throughput of its declared model (the cap), faster earns more."""
    n = 2 + others
    cap = CONFIG.weights.performance_cap
    measured = [H100 * ratio, H100 * min(ratio + faster_by, cap)] + [H100] * others
    assume(measured[1] > measured[0] * 1.001)
    scores = score_epoch(epoch(n, measured=measured), CONFIG)
    assert scores.reward_wei[1] > scores.reward_wei[0]


@settings(max_examples=50, deadline=None)
@given(st.integers(80, 100), st.integers(0, 20), st.integers(0, 5))
def test_more_uptime_never_earns_less(answered: int, more: int, others: int) -> None:
    better = min(100, answered + more)
    scores = score_epoch(epoch(2 + others, uptime=[answered / 100, better / 100] + [1.0] * others), CONFIG)
    if better > answered:
        assert scores.reward_wei[1] > scores.reward_wei[0]
    else:  # equal weights: the leftover wei, if any, goes to the earlier provider
        assert 0 <= scores.reward_wei[0] - scores.reward_wei[1] <= 1


# ── the exact split ──────────────────────────────────────────────────────────


def test_a_lone_provider_gets_the_whole_emission() -> None:
    scores = score_epoch(epoch(1, utilization=0.5), CONFIG)
    assert scores.reward_wei == [CONFIG.emission.emission_wei(0.5)] == [scores.emission_wei]


def test_with_no_eligible_provider_nothing_is_emitted() -> None:
    scores = score_epoch(epoch(3, jailed=[True] * 3), CONFIG)
    assert scores.emission_wei == 0 and scores.reward_wei == [0, 0, 0]
    empty = score_epoch(epoch(0), CONFIG)
    assert empty.emission_wei == 0 and empty.reward_wei == [] and empty.slashes == []


def test_leftover_wei_go_to_the_largest_fractions_then_to_the_earlier_provider() -> None:
    assert split_rewards(10, np.array([1.0, 1.0, 1.0])) == [4, 3, 3]
    assert split_rewards(5, np.array([0.0, 1.0, 1.0])) == [0, 3, 2]
    assert split_rewards(7, np.array([1.0, 2.0])) == [2, 5]  # 2.33 and 4.67: the .67 gets the wei
    assert split_rewards(0, np.array([1.0, 2.0])) == [0, 0]
    assert split_rewards(10**30, np.array([0.0, 0.0])) == [0, 0]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**200),
       st.lists(st.one_of(st.just(0.0), st.floats(1e-300, 1e300)), min_size=1, max_size=40))
def test_a_split_sums_exactly_and_each_share_is_within_a_wei_of_its_proportion(
    emission: int, weight: list[float]
) -> None:
    w = np.array(weight)
    shares = split_rewards(emission, w)
    assert all(isinstance(s, int) and s >= 0 for s in shares)
    if not w.any():
        assert shares == [0] * len(w)
        return
    assert sum(shares) == emission
    exact = [emission * (x / w.sum()) for x in weight]  # float, for the tolerance only
    tolerance = 1 + emission * len(w) * 2.0**-40
    assert all(abs(s - e) <= tolerance for s, e in zip(shares, exact, strict=True))


provider_rows = st.tuples(
    st.integers(0, 10**30),  # stake in wei: zero to a trillion tokens
    st.sampled_from(["H100", "cpu", "T4", "B200"]),
    st.integers(0, 10),  # probes answered of 10
    st.one_of(st.just(float("nan")), st.floats(0, 1e5)),  # measured GFLOPS
    st.booleans(),  # challenge checksum ok
    st.integers(0, 1000), st.integers(0, 1000),  # job successes, failures
    st.integers(0, 3),  # abandoned
    st.booleans(),  # jailed
    st.integers(0, 400),  # epochs staked
)


@settings(max_examples=150, deadline=None)
@given(st.lists(provider_rows, min_size=1, max_size=25), st.floats(-0.5, 1.5),
       st.sampled_from(["1wei", "7wei", "1000", "123456789.123456789", "1e9"]))
def test_rewards_sum_exactly_to_the_emission_for_any_epoch(
    rows: list[tuple], utilization: float, per_epoch: str
) -> None:
    config: OracleConfig = tuned(CONFIG, "emission.per_epoch", _wei(per_epoch))
    stake, models, answered, measured, ok, succ, fail, lost, jailed, staked = zip(*rows, strict=True)
    n = len(rows)
    checked = [o or np.isnan(m) for o, m in zip(ok, measured, strict=True)]  # no challenge: no bad checksum
    inputs = epoch(n, stake=stake, models=models, uptime=[a / 10 for a in answered], probes=10,
                   measured=measured, challenge_ok=checked,
                   successes=succ, failures=fail, abandoned=lost, jailed=jailed, epochs_staked=staked,
                   utilization=utilization)
    scores = score_epoch(inputs, config)
    assert sum(scores.reward_wei) == scores.emission_wei
    assert all(isinstance(r, int) and r >= 0 for r in scores.reward_wei)
    if scores.eligible.any():
        assert scores.emission_wei == config.emission.emission_wei(utilization)
    else:
        assert scores.emission_wei == 0
    assert all(r == 0 for r, e in zip(scores.reward_wei, scores.eligible, strict=True) if not e)


def _wei(amount: str) -> int:
    from ledger.units import parse_amount

    return parse_amount(amount)


def test_huge_stakes_split_a_huge_emission_exactly() -> None:
    config = tuned(CONFIG, "emission.per_epoch", 10**27 + 7)
    scores = score_epoch(epoch(3, stake=[10**40, 10**40 + 1, 1]), config)
    assert sum(scores.reward_wei) == 10**27 + 7
    assert scores.reward_wei[2] < scores.reward_wei[1] <= scores.reward_wei[0] <= scores.reward_wei[1] + 1


# ── bad input ────────────────────────────────────────────────────────────────


def test_inputs_of_the_wrong_length_are_refused_naming_the_field() -> None:
    inputs = epoch(3)
    with pytest.raises(InvalidInput, match="epoch input jailed has 2 entries for 3 providers"):
        EpochInputs(**{**inputs.__dict__, "jailed": np.array([False, False])})
    with pytest.raises(InvalidInput, match=r"probe_provider holds indices outside 0\.\.2"):
        EpochInputs(**{**inputs.__dict__, "probe_provider": inputs.probe_provider + 1})
    with pytest.raises(InvalidInput, match="abandoned holds a negative count"):
        EpochInputs(**{**inputs.__dict__, "abandoned": np.array([0, -1, 0])})
    with pytest.raises(InvalidInput, match="measured_gflops holds a negative or infinite"):
        EpochInputs(**{**inputs.__dict__, "measured_gflops": np.array([1.0, -1.0, 1.0])})
