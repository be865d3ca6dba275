"""Amounts and addresses as users type them."""

from __future__ import annotations

from decimal import Decimal, localcontext

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.errors import InvalidInput
from ledger.units import ONE, format_amount, parse_address, parse_amount


@given(st.integers(min_value=1, max_value=10**30))
def test_format_then_parse_is_the_identity(wei: int) -> None:
    assert parse_amount(format_amount(wei)) == wei


@given(st.decimals(min_value=Decimal("0.000000000000000001"), max_value=Decimal(10**12), places=18))
def test_decimal_tokens_become_exact_wei(value: Decimal) -> None:
    with localcontext() as ctx:
        ctx.prec = 60
        expected = int(value * ONE)
    assert parse_amount(str(value)) == expected


@pytest.mark.parametrize("text", ["0", "-5", "0.0", "0wei"])
def test_non_positive_amounts_are_refused(text: str) -> None:
    with pytest.raises(InvalidInput, match="must be greater than zero"):
        parse_amount(text)


@pytest.mark.parametrize("text", ["ten", "1e", "nan", "inf", ""])
def test_non_numbers_are_refused(text: str) -> None:
    with pytest.raises(InvalidInput, match="is not a number"):
        parse_amount(text)


def test_too_many_decimals_are_refused() -> None:
    with pytest.raises(InvalidInput, match="more than 18 decimal places"):
        parse_amount("0.0000000000000000001")


def test_addresses_are_checksummed_and_bad_ones_refused() -> None:
    lower = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8"
    assert parse_address(lower) == "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
    with pytest.raises(InvalidInput, match="bad checksum"):
        parse_address("0x70997970C51812dc3A010C7d01b50e0d17dc79c8")
    with pytest.raises(InvalidInput, match="not an Ethereum address"):
        parse_address("0x7099")
