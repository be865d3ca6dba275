"""A GPU node's commitment, hashed where the rounds ran (compute.sha256, compute.challenge_node.DeviceProver):
the Triton kernel's SHA-256 is hashlib's for every message, and the tree built on the device has
the root the hashlib Prover gives, so the oracle's check is unchanged.

Here the kernel runs through Triton's interpreter on CPU tensors (TRITON_INTERPRET=1, set only
around each check: Triton reads it as it decorates, and compute.sha256 decorates once for each
mode). The tests marked `gpu` run it compiled, on CUDA, at the shape the oracle sends.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute.challenge import Challenge
from compute.challenge_node import DeviceProver, checkpoints_of
from compute.proof import Prover, check, leaf, opening_from_json, root_from_hex, sample

pytestmark = pytest.mark.light


@contextmanager
def interpreted() -> Iterator[None]:
    """Triton's interpreter for the kernels launched inside, and only there."""
    with mock.patch.dict(os.environ, {"TRITON_INTERPRET": "1"}):
        yield


def kernel_digests(messages: list[bytes]) -> list[bytes]:
    """compute.sha256's digest of each of the equal-length `messages`, on CPU tensors."""
    import torch

    from compute import sha256

    joined = np.frombuffer(b"".join(messages), dtype=np.uint8).copy()
    rows = torch.from_numpy(joined.reshape(len(messages), len(messages[0])))
    with interpreted():
        digests = sha256.sha256(rows)
    return [row.tobytes() for row in digests.numpy()]


@pytest.mark.parametrize("length", [55, 56, 63, 64, 119, 120])
def test_the_kernel_hashes_every_message_as_hashlib_either_side_of_a_block_boundary(length: int) -> None:
    """55 bytes is the last length whose padding fits its block and 56 the first that needs
    another; 63, 64, 119 and 120 the same edges a block and two further."""
    messages = [secrets.token_bytes(length) for _ in range(5)]
    assert kernel_digests(messages) == [hashlib.sha256(m).digest() for m in messages]


@settings(max_examples=5, deadline=None)
@given(st.integers(min_value=0, max_value=130).flatmap(
    lambda length: st.lists(st.binary(min_size=length, max_size=length), min_size=1, max_size=4)))
def test_the_kernel_hashes_any_messages_as_hashlib(messages: list[bytes]) -> None:
    assert kernel_digests(messages) == [hashlib.sha256(m).digest() for m in messages]


# 12 leaves; 9 leaves over three strided checkpoints (levels of 9, 5 and 3: each carries its
# last node up unpaired); a single leaf, which is the root.
SMALL = [Challenge(seed=3, size=4, rounds=3), Challenge(seed=(1 << 64) - 5, size=3, rounds=6, stride=2),
         Challenge(seed=1, size=1, rounds=1)]


@pytest.mark.parametrize("challenge", SMALL, ids=lambda c: f"{c.size}x{c.rounds}/{c.stride}")
def test_the_device_tree_has_the_hashlib_provers_root_and_its_openings_pass(challenge: Challenge) -> None:
    import torch

    checkpoints = checkpoints_of(challenge)
    on_host = Prover(challenge, checkpoints)
    with interpreted():
        on_device = DeviceProver(challenge, torch.from_numpy(np.stack(checkpoints)))
    from compute import sha256

    assert sha256.to_host(on_device.levels[0]) == [leaf(challenge, k, i, rows[i].tobytes())
                                                    for k, rows in enumerate(checkpoints, start=1)
                                                    for i in range(challenge.size)]
    assert on_device.root == on_host.root
    cells = sample(challenge)
    opened = on_device.open(cells)
    check(challenge, on_device.root, cells, opened)
    assert opened == on_host.open(cells)
    with pytest.raises(ValueError, match="there is no row 0 of checkpoint 0 to open"):
        on_device.open([(0, 0)])


def test_the_compiled_kernels_take_their_block_and_shifts_as_compile_time_constants() -> None:
    """Compiled (not interpreted) Triton must see `BLOCK: tl.constexpr`: the kernels are rebuilt
    in a scope of their own, and a rebuilt function without its annotations failed to compile on
    an H200 ("arange's arguments must be of type tl.constexpr"), which the interpreter never
    checks."""
    from compute import sha256

    kernels = sha256._kernels(False)
    constant = {name: [p.name for p in kernels[name].params if p.is_constexpr]
                for name in ("_messages_kernel", "_parent_messages_kernel", "_rotr", "_constant")}
    assert constant == {"_messages_kernel": ["BLOCK"], "_parent_messages_kernel": ["BLOCK"],
                        "_rotr": ["n"], "_constant": ["index"]}


# ── on a GPU ──────────────────────────────────────────────────────────────────────


@pytest.mark.gpu
def test_on_cuda_every_row_of_a_2048_by_8_challenge_hashes_as_hashlib_to_the_same_root() -> None:
    from compute import sha256
    from compute.challenge_node import device_checkpoints

    challenge = Challenge(seed=secrets.randbits(63), size=2048, rounds=8, precision="bf16")
    checkpoints = device_checkpoints(challenge)
    on_device = DeviceProver(challenge, checkpoints)
    rows = list(checkpoints.cpu().numpy())
    assert sha256.to_host(on_device.levels[0]) == [leaf(challenge, k, i, checkpoint[i].tobytes())
                                                    for k, checkpoint in enumerate(rows, start=1)
                                                    for i in range(challenge.size)]
    assert on_device.root == Prover(challenge, rows).root


@pytest.mark.gpu
def test_a_cuda_worker_answers_with_its_root_and_timings_and_its_openings_pass() -> None:
    from compute.challenge_node import ChallengeWorker

    challenge = Challenge(seed=secrets.randbits(63), size=2048, rounds=8, precision="bf16")
    worker = ChallengeWorker("cuda")  # the actor's class, in this process: no Ray needed to commit
    answer = worker.commit({**challenge.params(), "seed": challenge.seed})
    assert set(answer) == {"root", "rounds_s", "commit_s"}
    assert answer["rounds_s"] > 0 and answer["commit_s"] > 0
    assert isinstance(worker.prover, DeviceProver)
    cells = sample(challenge)
    check(challenge, root_from_hex(answer["root"]), cells, [opening_from_json(o) for o in worker.open(cells)])
