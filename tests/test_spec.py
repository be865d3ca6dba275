"""Job specs: the examples load, every malformed spec gets one sentence naming its field,
deadlines parse, and the canonical form loads back into the same spec."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compute.errors import ComputeError
from compute.jobs import validate as validate_compute_job
from compute.reference import normalize_model
from compute.runners.params import FinetuneParams, TrainParams
from ledger import specs
from ledger.units import ONE
from market.spec import JobSpec, Resources, SpecError, load_spec, parse_deadline, parse_spec, validate_spec

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NOW = 1_800_000_000  # 2027-01-15; every test judges deadlines by this clock
VALID: dict[str, Any] = {
    "kind": "train",
    "model": "mlp",
    "dataset": "synthetic-classification",
    "resources": {"workers": 2, "gpus_per_worker": 1, "gpu_model": "a100", "vram_gb_per_worker": 40,
                  "cpus_per_worker": 4, "memory_gb": 16},
    "max_price_per_unit": "0.25",
    "max_units": 1000,
    "deadline": "2h",
    "min_provider_score": 0.5,
    "priority": 5,
    "replicas": 1,
    "seed": 3,
    "params": {"epochs": 2, "lr": 0.01},
}
REQUIRED = ["kind", "model", "dataset", "resources", "max_price_per_unit", "max_units", "deadline",
            "resources.workers"]
INT_FIELDS = ["resources.workers", "resources.gpus_per_worker", "resources.nodes", "max_units", "priority",
              "replicas", "seed"]
FLOAT_FIELDS = ["resources.vram_gb_per_worker", "resources.cpus_per_worker", "resources.memory_gb",
                "min_provider_score"]
settings.register_profile("spec", deadline=None, suppress_health_check=[HealthCheck.too_slow])


def mutated(path: str, value: Any = None, *, drop: bool = False) -> dict[str, Any]:
    spec = copy.deepcopy(VALID)
    *parents, leaf = path.split(".")
    node = spec
    for part in parents:
        node = node[part]
    if drop:
        del node[leaf]
    else:
        node[leaf] = value
    return spec


def refused(data: Any, field: str) -> str:
    """Asserts that `data` is refused with one sentence about `field`, and returns it."""
    with pytest.raises(SpecError) as caught:
        validate_spec(data, now=NOW)
    message = str(caught.value)
    assert caught.value.field == field, message
    assert message.startswith(f"spec field {field} "), message
    assert "\n" not in message and message.endswith("."), message
    return message


# ── valid specs ─────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_spec_loads_and_makes_a_valid_compute_job(path: Path) -> None:
    spec = load_spec(path)
    job = spec.to_compute_job("7", "0x" + "ab" * 20, storage="/results")
    validate_compute_job(job)
    assert job.kind == spec.kind and job.workers == spec.resources.workers and job.seed == spec.seed


# The serving examples are a served model's specs, not jobs' (tests/test_serving_escrow.py reads them).
PROJECTS = sorted(p for p in EXAMPLES.glob("*/*.yaml") if p.parent.name != "serving")


@pytest.mark.parametrize("path", PROJECTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_example_projects_spec_loads_with_what_it_brings_named(path: Path) -> None:
    spec = load_spec(path)
    assert spec.unpinned(), "an example's spec names local files that `swarm job post` pins"
    if spec.kind != "ray":
        assert set(spec.brought()) == {"model", "dataset"}
        assert spec.to_compute_job("7", "0x" + "ab" * 20, storage="/results").kind == spec.kind


def test_the_examples_cover_every_kind_and_replication() -> None:
    specs_ = [load_spec(p) for p in EXAMPLES.glob("*.yaml")]
    assert {s.kind for s in specs_} == {"train", "finetune", "infer", "tune"}
    assert any(s.replicas == 2 for s in specs_)
    finetune = next(s for s in specs_ if s.kind == "finetune")
    assert isinstance(finetune.model, str) and finetune.model.startswith("job:")


def test_defaults_fill_the_optional_fields() -> None:
    optional = ("min_provider_score", "priority", "replicas", "seed", "params")
    spec = validate_spec({k: v for k, v in VALID.items() if k not in optional}, now=NOW)
    assert [getattr(spec, name) for name in optional] == [0.0, 5, 1, 0, {}]


def test_gpu_model_is_read_in_any_case_and_stored_under_its_reference_name() -> None:
    for written in ("a100", "A100", "NVIDIA A100-SXM4-80GB", "rtx 4090"):
        spec = validate_spec(mutated("resources.gpu_model", written), now=NOW)
        assert spec.resources.gpu_model == normalize_model(written)


def test_escrow_is_price_times_units_in_wei() -> None:
    spec = validate_spec(VALID, now=NOW)
    assert spec.max_price_per_unit == ONE // 4
    assert spec.escrow_wei == 1000 * ONE // 4


def test_price_accepts_numbers_and_wei_strings() -> None:
    assert validate_spec(mutated("max_price_per_unit", 2), now=NOW).max_price_per_unit == 2 * ONE
    assert validate_spec(mutated("max_price_per_unit", 0.5), now=NOW).max_price_per_unit == ONE // 2
    assert validate_spec(mutated("max_price_per_unit", "123wei"), now=NOW).max_price_per_unit == 123


# ── deadlines ───────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize(("written", "seconds"), [("30m", 1_800), ("2h", 7_200), ("1d12h", 129_600),
                                                  ("90s", 90), ("1w", 604_800), ("1h 30m", 5_400)])
def test_a_duration_deadline_counts_from_now(written: str, seconds: int) -> None:
    assert parse_deadline(written, now=NOW) == NOW + seconds
    assert validate_spec(mutated("deadline", written), now=NOW).deadline == NOW + seconds


@pytest.mark.parametrize("written", ["2027-01-15T10:00:00Z", "2027-01-15T11:00:00+01:00",
                                     "2027-01-15 10:00:00+00:00"])
def test_an_iso_deadline_with_a_timezone_is_unix_seconds(written: str) -> None:
    assert parse_deadline(written, now=NOW) == NOW + 7_200  # NOW is 08:00 UTC that day


def _unix(iso: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(iso).timestamp())


def test_an_unquoted_yaml_timestamp_is_a_deadline() -> None:
    text = json.dumps({**VALID, "deadline": "X"}).replace('"X"', "2027-02-01T00:00:00Z")
    spec = parse_spec(text, "yaml", now=NOW)
    assert spec.deadline == _unix("2027-02-01T00:00:00+00:00")


def test_an_iso_deadline_without_a_timezone_is_refused_with_the_fix() -> None:
    assert "timezone" in refused(mutated("deadline", "2027-02-01T00:00:00"), "deadline")


# ── malformed specs, generated ──────────────────────────────────────────────────────

wrong_for_int = st.one_of(st.text(max_size=5), st.booleans(), st.floats(allow_nan=False),
                          st.lists(st.integers(), max_size=2), st.none())
wrong_for_float = st.one_of(st.text(max_size=5), st.booleans(), st.lists(st.floats(), max_size=2), st.none())
out_of_range = st.one_of(
    st.tuples(st.just("resources.workers"), st.integers(max_value=0)),
    st.tuples(st.just("resources.nodes"), st.integers(max_value=0)),
    st.tuples(st.just("resources.gpus_per_worker"), st.integers(max_value=-1)),
    st.tuples(st.just("resources.vram_gb_per_worker"), st.floats(max_value=-0.001, allow_infinity=False)),
    st.tuples(st.just("resources.cpus_per_worker"), st.floats(max_value=0, allow_infinity=False)),
    st.tuples(st.just("resources.memory_gb"), st.floats(max_value=-0.001, allow_infinity=False)),
    st.tuples(st.just("max_units"), st.integers(max_value=0)),
    st.tuples(st.just("min_provider_score"), st.floats(min_value=1.0001, allow_infinity=False)
              | st.floats(max_value=-0.0001, allow_infinity=False)),
    st.tuples(st.just("priority"), st.integers(max_value=-1) | st.integers(min_value=11)),
    st.tuples(st.just("replicas"), st.integers(max_value=0) | st.integers(min_value=4)),
    st.tuples(st.just("seed"), st.integers(max_value=-1)),
)
bad_amounts = st.sampled_from(["", "abc", "-1", "0", "0.0", "1e-19", "0.0000000000000000001", "1.2.3", "nan",
                               "inf", "-0.5", "0wei", "tenSWARM", True, None, [1]]) | st.integers(max_value=0)


def _not_a_gpu(name: str) -> bool:
    try:
        return normalize_model(name) == "cpu"
    except ComputeError:
        return True


@settings(settings.get_profile("spec"), max_examples=10)
@given(st.sampled_from(REQUIRED))
def test_a_missing_required_field_is_named(path: str) -> None:
    assert "is required" in refused(mutated(path, drop=True), path)


@settings(settings.get_profile("spec"), max_examples=30)
@given(st.sampled_from(INT_FIELDS), wrong_for_int)
def test_a_non_integer_where_an_integer_belongs_is_named(path: str, value: Any) -> None:
    assert "integer" in refused(mutated(path, value), path)


@settings(settings.get_profile("spec"), max_examples=20)
@given(st.sampled_from(FLOAT_FIELDS), wrong_for_float)
def test_a_non_number_where_a_number_belongs_is_named(path: str, value: Any) -> None:
    assert "number" in refused(mutated(path, value), path)


@settings(settings.get_profile("spec"), max_examples=40)
@given(out_of_range)
def test_an_out_of_range_number_is_named_with_its_range(case: tuple[str, Any]) -> None:
    path, value = case
    refused(mutated(path, value), path)


@settings(settings.get_profile("spec"), max_examples=20)
@given(st.sampled_from(["", "resources"]), st.from_regex(r"[a-z_]{1,12}", fullmatch=True))
def test_an_unknown_field_is_refused_with_the_known_ones(parent: str, key: str) -> None:
    known = set(JobSpec.model_fields if not parent else Resources.model_fields)
    if key in known:
        return
    path = f"{parent}.{key}" if parent else key
    message = refused(mutated(path, 1), path)
    # Named with the nearest known field where one is near, else with every known field.
    near = re.search(r"\(did you mean (\w+)\?\)\.$", message)
    assert (near is not None and near[1] in known) or "not allowed; known fields" in message, message


@pytest.mark.parametrize(("wrong", "right", "parent"), [("max_unit", "max_units", ""),
                                                        ("max_price", "max_price_per_unit", ""),
                                                        ("worker", "workers", "resources")])
def test_a_misspelt_required_field_is_named_with_the_field_it_meant(wrong: str, right: str,
                                                                    parent: str) -> None:
    """A misspelt required field is missing too; the sentence names the misspelling, not the absence."""
    spec = mutated(f"{parent}.{right}" if parent else right, drop=True)
    (spec[parent] if parent else spec)[wrong] = 3
    path = f"{parent}.{wrong}" if parent else wrong
    assert refused(spec, path).endswith(f"is not a known field{' of ' + parent if parent else ''} "
                                        f"(did you mean {right}?).")


@settings(settings.get_profile("spec"), max_examples=15)
@given(st.text(max_size=10).filter(lambda k: k not in ("train", "finetune", "infer", "tune")))
def test_an_unknown_kind_is_refused_with_the_kinds(kind: str) -> None:
    assert "train, finetune, infer, tune" in refused(mutated("kind", kind), "kind")


@settings(settings.get_profile("spec"), max_examples=15)
@given(st.from_regex(r"[a-z0-9-]{1,12}", fullmatch=True).filter(lambda m: m not in ("mlp",
                                                                                    "tiny-transformer")))
def test_an_unknown_model_for_training_is_refused_with_the_models(model: str) -> None:
    assert "mlp, tiny-transformer" in refused(mutated("model", model), "model")


@settings(settings.get_profile("spec"), max_examples=15)
@given(st.text(min_size=1, max_size=12).filter(_not_a_gpu))
def test_an_unknown_gpu_model_is_refused_with_the_models(name: str) -> None:
    assert "H100" in refused(mutated("resources.gpu_model", name), "resources.gpu_model")


@settings(settings.get_profile("spec"), max_examples=15)
@given(st.one_of(st.integers(max_value=NOW), st.sampled_from(["0m", "0h", "2020-01-01T00:00:00Z",
                                                              "2027-01-15T07:59:59+00:00"])))
def test_a_deadline_not_in_the_future_is_refused(deadline: Any) -> None:
    assert "future" in refused(mutated("deadline", deadline), "deadline")


@settings(settings.get_profile("spec"), max_examples=10)
@given(st.sampled_from(["soon", "2h later", "h", "yesterday", "2027-13-01T00:00:00Z"]) | st.booleans()
       | st.floats(allow_nan=False))
def test_an_unreadable_deadline_is_refused_with_the_forms(deadline: Any) -> None:
    refused(mutated("deadline", deadline), "deadline")


@settings(settings.get_profile("spec"), max_examples=25)
@given(bad_amounts)
def test_a_bad_price_is_refused(amount: Any) -> None:
    assert "token amount" in refused(mutated("max_price_per_unit", amount), "max_price_per_unit")


@settings(settings.get_profile("spec"), max_examples=20)
@given(st.sampled_from([("epochs", 0), ("epochs", "3"), ("lr", -1.0), ("batch_size", 0), ("precision", "fp8"),
                        ("samples", 5), ("max_failures", -1), ("lr", True)]))
def test_a_parameter_the_runner_refuses_is_named(case: tuple[str, Any]) -> None:
    key, value = case
    refused(mutated(f"params.{key}", value), f"params.{key}")


@settings(settings.get_profile("spec"), max_examples=15)
@given(st.from_regex(r"[a-z_]{1,12}", fullmatch=True))
def test_an_unknown_parameter_is_refused_with_the_known_ones(key: str) -> None:
    if key in ("samples", "epochs", "batch_size", "lr", "precision", "max_failures", "model", "dataset"):
        return
    assert "known ones are" in refused(mutated(f"params.{key}", 1), f"params.{key}")


# ── malformed specs, by hand ────────────────────────────────────────────────────────

def test_the_model_and_dataset_cannot_be_set_twice() -> None:
    assert "top-level model" in refused(mutated("params.model", "mlp"), "params.model")


def test_a_dataset_that_is_unknown_or_does_not_suit_the_model_is_refused() -> None:
    unknown = refused(mutated("dataset", "imagenet.tfrecord"), "dataset")
    assert "unknown format (.tfrecord); give Parquet (.parquet), CSV (.csv) or JSON Lines" in unknown
    mismatch = refused(mutated("dataset", "synthetic-sequences"), "dataset")
    assert "trains on synthetic-classification" in mismatch
    sequences = refused(
        {**VALID, "model": "tiny-transformer", "dataset": "s3://bucket/rows.parquet"}, "model"
    )
    assert "a table of features trains the mlp" in sequences


def test_a_table_the_buyer_brings_is_named_like_an_input_and_pinned() -> None:
    sha = "ab" * 32
    spec = validate_spec(mutated("dataset", "s3://bucket/digits.parquet"))
    assert spec.unpinned() == ["dataset"]
    pinned = validate_spec(mutated("dataset", {"uri": "s3://bucket/digits.parquet", "sha256": sha}))
    params = pinned.order(NOW).params
    assert isinstance(params, TrainParams)
    assert pinned.unpinned() == [] and params.dataset == "s3://bucket/digits.parquet"
    assert validate_spec(mutated("dataset", "synthetic-classification")).unpinned() == []
    tune = {**VALID, "kind": "tune", "model": {"uri": "s3://bucket/model", "sha256": sha}}
    assert "model's name" in refused(tune, "model")  # tune searches over a built-in model


def test_a_transformers_checkpoint_the_buyer_brings_trains_on_a_table_of_texts() -> None:
    sha = "ab" * 32
    spec = validate_spec({**VALID, "model": "./model", "dataset": "s3://bucket/reviews.parquet"}, now=NOW)
    assert spec.unpinned() == ["model", "dataset"] and set(spec.brought()) == {"model", "dataset"}
    pinned = validate_spec({**VALID, "model": {"uri": "s3://bucket/model", "sha256": sha},
                            "dataset": {"uri": "s3://bucket/reviews.parquet", "sha256": sha}}, now=NOW)
    params = pinned.order(NOW).params
    assert isinstance(params, TrainParams)
    assert pinned.unpinned() == [] and params.model == "s3://bucket/model"
    assert "table of texts" in refused({**VALID, "model": "./model"}, "dataset")  # not a built-in dataset
    assert "./model" in refused(mutated("model", "model"), "model")  # a bare word is a model's name


def test_gpu_settings_without_gpus_are_refused() -> None:
    spec = mutated("resources.gpus_per_worker", 0)
    assert "gpus_per_worker" in refused(spec, "resources.gpu_model")


def test_a_bad_tune_search_space_is_named() -> None:
    spec = {**VALID, "kind": "tune", "resources": {"workers": 1},
            "params": {"search_space": {"lr": {"uniform": [1, 0]}}}}
    assert "search_space.lr" in refused(spec, "params.search_space")


def test_a_finetune_must_name_a_job_or_a_path() -> None:
    spec = {**VALID, "kind": "finetune", "params": {}}
    refused({**spec, "model": "job:"}, "model")
    assert validate_spec({**spec, "model": "job:12"}, now=NOW).model == "job:12"


@pytest.mark.parametrize(("name", "text", "says"), [
    ("bad.yaml", "kind: [train\n", "not valid YAML"),
    ("bad.json", "{\"kind\": ", "not valid JSON"),
    ("list.yaml", "- kind: train\n", "must hold a mapping"),
    ("empty.yaml", "", "must hold a mapping"),
])
def test_an_unreadable_spec_file_is_named(tmp_path: Path, name: str, text: str, says: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(SpecError) as caught:
        load_spec(tmp_path / name, now=NOW)
    message = str(caught.value)
    assert says in message and str(tmp_path / name) in message and "\n" not in message


def test_a_missing_spec_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot be read"):
        load_spec(tmp_path / "nope.yaml")


# ── canonical form ──────────────────────────────────────────────────────────────────

@settings(settings.get_profile("spec"), max_examples=25)
@given(price=st.integers(min_value=1, max_value=10**30), units=st.integers(min_value=1, max_value=10**9),
       gpu=st.sampled_from([None, "h100", "T4", "rtx4090"]), replicas=st.integers(1, 3))
def test_canonical_form_loads_back_into_the_same_spec(price: int, units: int, gpu: str | None,
                                                     replicas: int) -> None:
    data = {**VALID, "max_price_per_unit": f"{price}wei", "max_units": units, "replicas": replicas,
            "resources": {**VALID["resources"], "gpu_model": gpu}}
    spec = validate_spec(data, now=NOW)
    canonical = spec.canonical()
    assert json.loads(json.dumps(canonical)) == canonical
    assert isinstance(canonical["max_price_per_unit"], str) and isinstance(canonical["deadline"], int)
    assert validate_spec(canonical, now=NOW) == spec
    assert parse_spec(json.dumps(canonical), "json", now=NOW) == spec


def test_a_stored_spec_reads_back_under_its_hash(tmp_path: Path) -> None:
    spec = validate_spec(VALID, now=NOW)
    digest = specs.store_spec(tmp_path, spec.canonical())
    assert validate_spec(specs.load_spec(tmp_path, digest), now=NOW) == spec


def test_a_finetune_of_a_job_runs_on_that_jobs_result(tmp_path: Path) -> None:
    spec = validate_spec({**VALID, "kind": "finetune", "model": "job:4", "params": {}}, now=NOW)
    assert spec.prior_job == 4
    job = spec.to_compute_job(
        "5", "0x" + "cd" * 20, storage=str(tmp_path), now=NOW, prior_result=str(tmp_path / "4")
    )
    assert job.params_of(FinetuneParams).base_checkpoint == str(tmp_path / "4")
    assert job.use_gpu and job.timeout_s == 7_200


def test_the_catalog_names_each_built_in_models_constructor_arguments() -> None:
    """Specs are checked against compute.catalog without torch; it must say what compute.models builds."""
    import inspect

    from compute.catalog import MODEL_ARGS
    from compute.models import MODELS

    assert set(MODELS) == set(MODEL_ARGS)
    for name, factory in MODELS.items():
        assert tuple(inspect.signature(factory).parameters) == MODEL_ARGS[name]


@pytest.mark.parametrize(("written", "seconds"), [("30m", 1_800), ("1h30m", 5_400), (90, 90)])
def test_a_max_runtime_is_a_duration_within_the_deadline(written: Any, seconds: int) -> None:
    spec = validate_spec(mutated("max_runtime", written) | {"deadline": NOW + 7_200}, now=NOW)
    assert spec.max_runtime == seconds and spec.canonical()["max_runtime"] == seconds
    assert spec.order(NOW).run_seconds(NOW) == seconds, "the site's lease is bounded by it"
    assert "max_runtime" not in validate_spec(VALID, now=NOW).canonical(), "none: the spec hashes as before"


@pytest.mark.parametrize(("written", "says"), [
    ("3h", "is 10,800 s, longer than the 7,200 s until the deadline; shorten it or move the deadline."),
    ("soon", "must be how long the job may run once it starts"),
    (0, "must be at least a second (got 0)."),
])
def test_a_max_runtime_past_the_deadline_or_malformed_is_refused(written: Any, says: str) -> None:
    assert says in refused(mutated("max_runtime", written) | {"deadline": NOW + 7_200}, "max_runtime")


# ── nodes ───────────────────────────────────────────────────────────────────────────

RAY = {"kind": "ray", "code": {"uri": "s3://code/x.tar", "sha256": "ab" * 32}, "output": "s3://results",
       "resources": {"workers": 2, "cpus_per_worker": 2, "memory_gb": 4}, "max_price_per_unit": "0.001",
       "max_units": 10, "deadline": "1h", "params": {"entrypoint": "python train.py"}}


def test_a_spec_of_one_node_is_the_default_and_hashes_as_before_the_field() -> None:
    spec = validate_spec(VALID, now=NOW)
    assert spec.resources.nodes == 1
    assert "nodes" not in spec.canonical()["resources"], "a spec of one node hashes as it did before"
    assert validate_spec(mutated("resources.nodes", 1), now=NOW).canonical() == spec.canonical()


@pytest.mark.parametrize("base", [VALID, RAY], ids=["train", "ray"])
def test_a_train_or_ray_job_of_several_nodes_runs_workers_on_each_node(base: dict[str, Any]) -> None:
    data = copy.deepcopy(base)
    data["resources"]["nodes"] = 3
    spec = validate_spec(data, now=NOW)
    assert spec.canonical()["resources"]["nodes"] == 3 and validate_spec(spec.canonical(), now=NOW) == spec
    r = spec.order(NOW).resources
    per_worker = spec.resources
    assert (r.nodes, r.workers) == (3, per_worker.workers)
    assert (r.cpus, r.gpus) == (per_worker.workers * per_worker.cpus_per_worker,
                                per_worker.workers * per_worker.gpus_per_worker), "one node's share"
    assert (r.total_workers, r.total_cpus, r.total_gpus) == (3 * r.workers, 3 * r.cpus, 3 * r.gpus)
    job = spec.to_compute_job("7", "0x" + "ab" * 20, storage="/results", now=NOW)
    assert job.workers == 3 * per_worker.workers, "a Ray Train gang's num_workers spans every node"


@pytest.mark.parametrize("kind", ["infer", "finetune", "tune"])
def test_a_kind_that_runs_on_one_machine_refuses_several_nodes_with_the_fix(kind: str) -> None:
    params = {"search_space": {"lr": {"uniform": [0.001, 0.1]}}} if kind == "tune" else {}
    data = mutated("resources.nodes", 2) | {"kind": kind, "params": params}
    if kind in ("infer", "finetune"):
        data["model"] = "job:3"
    if kind == "infer":
        data["dataset"] = "s3://bucket/rows.npy"
    message = refused(data, "resources.nodes")
    assert f"must be 1 for kind {kind}" in message
    assert "only train and ray jobs run across machines" in message
    assert message.endswith("remove it or set it to 1.")
    assert validate_spec(data | {"resources": {**data["resources"], "nodes": 1}}, now=NOW).kind == kind


def test_a_site_reading_a_posted_spec_refuses_several_nodes_for_a_kind_of_one_machine() -> None:
    """A spec posted around `swarm job post` is read by the site with the same rule."""
    from compute.errors import InvalidJob
    from compute.order import Order

    spec = validate_spec(VALID, now=NOW).canonical()
    posted = spec | {"kind": "tune", "params": {}, "resources": {**spec["resources"], "nodes": 2}}
    with pytest.raises(InvalidJob) as caught:
        Order.read(json.dumps(posted).encode())
    assert caught.value.field == "resources.nodes"
    for nodes in (0, 1.5, "2", True):
        with pytest.raises(InvalidJob, match=r"resources\.nodes must be an integer of at least 1"):
            Order.from_spec(spec | {"resources": {**spec["resources"], "nodes": nodes}})
