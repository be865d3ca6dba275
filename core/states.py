"""Records whose state follows a table (docs/architecture.md §5, §9): a market job, an oracle epoch.

A `Moves` table names, for each state, the states a record may move to, and under None the
states a new record may start in. Every move is checked against it before anything changes, so
no path through the code that writes a record can take it where its table does not lead; one
that tries is a bug, refused with `IllegalMove` in a sentence naming the record and both states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from core.errors import Fault

S = TypeVar("S", bound=StrEnum)


class IllegalMove(Fault):
    """A move its table does not name: a bug in the code that asked for it, or a row edited by hand."""


@dataclass(frozen=True)
class Moves(Generic[S]):
    """The moves a kind of record may make: `table[before]` is where a record in `before` may go."""

    noun: str  # what one record is called in a message: "job", "epoch"
    name: str  # where the table is written, for the message: "market.records.MARKET_MOVES"
    states: type[S]
    table: Mapping[S | None, frozenset[S]]

    def allows(self, before: str | None, after: str) -> bool:
        """Whether a record in `before` (None: a new record) may move to `after`."""
        try:
            start = None if before is None else self.states(before)
            return self.states(after) in self.table.get(start, frozenset())
        except ValueError:  # a state the enum does not know
            return False

    def check(self, key: int, before: str | None, after: str) -> None:
        """Refuses, with `IllegalMove`, a move the table does not name; `key` says which record."""
        if self.allows(before, after):
            return
        move = f"start as {after}" if before is None else f"move from {before} to {after}"
        raise IllegalMove(f"{self.noun} {key} cannot {move}: {self.name} has no such move.")

    def moves(self) -> frozenset[tuple[S | None, S]]:
        """Every move the table names, as (before, after) pairs."""
        return frozenset((before, after) for before, afters in self.table.items() for after in afters)
