"""The tree shows the architecture (docs/architecture.md §1): dependencies run one way,
`scripts, dashboard → market, oracle, provider → compute, ledger → anvil`, and the local
network of sites and the demo (`devnet`) are outside the production packages.

Every import of every module counts, those inside functions and under TYPE_CHECKING too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("anvil", "ledger", "compute", "provider", "market", "oracle", "dashboard", "scripts", "devnet")
# What each package may import of Swarm's own, besides itself.
MAY_IMPORT = {
    "anvil": set(),
    "ledger": {"anvil"},  # the devnet's accounts and node, behind the chain client
    "compute": set(),  # knows nothing of chains, sites or markets
    "provider": {"compute", "ledger"},  # the site reads compute's job contract, never the market's spec
    "market": {"compute", "ledger", "provider"},  # provider: the pinning client that reaches the sites
    "oracle": {"compute", "ledger", "provider"},
    "dashboard": {"compute", "ledger", "market", "oracle", "provider"},
    "devnet": {"anvil", "compute", "ledger", "market", "oracle", "provider"},
    "scripts": {"anvil", "compute", "ledger", "market", "oracle", "provider", "dashboard", "devnet"},
}

# Alembic's environment compares every package's tables with the migrations when run by hand
# (`alembic check`); upgrades from ledger.db import neither package.
SEES_ALL = {Path("ledger/migrations/env.py"): {"market", "oracle"}}


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
        extra = (
            imported_packages(path)
            - {package}
            - MAY_IMPORT[package]
            - SEES_ALL.get(path.relative_to(ROOT), set())
        )
        if extra:
            wrong[str(path.relative_to(ROOT))] = sorted(extra)
    assert wrong == {}, f"imports against the layering: {wrong}"

