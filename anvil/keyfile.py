"""eth_keyfile, loaded without BLS12-381.

eth_account (and web3, which loads it) imports eth_keyfile, and eth_keyfile imports py_ecc's BLS
ciphersuite and the BLS12-381 pairing for version-4 (EIP-2335) keystores: building their tables
costs every process that signs about 0.45 CPU-seconds here, before it has done anything. Swarm's
keys are version-3 keystores (`ledger.keys`) and its signatures secp256k1, so none of it is used.

`install()` puts a finder first on `sys.meta_path` that loads `eth_keyfile.keyfile`, when
something first imports it, with two stand-ins for those modules: the group order of BLS12-381,
the one number eth_keyfile reads from it as it loads, and a `G2ProofOfPossession` that imports
the real ciphersuite the first time a version-4 keystore needs it. The stand-ins leave
`sys.modules` as soon as eth_keyfile is loaded, so whatever imports py_ecc's BLS later gets the
real modules. An eth_keyfile that asks more of them than this is loaded again as it is.
tests/test_keys.py holds the constant to py_ecc's and a version-4 keystore to the real
ciphersuite's public key.

`anvil`, which every module that signs imports first, installs it as it loads; a process that
never signs loads none of this.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

# The order of BLS12-381's groups (py_ecc.bls12_381.curve_order): eth_keyfile's bound on a version-4 key.
BLS12_381_ORDER = 0x73EDA753299D7D483339D80809A1D80553BDA402FFFE5BFEFFFFFFFF00000001
MODULE = "eth_keyfile.keyfile"
_STAND_INS = ("py_ecc.bls", "py_ecc.bls12_381")


class _ProofOfPossession:
    """py_ecc.bls.G2ProofOfPossession, imported on first use."""

    def __getattr__(self, name: str) -> Any:
        from py_ecc.bls import G2ProofOfPossession

        return getattr(G2ProofOfPossession, name)


def _stand_ins() -> dict[str, types.ModuleType]:
    bls = types.ModuleType("py_ecc.bls")
    bls.G2ProofOfPossession = _ProofOfPossession()  # type: ignore[attr-defined]
    curve = types.ModuleType("py_ecc.bls12_381")
    curve.curve_order = BLS12_381_ORDER  # type: ignore[attr-defined]
    return {"py_ecc.bls": bls, "py_ecc.bls12_381": curve}


class _Loader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        if any(name in sys.modules for name in _STAND_INS):  # loaded already: nothing to spare
            self.loader.exec_module(module)
            return
        sys.modules.update(_stand_ins())
        try:
            self.loader.exec_module(module)
        except ImportError:  # an eth_keyfile that needs more of them: as it is
            for name in _STAND_INS:
                del sys.modules[name]
            self.loader.exec_module(module)
        finally:
            for name in _STAND_INS:
                sys.modules.pop(name, None)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: types.ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != MODULE:
            return None
        sys.meta_path.remove(self)  # once: the real finders find it, this wraps its loader
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Has eth_keyfile load without py_ecc's BLS modules (a no-op once it is loaded, or installed)."""
    if MODULE not in sys.modules and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
