"""Column types for chain values: uint256 amounts exactly on both databases."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Numeric, String
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

UINT256_DIGITS = 78  # len(str(2**256 - 1))


class Uint256(TypeDecorator):
    """A non-negative integer up to 2**256 − 1, stored without loss.

    PostgreSQL: NUMERIC(78, 0). SQLite has no exact type that wide (its integers stop
    at 2**63 and NUMERIC falls back to floats), so there it is zero-padded decimal
    text: equal width keeps ORDER BY and comparisons with bound values correct.
    """

    impl = Numeric(UINT256_DIGITS, 0)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(UINT256_DIGITS))
        return dialect.type_descriptor(Numeric(UINT256_DIGITS, 0))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        value = int(value)
        if dialect.name == "sqlite":
            return f"{value:0{UINT256_DIGITS}d}"
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> int | None:
        return None if value is None else int(value)

    def coerce_compared_value(self, op: Any, value: Any) -> TypeEngine[Any]:
        return self  # compare with bound ints through the same padding
