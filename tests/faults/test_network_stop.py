"""The fault suite's network (tests/faults/network.py) stopped after its start failed part-way: it
stops what it got to start, and the error that ended the start is the one the test reports.
The start fails for real, at its first step: anvil's keeper runs a binary that exits at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.starting import ExitedWhileStarting
from tests.faults.network import Network

pytestmark = pytest.mark.light


@pytest.fixture
def broken_anvil(monkeypatch: pytest.MonkeyPatch) -> None:
    """anvil, as `AnvilNode` finds it, is a program that exits with status 1 and says nothing."""
    monkeypatch.setenv("SWARM_ANVIL_BIN", "/bin/false")


def _run_as_the_suite_does(network: Network) -> None:
    try:
        network.start()
    finally:
        network.stop()


def test_a_network_that_failed_to_start_reports_its_first_error(tmp_path: Path, broken_anvil) -> None:
    network = Network(tmp_path, seed=1)
    with pytest.raises(ExitedWhileStarting) as caught:
        _run_as_the_suite_does(network)
    assert caught.value.what == "the local anvil" and caught.value.returncode == 1
    assert str(tmp_path / "home" / "anvil" / "anvil.log") in str(caught.value)
    assert not getattr(caught.value, "__notes__", None), "the stop had nothing to add"
    assert network.anvil is not None and network.anvil.status().running is False
    assert not network.anvil.pid_file.exists()


def test_a_stop_that_fails_too_is_a_note_on_the_first_error(tmp_path: Path, broken_anvil) -> None:
    network = Network(tmp_path, seed=1)
    network.home.mkdir(parents=True)
    (network.home / "sites.json").write_text("[{torn")  # the list of sites the stop reads
    with pytest.raises(ExitedWhileStarting) as caught:
        _run_as_the_suite_does(network)
    (note,) = caught.value.__notes__
    assert note.startswith("stopping the network failed too: JSONDecodeError")
    assert network.anvil is not None and not network.anvil.pid_file.exists(), "the parts after it stopped"


def test_a_stop_that_fails_with_no_error_on_its_way_raises_its_own(tmp_path: Path) -> None:
    network = Network(tmp_path, seed=1)
    network.home.mkdir(parents=True)
    (network.home / "sites.json").write_text("[{torn")
    with pytest.raises(json.JSONDecodeError):
        network.stop()
