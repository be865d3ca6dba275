"""Encrypted keystores (eth-account, Web3 Secret Storage) under $SWARM_HOME/keys.

Interface used by the command line; see scripts/common.py `signer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class KeyInfo:
    address: str  # checksummed
    name: str | None
    path: Path


class Keystore:
    """The keystores in one directory. Never prints, logs or returns a key except from unlock()."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def create(self, password: str, name: str | None = None) -> KeyInfo:
        raise NotImplementedError

    def import_key(self, private_key: str, password: str, name: str | None = None) -> KeyInfo:
        raise NotImplementedError

    def list(self) -> list[KeyInfo]:
        raise NotImplementedError

    def find(self, ref: str | None) -> KeyInfo:
        raise NotImplementedError

    def unlock(self, info: KeyInfo, password: str) -> bytes:
        raise NotImplementedError
