"""Where a job's work runs: on its provider's nodes as Ray tasks (the default), or `in_place`,
in the caller's own process.

A lease is such a process: its sandbox on the node the site placed it on, holding the devices
the job may use, timed and stopped from outside, with no Ray of its own to start for one task.
The dispatcher (`compute.dispatch`) decides what may run in place; the runners ask
`in_place_provider` where they are. Nothing here imports Swarm or Ray."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_IN_PLACE: ContextVar[str | None] = ContextVar("swarm_in_place", default=None)


@contextmanager
def in_place(provider: str) -> Iterator[None]:
    """Within it, a job that runs in one process (`compute.dispatch.runs_in_place`) runs its work
    in this process, not as Ray work pinned to `provider`'s nodes: for a process that already runs
    on one of them, holding what the job may use, and that something outside stops at the job's
    time."""
    token = _IN_PLACE.set(provider)
    try:
        yield
    finally:
        _IN_PLACE.reset(token)


def in_place_provider() -> str | None:
    """The provider whose node this process is, within `in_place`; None elsewhere."""
    return _IN_PLACE.get()
