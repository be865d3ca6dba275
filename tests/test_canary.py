"""The oracle's canaries for a serving lease (compute.serving): the bodies come from a seed alone,
the lease's own model answers within the tolerance, and another model's answers, or garbage, do not."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from compute.runners.params import Scope, ServeParams
from compute.serving import canary_bodies, canary_matches, load_predictor


def _predictor(model: str, seed: int):
    return load_predictor(ServeParams.parse({"model": model, "ends_at": 1.0}, Scope("canary", "serve")), seed)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32), model=st.sampled_from(["mlp", "tiny-transformer"]))
def test_a_lease_of_the_same_model_matches_and_another_model_does_not(seed: int, model: str) -> None:
    own, served, other = _predictor(model, 7), _predictor(model, 7), _predictor(model, 8)
    bodies = canary_bodies(own, seed, 4)
    assert bodies == canary_bodies(served, seed, 4), "drawn from the seed alone"
    expected = own([own.check(b) for b in bodies])
    # The lease answers them batched with others; the oracle, one by one: still the same model.
    batched = served([served.check(b) for b in [*bodies, *canary_bodies(served, seed + 1, 3)]])[:4]
    assert all(canary_matches(e, {"output": a["output"]})[0] for e, a in zip(expected, batched, strict=True))
    wrong = other([other.check(b) for b in bodies])
    assert not any(canary_matches(e, {"output": a["output"]})[0]
                   for e, a in zip(expected, wrong, strict=True))


def test_garbage_and_malformed_answers_do_not_match() -> None:
    own = _predictor("mlp", 7)
    [expected] = own([own.check(canary_bodies(own, 1, 1)[0])])
    size = len(expected["output"])
    for answer in ({"output": [0.0] * size}, {"output": [v * 1.5 for v in expected["output"]]},
                   {"output": expected["output"][:-1]}, {"output": [float("nan")] * size}, {"output": "x"},
                   "text", {}):
        matched, why = canary_matches(expected, answer)
        assert not matched and why
    close = {"output": [v * (1 + 1e-6) for v in expected["output"]]}
    assert canary_matches(expected, close)[0], "fp32 rounding between a batch and a row is within the bound"
