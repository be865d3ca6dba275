"""`make test-contracts` and `make snapshot` fail when a contract test fails: forge's exit
code must reach make (and so CI). Each test plants a Foundry test in a copy of the contracts
project that holds nothing else, so forge compiles one small file."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PLANTED = """// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

contract PlantedTest {{
    function test_planted() public pure {{
        require({condition}, "planted assertion");
    }}
}}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A repository with the real Makefile, toolchain and foundry.toml, and no contracts."""
    if not (ROOT / "node_modules" / ".swarm-installed").exists():
        pytest.fail("node_modules is not installed; run `make install` first.")
    for name in ("Makefile", "package.json", "package-lock.json"):
        shutil.copy2(ROOT / name, tmp_path / name)  # mtimes kept: the npm stamp stays newer
    (tmp_path / "node_modules").symlink_to(ROOT / "node_modules")
    contracts = tmp_path / "contracts"
    (contracts / "src").mkdir(parents=True)
    (contracts / "test").mkdir()
    for name in ("foundry.toml", "foundry", "solc"):
        shutil.copy2(ROOT / "contracts" / name, contracts / name)
    return tmp_path


def plant(project: Path, passes: bool) -> None:
    test = project / "contracts" / "test" / "Planted.t.sol"
    test.write_text(PLANTED.format(condition="true" if passes else "false"))


def make(project: Path, target: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    return subprocess.run(
        # -o: never remake the npm stamp here, whose node_modules is the real checkout's.
        ["make", "--no-print-directory", "-o", "node_modules/.swarm-installed", "-C", str(project), target],
        check=False, capture_output=True, text=True, env=env, timeout=300,
    )


@pytest.mark.parametrize("target", ["test-contracts", "snapshot"])
def test_a_failing_contract_test_fails_the_make_target(project: Path, target: str) -> None:
    plant(project, passes=False)
    done = make(project, target)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "test_planted" in output and "planted assertion" in output, output


def test_the_same_planted_test_passing_lets_make_test_contracts_pass(project: Path) -> None:
    plant(project, passes=True)
    done = make(project, "test-contracts")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "[PASS] test_planted()" in output, output
