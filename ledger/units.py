"""Token amounts and addresses as users type them, checked before anything is sent."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation, localcontext

from ledger.abi import is_hex_address, to_checksum_address
from ledger.errors import InvalidInput

DECIMALS = 18
ONE = 10**DECIMALS
SYMBOL = "SWARM"


def parse_amount(text: str | float | Decimal, what: str = "amount") -> int:
    """'1000', '0.5' or '2e3' tokens (or '123wei') into wei; must be positive."""
    raw = str(text).strip().replace("_", "").replace(",", "")
    try:
        if raw.lower().endswith("wei"):
            wei = int(raw[:-3])
        else:
            with localcontext() as ctx:
                ctx.prec = 100  # exact for any uint256 amount
                value = Decimal(raw.removesuffix(SYMBOL).strip())
                if not value.is_finite():
                    raise InvalidOperation
                scaled = value * ONE
                if scaled != scaled.to_integral_value():
                    raise InvalidInput(f"{what} {text!r} has more than {DECIMALS} decimal places; round it.")
                wei = int(scaled)
    except (InvalidOperation, ValueError):
        raise InvalidInput(f"{what} {text!r} is not a number; give tokens like 1000 or 0.5.") from None
    if wei <= 0:
        raise InvalidInput(f"{what} must be greater than zero, got {text!r}.")
    return wei


def format_amount(wei: int) -> str:
    """Wei as tokens, e.g. 1500000000000000000000 → '1,500 SWARM'."""
    whole, frac = divmod(int(wei), ONE)
    text = f"{whole:,}"
    if frac:
        text += ("." + f"{frac:018d}").rstrip("0")
    return f"{text} {SYMBOL}"


def parse_address(text: str, what: str = "address") -> str:
    """A 0x address into its checksummed form; a malformed one is refused."""
    raw = str(text).strip()
    if len(raw) == 40 and not raw.startswith(("0x", "0X")):
        raw = "0x" + raw
    if not is_hex_address(raw):
        raise InvalidInput(f"{what} {text!r} is not an Ethereum address; give 0x followed by 40 hex digits.")
    checksummed = to_checksum_address(raw)
    digits = raw[2:]
    if digits != digits.lower() and digits != digits.upper() and raw[2:] != checksummed[2:]:
        raise InvalidInput(f"{what} {text!r} has a bad checksum (mixed case); check it for a typo.")
    return checksummed


def when(timestamp: int) -> str:
    """A chain time as UTC text."""
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timestamp))


def duration(seconds: int) -> str:
    """Seconds as `2h 5m`, `3m 10s` or `42s`."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m" if hours else (f"{minutes}m {secs}s" if minutes else f"{secs}s")
