"""OpenZeppelin StandardMerkleTree over (address provider, uint256 cumulative) leaves.

Same leaf encoding, leaf order, tree layout and proofs as @openzeppelin/merkle-tree, so
any standard tool verifies the roots Swarm publishes: leaf =
keccak256(bytes.concat(keccak256(abi.encode(provider, cumulative)))), pairs hashed sorted.

Built for 100,000 leaves and every proof in well under two seconds (bench/merkle.py): the
keccaks of a whole level run in one loop over pycryptodome's C functions on one buffer,
addresses are checksummed in a batch, and all proofs are gathered by index with numpy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from eth_abi import encode as abi_encode
from eth_utils import keccak, to_checksum_address

try:  # pycryptodome's C keccak through its cffi backend (eth-hash's backend here)
    from Crypto.Hash.keccak import _raw_keccak_lib as _keccak_lib  # type: ignore[attr-defined]
    from Crypto.Util._raw_api import (  # type: ignore[attr-defined]
        VoidPointer,
        c_size_t,
        c_ubyte,
    )
    from Crypto.Util._raw_api import ffi as _ffi
except ImportError:  # another backend: same digests, one eth_utils.keccak call each (≈ 3× slower)
    _ffi = None

_UINT256 = 2**256


def leaf_hash(provider: str, cumulative: int) -> bytes:
    return keccak(keccak(abi_encode(["address", "uint256"], [provider, cumulative])))


def hash_pair(a: bytes, b: bytes) -> bytes:
    return keccak(a + b) if a < b else keccak(b + a)


class _BatchKeccak:
    """keccak256 of many equal-width messages laid end to end, through one reused state.

    pycryptodome's own `keccak.new(...)` builds a Python object and a buffer per hash; the
    same C functions called directly do the work of 100,000 hashes in a tenth of a second.
    """

    def __init__(self) -> None:
        if _ffi is None:
            self._state = None
            return
        state = VoidPointer()
        if _keccak_lib.keccak_init(state.address_of(), c_size_t(64), c_ubyte(24)):
            raise RuntimeError("pycryptodome could not start a keccak state")
        self._state = state.get()  # one state for the life of the process, never freed

    def digests(self, data: bytes, width: int) -> bytes:
        """The 32-byte digests of data[0:width], data[width:2·width], … concatenated."""
        n = len(data) // width
        if self._state is None:
            return b"".join(keccak(data[i * width : (i + 1) * width]) for i in range(n))
        out = _ffi.new("uint8_t[]", 32 * n)
        src = _ffi.from_buffer(data)
        state, reset, absorb, digest = self._state, _keccak_lib.keccak_reset, _keccak_lib.keccak_absorb, \
            _keccak_lib.keccak_digest
        for i in range(n):
            reset(state)
            absorb(state, src + i * width, width)
            digest(state, out + 32 * i, 32, 0x01)  # 0x01: Keccak padding, not SHA-3's
        return bytes(_ffi.buffer(out))


_batch = _BatchKeccak()


def _split(digests: bytes) -> list[bytes]:
    return [digests[i : i + 32] for i in range(0, len(digests), 32)]


def checksum_addresses(addresses: list[str]) -> list[str]:
    """EIP-55 forms of many addresses at once (same result as eth_utils.to_checksum_address)."""
    if not addresses:
        return []
    simple = all(isinstance(a, str) and len(a) == 42 and a[:2] in ("0x", "0X") for a in addresses)
    if not simple:
        return [to_checksum_address(a) for a in addresses]
    lower = "".join(a[2:] for a in addresses).lower()
    try:
        bytes.fromhex(lower)  # refuses anything but hex digits
    except ValueError:
        return [to_checksum_address(a) for a in addresses]  # raises, naming the bad one
    chars = np.frombuffer(lower.encode("ascii"), dtype=np.uint8).reshape(-1, 40)
    hashed = np.frombuffer(_batch.digests(chars.tobytes(), 40), dtype=np.uint8).reshape(-1, 32)
    nibbles: np.ndarray = np.empty((len(addresses), 40), dtype=np.uint8)
    nibbles[:, 0::2], nibbles[:, 1::2] = hashed[:, :20] >> 4, hashed[:, :20] & 0x0F
    upper = np.where((nibbles >= 8) & (chars >= ord("a")), chars - 32, chars).astype(np.uint8)
    text = upper.tobytes().decode("ascii")
    return ["0x" + text[i : i + 40] for i in range(0, len(text), 40)]


def leaf_hashes(providers: list[str], cumulative: list[int]) -> list[bytes]:
    """leaf_hash for many checksummed providers at once."""
    for c in cumulative:
        if not 0 <= c < _UINT256:
            raise ValueError(f"cumulative amount {c} does not fit a uint256")
    pad = b"\0" * 12  # abi.encode left-pads the 20-byte address to a 32-byte word
    encoded = b"".join(
        pad + bytes.fromhex(p[2:]) + c.to_bytes(32, "big") for p, c in zip(providers, cumulative, strict=True)
    )
    return _split(_batch.digests(_batch.digests(encoded, 64), 32))


@dataclass(frozen=True)
class RewardTree:
    """A built tree: its root, and a proof for every provider."""

    tree: list[bytes]  # array layout: node i has children 2i+1 and 2i+2; leaves at the end
    index: dict[str, int]  # provider → position of its leaf in `tree`
    values: dict[str, int]  # provider → cumulative

    @classmethod
    def build(cls, cumulative: dict[str, int] | Iterable[tuple[str, int]]) -> RewardTree:
        items = list(cumulative.items()) if isinstance(cumulative, dict) else list(cumulative)
        if not items:
            raise ValueError("a reward tree needs at least one leaf")
        providers = checksum_addresses([p for p, _ in items])
        values = dict(zip(providers, (int(c) for _, c in items), strict=True))
        if len(values) != len(items):
            raise ValueError("each provider may appear once in a reward tree")
        leaves = sorted(zip(leaf_hashes(list(values), list(values.values())), values, strict=True))
        n = len(leaves)
        size = 2 * n - 1
        tree: list[bytes] = [b""] * size
        index: dict[str, int] = {}
        for i, (leaf, provider) in enumerate(leaves):
            tree[size - 1 - i] = leaf
            index[provider] = size - 1 - i
        # Internal nodes in batches from the bottom up: the children of [end // 2, end) all
        # lie at end or beyond, so they are done before the batch is hashed.
        end = n - 1  # nodes [0, n - 1) are internal
        while end > 0:
            start = end // 2
            pairs = b"".join(
                a + b if a < b else b + a for a, b in zip(tree[2 * start + 1 : 2 * end + 1 : 2],
                                                          tree[2 * start + 2 : 2 * end + 2 : 2], strict=True)
            )
            tree[start:end] = _split(_batch.digests(pairs, 64))
            end = start
        return cls(tree=tree, index=index, values=values)

    @property
    def root(self) -> bytes:
        return self.tree[0]

    def proof(self, provider: str) -> list[bytes]:
        i = self.index.get(provider)
        if i is None:
            i = self.index[to_checksum_address(provider)]
        proof = []
        while i > 0:
            sibling = i + 1 if i % 2 == 1 else i - 1
            proof.append(self.tree[sibling])
            i = (i - 1) // 2
        return proof

    def proofs(self) -> dict[str, list[bytes]]:
        """Every provider's proof (as `proof` gives it), gathered level by level with numpy."""
        providers = list(self.index)
        position = np.fromiter(self.index.values(), dtype=np.int64, count=len(providers))
        nodes = np.array(self.tree, dtype=object)
        # A leaf at position p sits at depth bit_length(p + 1) − 1: leaves span at most two depths.
        deepest = len(self.tree).bit_length() - 1
        depth = np.where(position >= (1 << deepest) - 1, deepest, deepest - 1)
        result: dict[str, list[bytes]] = {}
        for d in np.unique(depth).tolist():
            rows = np.flatnonzero(depth == d)
            siblings = np.empty((len(rows), d), dtype=np.int64)
            i = position[rows]
            for level in range(d):
                siblings[:, level] = np.where(i % 2 == 1, i + 1, i - 1)
                i = (i - 1) // 2
            for row, proof in zip(rows.tolist(), nodes[siblings].tolist(), strict=True):
                result[providers[row]] = proof
        return result


def verify(root: bytes, provider: str, cumulative: int, proof: list[bytes]) -> bool:
    node = leaf_hash(to_checksum_address(provider), cumulative)
    for sibling in proof:
        node = hash_pair(node, sibling)
    return node == root
