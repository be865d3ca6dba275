"""Compile the contracts with py-solc-x through the `contracts/solc` wrapper (docs/architecture.md §11).

Artifacts (ABI and bytecode) are build outputs: cached under build/contracts, keyed by a
hash of every source and the compiler settings, and never committed.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ledger.errors import SwarmError

REPO_ROOT = Path(__file__).resolve().parents[1]
CONTRACTS_DIR = REPO_ROOT / "contracts"
SOURCES_DIR = CONTRACTS_DIR / "src"
SOLC_WRAPPER = CONTRACTS_DIR / "solc"
NODE_MODULES = REPO_ROOT / "node_modules"
BUILD_DIR = REPO_ROOT / "build" / "contracts"

log = logging.getLogger(__name__)

# The deployable contracts, by the source key the compiler gives them: Swarm's own, the admin
# of them all among them (SwarmTimelock: OpenZeppelin's TimelockController, bound to the vault's
# exit bound).
CONTRACTS = {
    "SwarmToken": "contracts/src/SwarmToken.sol",
    "StakingVault": "contracts/src/StakingVault.sol",
    "RewardDistributor": "contracts/src/RewardDistributor.sol",
    "JobMarket": "contracts/src/JobMarket.sol",
    "ServingEscrow": "contracts/src/ServingEscrow.sol",
    "SwarmTimelock": "contracts/src/SwarmTimelock.sol",
}

# Must match contracts/foundry.toml, so the gas measured by forge is the gas deployed.
SETTINGS = {
    "optimizer": {"enabled": True, "runs": 10_000},
    "evmVersion": "prague",
    "remappings": ["@openzeppelin/contracts/=node_modules/@openzeppelin/contracts/"],
    "outputSelection": {"*": {"*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"]}},
}


@dataclass(frozen=True)
class Artifact:
    name: str
    abi: list[dict]
    bytecode: str  # creation code, 0x-prefixed
    runtime_hash: str  # keccak-free fingerprint of the runtime code, for idempotent deploys


@dataclass(frozen=True)
class Artifacts:
    contracts: dict[str, Artifact]
    errors_abi: dict[str, list[dict]]  # every contract's ABI (OpenZeppelin's too), for error decoding
    source_hash: str

    def __getitem__(self, name: str) -> Artifact:
        return self.contracts[name]


def _sources() -> dict[str, Path]:
    return {
        f"contracts/src/{p.relative_to(SOURCES_DIR).as_posix()}": p
        for p in sorted(SOURCES_DIR.rglob("*.sol"))
    }


def _fingerprint(sources: dict[str, Path]) -> str:
    digest = hashlib.sha256(json.dumps(SETTINGS, sort_keys=True).encode())
    digest.update(SOLC_WRAPPER.read_bytes())
    oz_package = NODE_MODULES / "@openzeppelin" / "contracts" / "package.json"
    solc_package = NODE_MODULES / "solc" / "package.json"
    for extra in (oz_package, solc_package):
        if extra.exists():
            digest.update(extra.read_bytes())
    for key, path in sources.items():
        digest.update(key.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@cache
def load_artifacts() -> Artifacts:
    """The compiled contracts, compiling once per change of the sources."""
    sources = _sources()
    fingerprint = _fingerprint(sources)
    cached = BUILD_DIR / f"artifacts-{fingerprint}.json"
    if cached.exists():
        output = json.loads(cached.read_text())
    else:
        log.info("compiling the contracts (none built yet for these sources) into %s", BUILD_DIR)
        output = _compile(sources)
        BUILD_DIR.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(".tmp")
        tmp.write_text(json.dumps(output))
        tmp.replace(cached)
    return _parse(output, fingerprint)


def _compile(sources: dict[str, Path]) -> dict:
    if not (NODE_MODULES / "solc").exists():
        raise SwarmError("The Solidity compiler is not installed; run `npm ci` in the repository first.")
    import solcx
    from solcx.exceptions import SolcError

    standard_input = {
        "language": "Solidity",
        "sources": {key: {"content": path.read_text()} for key, path in sources.items()},
        "settings": SETTINGS,
    }
    try:
        return solcx.compile_standard(
            standard_input,
            base_path=str(REPO_ROOT),
            allow_paths=[str(REPO_ROOT)],
            solc_binary=str(SOLC_WRAPPER),
        )
    except SolcError as exc:
        raise SwarmError(f"The contracts do not compile: {exc.message or exc}") from exc


def _parse(output: dict, fingerprint: str) -> Artifacts:
    contracts: dict[str, Artifact] = {}
    abis: dict[str, list[dict]] = {}
    for source, by_name in output["contracts"].items():
        for name, data in by_name.items():
            if data.get("abi"):
                abis.setdefault(name, data["abi"])
            if CONTRACTS.get(name) == source:
                runtime = data["evm"]["deployedBytecode"]["object"]
                contracts[name] = Artifact(
                    name=name,
                    abi=data["abi"],
                    bytecode="0x" + data["evm"]["bytecode"]["object"],
                    runtime_hash=hashlib.sha256(bytes.fromhex(runtime)).hexdigest(),
                )
    missing = set(CONTRACTS) - set(contracts)
    if missing:
        raise SwarmError(f"The compiler produced no artifact for {', '.join(sorted(missing))}.")
    return Artifacts(contracts=contracts, errors_abi=abis, source_hash=fingerprint)
