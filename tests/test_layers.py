"""The tree shows the architecture (docs/architecture.md §1): dependencies run one way,
`scripts, dashboard → market, oracle, provider → wire → compute, ledger → anvil → core`, and the
local network of sites and the demo (`devnet`) are outside the production packages.

Every import of every module counts, those inside functions and under TYPE_CHECKING too. The
imports that run as a module loads form a graph with no cycle, and a definition (the job
contract, the oracle's side of the challenge, a transaction's sender) loads none of what runs it."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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



# ── the graph of module-level imports ─────────────────────────────────────────────
# What a module imports as it loads: its top-level `import` and `from` statements, those in
# module-level `if`, `try` and `with` blocks and class bodies too, but none inside a function and
# none under `if TYPE_CHECKING:`. An edge goes to the module named (`from a.b import c` names
# a.b.c when that is a module, else a.b); Swarm's modules only. A cycle here is a cycle Python
# meets at import time, and a function-local import that hides one shows up as soon as it moves.


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def swarm_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES
            for path in sorted((ROOT / package).rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _loading_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of `body` that run as the module loads."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _type_checking(node):
                found += _loading_imports(node.body)
            found += _loading_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                found += _loading_imports(block)
        elif isinstance(node, ast.With | ast.ClassDef):
            found += _loading_imports(node.body)
    return found


def loading_imports(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of `known` that `module` (whose source is `source`) imports as it loads."""
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in _loading_imports(ast.parse(source).body):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
            continue
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
        names |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names}
    return (names & known) - {module}


def import_graph() -> dict[str, set[str]]:
    modules = swarm_modules()
    return {name: loading_imports(path.read_text(), name, path.name == "__init__.py", set(modules))
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` (its first node repeated at the end), or None when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(graph):
        if root in state:
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(child) == 1:
                return [*path[path.index(child):], child]
            elif child not in state:
                state[child] = 1
                path.append(child)
                stack.append(iter(sorted(graph.get(child, ()))))
    return None


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for child in graph[todo.pop()] - seen:
            seen.add(child)
            todo.append(child)
    return seen


def test_swarms_module_level_imports_have_no_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "module-level imports in a cycle: " + " → ".join(cycle or [])


@pytest.mark.parametrize(("module", "never"), [
    # The job contract imports no runner and nothing that runs a job.
    ("compute.jobs", {"compute.dispatch", "compute.context", "compute.runners.train", "compute.runners.infer",
                      "compute.runners.finetune", "compute.runners.tune", "compute.runners.serve",
                      "compute.runners.supervise", "compute.runners.program"}),
    # The oracle's side of the challenge never loads a node's side, nor torch's SHA-256 kernel.
    ("oracle.collector", {"compute.challenge_node", "compute.sha256"}),
    ("compute.proof", {"compute.challenge_node", "compute.sha256"}),
    # A transaction's sender signs with a key primitive, not with serving's escrow.
    ("ledger.tx", {"ledger.serving"}),
])
def test_a_definition_loads_none_of_what_runs_it(module: str, never: set[str]) -> None:
    assert reachable(import_graph(), module) & never == set()


def test_the_import_reader_counts_what_runs_as_a_module_loads_and_nothing_else() -> None:
    source = """
from __future__ import annotations
import compute.jobs
from compute import errors, hf as h
from . import placement
from .runners.params import Scope
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from compute import serving
else:
    from compute import node
try:
    from compute import tabular
except ImportError:
    from compute import data
class Loaded:
    from compute import manifest
def later():
    from compute import models
"""
    names = "jobs errors hf placement runners runners.params serving node tabular data manifest models order"
    known = {"compute", *(f"compute.{name}" for name in names.split())}
    assert loading_imports(source, "compute.order", False, known) == {
        "compute.jobs", "compute.errors", "compute.hf", "compute.placement", "compute.runners.params",
        "compute.node", "compute.tabular", "compute.data", "compute.manifest"}


NODES = st.sampled_from("abcdefgh")
graphs = st.dictionaries(NODES, st.sets(NODES, max_size=3), max_size=8)


@settings(max_examples=200, deadline=None)
@given(graph=graphs)
def test_a_cycle_is_found_exactly_when_the_graph_has_no_topological_order(graph: dict[str, set[str]]) -> None:
    graph = {node: children - {node} for node, children in graph.items()}  # a self-import is not an edge
    cycle = find_cycle(graph)
    ordered, indegree = [], {node: 0 for node in set(graph).union(*graph.values())}
    for children in graph.values():
        for child in children:
            indegree[child] += 1
    ready = [node for node, degree in indegree.items() if degree == 0]
    while ready:  # Kahn's algorithm: every node comes out exactly when the graph is acyclic
        node = ready.pop()
        ordered.append(node)
        for child in graph.get(node, ()):
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    assert (cycle is None) == (len(ordered) == len(indegree))
    if cycle is not None:
        assert cycle[0] == cycle[-1] and len(cycle) > 2
        assert all(b in graph[a] for a, b in itertools.pairwise(cycle))
