"""Raw `eth_getLogs` entries into Swarm events, fast.

The topic → event table is built once. Every Swarm event but one has only static
fields, so its data is sliced into 32-byte words straight from the hex text; the one
with dynamic fields (CommitteeSet's signer list) goes through eth_abi. Values come out
JSON-ready: ints, checksummed addresses, 0x hex for bytes, dicts for structs — the same
form the `events.args` column stores and a reorg replays from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from eth_abi import decode as abi_decode
from eth_utils import event_abi_to_log_topic, to_checksum_address

WordDecoder = Callable[[str], Any]


@dataclass(frozen=True)
class Log:
    """One decoded Swarm event and where it sits on the chain."""

    block_number: int
    block_hash: str
    tx_hash: str
    tx_index: int
    log_index: int
    contract: str
    name: str
    args: dict[str, Any]


@lru_cache(maxsize=65_536)
def checksum(address: str) -> str:
    """A 0x address, checksummed; cached because a chain's events name few distinct addresses."""
    return to_checksum_address(address)


def _uint(word: str) -> int:
    return int(word, 16)


def _int(word: str) -> int:
    value = int(word, 16)
    return value - (1 << 256) if value >= 1 << 255 else value


def _address(word: str) -> str:
    return checksum("0x" + word[24:])


def _bool(word: str) -> bool:
    return int(word, 16) != 0


def _topic_hash(word: str) -> str:
    return "0x" + word


def _word_decoder(spec: dict) -> WordDecoder | None:
    """A decoder for one static elementary type held in one word, or None."""
    kind = spec["type"]
    if kind.startswith("uint"):
        return _uint
    if kind.startswith("int"):
        return _int
    if kind == "address":
        return _address
    if kind == "bool":
        return _bool
    if kind.startswith("bytes") and kind[5:].isdigit():
        width = 2 * int(kind[5:])
        return lambda word: "0x" + word[:width]
    return None


def _static_decoder(spec: dict) -> tuple[int, Callable[[list[str]], Any]] | None:
    """(words, decoder over those words) for a static type, including static structs; None if dynamic."""
    if spec["type"] == "tuple":
        parts = [(c["name"], _static_decoder(c)) for c in spec["components"]]
        if any(p is None for _, p in parts):
            return None
        width = sum(p[0] for _, p in parts if p is not None)

        def decode_struct(words: list[str]) -> dict[str, Any]:
            out, i = {}, 0
            for name, (n, fn) in parts:  # type: ignore[misc]
                out[name] = fn(words[i : i + n])
                i += n
            return out

        return width, decode_struct
    word = _word_decoder(spec)
    if word is None:
        return None
    return 1, lambda words: word(words[0])


def _abi_type(spec: dict) -> str:
    """The canonical type string eth_abi takes, structs spelled out."""
    kind = spec["type"]
    if kind.startswith("tuple"):
        return "(" + ",".join(_abi_type(c) for c in spec["components"]) + ")" + kind[len("tuple") :]
    return kind


def _normalize(spec: dict, value: Any) -> Any:
    """eth_abi's output in the JSON-ready form of the fast path."""
    kind = spec["type"]
    if kind.endswith("]"):
        inner = dict(spec, type=kind[: kind.rindex("[")])
        return [_normalize(inner, v) for v in value]
    if kind == "tuple":
        return {c["name"]: _normalize(c, v) for c, v in zip(spec["components"], value, strict=True)}
    if kind == "address":
        return checksum(value)
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return value


@dataclass(frozen=True)
class _EventSpec:
    contract: str
    name: str
    topics: tuple[tuple[str, WordDecoder], ...]  # the indexed fields, in topic order
    data: Callable[[str], dict[str, Any]]  # the data hex (without 0x) → the other fields


def _event_spec(contract: str, abi: dict) -> _EventSpec:
    indexed = []
    for field in abi["inputs"]:
        if field["indexed"]:
            decoder = _word_decoder(field)
            if decoder is None:  # dynamic indexed fields are hashed; no Swarm event has one
                decoder = _topic_hash
            indexed.append((field["name"], decoder))
    plain = [f for f in abi["inputs"] if not f["indexed"]]
    statics = [_static_decoder(f) for f in plain]
    if all(s is not None for s in statics):
        layout = [(f["name"], n, fn) for f, (n, fn) in zip(plain, statics, strict=True)]  # type: ignore[misc]

        def decode_static(data: str) -> dict[str, Any]:
            words = [data[i : i + 64] for i in range(0, len(data), 64)]
            out, i = {}, 0
            for name, n, fn in layout:
                out[name] = fn(words[i : i + n])
                i += n
            return out

        return _EventSpec(contract, abi["name"], tuple(indexed), decode_static)

    types = [_abi_type(f) for f in plain]

    def decode_dynamic(data: str) -> dict[str, Any]:
        values = abi_decode(types, bytes.fromhex(data))
        return {f["name"]: _normalize(f, v) for f, v in zip(plain, values, strict=True)}

    return _EventSpec(contract, abi["name"], tuple(indexed), decode_dynamic)


class LogDecoder:
    """Decodes the logs of the given contracts; other logs are skipped."""

    def __init__(self, contracts: Iterable[tuple[str, str, list[dict]]]) -> None:
        """`contracts`: (name, address, abi) for each contract to index."""
        self._specs: dict[tuple[str, str], _EventSpec] = {}
        for name, address, abi in contracts:
            for item in abi:
                if item.get("type") == "event" and not item.get("anonymous"):
                    topic = "0x" + event_abi_to_log_topic(item).hex()
                    self._specs[(address.lower(), topic)] = _event_spec(name, item)

    def decode(self, raw: dict[str, Any]) -> Log | None:
        topics = raw["topics"]
        if not topics:
            return None
        spec = self._specs.get((raw["address"].lower(), topics[0]))
        if spec is None:
            return None
        args = spec.data(raw["data"][2:])
        for (name, fn), topic in zip(spec.topics, topics[1:], strict=True):
            args[name] = fn(topic[2:])
        return Log(
            block_number=int(raw["blockNumber"], 16),
            block_hash=raw["blockHash"],
            tx_hash=raw["transactionHash"],
            tx_index=int(raw["transactionIndex"], 16),
            log_index=int(raw["logIndex"], 16),
            contract=spec.contract,
            name=spec.name,
            args=args,
        )

    def decode_all(self, raws: Iterable[dict[str, Any]]) -> list[Log]:
        return [log for log in map(self.decode, raws) if log is not None]
