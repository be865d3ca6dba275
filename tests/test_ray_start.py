"""Whether a failed Ray start is worth one more try (compute.node.RayStart, as a lease's worker
starts its own Ray): decided by the class of the error Ray raised and by whether the raylet that
start left still runs, never by the error's text. The raylets here are real processes by that
name (a copy of `sleep`), since Ray's own takes 30 s of a loaded machine to miss its deadline."""

from __future__ import annotations

import inspect
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from compute.node import RayStart

pytestmark = pytest.mark.light

# What Ray raises when its raylet misses its deadline, with its class and its words.
RAYS_TIMEOUT = Exception("The current node timed out during startup. This could happen because some of the "
                         "raylet failed to startup or the GCS has become overloaded.")


@pytest.fixture
def programs(tmp_path: Path) -> Iterator[dict[str, subprocess.Popen]]:
    """Starts processes named as Ray's are (`raylet`, `gcs_server`), each killed at the test's end."""
    started: dict[str, subprocess.Popen] = {}

    def start(name: str, seconds: float = 60) -> subprocess.Popen:
        binary = tmp_path / name
        if not binary.exists():
            shutil.copy(shutil.which("sleep") or "/bin/sleep", binary)
        started[f"{name}-{len(started)}"] = process = subprocess.Popen([str(binary), str(seconds)])
        return process

    yield start  # type: ignore[misc]
    for process in started.values():
        if process.poll() is None:
            process.kill()
        process.wait()


def test_rays_deadline_passing_while_its_raylet_still_starts_is_a_slow_start(programs) -> None:
    start = RayStart()
    raylet = programs("raylet")
    assert psutil.Process(raylet.pid).name() == "raylet"
    assert start.slow(RAYS_TIMEOUT) is True


def test_another_class_of_error_is_not_a_slow_start_whatever_its_text(programs) -> None:
    start = RayStart()
    programs("raylet")
    for error in (RuntimeError(str(RAYS_TIMEOUT)), ConnectionError(str(RAYS_TIMEOUT)), TimeoutError("slow"),
                  ValueError("num_cpus must be positive")):
        assert start.slow(error) is False, error


def test_a_raylet_that_exited_is_a_broken_start_not_a_slow_one(programs) -> None:
    start = RayStart()
    raylet = programs("raylet", 0)
    raylet.wait()
    assert start.slow(RAYS_TIMEOUT) is False


def test_a_raylet_running_before_the_attempt_is_not_the_attempts(programs) -> None:
    programs("raylet")  # a Ray of this process that started earlier, and still runs
    start = RayStart()
    assert start.slow(RAYS_TIMEOUT) is False


def test_stopping_an_attempt_kills_what_it_left_and_only_that(programs) -> None:
    earlier = programs("raylet")
    start = RayStart()
    left = [programs("gcs_server"), programs("raylet")]
    start.stop()  # returns once they have ended, reaped
    assert not [p.pid for p in left if psutil.pid_exists(p.pid)]
    assert earlier.poll() is None, "what ran before the attempt is not the attempt's to stop"


@pytest.mark.ray
def test_ray_raises_a_bare_exception_when_its_raylet_misses_its_deadline() -> None:
    """The class `RayStart.slow` looks for, as the installed Ray raises it: a change of Ray's fails
    this test rather than the retry going quiet."""
    from ray._private import node

    source = inspect.getsource(node.Node.__init__)
    assert re.search(r'raise Exception\(\s*"The current node timed out during startup', source), \
        "Ray's start deadline raises something else now: update compute.node.RayStart.slow"
    assert re.search(r"raylet_start_wait_time_s = 30\b", source), "Ray's deadline for its raylet changed"
