"""The oracle's config: packaged defaults, partial overrides, exact emission, and one-sentence errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ledger.errors import InvalidInput, SwarmError
from ledger.units import ONE
from oracle.config import PACKAGED, load_config


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "oracle.toml"
    path.write_text(text)
    return path


def test_the_packaged_defaults_load_with_the_documented_values() -> None:
    config = load_config()
    assert config.epoch.length_s == 3600 and config.epoch.devnet_length_s == 30
    assert config.epoch.probe_interval_s == 10 and config.epoch.devnet_probe_interval_s == 3
    assert config.emission.per_epoch == 1000 * ONE and config.emission.min_fraction == 0.2
    assert (config.eligibility.min_uptime, config.eligibility.min_performance) == (0.8, 0.5)
    assert (config.reliability.prior_successes, config.reliability.prior_failures) == (4.0, 1.0)
    assert config.slashing.fraud.tombstone and config.slashing.fraud.bps == config.slashing.max_bps == 5000
    assert config.slashing.misrepresentation.below_ratio == 0.5
    assert config.slashing.correlation.threshold == 0.1
    assert (config.canary.requests, config.canary.deposit, config.canary.max_price) == (4, ONE, ONE // 100)


def test_a_file_overrides_only_the_keys_it_sets(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, '[emission]\nper_epoch = "2.5"\n[slashing.downtime]\nbps = 25\n'))
    defaults = load_config()
    assert config.emission.per_epoch == 25 * ONE // 10
    assert config.emission.min_fraction == defaults.emission.min_fraction
    assert config.slashing.downtime.bps == 25
    assert config.slashing.downtime.jail_epochs == defaults.slashing.downtime.jail_epochs
    assert config.weights == defaults.weights


def test_the_devnet_timing_is_short_and_its_challenge_small() -> None:
    epoch = load_config().epoch
    devnet, real = epoch.timing(devnet=True), epoch.timing()
    assert (devnet.length_s, devnet.probe_interval_s) == (30, 3)
    assert (real.length_s, real.probe_interval_s) == (3600, 10)
    # ≈ 1 s on one CPU core at the ~70 GFLOPS this machine measures (BENCHMARKS.md).
    assert 2 * devnet.challenge_size**3 * devnet.challenge_rounds <= 80e9
    assert devnet.probe_timeout_s <= devnet.probe_interval_s


@pytest.mark.parametrize(
    ("utilization", "tokens"),
    [(0.0, 200), (1.0, 1000), (0.5, 600), (0.3, 440), (-1.0, 200), (7.0, 1000)],
)
def test_emission_scales_with_utilization_in_exact_wei(utilization: float, tokens: int) -> None:
    assert load_config().emission.emission_wei(utilization) == tokens * ONE


def test_emission_floors_to_whole_wei(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, '[emission]\nper_epoch = "10wei"\nmin_fraction = 0.0\n'))
    assert config.emission.emission_wei(1 / 3) == 3  # 10 × 0.3333333333333333 floors to 3, exactly


def test_an_unknown_utilization_is_refused() -> None:
    with pytest.raises(InvalidInput, match="utilization must be a number from 0 to 1"):
        load_config().emission.emission_wei(math.nan)


@pytest.mark.parametrize(
    ("text", "key", "allowed"),
    [
        ("[slashing.downtime]\nbps = 20000\n", "slashing.downtime.bps = 20000",
         "less than or equal to 10000"),
        ("[slashing.downtime]\nbps = -1\n", "slashing.downtime.bps = -1", "greater than or equal to 0"),
        ("[slashing]\nmax_bps = 100\n", "slashing.fraud.bps = 5000", "at most slashing.max_bps (100)"),
        ("[slashing.abandonment]\nmax_bps = 10\n", "slashing.abandonment.max_bps = 10", "at least bps (50)"),
        ("[slashing.fraud]\ntombstone = 1\n", "slashing.fraud.tombstone = 1", "a valid boolean"),
        ("[slashing.correlation]\nthreshold = 1.5\n", "slashing.correlation.threshold = 1.5",
         "less than or equal to 1"),
        ("[weights]\nuptime = -0.5\n", "weights.uptime = -0.5", "greater than or equal to 0"),
        ("[weights]\nloyalty_ramp_epochs = 0\n", "weights.loyalty_ramp_epochs = 0",
         "greater than or equal to 1"),
        ("[reliability]\nquantile = 1.0\n", "reliability.quantile = 1.0", "less than 1"),
        ("[eligibility]\nmin_uptime = 2\n", "eligibility.min_uptime = 2", "less than or equal to 1"),
        ('[emission]\nper_epoch = "lots"\n', 'emission.per_epoch = "lots"', "positive token amount"),
        ("[emission]\nper_epoch = 5.5\n", "emission.per_epoch = 5.5", "written as a string"),
        ("[canary]\nrequests = 0\n", "canary.requests = 0", "greater than or equal to 1"),
        ('[canary]\nmax_price = "-1"\n', 'canary.max_price = "-1"', "positive token amount"),
        ("[epoch]\nprobe_timeout_s = 50\n", "epoch.probe_timeout_s = 50", "at most probe_interval_s (10)"),
        ("[epoch]\nchallenge_size = 70000\n", "epoch.challenge_size = 70000", "less than or equal to 65535"),
        ("[epoch]\ngpu_challenge_s = 61.0\n", "epoch.gpu_challenge_s = 61.0",
         "at most half of challenge_timeout_s (120)"),
        ("[epoch]\nlength_s = \"1h\"\n", 'epoch.length_s = "1h"', "a valid integer"),
        ("epoch = 5\n", "epoch = 5", "a table, [epoch]"),
        ("[slashing.downtime]\nbpz = 1\n", "slashing.downtime.bpz is not a known key",
         "[slashing.downtime] allows bps, jail_epochs, tombstone, recovery, below_uptime"),
        ('[emissions]\nper_epoch = "1"\n', "emissions is not a known key",
         "the top level allows epoch, emission"),
    ],
)
def test_a_bad_value_is_one_sentence_naming_the_file_the_key_and_what_is_allowed(
    tmp_path: Path, text: str, key: str, allowed: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InvalidInput) as raised:
        load_config(path)
    message = str(raised.value)
    assert isinstance(raised.value, SwarmError)
    assert message.startswith(f"In {path}, {key}"), message
    assert allowed in message, message
    assert "\n" not in message and message.endswith(".") and ". " not in message, message


def test_a_file_that_is_not_toml_is_refused_with_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "[epoch\nlength_s = 1\n")
    with pytest.raises(InvalidInput, match=rf"Oracle config file {path} is not valid TOML \(.*line 1"):
        load_config(path)


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=f"Oracle config file {tmp_path / 'nope.toml'} does not exist"):
        load_config(tmp_path / "nope.toml")


def test_the_config_is_frozen() -> None:
    config = load_config()
    with pytest.raises(Exception, match="frozen"):
        config.slashing.downtime.bps = 1


def test_the_correlation_multiplier_starts_above_the_threshold_and_is_capped() -> None:
    c = load_config().slashing.correlation  # threshold 0.1, factor 5, max 3
    assert c.multiplier(0.0) == c.multiplier(0.1) == 1.0
    assert c.multiplier(0.2) == pytest.approx(2.0)
    assert c.multiplier(0.4) == c.multiplier(1.0) == 3.0


def test_the_packaged_file_is_named_in_errors_about_it() -> None:
    assert PACKAGED == "oracle/config.toml"
    assert (Path(__file__).resolve().parents[1] / PACKAGED).is_file()
