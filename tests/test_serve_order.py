"""The serving order is one definition (compute/serve_order.py): its fields and defaults are the
serve runner's and the order's own, a buyer's spec and the site's wire read through one parser,
and what is written is read back the same."""

from __future__ import annotations

import dataclasses
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute.errors import InvalidJob
from compute.runners.params import ServeParams
from compute.serve_order import FORMAT, RUNNER_FIELDS, SITE_SET, ServeOrder
from ledger.errors import InvalidInput
from market.serving import order_from_spec, spec_fields

NOW = 1_800_000_000
SHA = "ab" * 32


def test_the_orders_fields_are_the_runners_less_what_the_site_sets_and_the_orders_terms() -> None:
    runner = {f.name for f in dataclasses.fields(ServeParams)}
    assert set(RUNNER_FIELDS) == runner - set(SITE_SET)
    assert set(ServeOrder.fields()) == set(RUNNER_FIELDS) | {
        "ends_at", "price_per_request", "price_per_token", "checkpoint", "memory_gb", "seed"}
    # a buyer's spec names the same fields, three of them in its own notation
    assert set(spec_fields()) == set(ServeOrder.fields()) - {
        "checkpoint", "price_per_request", "price_per_token"} | {"price", "duration"}


def test_an_order_left_to_its_defaults_takes_the_runners() -> None:
    order = ServeOrder.parse({"ends_at": NOW + 60, "price_per_request": 5}, NOW)
    defaults = ServeParams()
    for name in RUNNER_FIELDS:
        assert getattr(order.runner, name) == getattr(defaults, name), name
    params = order.params("")
    assert params.ends_at == NOW + 60 and params.checkpoint == "" and params.socket == defaults.socket


def test_a_spec_and_the_wire_read_into_the_same_order() -> None:
    spec = {"model": {"uri": "s3://models/bert", "sha256": SHA}, "task": "generate", "max_tokens": 32,
            "replicas": 2, "price": {"per_token": "0.000001"}, "ends_at": NOW + 600}
    from_spec = order_from_spec(spec, now=NOW)
    from_wire = ServeOrder.read(from_spec.to_json(), now=NOW)
    assert from_wire == from_spec
    assert from_spec.model == "s3://models/bert" and from_spec.sha256 == SHA
    assert from_spec.price_per_token == 10**12 and from_spec.price_per_request == 0
    assert from_spec.params("inputs/checkpoint/bert").checkpoint == "inputs/checkpoint/bert"


@settings(max_examples=60, deadline=None)
@given(replicas=st.integers(1, 64), batch=st.integers(1, 1024), wait=st.floats(0, 1),
       tokens=st.integers(1, 4096), memory=st.floats(0.1, 1024), seed=st.integers(0, 2**31),
       price=st.integers(1, 2**128 - 1), ahead=st.integers(10, 30 * 86_400))
def test_every_valid_order_survives_the_wire_whole(replicas: int, batch: int, wait: float, tokens: int,
                                                   memory: float, seed: int, price: int, ahead: int) -> None:
    order = ServeOrder.parse({"replicas": replicas, "min_replicas": 1, "max_batch_size": batch,
                              "max_batch_wait_s": wait, "max_tokens": tokens, "memory_gb": memory,
                              "seed": seed, "price_per_request": price, "ends_at": NOW + ahead}, NOW)
    assert ServeOrder.read(order.to_json(), now=NOW) == order
    assert ServeOrder.parse(order.as_dict()) == order  # a site's record read back


@pytest.mark.parametrize(("raw", "words"), [
    ({"colour": 1}, "no field colour"),
    ({"replicas": "two"}, "replicas must be an integer"),
    ({"replicas": 0}, "replicas must be from min_replicas"),
    ({"memory_gb": True}, "memory_gb must be a number"),
    ({"memory_gb": 4096}, "memory_gb must be from 0 to 1024"),
    ({"price_per_request": 0}, "give one price"),
    ({"price_per_request": "1.5"}, "whole number of wei"),
    ({"price_per_token": 3, "price_per_request": 0}, "per_token is for task generate"),
    ({"model": "gpt-9"}, "model must be one of"),
    ({"checkpoint": {"uri": "models/bert", "sha256": SHA}}, "where it lies"),
    ({"checkpoint": {"uri": "s3://m/b", "sha256": "no"}}, "checkpoint.sha256 must be 64 hex digits"),
    ({"ends_at": NOW + 1}, "ends_at must lie from 10 s"),
    ({"socket": "../../x"}, "no field socket"),
])
def test_a_bad_order_is_refused_in_one_sentence_that_names_the_field(raw: dict, words: str) -> None:
    with pytest.raises(InvalidJob, match=words):
        ServeOrder.parse({"ends_at": NOW + 60, "price_per_request": 5} | raw, NOW)


def test_the_wire_refuses_another_format_and_a_body_that_is_not_json() -> None:
    order = ServeOrder.parse({"ends_at": int(time.time()) + 60, "price_per_request": 5})
    body = order.to_json().replace(f'"format":{FORMAT}'.encode(), b'"format":1')
    with pytest.raises(InvalidJob, match=f"format {FORMAT}"):
        ServeOrder.read(body)
    with pytest.raises(InvalidJob, match="not JSON"):
        ServeOrder.read(b"{")


def test_a_spec_names_its_own_notation_when_it_is_wrong() -> None:
    with pytest.raises(InvalidInput, match="the serving spec's model must be"):
        order_from_spec({"model": 3, "price": {"per_request": "1"}}, now=NOW)
    with pytest.raises(InvalidInput, match="a duration or an ends_at, not both"):
        order_from_spec({"price": {"per_request": "1"}, "duration": "1h", "ends_at": NOW + 60}, now=NOW)
