"""ledger.abi, the codec of the fast read path, agrees with eth_abi (the codec web3 uses) on
every type our contracts can return, and refuses malformed data instead of misreading it."""

from __future__ import annotations

import eth_abi
import pytest
from eth_utils import function_signature_to_4byte_selector, to_checksum_address
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import abi
from ledger.artifacts import load_artifacts


def _base_types() -> st.SearchStrategy[str]:
    ints = st.sampled_from([8, 16, 32, 64, 128, 160, 256]).flatmap(
        lambda bits: st.sampled_from([f"uint{bits}", f"int{bits}"]))
    fixed = st.integers(1, 32).map(lambda n: f"bytes{n}")
    return st.one_of(ints, fixed, st.sampled_from(["address", "bool", "bytes", "string"]))


def _types() -> st.SearchStrategy[str]:
    return st.recursive(
        _base_types(),
        lambda inner: st.one_of(
            inner.map(lambda t: f"{t}[]"),
            st.tuples(inner, st.integers(1, 3)).map(lambda p: f"{p[0]}[{p[1]}]"),
            st.lists(inner, min_size=1, max_size=4).map(lambda ts: "(" + ",".join(ts) + ")"),
        ),
        max_leaves=6,
    )


def _value(t: abi.AbiType) -> st.SearchStrategy:
    item = t.item
    if item is not None:
        size = st.just(t.length) if t.length is not None else st.integers(0, 3)
        return size.flatmap(lambda n: st.lists(_value(item), min_size=n, max_size=n).map(tuple))
    if t.components:
        return st.tuples(*(_value(c) for c in t.components))
    base = t.base
    if base.startswith("uint"):
        return st.integers(0, 2 ** int(base[4:]) - 1)
    if base.startswith("int"):
        bits = int(base[3:])
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if base == "address":
        return st.binary(min_size=20, max_size=20).map(to_checksum_address)
    if base == "bool":
        return st.booleans()
    if base == "bytes":
        return st.binary(max_size=70)
    if base == "string":
        return st.text(max_size=40)
    width = int(base[5:])
    return st.binary(min_size=width, max_size=width)


def _as_web3(t: abi.AbiType, value):
    """eth_abi's decoded value as web3 returns it: addresses checksummed."""
    if t.item is not None:
        return tuple(_as_web3(t.item, v) for v in value)
    if t.components:
        return tuple(_as_web3(c, v) for c, v in zip(t.components, value, strict=True))
    return to_checksum_address(value) if t.base == "address" else value


def eth_abi_decode(types: list[str], data: bytes, strict: bool = True) -> tuple:
    return _as_web3(abi.parse_type("(" + ",".join(types) + ")"), eth_abi.decode(types, data, strict=strict))


@st.composite
def typed_values(draw) -> tuple[list[str], tuple]:
    types = draw(st.lists(_types(), min_size=1, max_size=4))
    values = tuple(draw(_value(abi.parse_type(t))) for t in types)
    return types, values


@settings(max_examples=300, deadline=None)
@given(typed_values())
def test_encoding_matches_eth_abi_and_decodes_back(case: tuple[list[str], tuple]) -> None:
    types, values = case
    encoded = abi.encode(types, values)
    assert encoded == eth_abi.encode(types, values)
    assert abi.decode(types, encoded) == eth_abi_decode(types, encoded) == values


@settings(max_examples=200, deadline=None)
@given(typed_values(), st.data())
def test_truncated_or_dirty_data_is_refused_or_read_as_eth_abi_reads_it(case, data) -> None:
    types, values = case
    encoded = bytearray(abi.encode(types, values))
    if data.draw(st.booleans()) and encoded:
        del encoded[data.draw(st.integers(0, len(encoded) - 1)):]
    elif encoded:
        encoded[data.draw(st.integers(0, len(encoded) - 1))] ^= data.draw(st.integers(1, 255))
    try:
        ours = abi.decode(types, bytes(encoded))
    except abi.AbiError:
        with pytest.raises(Exception):  # noqa: B017 -- eth_abi refuses it too, with an error of its own
            eth_abi_decode(types, bytes(encoded))
        return
    assert ours == eth_abi_decode(types, bytes(encoded), strict=False)


def test_a_pointer_into_its_containers_offsets_is_refused_as_eth_abi_refuses_it() -> None:
    """A dynamic value's offset turned to 0 points back at its tuple's own head words."""
    types = ["bytes1", "(bytes1,bytes,uint8,bytes1)"]
    encoded = bytearray(abi.encode(types, (b"\x00", (b"\x00", b"ab", 0, b"\x00"))))
    encoded[64 + 32 + 31] = 0  # the inner tuple's pointer to its bytes, 0x80, now 0
    with pytest.raises(abi.AbiError, match="inside its container's offsets"):
        abi.decode(types, bytes(encoded))
    with pytest.raises(eth_abi.exceptions.InvalidPointer):
        eth_abi_decode(types, bytes(encoded))


@pytest.mark.parametrize(("types", "values"), [
    (["uint8"], [256]),
    (["int8"], [-129]),
    (["uint256"], [-1]),
    (["address"], ["0x1234"]),
    (["bool"], [1]),
    (["bytes4"], [b"12345"]),
    (["uint256[2]"], [[1]]),
    (["(uint256,bool)"], [(1,)]),
    (["string"], [b"not text"]),
])
def test_values_that_do_not_fit_their_type_are_refused(types, values) -> None:
    with pytest.raises(abi.AbiError):
        abi.encode(types, values)


def test_selectors_and_checksums_match_eth_utils() -> None:
    artifacts = load_artifacts()
    checked = 0
    for artifact in artifacts.contracts.values():
        for item in artifact.abi:
            if item["type"] in ("function", "error"):
                assert abi.selector(item) == function_signature_to_4byte_selector(abi.signature(item))
                checked += 1
    assert checked > 50
    for raw in (b"\x00" * 20, b"\xff" * 20, bytes(range(20))):
        assert abi.to_checksum_address(raw) == to_checksum_address(raw)
        assert abi.to_checksum_address("0x" + raw.hex()) == to_checksum_address(raw)
