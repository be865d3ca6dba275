"""Keys: encrypted keystores (eth-account, Web3 Secret Storage) under $SWARM_HOME/keys, and a
key's primitives for signing raw digests fast (`DigestSigner`, `recover`).

One file per key, `<checksummed address>.json` (mode 0600, in a 0700 directory), holding
the standard encrypted keystore JSON plus an optional unique "name". The key is encrypted
with eth-account's default KDF (scrypt, n = 2**18, about half a second per encryption or
decryption); `kdf_iterations` sets a lighter scrypt n for tests only. Nothing here prints,
logs or returns a private key except `Keystore.unlock`.

A digest is signed and recovered with libsecp256k1 (coincurve), not eth-account: serving's
receipts and vouchers (`ledger.serving`) are signed and checked by the thousand, and a
transaction's sender hands its key over as a `DigestSigner` (`ledger.tx.Sender.digest_signer`).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sha3 import keccak_256

from ledger.abi import is_hex_address, to_checksum_address
from ledger.errors import InvalidInput, SwarmError
from ledger.units import parse_address

NAME_PATTERN = re.compile(r"(?!0[xX])[A-Za-z0-9_-]{1,32}")  # never mistaken for an address
_HEX_KEY = re.compile(r"(?:0x)?([0-9a-fA-F]{64})")
SIGNATURE_BYTES = 65  # r, s and v, as Ethereum writes a signature
SECP256K1_HALF_N = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0  # the highest low s


class WrongPassword(SwarmError):
    """The password does not decrypt the keystore."""


class CorruptKeystore(SwarmError):
    """A keystore file cannot be read or does not hold the key its name promises."""


class InvalidSignature(InvalidInput):
    """A signature that is malformed or not the claimed signer's."""


@dataclass(frozen=True)
class KeyInfo:
    address: str  # checksummed
    name: str | None
    path: Path

    def as_dict(self) -> dict[str, Any]:
        return {"address": self.address, "name": self.name, "path": str(self.path)}


def _eth_account() -> Any:
    """eth-account's Account, imported when a key is used (listing keystores needs none of it)."""
    from eth_account import Account

    return Account


def parse_private_key(text: str, source: str = "The private key",
                      fix: str = "check what you pasted") -> bytes:
    """64 hex digits, with or without 0x, into a secp256k1 key; the text is never echoed back.
    A refusal names `source` (where the text came from, e.g. an environment variable) and `fix`."""
    match = _HEX_KEY.fullmatch(text.strip())
    if match is None:
        raise InvalidInput(f"{source} is not 64 hex digits (with or without 0x); {fix}.")
    key = bytes.fromhex(match.group(1))
    try:
        _eth_account().from_key(key)
    except ValueError:
        raise InvalidInput(f"{source} is outside the secp256k1 range; {fix}.") from None
    return key


def address_of(private_key: bytes) -> str:
    """The checksummed address a private key signs for."""
    return _eth_account().from_key(private_key).address


def check_name(name: str | None) -> str | None:
    """A keystore name: 1 to 32 letters, digits, '_' or '-', not starting with 0x (so never an address)."""
    if name is not None and NAME_PATTERN.fullmatch(name) is None:
        raise InvalidInput(
            f"Keystore name {name!r} is not allowed; "
            "use 1 to 32 letters, digits, '_' or '-', not starting with 0x."
        )
    return name


def check_password(password: str) -> str:
    if not password:
        raise InvalidInput(
            "An empty password would leave the key unprotected; "
            "choose a password (or set SWARM_KEY_PASSWORD)."
        )
    return password


class Keystore:
    """The keystores in one directory. Never prints, logs or returns a key except from unlock()."""

    def __init__(self, directory: Path, kdf_iterations: int | None = None) -> None:
        self.directory = directory
        self.kdf_iterations = kdf_iterations  # scrypt n; None is eth-account's default (2**18)

    def __repr__(self) -> str:
        return f"Keystore({str(self.directory)!r})"

    def create(self, password: str, name: str | None = None) -> KeyInfo:
        """A new random key, encrypted with `password`."""
        return self._store(bytes(_eth_account().create().key), password, name)

    def import_key(self, private_key: str | bytes, password: str, name: str | None = None) -> KeyInfo:
        """An existing key (32 bytes, or 64 hex digits with or without 0x), encrypted with `password`."""
        text = private_key.hex() if isinstance(private_key, bytes) else private_key
        return self._store(parse_private_key(text), password, name)

    def check_available(self, address: str | None, name: str | None) -> None:
        """Refuses an address or a name that a keystore here already has."""
        check_name(name)
        for info in self.list():
            if info.address == address:
                raise InvalidInput(
                    f"A keystore for {address} exists already: {info.path}; nothing was written."
                )
            if name is not None and info.name == name:
                raise InvalidInput(
                    f"The name {name!r} is taken by the keystore for {info.address}; choose another --name."
                )

    def list(self) -> list[KeyInfo]:
        """Every keystore here, ordered by name then address."""
        if not self.directory.is_dir():
            return []
        found = [
            KeyInfo(to_checksum_address(path.stem), _read_name(path), path)
            for path in self.directory.glob("*.json")
            if is_hex_address(path.stem) and path.stem.startswith("0x")
        ]
        return sorted(found, key=lambda info: (info.name is None, info.name or "", info.address))

    def find(self, ref: str | None) -> KeyInfo:
        """The keystore named or addressed by `ref`, or the only one there is when `ref` is None."""
        known = self.list()
        if ref is None:
            return self._only(known)
        if NAME_PATTERN.fullmatch(ref):
            matches = [info for info in known if info.name == ref]
        else:
            address = parse_address(ref, "keystore address")
            matches = [info for info in known if info.address == address]
        if not matches:
            raise SwarmError(f"No keystore for {ref} in {self.directory}; see `swarm keys list`.")
        return matches[0]

    def unlock(self, info: KeyInfo, password: str) -> bytes:
        """The private key in `info`'s file, decrypted with `password`."""
        keyfile = _read_json(info.path)
        try:
            key = bytes(_eth_account().decrypt(keyfile, password))
        except ValueError as exc:
            if "mismatch" in str(exc):  # v3 "MAC mismatch", v4 "Checksum mismatch"
                raise WrongPassword(
                    f"Wrong password for keystore {info.address}; try again or check SWARM_KEY_PASSWORD."
                ) from None
            raise _corrupt(info.path, _why(exc)) from None
        except (KeyError, TypeError, AttributeError, NotImplementedError) as exc:
            raise _corrupt(info.path, _why(exc)) from None
        if address_of(key) != info.address:
            raise CorruptKeystore(
                f"{info.path} holds the key of another address; rename the file to that address "
                "or import the key again."
            )
        return key

    def _only(self, known: Sequence[KeyInfo]) -> KeyInfo:
        if len(known) == 1:
            return known[0]
        if not known:
            raise SwarmError(
                f"No keystore in {self.directory}; create one with `swarm keys new` "
                "(or use --account N on a devnet)."
            )
        raise SwarmError(
            f"{len(known)} keystores in {self.directory}; "
            "choose one with --key ADDRESS|NAME (see `swarm keys list`)."
        )

    def _store(self, key: bytes, password: str, name: str | None) -> KeyInfo:
        check_password(password)
        address = address_of(key)
        self.check_available(address, name)
        keyfile = _eth_account().encrypt(key, password, iterations=self.kdf_iterations)
        if name is not None:
            keyfile["name"] = name
        path = self.directory / f"{address}.json"
        self._write_new(path, json.dumps(keyfile, indent=2) + "\n")
        return KeyInfo(address, name, path)

    def _write_new(self, path: Path, text: str) -> None:
        """Writes the whole file under a temporary name (mode 0600), then links it in; never overwrites."""
        if not self.directory.exists():
            self.directory.mkdir(parents=True, mode=0o700)
            os.chmod(self.directory, 0o700)  # mkdir's mode is filtered by the umask
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")  # created 0600
        try:
            with os.fdopen(fd, "w") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.link(tmp, path)
        except FileExistsError:
            raise InvalidInput(f"A keystore exists already at {path}; nothing was written.") from None
        finally:
            os.unlink(tmp)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        keyfile = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _corrupt(path, _why(exc)) from None
    if not isinstance(keyfile, dict):
        raise _corrupt(path, "not a JSON object")
    return keyfile


def _read_name(path: Path) -> str | None:
    """The keystore's name, or None when it has none or the file cannot be read (unlock says why)."""
    try:
        name = _read_json(path).get("name")
    except CorruptKeystore:
        return None
    return name if isinstance(name, str) else None


def _corrupt(path: Path, reason: str) -> CorruptKeystore:
    return CorruptKeystore(
        f"{path} is not a readable keystore ({reason}); restore it from a backup or import the key again."
    )


def _why(exc: Exception) -> str:
    """A file's fault in a few words; the file holds no plaintext key, so its contents may show."""
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r} field"
    return " ".join(str(exc).split()) or type(exc).__name__


# ── a key's signatures over raw digests ──────────────────────────────────────────


class DigestSigner:
    """Signs 32-byte digests with one key, as Ethereum expects (r, s, v with v 27 or 28, low s)."""

    def __init__(self, key: bytes) -> None:
        from coincurve import PrivateKey

        self._key = PrivateKey(bytes(key))
        self.address = address_of_public_key(self._key.public_key.format(compressed=False))

    def __repr__(self) -> str:  # never show the key
        return f"DigestSigner({self.address})"

    def sign(self, digest: bytes) -> bytes:
        signature = self._key.sign_recoverable(digest, hasher=None)  # r, s, recovery id
        return signature[:64] + bytes([27 + signature[64]])


def address_of_public_key(public_key: bytes) -> str:
    """The checksummed address of an uncompressed secp256k1 public key (65 bytes, 0x04 first)."""
    return to_checksum_address(keccak_256(public_key[1:]).digest()[12:])


def recover(digest: bytes, signature: bytes) -> str:
    """The address whose key made `signature` over `digest`; a malformed or high-s signature
    raises InvalidSignature (the escrow's OpenZeppelin ECDSA refuses those too)."""
    from coincurve import PublicKey

    if len(signature) != SIGNATURE_BYTES or signature[64] not in (27, 28):
        raise InvalidSignature("the signature is not 65 bytes ending in 27 or 28.")
    if int.from_bytes(signature[32:64], "big") > SECP256K1_HALF_N:
        raise InvalidSignature("the signature's s is in the upper half of the curve's order.")
    try:
        public = PublicKey.from_signature_and_message(signature[:64] + bytes([signature[64] - 27]), digest,
                                                      hasher=None)
    except Exception:  # noqa: BLE001 — libsecp256k1 says only that it failed
        raise InvalidSignature("the signature recovers no key.") from None
    return address_of_public_key(public.format(compressed=False))
