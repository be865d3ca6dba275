"""The batch tuner that adapts `@serve.batch` to load (compute.serving.BatchTuner), driven by
batches of every size: its size and wait stay within their bounds, batches that close full
grow it to the cap, and lone requests bring the wait down to its floor."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from compute.serving import BatchTuner


@given(cap=st.integers(1, 1024), max_wait=st.floats(0.0, 1.0),
       batches=st.lists(st.integers(1, 1024), max_size=200))
def test_the_size_and_wait_stay_within_their_bounds(cap: int, max_wait: float, batches: list[int]) -> None:
    tuner = BatchTuner(cap, max_wait)
    for batch in batches:
        size, wait = tuner.observe(min(batch, tuner.size))  # a batch never holds more than its size
        assert 1 <= size <= cap
        assert min(tuner.min_wait_s, max_wait) <= wait <= max_wait


@given(cap=st.integers(8, 1024))
def test_full_batches_grow_the_size_to_the_cap(cap: int) -> None:
    tuner = BatchTuner(cap, 0.01)
    for _ in range(200):
        tuner.observe(tuner.size)
    assert tuner.size == cap


def test_lone_requests_bring_the_wait_to_its_floor_and_a_burst_brings_it_back() -> None:
    tuner = BatchTuner(32, 0.01)
    for _ in range(100):
        tuner.observe(1)
    assert tuner.wait_s == tuner.min_wait_s and tuner.size <= 2
    for _ in range(100):
        tuner.observe(tuner.size)
    assert tuner.size == 32 and tuner.wait_s > tuner.min_wait_s
