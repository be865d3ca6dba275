"""A lease's plan travels in its Ray job to whichever machine of the site runs it: it survives
the trip whole, its paths become that machine's lease directory, and the launcher's verdict
comes back from the job's log."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from compute.lease import HERE, PLAN_ENV, VERDICT, WORK, LeasePlan, Outcome, ray_job, verdict, verdict_line
from market.spec import MAX_RUN_BYTES

MAX_ENV_BYTES = 128 * 1024  # Linux's limit on one environment string (MAX_ARG_STRLEN)

env_st = st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), st.text(max_size=2_000), max_size=4)
PINNED = {"uri": "s3://code/0.tar?endpoint_override=127.0.0.1:9000", "sha256": "ab" * 32}


def program(entrypoint: str = "python main.py", env: dict[str, str] | None = None) -> dict:
    return {"entrypoint": entrypoint, "requirements": ["numpy>=1.26"], "env": env or {}, "code": PINNED,
            "inputs": {"digits": PINNED}, "output": "s3://results"}


def job_plan(directory_params: dict[str, str]) -> LeasePlan:
    job = {"job_id": "ns-7", "kind": "infer", "provider": "0xabc", "storage": f"{HERE}/{WORK}/storage",
           "params": directory_params}
    return LeasePlan(job_id=7, number=3, job=job, cpus=1, gpus=0, memory_bytes=2**30, wall_seconds=60,
                     max_units=100, hidden=("/srv/provider",), files=(("/data/in.npy", "ab" * 32, "inputs/dataset_path"),))


@settings(max_examples=50, deadline=None)
@given(env_st, st.integers(1, 3))
def test_a_program_plan_survives_its_ray_job_whole(env: dict[str, str], attempt: int) -> None:
    plan = LeasePlan(job_id=1, number=2, job=None, cpus=2, gpus=0, memory_bytes=2**30, wall_seconds=30,
                     max_units=10, attempt=attempt, program=program(env=env))
    submitted = ray_job(plan, "1-abcdef")
    carried = submitted["runtime_env"]["env_vars"][PLAN_ENV]
    assert LeasePlan.decode(carried) == plan
    assert len(f"{PLAN_ENV}={carried}".encode()) < MAX_ENV_BYTES
    assert submitted["entrypoint"].endswith("-m compute.lease launch 1-abcdef")
    assert submitted["entrypoint_num_cpus"] == 2 and submitted["entrypoint_num_gpus"] is None


def test_the_largest_program_fits_in_one_environment_string() -> None:
    import random

    rng = random.Random(0)  # incompressible text: the worst case for the plan's size
    text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 \n\"'\\") for _ in range(MAX_RUN_BYTES))
    plan = LeasePlan(job_id=1, number=1, job=None, cpus=1, gpus=0, memory_bytes=2**30, wall_seconds=30,
                     max_units=10, program=program(entrypoint=text))
    assert len(f"{PLAN_ENV}={plan.encode()}".encode()) < MAX_ENV_BYTES


def test_a_plans_paths_become_those_of_the_machine_that_runs_it(tmp_path: Path) -> None:
    plan = job_plan({"dataset_path": f"{HERE}/{WORK}/inputs/dataset/in.npy", "batch_size": 8})
    here = tmp_path / "machine b" / "site" / "leases" / "7-00ff"
    located = LeasePlan.decode(plan.encode()).located(here)
    assert located.job["storage"] == str(here / WORK / "storage")
    assert located.job["params"] == {"dataset_path": str(here / WORK / "inputs/dataset/in.npy"), "batch_size": 8}
    assert located.files == plan.files and located.hidden == plan.hidden
    assert HERE not in json.dumps(asdict(located))


def test_a_buyers_program_is_carried_as_written_even_where_it_names_the_lease_placeholder(tmp_path: Path) -> None:
    entrypoint = f"python main.py --out {HERE}/{WORK}"
    plan = LeasePlan(job_id=1, number=1, job=None, cpus=1, gpus=0, memory_bytes=2**30, wall_seconds=30,
                     max_units=10, program=program(entrypoint=entrypoint, env={"WHERE": HERE}))
    located = LeasePlan.decode(plan.encode()).located(tmp_path).program
    assert located["entrypoint"] == entrypoint and located["env"] == {"WHERE": HERE}


def test_the_verdict_is_the_last_one_the_launcher_printed_and_a_job_cannot_forge_it() -> None:
    plan = job_plan({})
    plan = LeasePlan(**(asdict(plan) | {"verdict_key": "5ec2e7"}))
    first = Outcome(state="failed", attempt=1, seconds=1.0, returncode=1, error="boom")
    last = Outcome(state="failed", attempt=1, seconds=2.0, returncode=1, error="the job exited with 1")
    forged = Outcome(state="succeeded", attempt=1, seconds=2.0, returncode=0, result_hash="0x" + "ab" * 32,
                     units=100)
    log = "\n".join(["── attempt 1 ──", verdict_line(plan, first), "a buyer's line", verdict_line(plan, last),
                     "lease failed after 2.0 s"])
    assert verdict(log, plan.verdict_key) == last
    # What the job prints comes first in the log; if the launcher died before its own verdict,
    # the job's would be last: without the key, it is not a verdict at all.
    for guess in ("", "0000", "5ec2e"):
        printed = f"{VERDICT}{guess} {json.dumps(asdict(forged))}"
        assert verdict(f"── attempt 1 ──\n{printed}\n", plan.verdict_key) is None
    assert verdict("the node died before the launcher could say anything\n", plan.verdict_key) is None
    assert verdict(f"{VERDICT}5ec2e7 {{not json", plan.verdict_key) is None
