"""The oracle's parameters, read once from one TOML file into frozen, checked models.

The packaged `oracle/config.toml` holds every default, with a comment for each. A file the
operator gives overrides only the keys it sets. A bad file or value is refused with one
sentence naming the file, the key (`slashing.downtime.bps`) and what is allowed.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ledger.errors import InvalidInput
from ledger.units import parse_amount

PACKAGED = "oracle/config.toml"
BPS = 10_000
# compute.challenge.MAX_SIZE, restated so reading the config does not import torch and Ray:
# every sum of a row·column product of entries in 0..16 must stay below 2^24.
MAX_CHALLENGE_SIZE = (1 << 24) // (16 * 16) - 1

Fraction01 = Annotated[float, Field(ge=0.0, le=1.0)]
Bps = Annotated[int, Field(ge=0, le=BPS)]
Exponent = Annotated[float, Field(ge=0.0, le=10.0)]


class _BlamedKey(ValueError):
    """A check across fields, raised at a section but blamed on the key `loc` below it."""

    def __init__(self, loc: tuple[str, ...], value: Any, message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.value = value


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


def _at_most(info: ValidationInfo, value: float, other: str) -> float:
    """Checks value ≤ the already-validated field `other` of the same section."""
    bound = info.data.get(other)
    if bound is not None and value > bound:
        raise ValueError(f"it must be at most {other} ({bound:g})")
    return value


@dataclass(frozen=True)
class EpochTiming:
    """The epoch's clock and challenge size for one kind of network (devnet or not)."""

    length_s: float
    probe_interval_s: float
    probe_timeout_s: float
    challenge_size: int
    challenge_rounds: int
    challenge_timeout_s: float
    gpu_challenge_size: int = 8192
    gpu_challenge_s: float = 2.0


class EpochConfig(_Section):
    length_s: int = Field(ge=1)
    devnet_length_s: int = Field(ge=1)
    probe_interval_s: float = Field(gt=0)
    devnet_probe_interval_s: float = Field(gt=0)
    probe_timeout_s: float = Field(gt=0)
    devnet_probe_timeout_s: float = Field(gt=0)
    challenge_size: int = Field(ge=1, le=MAX_CHALLENGE_SIZE)
    challenge_rounds: int = Field(ge=1)
    challenge_timeout_s: float = Field(gt=0)
    devnet_challenge_size: int = Field(ge=1, le=MAX_CHALLENGE_SIZE)
    devnet_challenge_rounds: int = Field(ge=1)
    devnet_challenge_timeout_s: float = Field(gt=0)
    gpu_challenge_size: int = Field(ge=1, le=MAX_CHALLENGE_SIZE)
    gpu_challenge_s: float = Field(gt=0)

    @field_validator("gpu_challenge_s")
    @classmethod
    def _gpu_challenge_within_timeout(cls, value: float, info: ValidationInfo) -> float:
        # A GPU at half its reference, flagged but not late, must still answer within the timeout.
        bound = info.data.get("challenge_timeout_s")
        if bound is not None and 2 * value > bound:
            raise ValueError(f"it must be at most half of challenge_timeout_s ({bound:g})")
        return value

    @field_validator("probe_interval_s")
    @classmethod
    def _probe_within_epoch(cls, value: float, info: ValidationInfo) -> float:
        return _at_most(info, value, "length_s")

    @field_validator("devnet_probe_interval_s")
    @classmethod
    def _devnet_probe_within_epoch(cls, value: float, info: ValidationInfo) -> float:
        return _at_most(info, value, "devnet_length_s")

    @field_validator("probe_timeout_s")
    @classmethod
    def _timeout_within_interval(cls, value: float, info: ValidationInfo) -> float:
        return _at_most(info, value, "probe_interval_s")

    @field_validator("devnet_probe_timeout_s")
    @classmethod
    def _devnet_timeout_within_interval(cls, value: float, info: ValidationInfo) -> float:
        return _at_most(info, value, "devnet_probe_interval_s")

    def timing(self, devnet: bool = False) -> EpochTiming:
        if devnet:
            return EpochTiming(self.devnet_length_s, self.devnet_probe_interval_s,
                               self.devnet_probe_timeout_s, self.devnet_challenge_size,
                               self.devnet_challenge_rounds, self.devnet_challenge_timeout_s,
                               self.gpu_challenge_size, self.gpu_challenge_s)
        return EpochTiming(self.length_s, self.probe_interval_s, self.probe_timeout_s,
                           self.challenge_size, self.challenge_rounds, self.challenge_timeout_s,
                           self.gpu_challenge_size, self.gpu_challenge_s)


class EmissionConfig(_Section):
    per_epoch: int  # wei, from a decimal token amount such as "1000"
    min_fraction: Fraction01

    @field_validator("per_epoch", mode="before")
    @classmethod
    def _tokens(cls, value: Any) -> int:
        return _token_amount(value)

    def emission_wei(self, utilization: float) -> int:
        """floor(per_epoch × (min_fraction + (1 − min_fraction) × clamp(utilization, 0, 1))), exactly."""
        if not math.isfinite(utilization):
            raise InvalidInput(f"utilization must be a number from 0 to 1, got {utilization!r}.")
        u = min(max(_exact(utilization), Fraction(0)), Fraction(1))
        floor = _exact(self.min_fraction)
        return math.floor(self.per_epoch * (floor + (1 - floor) * u))


def _token_amount(value: Any) -> int:
    """A token amount written as a string ("1000", "0.5"), in wei."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        # pydantic turns a ValueError, not a TypeError, into the field's error sentence
        raise ValueError('it must be a token amount written as a string, such as "1000" or "0.5"')  # noqa: TRY004
    try:
        return parse_amount(value, "amount")
    except InvalidInput:
        raise ValueError(
            'it must be a positive token amount with at most 18 decimals, such as "1000"'
        ) from None


def _exact(x: float) -> Fraction:
    """The decimal a float was written as (0.2 → 1/5), not its binary approximation."""
    return Fraction(repr(float(x)))


class EligibilityConfig(_Section):
    min_uptime: Fraction01
    min_performance: float = Field(ge=0.0, le=10.0)


class WeightsConfig(_Section):
    stake: Exponent
    uptime: Exponent
    performance: Exponent
    reliability: Exponent
    loyalty_start: Fraction01
    loyalty_ramp_epochs: int = Field(ge=1)
    performance_cap: float = Field(ge=1.0, le=100.0)


class ReliabilityConfig(_Section):
    prior_successes: float = Field(gt=0.0)
    prior_failures: float = Field(gt=0.0)
    quantile: float = Field(gt=0.0, lt=1.0)


class SlashRow(_Section):
    """One row of the slashing matrix: how much, how long in jail, and the way back."""

    bps: Bps
    jail_epochs: int = Field(ge=0)
    tombstone: bool
    recovery: str = Field(min_length=1)


class DowntimeRow(SlashRow):
    below_uptime: Fraction01
    min_samples: int = Field(ge=1)  # fewer probes than this in an epoch prove nothing either way


class AbandonmentRow(SlashRow):
    max_bps: Bps  # bps is per abandoned job; this caps the epoch's total

    @field_validator("max_bps")
    @classmethod
    def _cap_covers_one_job(cls, value: int, info: ValidationInfo) -> int:
        bps = info.data.get("bps")
        if bps is not None and value < bps:
            raise ValueError(f"it must be at least bps ({bps}), the slash for one abandoned job")
        return value


class MisrepresentationRow(SlashRow):
    below_ratio: Fraction01


class FraudRow(SlashRow):
    pass


class CorrelationConfig(_Section):
    threshold: Fraction01
    factor: float = Field(ge=0.0, le=100.0)
    max_multiplier: float = Field(ge=1.0, le=10.0)

    def multiplier(self, fraction_hit: float) -> float:
        """The factor on correlated slashes when `fraction_hit` of the providers were hit."""
        if fraction_hit <= self.threshold:
            return 1.0
        return min(self.max_multiplier, 1.0 + self.factor * fraction_hit)


class SlashingConfig(_Section):
    max_bps: int = Field(ge=1, le=BPS)
    downtime: DowntimeRow
    abandonment: AbandonmentRow
    misrepresentation: MisrepresentationRow
    fraud: FraudRow
    correlation: CorrelationConfig

    @model_validator(mode="after")
    def _rows_within_cap(self) -> SlashingConfig:
        for name in ("fraud", "misrepresentation", "abandonment", "downtime"):
            row = getattr(self, name)
            for key in ("bps", "max_bps"):
                value = getattr(row, key, 0)
                if value > self.max_bps:
                    raise _BlamedKey((name, key), value,
                                    f"it must be at most slashing.max_bps ({self.max_bps}), the vault's cap")
        return self

    def row(self, name: str) -> SlashRow:
        return getattr(self, name)


class CanaryConfig(_Section):
    """The oracle's canary requests to serving leases (oracle/canaries.py)."""

    requests: int = Field(ge=1, le=64)  # a lease's canary calls an epoch
    deposit: int  # wei the oracle adds to its deposit for a provider when it runs low
    max_price: int  # wei: the most one canary call may cost; a lease priced above is left unchecked

    @field_validator("deposit", "max_price", mode="before")
    @classmethod
    def _tokens(cls, value: Any) -> int:
        return _token_amount(value)


class OracleConfig(_Section):
    epoch: EpochConfig
    emission: EmissionConfig
    eligibility: EligibilityConfig
    weights: WeightsConfig
    reliability: ReliabilityConfig
    slashing: SlashingConfig
    canary: CanaryConfig


def load_config(path: Path | None = None) -> OracleConfig:
    """The packaged defaults, with the keys of the TOML file at `path` (if any) over them."""
    defaults = tomllib.loads(resources.files("oracle").joinpath("config.toml").read_text(encoding="utf-8"))
    source = PACKAGED if path is None else str(path)
    data = defaults if path is None else _merge(defaults, _read(Path(path)))
    try:
        return OracleConfig.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(_sentence(source, exc.errors()[0])) from None


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise InvalidInput(f"Oracle config file {path} does not exist; give the path of a TOML file "
                           f"laid out like {PACKAGED}.") from None
    except OSError as exc:
        raise InvalidInput(
            f"Oracle config file {path} cannot be read ({exc.strerror}); check the path."
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            f"Oracle config file {path} is not valid TOML ({exc}); fix the syntax there."
        ) from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _sentence(source: str, error: Mapping[str, Any]) -> str:
    """One pydantic error as one sentence: file, dotted key, value and what is allowed."""
    loc = tuple(str(p) for p in error["loc"])
    value = error.get("input")
    cause = (error.get("ctx") or {}).get("error")
    reason = error["msg"]
    if isinstance(cause, _BlamedKey):
        loc, value = loc + cause.loc, cause.value
    if isinstance(cause, ValueError):
        reason = str(cause)
    key = ".".join(loc)
    if error["type"] == "extra_forbidden":
        allowed = ", ".join(_keys_at(loc[:-1]))
        where = f"[{'.'.join(loc[:-1])}]" if len(loc) > 1 else "the top level"
        return f"In {source}, {key} is not a known key; {where} allows {allowed}."
    if error["type"] == "missing":
        return f"In {source}, {key} is missing; set it as in {PACKAGED}."
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        reason = f"it must be a table, [{key}]"
    reason = reason.replace("Input should", "it must", 1)
    if isinstance(value, dict):
        return f"In {source}, {key} is not allowed: {reason}."
    return f"In {source}, {key} = {_toml(value)} is not allowed: {reason}."


def _keys_at(loc: tuple[str, ...]) -> list[str]:
    model: type[BaseModel] = OracleConfig
    for part in loc:
        annotation = model.model_fields[part].annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    return repr(value)
