"""The tree shows the architecture (docs/architecture.md §1): dependencies run one way,
`scripts, dashboard → market, oracle, provider → wire → compute, ledger → anvil → core`, and the
local network of sites and the demo (`devnet`) are outside the production packages.

Every import of every module counts, those inside functions and under TYPE_CHECKING too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "anvil", "ledger", "compute", "wire", "provider", "market", "oracle", "dashboard",
            "scripts", "devnet")
# What each package may import of Swarm's own, besides itself.
MAY_IMPORT = {
    "core": set(),  # the error family and the hardware's names, below everything
    "anvil": {"core"},
    "ledger": {"core", "anvil"},  # anvil: the devnet's accounts and node, behind the chain client
    "compute": {"core"},  # knows nothing of chains, sites or markets
    "wire": {"core", "compute", "ledger"},  # how a site is reached: what the market, oracle and buyers use
    "provider": {"core", "compute", "ledger", "wire"},  # compute's job contract, never the market's spec
    "market": {"core", "compute", "ledger", "wire"},  # never the site's server
    "oracle": {"core", "compute", "ledger", "wire"},
    "dashboard": {"core", "compute", "ledger", "market", "oracle", "wire"},
    "devnet": {"core", "anvil", "compute", "ledger", "market", "oracle", "provider", "wire"},
    "scripts": {"core", "anvil", "compute", "ledger", "market", "oracle", "provider", "wire", "dashboard",
                "devnet"},
}


def imported_packages(path: Path) -> set[str]:
    """The Swarm packages `path` imports, at any depth of the module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {name.split(".")[0] for name in names} & set(PACKAGES)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    wrong = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        extra = imported_packages(path) - {package} - MAY_IMPORT[package]
        if extra:
            wrong[str(path.relative_to(ROOT))] = sorted(extra)
    assert wrong == {}, f"imports against the layering: {wrong}"

