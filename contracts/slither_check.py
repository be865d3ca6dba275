"""Run slither over contracts/src and fail on any High or Medium finding that is not triaged.

`make slither` runs this from the repository root with the interpreter slither is installed
in. Slither compiles through `contracts/solc` (solcjs) from a standard-json input built
here from foundry.toml, so it sees exactly one copy of each source, as forge's settings
would compile it. A finding is triaged when contracts/slither-triage.md has a table row
whose first three cells are its detector, contract and function (`-` when it has none).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACTS = ROOT / "contracts"
TRIAGE = CONTRACTS / "slither-triage.md"
GATED_IMPACTS = ("High", "Medium")
IMPACT_ORDER = ("High", "Medium", "Low", "Informational", "Optimization")

_TRIAGE_ROW = re.compile(r"^\|\s*`([a-z0-9-]+)`\s*\|\s*`?([^|`]+?)`?\s*\|\s*`?([^|`]+?)`?\s*\|")


@dataclass(frozen=True, order=True)
class FindingKey:
    """What a triage entry matches: the detector and where it fired."""

    detector: str
    contract: str
    function: str

    def __str__(self) -> str:
        return f"{self.detector} {self.contract}.{self.function}"


def standard_json_input() -> dict:
    """The solc input for every source under the Foundry `src`, with foundry.toml's settings."""
    profile = tomllib.loads((CONTRACTS / "foundry.toml").read_text())["profile"]["default"]
    sources = sorted((CONTRACTS / profile.get("src", "src")).rglob("*.sol"))
    remappings = []
    for remapping in profile.get("remappings", []):
        prefix, target = remapping.split("=", 1)
        # foundry.toml's targets are relative to contracts/; slither runs from the root.
        rooted = os.path.relpath(CONTRACTS / target, ROOT) + "/"
        remappings.append(f"{prefix}={rooted}")
    settings: dict = {
        "remappings": remappings,
        "optimizer": {"enabled": profile.get("optimizer", False), "runs": profile.get("optimizer_runs", 200)},
    }
    if "evm_version" in profile:
        settings["evmVersion"] = profile["evm_version"]
    return {
        "language": "Solidity",
        "sources": {str(p.relative_to(ROOT)): {"urls": [str(p.relative_to(ROOT))]} for p in sources},
        "settings": settings,
    }


def run_slither(workdir: Path) -> dict:
    """Run slither (its human report goes to the terminal) and return its JSON output."""
    input_path = workdir / "input.json"
    output_path = workdir / "slither.json"
    input_path.write_text(json.dumps(standard_json_input()))
    # slither.config.json (repository root) names the compiler and filters out dependencies.
    # Run from the root: from contracts/ crytic-compile finds foundry.toml and builds with
    # forge, whose build-info lists OpenZeppelin twice (relative and absolute paths).
    cmd = [sys.executable, "-m", "slither", str(input_path), "--json", str(output_path), "--fail-none"]
    proc = subprocess.run(cmd, cwd=ROOT, check=False)
    if not output_path.exists():
        sys.exit(f"slither produced no report (exit {proc.returncode}); see its output above.")
    report = json.loads(output_path.read_text())
    if not report.get("success"):
        sys.exit(f"slither failed: {report.get('error')}")
    return report


def finding_key(result: dict) -> FindingKey:
    """Detector, contract and function of a finding's primary element (`-` where absent)."""
    contract = function = "-"
    element: dict | None = result["elements"][0] if result.get("elements") else None
    while element:
        if element["type"] == "function" and function == "-":
            function = element["name"]
        elif element["type"] == "contract" and contract == "-":
            contract = element["name"]
        element = element.get("type_specific_fields", {}).get("parent")
    return FindingKey(result["check"], contract, function)


def triaged_keys(path: Path) -> set[FindingKey]:
    """The keys of every triage table row in `path`."""
    if not path.exists():
        return set()
    keys = set()
    for line in path.read_text().splitlines():
        match = _TRIAGE_ROW.match(line.strip())
        if match:
            keys.add(FindingKey(*(cell.strip() for cell in match.groups())))
    return keys


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="swarm-slither-") as tmp:
        report = run_slither(Path(tmp))
    results = report.get("results", {}).get("detectors", [])
    counts = Counter(r["impact"] for r in results)
    print("slither: " + ", ".join(f"{counts.get(i, 0)} {i.lower()}" for i in IMPACT_ORDER))

    triaged = triaged_keys(TRIAGE)
    gated = [r for r in results if r["impact"] in GATED_IMPACTS]
    untriaged = [r for r in gated if finding_key(r) not in triaged]
    stale = sorted(triaged - {finding_key(r) for r in gated})
    rel_triage = TRIAGE.relative_to(ROOT)
    for key in stale:
        print(f"note: {rel_triage} triages {key}, which slither no longer reports")
    if untriaged:
        print(f"{len(untriaged)} untriaged high/medium finding(s); fix them or justify them in {rel_triage}:")
        for r in sorted(untriaged, key=lambda r: (IMPACT_ORDER.index(r["impact"]), finding_key(r))):
            print(f"  {r['impact'].upper()} {finding_key(r)}: {r['description'].splitlines()[0]}")
        return 1
    print(f"slither: every high/medium finding is triaged in {rel_triage}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
