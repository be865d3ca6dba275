"""The head's register of its mesh (`provider.mesh.Coordinator`), under any sequence of joins,
rotations and removals (hypothesis): addresses and keys stay unique, a rotation keeps a
machine's address, every machine's peers are exactly the others, reached directly where either
listens and through the head where neither does, and the register survives a restart."""

from __future__ import annotations

import base64
import ipaddress
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import Refused
from provider.mesh import HEAD, Coordinator

pytestmark = pytest.mark.light

SECRET = "secret"
names = st.sampled_from([f"gpu-{i}" for i in range(6)])
keys = st.binary(min_size=32, max_size=32).map(lambda raw: base64.b64encode(raw).decode())
endpoints = st.one_of(st.none(), st.integers(1, 250).map(lambda i: f"10.77.0.{i}:51820"))
steps = st.lists(st.one_of(st.tuples(st.just("join"), names, keys, endpoints),
                           st.tuples(st.just("remove"), names)), max_size=25)


@settings(max_examples=60, deadline=None)
@given(steps=steps)
def test_the_register_keeps_its_invariants_whatever_joins_rotates_and_leaves(steps, tmp_path_factory) -> None:
    path = tmp_path_factory.mktemp("register") / "mesh.json"
    head_key = base64.b64encode(b"\x01" * 32).decode()
    register = Coordinator(path, SECRET, head_key, "10.77.0.254:51820", "10.231.0.0/29")
    for step in steps:
        before = dict(register.state.peers)
        try:
            if step[0] == "join":
                _, name, key, endpoint = step
                answer = register.join(SECRET, name, key, endpoint)
                if name in before:
                    assert answer["address"] == before[name].address, "a rotation keeps the address"
            else:
                register.remove(step[1])
        except Refused as refused:
            assert refused.status in (404, 409, 507), refused
            assert register.state.peers == before, "a refused step changes nothing"
    peers = register.state.peers
    assert len({p.address for p in peers.values()}) == len(peers)
    assert len({p.public_key for p in peers.values()}) == len(peers)
    network = ipaddress.ip_network("10.231.0.0/29")
    assert all(ipaddress.ip_address(p.address) in network for p in peers.values())
    for me in peers.values():
        wired = register.peers_of(me.public_key)
        routed = {ip for entry in wired for ip in entry["allowed_ips"]}
        others = {p.address for p in peers.values() if p.name != me.name}
        assert routed == {f"{a}/32" for a in others}, "every other machine, once, and no one else"
        for entry in wired:
            other = peers[entry["name"]]
            assert other.endpoint is not None or me.endpoint is not None or other.name == HEAD, (
                "two machines that only dial out meet through the head")
            assert (entry["keepalive"] > 0) == (me.endpoint is None)
    assert Coordinator(path, SECRET, head_key, "10.77.0.254:51820").state == register.state


def test_a_request_with_a_bad_name_key_or_endpoint_is_refused_in_one_sentence(tmp_path: Path) -> None:
    register = Coordinator(tmp_path / "mesh.json", SECRET, base64.b64encode(b"\x01" * 32).decode(),
                           "10.77.0.254:51820")
    key = base64.b64encode(b"\x02" * 32).decode()
    for args, says in ((("Bad_Name", key, None), "lowercase letters"), ((HEAD, key, None), "not 'head'"),
                       (("gpu-1", "not a key", None), "32 bytes in base64"),
                       (("gpu-1", key, "nowhere"), "HOST:PORT"),
                       (("gpu-1", key, "nowhere.invalid:51820"), "'nowhere.invalid' does not resolve")):
        with pytest.raises(Refused, match=says) as refused:
            register.join(SECRET, *args)
        assert refused.value.status == 400 and "\n" not in str(refused.value)
    assert set(register.state.peers) == {HEAD}


def test_a_key_rotated_in_one_process_is_read_whole_by_another_at_every_moment(tmp_path: Path) -> None:
    """`mesh join --rotate` replaces the machine's key while its running `mesh join` reads it to
    ask for its peers: the reader sees the old key or the new, never none and never half of one."""
    import multiprocessing

    from provider.mesh import KEY_FILE, machine_key, rotate_key

    first = machine_key(tmp_path)
    context = multiprocessing.get_context("spawn")
    rotator = context.Process(target=_rotate_many, args=(tmp_path, 300))
    rotator.start()
    seen = {first}
    try:
        while rotator.is_alive():
            seen.add(machine_key(tmp_path))  # raises on a missing or partial file
    finally:
        rotator.join(timeout=60)
    assert rotator.exitcode == 0
    final = machine_key(tmp_path)
    assert len(seen) > 2 and final != first and (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600
    left = sorted(p.name for p in (tmp_path / KEY_FILE).parent.iterdir())
    assert left == [KEY_FILE.name], "no staged file left behind"
    assert rotate_key(tmp_path) != final


def _rotate_many(home: Path, times: int) -> None:
    from provider.mesh import rotate_key

    for _ in range(times):
        rotate_key(home)
