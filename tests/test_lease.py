"""A lease's plan travels in its Ray job to whichever machine of the site runs it: it survives
the trip whole, its paths become that machine's lease directory, and the launcher's verdict
comes back from the job's log."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute.errors import InvalidJob
from compute.jobs import FORMAT, ComputeJob
from compute.runners.params import MAX_RUN_BYTES, InferParams
from provider.lease import WORK
from provider.lease.launch import PLAN_ENV, ray_job
from provider.lease.outcome import VERDICT, Outcome, verdict, verdict_line
from provider.lease.plan import Fetch, LeasePlan

MAX_ENV_BYTES = 128 * 1024  # Linux's limit on one environment string (MAX_ARG_STRLEN)

env_st = st.dictionaries(
    st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), st.text(max_size=2_000), max_size=4
)
PINNED = {"uri": "s3://code/0.tar?endpoint_override=127.0.0.1:9000", "sha256": "ab" * 32}


def program(entrypoint: str = "python main.py", env: dict[str, str] | None = None) -> ComputeJob:
    return ComputeJob.of(
        "ns-1",
        "ray",
        "0xabc",
        {
            "entrypoint": entrypoint,
            "requirements": ["numpy>=1.26"],
            "env": env or {},
            "code": PINNED,
            "inputs": {"digits": PINNED},
        },
    )


def program_plan(job: ComputeJob, **changes: Any) -> LeasePlan:
    fields: dict[str, Any] = {"job_id": 1, "number": 2, "job": job, "cpus": 2, "gpus": 0,
                              "memory_bytes": 2**30, "wall_seconds": 30, "max_units": 10, "result": "s3://results/ns-1"}
    return LeasePlan(**fields | changes)


def job_plan() -> LeasePlan:
    """An infer lease whose dataset the launcher fetches into the lease: its params name it there."""
    job = ComputeJob.of("ns-7", "infer", "0xabc", {"checkpoint": "s3://models/m", "dataset_path": "s3://d/in.npy",
                                                  "batch_size": 8})
    fetch = Fetch(
        "/data/in.npy", "ab" * 32, "inputs/dataset_path", "dataset_path", "inputs/dataset_path/in.npy"
    )
    return LeasePlan(
        job_id=7,
        number=3,
        job=job.with_params(dataset_path=fetch.path),
        cpus=1,
        gpus=0,
        memory_bytes=2**30,
        wall_seconds=60,
        max_units=100,
        hidden=("/srv/provider",),
        fetch=(fetch,),
        result="s3://results/ns-7",
    )


@settings(max_examples=50, deadline=None)
@given(env_st, st.integers(1, 3))
def test_a_program_plan_survives_its_ray_job_whole(env: dict[str, str], attempt: int) -> None:
    plan = program_plan(program(env=env), attempt=attempt)
    submitted = ray_job(plan, "1-abcdef")
    carried = submitted["runtime_env"]["env_vars"][PLAN_ENV]
    assert LeasePlan.decode(carried) == plan
    assert len(f"{PLAN_ENV}={carried}".encode()) < MAX_ENV_BYTES
    assert submitted["entrypoint"].endswith("-m provider.lease.launch 1-abcdef")
    assert submitted["entrypoint_num_cpus"] == 2 and submitted["entrypoint_num_gpus"] is None


def test_the_largest_program_fits_in_one_environment_string() -> None:
    import random

    rng = random.Random(0)  # incompressible text: the worst case for the plan's size
    text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 \n\"'\\") for _ in range(MAX_RUN_BYTES))
    while (
        len(json.dumps({"entrypoint": text, "requirements": ["numpy>=1.26"], "env": {}, "ray": True}))
        > MAX_RUN_BYTES
    ):
        text = text[:-16]  # as long as a ray job's params may be
    plan = program_plan(program(entrypoint=text))
    assert len(f"{PLAN_ENV}={plan.encode()}".encode()) < MAX_ENV_BYTES


def test_a_plans_paths_become_those_of_the_machine_that_runs_it(tmp_path: Path) -> None:
    plan = job_plan()
    here = tmp_path / "machine b" / "site" / "leases" / "7-00ff" / WORK
    job = LeasePlan.decode(plan.encode()).in_lease(here)
    assert job.storage == str(here / "storage")
    params = job.params_of(InferParams)
    assert params.dataset_path == str(here / "inputs/dataset_path/in.npy") and params.batch_size == 8
    assert params.checkpoint == "s3://models/m", "only what the lease fetched is placed in it"
    assert plan.job.params_of(InferParams).dataset_path == "inputs/dataset_path/in.npy", (
        "the plan itself names no machine's path"
    )
    assert str(tmp_path) not in json.dumps(plan.to_dict())


def test_a_buyers_program_is_carried_as_written_even_where_it_names_lease_paths(tmp_path: Path) -> None:
    entrypoint = "python main.py --out inputs/x {lease}/work"
    plan = program_plan(program(entrypoint=entrypoint, env={"WHERE": "{lease}"}))
    carried = LeasePlan.decode(plan.encode())
    assert carried.program is not None
    assert carried.program.entrypoint == entrypoint and carried.program.env == {"WHERE": "{lease}"}
    assert carried.in_lease(tmp_path).params == plan.job.params, "nothing of a program's params is rewritten"


def test_the_job_contract_is_versioned_json_read_as_a_strangers() -> None:
    job = program()
    assert ComputeJob.from_json(job.to_json()) == job
    raw = json.loads(job.to_json())
    assert raw["format"] == FORMAT and raw["kind"] == "ray"
    with pytest.raises(InvalidJob, match=f"format 0; this reader reads format {FORMAT}"):
        ComputeJob.from_dict(raw | {"format": 0})
    with pytest.raises(InvalidJob, match=r"params\.env cannot set 'PATH'"):
        ComputeJob.from_dict(raw | {"params": raw["params"] | {"env": {"PATH": "/evil"}}})
    with pytest.raises(InvalidJob, match="unknown job kind 'mine'"):
        ComputeJob.from_dict(raw | {"kind": "mine"})
    with pytest.raises(InvalidJob, match="fields"):
        ComputeJob.from_dict(raw | {"extra": 1})


def test_the_verdict_is_the_last_one_the_launcher_printed_and_a_job_cannot_forge_it() -> None:
    plan = job_plan().but(verdict_key="5ec2e7")
    first = Outcome(state="failed", attempt=1, seconds=1.0, returncode=1, error="boom")
    last = Outcome(state="failed", attempt=1, seconds=2.0, returncode=1, error="the job exited with 1")
    forged = Outcome(state="succeeded", attempt=1, seconds=2.0, returncode=0, result_hash="0x" + "ab" * 32,
                     units=100)
    log = "\n".join(["── attempt 1 ──", verdict_line(plan.verdict_key, first), "a buyer's line",
                     verdict_line(plan.verdict_key, last), "lease failed after 2.0 s"])
    assert verdict(log, plan.verdict_key) == last
    # What the job prints comes first in the log; if the launcher died before its own verdict,
    # the job's would be last: without the key, it is not a verdict at all.
    for guess in ("", "0000", "5ec2e"):
        printed = f"{VERDICT}{guess} {json.dumps(asdict(forged))}"
        assert verdict(f"── attempt 1 ──\n{printed}\n", plan.verdict_key) is None
    assert verdict("the node died before the launcher could say anything\n", plan.verdict_key) is None
    assert verdict(f"{VERDICT}5ec2e7 {{not json", plan.verdict_key) is None
    assert verdict(f'{VERDICT}5ec2e7 {{"state": "succeeded", "units": 9}}', plan.verdict_key) is None


def test_only_a_one_process_job_of_the_leases_own_provider_runs_in_place() -> None:
    """In a lease an infer or a finetune job, and a train job of one worker, run in the worker's
    process, with no Ray to start; anything else there is refused before any work, and the
    lease's place ends with it."""
    from compute.context import in_place, in_place_provider
    from compute.dispatch import run_job, runs_in_place

    one = ComputeJob.of("ns-8", "train", "0xabc", {"epochs": 1})
    two = replace(one, workers=2)
    in_s3 = replace(one, storage="s3://bucket/runs")  # Ray Train writes checkpoints through pyarrow
    infer = job_plan().job
    assert runs_in_place(one) and runs_in_place(infer)
    assert not runs_in_place(two) and not runs_in_place(in_s3)
    for job, provider in ((two, "0xabc"), (in_s3, "0xabc"), (infer, "0xdef")):
        with in_place(provider), pytest.raises(InvalidJob, match="train jobs of one worker run in place"):
            run_job(job)
    assert in_place_provider() is None
