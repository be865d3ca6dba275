"""What the oracle reads of a provider's stored hardware spec (oracle/collector.py): a spec it
cannot read declares nothing, and only the ways a stored spec can really be unreadable count as
that — a missing file, an altered one, one that is not a JSON object — never a bug's exception."""

from __future__ import annotations

from pathlib import Path

import pytest
from eth_utils import keccak
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.specs import spec_path, store_spec
from oracle.collector import declared_hardware, declared_model

PROVIDER = "0x" + "11" * 20


def test_a_stored_spec_declares_its_model_vram_and_uuids(tmp_path: Path) -> None:
    digest = store_spec(tmp_path, {"gpu_model": "H100", "vram_gb": 80, "gpu_uuids": ["GPU-1", "GPU-2"]})
    watched = declared_hardware(tmp_path, PROVIDER, "0x" + digest.hex())
    assert (watched.declared_model, watched.vram_gb, watched.gpu_uuids) == ("H100", 80.0, ("GPU-1", "GPU-2"))


def test_a_spec_this_home_lacks_or_that_was_altered_declares_nothing(tmp_path: Path) -> None:
    assert declared_model(tmp_path, "0x" + "ab" * 32) == ""
    digest = store_spec(tmp_path, {"gpu_model": "H100"})
    spec_path(tmp_path, digest).write_text('{"gpu_model": "B200"}')  # no longer hashes to its name
    assert declared_model(tmp_path, "0x" + digest.hex()) == ""
    assert declared_model(tmp_path, "0xnot-hex") == ""


@pytest.mark.parametrize("body", [b"[1, 2]", b"not json", b'"H100"', b"null"])
def test_a_stored_file_that_is_not_a_json_object_declares_nothing(tmp_path: Path, body: bytes) -> None:
    digest = keccak(body)
    path = spec_path(tmp_path, digest)
    path.parent.mkdir(parents=True)
    path.write_bytes(body)
    assert declared_hardware(tmp_path, PROVIDER, "0x" + digest.hex()).declared_model == ""


@settings(max_examples=50, deadline=None)
@given(vram=st.one_of(st.none(), st.booleans(), st.text(max_size=5), st.floats(0, 1e4), st.integers(0, 10**4),
                      st.lists(st.integers(), max_size=2)),
       uuids=st.one_of(st.none(), st.text(max_size=5), st.lists(st.text(max_size=8), max_size=3)))
def test_any_shape_of_a_specs_fields_is_read_without_an_error(tmp_path_factory, vram, uuids) -> None:
    home = tmp_path_factory.mktemp("home")
    digest = store_spec(home, {"gpu_model": "A100", "vram_gb": vram, "gpu_uuids": uuids})
    watched = declared_hardware(home, PROVIDER, "0x" + digest.hex())
    assert watched.declared_model == "A100" and watched.vram_gb >= 0
    assert all(isinstance(u, str) for u in watched.gpu_uuids)
