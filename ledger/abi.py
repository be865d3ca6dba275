"""The Solidity ABI for reads: selectors, checksummed addresses, and the head/tail encoding
of call arguments, return values and revert data.

Commands that only read the chain use this instead of web3, whose import alone takes about
a second; web3 stays the client for transactions and the indexer. Values map as web3 maps
them: integers, checksummed address strings, bools, bytes, str, and tuples for both tuples
and arrays.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from Crypto.Hash import keccak

from core.errors import UserError

WORD = 32


class AbiError(UserError, ValueError):
    """A value does not fit its ABI type, or bytes are not a valid encoding: the caller's input (a
    user's argument, or a node's answer read as the contract's ABI)."""


def keccak256(data: bytes) -> bytes:
    return keccak.new(digest_bits=256, data=data).digest()


def to_checksum_address(address: str | bytes) -> str:
    """EIP-55: the hex address with letters upper-cased where the hash of its lower case says."""
    if isinstance(address, bytes):
        if len(address) != 20:
            raise AbiError(f"an address is 20 bytes, got {len(address)}")
        lower = address.hex()
    else:
        if not is_hex_address(address):
            raise AbiError(f"{address!r} is not an address")
        lower = address[2:].lower()
    digest = keccak256(lower.encode()).hex()
    return "0x" + "".join(
        c.upper() if int(d, 16) >= 8 else c for c, d in zip(lower, digest[:40], strict=True)
    )


_HEX_ADDRESS = re.compile(r"^0[xX][0-9a-fA-F]{40}$")


def is_hex_address(text: Any) -> bool:
    return isinstance(text, str) and bool(_HEX_ADDRESS.match(text))


# ── types ────────────────────────────────────────────────────────────────────

@dataclass(frozen=True)
class AbiType:
    """A parsed ABI type: a base (`uint256`, `bytes`, …), a tuple of components, or an array."""

    base: str = ""  # "" for tuples and arrays
    components: tuple[AbiType, ...] = ()  # a tuple's fields
    item: AbiType | None = None  # an array's element type
    length: int | None = None  # a fixed array's length; None for T[]

    @property
    def is_dynamic(self) -> bool:
        if self.item is not None:
            return self.length is None or self.item.is_dynamic
        if self.base:
            return self.base in ("bytes", "string")
        return any(c.is_dynamic for c in self.components)

    @property
    def head_size(self) -> int:
        """Bytes this type takes in its enclosing head: a word for dynamic types."""
        if self.is_dynamic:
            return WORD
        if self.item is not None:
            return self.item.head_size * (self.length or 0)
        if self.components:
            return sum(c.head_size for c in self.components)
        return WORD


_BASE = re.compile(r"^(uint|int)(\d*)$|^bytes(\d+)$|^(address|bool|bytes|string)$")


@cache
def parse_type(text: str) -> AbiType:
    """`uint256`, `(address,bytes32)[]`, `uint8[3]` … into an AbiType."""
    text = text.strip()
    if text.endswith("]"):
        start = text.rindex("[")
        inner, size = text[:start], text[start + 1:-1]
        if size and (not size.isdigit() or int(size) == 0):
            raise AbiError(f"bad array length in {text!r}")
        return AbiType(item=parse_type(inner), length=int(size) if size else None)
    if text.startswith("("):
        if not text.endswith(")"):
            raise AbiError(f"unbalanced tuple type {text!r}")
        return AbiType(components=tuple(parse_type(part) for part in _split(text[1:-1])))
    match = _BASE.match(text)
    if not match:
        raise AbiError(f"unknown ABI type {text!r}")
    if match.group(1):
        bits = int(match.group(2) or 256)
        if bits % 8 or not 8 <= bits <= 256:
            raise AbiError(f"bad integer width in {text!r}")
        return AbiType(base=f"{match.group(1)}{bits}")
    if match.group(3) and not 1 <= int(match.group(3)) <= 32:
        raise AbiError(f"bad bytes width in {text!r}")
    return AbiType(base=text)


def _split(inner: str) -> list[str]:
    """The top-level, comma-separated parts of a tuple's inside."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(inner):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    if inner:
        parts.append(inner[start:])
    return parts


def type_string(param: dict) -> str:
    """The canonical type of an ABI JSON parameter (tuples spelled out from their components)."""
    kind = param["type"]
    if kind.startswith("tuple"):
        return "(" + ",".join(type_string(c) for c in param["components"]) + ")" + kind[len("tuple"):]
    return kind


def signature(item: dict) -> str:
    """`name(type,type)` of an ABI function, event or error."""
    return f"{item['name']}({','.join(type_string(p) for p in item.get('inputs', []))})"


def selector(item: dict) -> bytes:
    """The 4-byte selector of an ABI function or error."""
    return keccak256(signature(item).encode())[:4]


# ── encoding ─────────────────────────────────────────────────────────────────

def encode(types: Sequence[str], values: Sequence[Any]) -> bytes:
    """The ABI encoding of `values` as the tuple `types` (call arguments, return data)."""
    if len(types) != len(values):
        raise AbiError(f"{len(types)} types but {len(values)} values")
    return _encode(AbiType(components=tuple(parse_type(t) for t in types)), tuple(values))


def _encode(t: AbiType, value: Any) -> bytes:
    if t.base:
        return _encode_base(t.base, value)
    if t.item is not None:
        if not isinstance(value, (list, tuple)):
            raise AbiError(f"an array needs a list, got {type(value).__name__}")
        if t.length is not None and len(value) != t.length:
            raise AbiError(f"a fixed array of {t.length} got {len(value)} items")
        body = _encode_sequence([t.item] * len(value), value)
        return body if t.length is not None else _uint(len(value)) + body
    if not isinstance(value, (list, tuple)) or len(value) != len(t.components):
        raise AbiError(f"a tuple of {len(t.components)} needs as many values, got {value!r}")
    return _encode_sequence(list(t.components), value)


def _encode_sequence(types: list[AbiType], values: Sequence[Any]) -> bytes:
    heads, tails = [], []
    offset = sum(t.head_size for t in types)
    for t, value in zip(types, values, strict=True):
        encoded = _encode(t, value)
        if t.is_dynamic:
            heads.append(_uint(offset))
            tails.append(encoded)
            offset += len(encoded)
        else:
            heads.append(encoded)
    return b"".join(heads) + b"".join(tails)


def _uint(value: int) -> bytes:
    return value.to_bytes(WORD, "big")


def _encode_base(base: str, value: Any) -> bytes:
    if base.startswith(("uint", "int")):
        if isinstance(value, bool) or not isinstance(value, int):
            raise AbiError(f"{base} needs an integer, got {value!r}")
        bits = int(base.removeprefix("u").removeprefix("int"))
        signed = base.startswith("int")
        low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
        if not low <= value <= high:
            raise AbiError(f"{value} is out of range for {base}")
        return value.to_bytes(WORD, "big", signed=True) if signed else _uint(value)
    if base == "address":
        if isinstance(value, bytes) and len(value) == 20:
            raw = value
        elif is_hex_address(value):
            raw = bytes.fromhex(value[2:])
        else:
            raise AbiError(f"{value!r} is not an address")
        return raw.rjust(WORD, b"\0")
    if base == "bool":
        if not isinstance(value, bool):
            raise AbiError(f"bool needs True or False, got {value!r}")
        return _uint(int(value))
    raw = _as_bytes(value, base)
    if base == "string" or base == "bytes":
        padded = raw + b"\0" * (-len(raw) % WORD)
        return _uint(len(raw)) + padded
    width = int(base[len("bytes"):])
    if len(raw) > width:
        raise AbiError(f"{base} holds {width} bytes, got {len(raw)}")
    return raw.ljust(WORD, b"\0")


def _as_bytes(value: Any, base: str) -> bytes:
    if base == "string":
        if not isinstance(value, str):
            raise AbiError(f"string needs a str, got {value!r}")
        return value.encode()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str) and value.startswith("0x"):
        try:
            return bytes.fromhex(value[2:])
        except ValueError:
            pass
    raise AbiError(f"{base} needs bytes or 0x-hex, got {value!r}")


# ── decoding ─────────────────────────────────────────────────────────────────

def decode(types: Sequence[str], data: bytes) -> tuple:
    """The values of the tuple `types` encoded in `data`; malformed data raises AbiError."""
    t = AbiType(components=tuple(parse_type(x) for x in types))
    return _decode(t, bytes(data), 0)


def _decode(t: AbiType, data: bytes, start: int) -> Any:
    if t.base:
        return _decode_base(t.base, data, start)
    if t.item is not None:
        if t.length is None:
            count = _word(data, start)
            if count > len(data):  # each item takes at least a byte: a bound against huge counts
                raise AbiError(f"an array claims {count} items in {len(data)} bytes")
            return _decode_sequence([t.item] * count, data, start + WORD, count)
        return _decode_sequence([t.item] * t.length, data, start, t.length)
    offsets = sum(c.length if c.item is not None and c.length is not None and not c.is_dynamic else 1
                  for c in t.components)
    return _decode_sequence(list(t.components), data, start, offsets)


def _decode_sequence(types: list[AbiType], data: bytes, start: int, offsets: int) -> tuple:
    """The values of `types` encoded from `start`. A dynamic value's pointer must lead past the
    sequence's first `offsets` words and into the data, as eth_abi, the reference decoder, holds
    it (a static tuple among them counting one word, a static array one a value)."""
    values, head = [], start
    for t in types:
        if t.is_dynamic:
            at = start + _word(data, head)
            if not start + offsets * WORD <= at < len(data):
                raise AbiError(f"the pointer at byte {head} leads to byte {at}, inside its container's "
                               f"offsets or past the data's {len(data)} bytes")
            values.append(_decode(t, data, at))
        else:
            values.append(_decode(t, data, head))
        head += t.head_size
    return tuple(values)


def _word(data: bytes, at: int) -> int:
    if at < 0 or at + WORD > len(data):
        raise AbiError(f"the data ends at byte {len(data)}, before the word at {at}")
    return int.from_bytes(data[at:at + WORD], "big")


def _decode_base(base: str, data: bytes, at: int) -> Any:
    word = _word(data, at)
    if base.startswith("uint"):
        if word >> int(base[4:]):
            raise AbiError(f"{base} value out of range at byte {at}")
        return word
    if base.startswith("int"):
        bits = int(base[3:])
        value = word - 2**256 if word >> 255 else word
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise AbiError(f"{base} value out of range at byte {at}")
        return value
    if base == "address":
        if word >> 160:
            raise AbiError(f"address with dirty high bytes at byte {at}")
        return to_checksum_address(word.to_bytes(20, "big"))
    if base == "bool":
        if word > 1:
            raise AbiError(f"bool that is neither 0 nor 1 at byte {at}")
        return bool(word)
    if base in ("bytes", "string"):
        end = at + WORD + word
        padded_end = at + WORD + -(-word // WORD) * WORD
        if word > len(data) or padded_end > len(data):
            raise AbiError(f"{base} of {word} bytes runs past the data's end")
        if any(data[end:padded_end]):
            raise AbiError(f"{base} with dirty padding at byte {end}")
        raw = data[at + WORD:end]
        if base == "bytes":
            return raw
        try:
            return raw.decode()
        except UnicodeDecodeError as exc:
            raise AbiError(f"string that is not UTF-8 at byte {at}") from exc
    width = int(base[len("bytes"):])
    raw = data[at:at + WORD]
    if any(raw[width:]):
        raise AbiError(f"{base} with dirty padding at byte {at}")
    return raw[:width]
