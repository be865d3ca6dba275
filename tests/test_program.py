"""A buyer's own Ray program (kind `ray`): its code packed the same way every time and pinned by
its sha256, its inputs checked by the site against their pins before anything runs, its
results written to the buyer's own storage — a local directory, and a real S3 server
(tests/object_store.py). The Ray Train example learns the digits in a lease, its data and code
read from S3 and its result written back there."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compute import dataplane
from compute.manifest import build_manifest, manifest_hash, record_hash
from compute.order import Order
from ledger.errors import SwarmError
from market.spec import Input, SpecError, validate_spec
from market.storage import failed_log, pin, verify
from provider.lease.launch import launch
from provider.lease.outcome import reports
from provider.lease.plan import LeasePlan, plan_lease
from tests.object_store import S3Store
from tests.programs import program_plan, with_program

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "digits"
# A plain program's lease starts no Ray: it runs in `make test`'s light lane (tests/conftest.py).
LIGHT = pytest.mark.light
NOW = 1_900_000_000

names_st = st.from_regex(r"[a-z]{1,6}(/[a-z]{1,6}){0,2}\.(py|txt)", fullmatch=True)
tree_st = st.dictionaries(names_st, st.tuples(st.binary(max_size=300), st.booleans()), min_size=1, max_size=6)


def write_tree(root: Path, tree: dict[str, tuple[bytes, bool]], order: list[str], mtime: int) -> Path:
    for name in order:
        path = root / name
        if path.exists() or any(p.is_file() for p in path.parents if p != root and p.is_relative_to(root)):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        content, executable = tree[name]
        path.write_bytes(content)
        path.chmod(0o750 if executable else 0o600)
        os.utime(path, (mtime, mtime))
    return root


# ── packing and pinning ─────────────────────────────────────────────────────────────

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=tree_st, shuffle=st.randoms(use_true_random=False), mtime=st.integers(0, 2**31 - 1))
def test_packing_depends_only_on_names_contents_and_executable_bits(
    tmp_path_factory, tree, shuffle, mtime
) -> None:
    names = sorted(tree)
    if any(b != a and b.startswith(a.rsplit(".", 1)[0] + "/") for a in names for b in names):
        return  # a file and a directory of one name cannot both exist
    first = write_tree(tmp_path_factory.mktemp("a"), tree, names, 0)
    other_order = names[:]
    shuffle.shuffle(other_order)
    second = write_tree(tmp_path_factory.mktemp("b"), tree, other_order, mtime)
    packed = dataplane.pack(first)
    assert dataplane.pack(second) == packed, "another order, another time, other permissions: the same tar"

    unpacked = tmp_path_factory.mktemp("unpacked")
    archive = unpacked.parent / f"{unpacked.name}.tar"
    archive.write_bytes(packed)
    dataplane.unpack(archive, unpacked)
    for name, (content, executable) in tree.items():
        assert (unpacked / name).read_bytes() == content
        assert os.access(unpacked / name, os.X_OK) == executable

    changed = next(iter(tree))
    (first / changed).write_bytes(tree[changed][0] + b"!")
    assert hashlib.sha256(dataplane.pack(first)).digest() != hashlib.sha256(packed).digest()


def test_packing_leaves_out_caches_and_refuses_links(tmp_path: Path) -> None:
    code = tmp_path / "code"
    (code / "__pycache__").mkdir(parents=True)
    (code / "train.py").write_text("print('hi')\n")
    (code / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"cache")
    with tarfile.open(fileobj=io.BytesIO(dataplane.pack(code))) as tar:
        assert tar.getnames() == ["train.py"]
    (code / "secrets").symlink_to("/etc/passwd")
    with pytest.raises(dataplane.DataPlaneError, match="secrets, which is a link"):
        dataplane.pack(code)


def test_unpacking_refuses_a_member_that_would_land_outside(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("../escaped.py")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"boom"))
    with pytest.raises(dataplane.DataPlaneError, match="cannot be unpacked"):
        dataplane.unpack(archive, tmp_path / "lease")
    assert not (tmp_path / "escaped.py").exists()


@pytest.mark.parametrize("as_directory", [False, True])
def test_an_input_that_does_not_hash_to_its_pin_is_refused_and_nothing_stays(tmp_path: Path,
                                                                               as_directory: bool) -> None:
    source = tmp_path / "data"
    if as_directory:
        (source / "part").mkdir(parents=True)
        (source / "part" / "0.csv").write_text("a,b\n1,2\n")
        (source / "1.csv").write_text("a,b\n3,4\n")
        expected = manifest_hash([{"path": p, "size": (source / p).stat().st_size,
                                   "sha256": hashlib.sha256((source / p).read_bytes()).hexdigest()}
                                  for p in ("1.csv", "part/0.csv")]).removeprefix("0x")
    else:
        source.write_text("a,b\n1,2\n")
        expected = hashlib.sha256(source.read_bytes()).hexdigest()
    assert dataplane.digest(str(source)) == expected
    staged = dataplane.stage(str(source), expected, tmp_path / "lease" / "data")
    assert staged == (tmp_path / "lease" / "data" if as_directory else tmp_path / "lease" / "data" / "data")

    with pytest.raises(
        dataplane.DigestMismatch, match=f"input {source} has sha256 {expected}, not the 00+ its"
    ):
        dataplane.stage(str(source), "0" * 64, tmp_path / "other" / "data")
    assert list((tmp_path / "other").iterdir()) == [], "a copy that failed its pin is not left behind"


# ── the spec ─────────────────────────────────────────────────────────────────────────

RAY = {"kind": "ray", "code": {"uri": "s3://code/x.tar", "sha256": "ab" * 32}, "output": "s3://results",
       "resources": {"workers": 1}, "max_price_per_unit": "0.001", "max_units": 10, "deadline": NOW + 3_600,
       "params": {"entrypoint": "python train.py"}}


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"code": None}, "code", "is required for a ray job"),
        ({"output": None}, "output", "is required for a ray job"),
        ({"code": {"uri": "s3://code/x.tar", "sha256": "xyz"}}, "code.sha256", "must be 64 hex digits"),
        ({"inputs": {"digits": {"uri": "s3://d"}}}, "inputs.digits.sha256", "is required"),
        ({"inputs": {"my-data": "data.parquet"}}, "inputs.my-data", "letters, digits and _"),
        ({"params": {}}, "params.entrypoint", "must be the command"),
        (
            {"params": {"entrypoint": "x", "requirements": ["torch @ https://evil/torch.whl"]}},
            "params.requirements",
            "not a requirement from the package index",
        ),
        (
            {"params": {"entrypoint": "x", "env": {"RAY_ADDRESS": "10.0.0.1:6379"}}},
            "params.env",
            "cannot set",
        ),
        ({"params": {"entrypoint": "x", "files": {"main.py": ""}}}, "params.files", "is not a ray parameter"),
        ({"params": {"entrypoint": "x", "ray": "no"}}, "params.ray", "must be true"),
        *(({"params": {"entrypoint": "x", "metrics": named}}, "params.metrics",
           "must name a file under the program's outputs") for named in ("../etc/passwd", "/m.json", "", 3)),
        ({"model": "mlp"}, "model", "does not apply to a ray job"),
    ],
)
def test_a_ray_spec_with_a_wrong_field_is_refused_naming_it(change: dict, field: str, says: str) -> None:
    data = {k: v for k, v in (RAY | change).items() if v is not None}
    with pytest.raises(SpecError) as refused:
        validate_spec(data, now=NOW)
    assert refused.value.field == field and says in str(refused.value), str(refused.value)


def test_a_built_in_kind_takes_no_code() -> None:
    with pytest.raises(SpecError, match="spec field code applies only to a ray job"):
        validate_spec({"kind": "train", "model": "mlp", "dataset": "synthetic-classification",
                       "code": "code", **{k: RAY[k] for k in ("resources", "max_price_per_unit", "max_units",
                                                             "deadline")}}, now=NOW)


# ── posting: local code and inputs go to the buyer's storage, pinned ───────────────────

def unpinned_spec(directory: Path, output: str) -> dict:
    code = directory / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "train.py").write_text("print('hello')\n")  # what RAY's entrypoint runs
    (directory / "data.csv").write_text("x,y\n1,2\n")
    return RAY | {"code": "code", "inputs": {"table": "data.csv"}, "output": output}


@LIGHT
@pytest.mark.parametrize(("entrypoint", "says"), [
    ("python trian.py --epochs 3", ("runs trian.py, which the code directory {code} does not have "
                                    "(did you mean train.py?).")),
    ("bash start.sh", "runs start.sh, which the code directory {code} does not have; it has train.py."),
])
def test_an_entrypoint_whose_file_the_code_lacks_is_refused_before_anything_is_uploaded(
        tmp_path: Path, entrypoint: str, says: str) -> None:
    spec = validate_spec(unpinned_spec(tmp_path, "results") | {"params": {"entrypoint": entrypoint}}, now=NOW)
    with pytest.raises(SpecError) as refused:
        pin(spec, tmp_path)
    assert refused.value.field == "params.entrypoint"
    assert str(refused.value) == "spec field params.entrypoint " + says.format(code=tmp_path / "code")
    assert not (tmp_path / "results").exists(), "nothing uploaded"
    # Commands that name no file of the code directory are the program's own business.
    for fine in ("python -m http.server", "python -c 'print(1)'", "torchrun --nproc-per-node 2 train.py"):
        assert pin(validate_spec(unpinned_spec(tmp_path, "results") | {"params": {"entrypoint": fine}},
                                 now=NOW), tmp_path).code is not None


def test_posting_uploads_local_code_and_inputs_once_and_pins_them(tmp_path: Path) -> None:
    spec = validate_spec(unpinned_spec(tmp_path, "results"), now=NOW)
    assert spec.unpinned() == ["code", "inputs.table"]
    pinned = pin(spec, tmp_path)
    assert pinned.unpinned() == [] and pinned.output == str(tmp_path / "results")
    code, table = pinned.code, pinned.inputs["table"]
    assert isinstance(code, Input) and isinstance(table, Input)
    assert code.uri == str(tmp_path / "results" / "uploads" / "code" / f"{code.sha256}.tar")
    assert hashlib.sha256(Path(code.uri).read_bytes()).hexdigest() == code.sha256
    assert Path(table.uri).read_text() == "x,y\n1,2\n" and Path(table.uri).name == "data.csv"
    assert table.sha256 == hashlib.sha256(b"x,y\n1,2\n").hexdigest()
    stamp = Path(code.uri).stat().st_mtime_ns
    assert pin(spec, tmp_path) == pinned, "the same code and data pin to the same spec"
    assert Path(code.uri).stat().st_mtime_ns == stamp, "and nothing is uploaded again"


def test_a_local_input_with_nowhere_to_upload_is_refused_naming_it(tmp_path: Path) -> None:
    spec = validate_spec(unpinned_spec(tmp_path, "s3://results") | {"code": RAY["code"]}, now=NOW)
    pinned = pin(spec, tmp_path, upload_to=str(tmp_path / "store"))
    table = pinned.inputs["table"]
    assert isinstance(table, Input) and Path(table.uri).is_relative_to(tmp_path / "store")
    missing = validate_spec(RAY | {"inputs": {"table": "nowhere.csv"}}, now=NOW)
    with pytest.raises(
        SpecError,
        match=r"spec field inputs.table cannot be pinned: input table .*nowhere.csv "
        r"does not exist\.",
    ):
        pin(missing, tmp_path, upload_to=str(tmp_path / "store"))


# ── in a lease: what fails before the program runs, and why ─────────────────────────────

READ_INPUT = """
import os, pathlib
out = pathlib.Path(os.environ["SWARM_OUTPUT_DIR"])
table = pathlib.Path(os.environ["SWARM_INPUT_TABLE"], "data.csv").read_text()
(out / "rows.txt").write_text(str(len(table.splitlines())))
import six
print("six", six.__version__, os.environ["GREETING"])
import ray
ray.init()  # joins the lease's own Ray (RAY_ADDRESS), as under `ray job submit`
(out / "cpus.txt").write_text(str(ray.cluster_resources()["CPU"]))
(out / "six.txt").write_text(ray.get(ray.remote(lambda: __import__("six").__version__).remote()))
"""


def test_a_program_reads_its_checked_input_uses_its_requirements_on_its_ray_and_its_result_reaches_the_output(
    tmp_path: Path,
) -> None:
    plan = program_plan(tmp_path, READ_INPUT, requirements=["six"], env={"GREETING": "hello"}, ray=True)
    plan = plan.but(cpus=2)
    outcome = launch(tmp_path / "lease", plan)
    assert outcome.state == "succeeded", (outcome.error, (tmp_path / "lease" / "log").read_text()[-3000:])
    stored = tmp_path / "results" / "job-1"
    assert (stored / "outputs" / "rows.txt").read_text() == "2"
    assert (stored / "outputs" / "cpus.txt").read_text() == "2.0", "exactly the CPUs the lease reserved"
    assert (stored / "outputs" / "six.txt").read_text().startswith("1."), (
        "its Ray workers see its requirements"
    )
    assert outcome.result_record is not None
    assert manifest_hash(build_manifest(stored)) == outcome.result_record["outputs"], (
        "the hash covers what reached the buyer"
    )
    assert "six 1." in (tmp_path / "lease" / "log").read_text()


@LIGHT
def test_a_plain_program_runs_without_a_ray_of_its_own(tmp_path: Path) -> None:
    main = ("import os, pathlib\npathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'ray.txt')"
            ".write_text(str(os.environ.get('RAY_ADDRESS')))\n")
    outcome = launch(tmp_path / "lease", program_plan(tmp_path, main))
    assert outcome.state == "succeeded", outcome.error
    assert (tmp_path / "results" / "job-1" / "outputs" / "ray.txt").read_text() == "None"


@LIGHT
def test_a_program_that_leaves_a_link_in_its_outputs_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    secret = tmp_path / "provider-secret"
    secret.write_text("the provider's key")
    main = f"import os\nos.symlink({str(secret)!r}, os.path.join(os.environ['SWARM_OUTPUT_DIR'], 'loot'))\n"
    outcome = launch(tmp_path / "lease", program_plan(tmp_path, main))
    assert outcome.state == "failed" and outcome.error is not None
    assert "outputs/loot, a link" in outcome.error
    assert [p.name for p in (tmp_path / "results" / "job-1").iterdir()] == ["log"], "no output, its log only"


BAD_INPUT: dict[str, tuple[Callable[..., dict[str, Any]], str]] = {
    "code that is not what the spec pins": (
        lambda p, plan: {"code": {"uri": plan.program.code.uri, "sha256": "0" * 64}}, "has sha256"),
    "an input that is not what the spec pins": (
        lambda p, plan: {"inputs": {"table": {"uri": plan.program.inputs["table"].uri, "sha256": "1" * 64}}},
        "input table"),
    "an input that does not exist": (
        lambda p, plan: {"inputs": {"table": {"uri": str(p / "gone.csv"), "sha256": "1" * 64}}},
        "does not exist"),
    "an input on an unreachable store": (
        lambda p, plan: {"inputs": {"table": {"uri": "s3://data/t.csv?endpoint_override=127.0.0.1:9&scheme=http",
                                              "sha256": "1" * 64}}}, "Could not connect"),
    "requirements that do not install": (
        lambda p, plan: {"requirements": ["swarm-no-such-package-exists==0.0.1"]}, "could not be installed"),
    "an entrypoint that is not there": (lambda p, plan: {"entrypoint": "python missing.py"}, "missing.py"),
    "a program that crashes": (lambda p, plan: {"entrypoint": "python main.py"}, "ZeroDivisionError"),
}


@LIGHT
@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_fails_the_lease_with_one_sentence_as_the_buyers_fault(tmp_path: Path, case: str) -> None:
    change, says = BAD_INPUT[case]
    plan = program_plan(tmp_path, "print(1 / 0)\n")
    plan = with_program(plan, **change(tmp_path, plan))
    outcome = launch(tmp_path / "lease", plan)
    assert outcome.state == "failed" and outcome.fault == "buyer" and outcome.error is not None
    assert says in outcome.error and "\n" not in outcome.error, outcome.error
    left = sorted(p.name for p in (tmp_path / "results" / "job-1").iterdir()) \
        if (tmp_path / "results").exists() else []
    assert left in ([], ["log"]), "nothing but its log reached the buyer's output"


# ── what a lease printed and reported ───────────────────────────────────────────────────

PRINTS = """
import os, pathlib, sys, time
print("started at", time.time())
print("a warning on stderr", file=sys.stderr)
pathlib.Path(os.environ["SWARM_OUTPUT_DIR"], "answer.txt").write_text("42")
"""


@LIGHT
def test_a_leases_log_is_kept_beside_its_result_and_the_result_hash_covers_it(tmp_path: Path) -> None:
    """The log is in the buyer's output with the outputs, and the chain's resultHash covers both
    through the result's record; two runs of the same program print differently and agree on
    their outputs, as replicas must; a log changed or removed afterwards is refused."""
    first = launch(tmp_path / "a", program_plan(tmp_path, PRINTS))
    assert first.state == "succeeded", first.error
    assert first.result_hash is not None and first.result_record is not None
    stored = tmp_path / "results" / "job-1"
    log = (stored / "log").read_text()
    assert "started at" in log and "a warning on stderr" in log
    raw = (stored / "result.json").read_bytes()
    assert record_hash(raw) == first.result_hash and json.loads(raw) == first.result_record
    assert first.result_record["outputs"] == manifest_hash(build_manifest(stored))
    verify(1, stored, first.result_hash)

    stored.rename(tmp_path / "first-result")
    second = launch(tmp_path / "b", program_plan(tmp_path, PRINTS))
    assert second.state == "succeeded", second.error
    assert second.result_hash is not None and second.result_record is not None
    assert second.result_hash != first.result_hash, "each result hash covers its own log"
    assert second.result_record["outputs"] == first.result_record["outputs"], "the outputs agree"

    (stored / "log").write_text((stored / "log").read_text().replace("started", "begun"))
    with pytest.raises(SwarmError, match="log of job 1 .* is not the one its on-chain result hash covers "
                                         r"\(it was altered\)"):
        verify(1, stored, second.result_hash)
    (stored / "log").unlink()
    with pytest.raises(SwarmError, match=r"\(it is missing\)"):
        verify(1, stored, second.result_hash)
    with pytest.raises(SwarmError, match=r"its result\.json hashes to"):
        verify(1, tmp_path / "first-result", second.result_hash)


FAILS = """
print("reading the table")
import csv
raise KeyError("['x4'] not in index")
"""


@LIGHT
def test_a_failed_programs_traceback_is_kept_in_the_buyers_output_without_a_result(tmp_path: Path) -> None:
    outcome = launch(tmp_path / "lease", program_plan(tmp_path, FAILS))
    assert outcome.state == "failed" and outcome.fault == "buyer", outcome
    kept = tmp_path / "results" / "job-1"
    assert sorted(p.name for p in kept.iterdir()) == ["log"], "its log, and no result"
    log = (kept / "log").read_text()
    assert "reading the table" in log and "Traceback (most recent call last)" in log
    assert "KeyError: \"['x4'] not in index\"" in log
    assert failed_log(1, str(kept)) == log


REPORTS_WRITTEN = """
import json, os, time
path = os.environ["SWARM_REPORTS"]
with open(path, "w") as f:
    f.write(json.dumps({"at": 1.5, "metrics": {"loss": 0.5, "step": 1, "nested": {"x": 1}}}) + "\\n")
    f.write("not json\\n")
    f.write(json.dumps({"at": 2, "metrics": {"loss": 0.25}, "more": 1}) + "\\n")
    f.write("x" * 20000 + "\\n")
time.sleep(0.8)
os.remove(path)
os.symlink(SECRET, path)
time.sleep(0.8)
print("done")
"""


@LIGHT
def test_a_leases_reports_are_relayed_in_their_shape_only_and_never_through_a_link(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The lease writes its reports file itself: a line of another shape, or too long, is left
    out, and a link put in its place is not followed to the provider's files."""
    secret = tmp_path / "provider-secret"
    secret.write_text(json.dumps({"at": 3, "metrics": {"key": "the provider's secret"}}) + "\n")
    plan = program_plan(tmp_path, REPORTS_WRITTEN.replace("SECRET", repr(str(secret))))
    plan = plan.but(verdict_key="k" * 32)
    outcome = launch(tmp_path / "lease", plan)
    assert outcome.state == "succeeded", (outcome.error, (tmp_path / "lease" / "log").read_text())
    printed = capfd.readouterr().out
    assert reports(printed, plan.verdict_key) == [{"at": 1.5, "metrics": {"loss": 0.5, "step": 1}}]
    assert "the provider's secret" not in printed
    assert "swarm-lease-report" not in (tmp_path / "results" / "job-1" / "log").read_text()


# ── the Ray Train example, from and to S3 ───────────────────────────────────────────────

def test_the_ray_train_example_learns_the_digits_in_a_lease_from_and_to_s3(
        s3_store: S3Store, bucket: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from compute.data import write_digits

    write_digits(tmp_path / "digits.parquet")
    spec = validate_spec(json.loads(json.dumps(RAY)) | {
        "code": str(EXAMPLE / "code"), "inputs": {"digits": str(tmp_path / "digits.parquet")},
        "output": s3_store.uri(f"{bucket}/runs"),
        "params": {"entrypoint": "python train.py --data inputs/digits --workers 1 --epochs 4"}}, now=NOW)
    pinned = pin(spec, tmp_path)  # what `swarm job post` does: both uploaded to the bucket
    code, digits = pinned.code, pinned.inputs["digits"]
    assert isinstance(code, Input) and code.uri.startswith(f"s3://{bucket}/runs/uploads/code/")
    assert isinstance(digits, Input) and digits.uri.startswith(f"s3://{bucket}/runs/uploads/inputs/")
    assert pinned.output is not None

    plan = LeasePlan(job_id=7, number=7, job=pinned.to_compute_job("job-7", ""), cpus=1, gpus=0,
                     memory_bytes=4 * 2**30, wall_seconds=600, max_units=1_000,
                     result=dataplane.join(pinned.output, "job-7"), verdict_key="k" * 32)
    outcome = launch(tmp_path / "lease", plan)
    assert outcome.state == "succeeded", (outcome.error, (tmp_path / "lease" / "log").read_text()[-3000:])

    fetched = tmp_path / "fetched"
    pafs.copy_files(f"{bucket}/runs/job-7", str(fetched), source_filesystem=s3_store.filesystem(),
                    destination_filesystem=pafs.LocalFileSystem())
    assert outcome.result_record is not None and outcome.result_hash is not None
    assert manifest_hash(build_manifest(fetched)) == outcome.result_record["outputs"]
    verify(7, fetched, outcome.result_hash)  # the buyer's check: its outputs and its log
    metrics = json.loads((fetched / "outputs" / "metrics.json").read_text())
    assert metrics["epoch"] == 4 and metrics["val_accuracy"] > 0.9, metrics
    relayed = reports(capfd.readouterr().out, plan.verdict_key)  # each ray.train.report, as it came
    assert [r["metrics"]["epoch"] for r in relayed] == [1, 2, 3, 4], relayed
    assert relayed[-1]["metrics"]["val_accuracy"] == pytest.approx(metrics["val_accuracy"])
    assert (fetched / "outputs" / "model.pt").stat().st_size > 10_000
    assert outcome.units == pytest.approx(outcome.seconds, abs=1.0), "one CPU reserved for as long as it ran"


# ── a built-in kind on a table the buyer brings ─────────────────────────────────────────

@LIGHT
@pytest.mark.parametrize(("written", "named", "metrics"), [
    ('{"r2": 0.98, "rows": 4}', None, {"r2": 0.98, "rows": 4}),
    ('{"r2": 0.5}', "eval/scores.json", {"r2": 0.5}),
    ("not json", None, {}),
    ("[1, 2]", None, {}),
])
def test_a_programs_metrics_file_is_its_leases_metrics(tmp_path: Path, written: str, named: str | None,
                                                      metrics: dict) -> None:
    """What the program wrote in outputs/metrics.json (or the file params.metrics names) is the
    lease's metrics, as the site reports them; anything else is no metrics, not a failure."""
    where = named or "metrics.json"
    main = (f"import os, pathlib\nout = pathlib.Path(os.environ['SWARM_OUTPUT_DIR'], {where!r})\n"
            f"out.parent.mkdir(parents=True, exist_ok=True)\nout.write_text({written!r})\n")
    plan = program_plan(tmp_path, main, **({"metrics": named} if named else {}))
    outcome = launch(tmp_path / "lease", plan)
    assert outcome.state == "succeeded", outcome.error
    assert outcome.metrics == metrics


@LIGHT
def test_a_max_runtime_bounds_the_lease_the_site_plans_and_a_run_past_it_is_stopped(tmp_path: Path) -> None:
    """The spec's max_runtime, not its deadline an hour away, is the lease's wall clock: a program
    that would run on is stopped after it, as the buyer's fault, paying for what it held."""
    import time

    from tests.programs import program_spec

    now = time.time()
    spec = validate_spec(program_spec(tmp_path, "import time\ntime.sleep(60)\n", deadline=int(now) + 3_600)
                         | {"max_runtime": 2}, now=now)
    order = Order.read(json.dumps(spec.canonical()).encode())
    assert (order.max_runtime, order.run_seconds(now)) == (2, 2.0)
    plan = plan_lease(order, 5, 5, "0x" + "ab" * 20, "t-", now=now)
    assert plan.wall_seconds == 2.0
    started = time.monotonic()
    outcome = launch(tmp_path / "lease", plan)
    assert time.monotonic() - started < 30, "stopped at its max_runtime, not its deadline"
    assert (outcome.state, outcome.broke, outcome.fault) == ("failed", "time", "buyer")
    assert outcome.error == "the job ran past its 2 s and was stopped." and 1 <= outcome.units <= 4


def builtin_plan(spec: dict, tmp_path: Path, job_id: int = 9) -> LeasePlan:
    """The lease a site plans for a posted built-in spec, in tmp_path/lease; its results go to
    the spec's output, tmp_path/output unless it names one."""
    body = json.dumps({"output": str(tmp_path / "output")} | spec).encode()
    return plan_lease(Order.read(body), job_id, job_id, "0x" + "ab" * 20, "t-", now=NOW)


TRAIN = {"kind": "train", "model": "mlp", "resources": {"workers": 1, "memory_gb": 2},
         "max_price_per_unit": "0.001", "max_units": 600, "deadline": NOW + 3_600, "seed": 3,
         "params": {"epochs": 1}}


def test_an_infer_job_on_a_model_and_table_pinned_in_s3_runs_in_a_lease_and_its_result_goes_to_s3(
        s3_store: S3Store, bucket: str, tmp_path: Path) -> None:
    import numpy as np
    import torch

    from compute.checkpoints import save_model
    from compute.data import write_digits
    from compute.models import build_model

    write_digits(tmp_path / "digits.parquet")
    torch.manual_seed(0)
    features = [f"px_{i}" for i in range(64)]
    save_model(build_model("mlp", in_features=64, classes=10), "mlp", {"in_features": 64, "classes": 10},
               tmp_path / "model", features=features)
    spec = validate_spec(TRAIN | {"kind": "infer", "model": str(tmp_path / "model"), "params": {},
                                  "dataset": str(tmp_path / "digits.parquet")}, now=NOW)
    assert spec.unpinned() == ["model", "dataset"]
    pinned = pin(spec, tmp_path, upload_to=s3_store.uri(f"{bucket}/brought"))
    model, dataset = pinned.model, pinned.dataset
    assert isinstance(model, Input) and isinstance(dataset, Input)
    assert model.uri.startswith(f"s3://{bucket}/brought/inputs/") and pinned.unpinned() == []
    output = s3_store.uri(f"{bucket}/results")
    plan = builtin_plan(pinned.canonical() | {"output": output}, tmp_path)
    assert [(f.uri, f.sha256, f.target) for f in plan.fetch] == [
        (model.uri, model.sha256, "inputs/checkpoint"),
        (dataset.uri, dataset.sha256, "inputs/dataset_path")]
    assert plan.result == dataplane.join(output, "t-9") and plan.local_result is None

    outcome = launch(tmp_path / "lease", plan)
    assert outcome.state == "succeeded", (outcome.error, (tmp_path / "lease" / "log").read_text()[-3000:])
    stored = tmp_path / "fetched"  # what the buyer downloads from their own storage
    dataplane.download(plan.result, stored)
    predictions = np.load(stored / "outputs" / "predictions.npy")
    assert predictions.shape == (1797,) and 0 <= outcome.metrics["accuracy"] <= 1
    assert outcome.result_record is not None
    assert manifest_hash(build_manifest(stored)) == outcome.result_record["outputs"]
    # One task: it ran in the lease's own process, which started no Ray (no Ray node to name).
    assert outcome.metrics["placement"] == {"node_id": None, "provider": plan.job.provider}


BAD_TABLE = {
    "a table that is not what the spec pins": ("digits.csv", b"px,label\n1,0\n", "1" * 64, "has sha256"),
    "a table in no known format": (
        "rows",
        None,
        None,
        "dataset inputs/dataset/sheet.xlsx is in an unknown format",
    ),
    "a table with no label": ("rows.csv", b"a,b\n" + b"1,2\n" * 20, None, "has no 'label' column"),
}


@pytest.mark.parametrize("case", BAD_TABLE)
def test_a_bad_table_fails_a_built_in_lease_as_the_buyers_fault_in_one_sentence(
    tmp_path: Path, case: str
) -> None:
    name, content, sha, says = BAD_TABLE[case]
    location = tmp_path / name
    if content is None:  # a directory of spreadsheets
        location.mkdir()
        (location / "sheet.xlsx").write_bytes(b"PK\x03\x04")
    else:
        location.write_bytes(content)
    pinned = {"uri": str(location), "sha256": sha or dataplane.digest(str(location))}
    outcome = launch(tmp_path / "lease", builtin_plan(TRAIN | {"dataset": pinned}, tmp_path))
    assert outcome.state == "failed" and outcome.fault == "buyer" and outcome.error is not None
    assert says in outcome.error and "\n" not in outcome.error, outcome.error
    assert not (tmp_path / "output" / "t-9" / "outputs").exists(), "nothing was stored"
