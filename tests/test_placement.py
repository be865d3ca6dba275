"""Provider nodes on a real Ray cluster: work for provider A never runs on B; a job's
parameters are checked before any Ray work."""

from __future__ import annotations

import pytest
import ray

from compute.dispatch import check_capacity, run_job
from compute.errors import InvalidJob
from compute.jobs import ComputeJob
from compute.placement import provider_capacity, providers_in_cluster, task_options
from tests.ray_cluster import PROVIDER_A, PROVIDER_B, PROVIDER_C


@ray.remote
def _where() -> str:
    return ray.get_runtime_context().get_node_labels().get("provider")


def test_work_for_a_provider_runs_only_on_its_nodes(ray_cluster) -> None:
    for provider in (PROVIDER_A, PROVIDER_B, PROVIDER_C):
        ran_on = ray.get([_where.options(**task_options(provider)).remote() for _ in range(6)])
        assert set(ran_on) == {provider}


def test_the_sessions_workers_run_ahead_of_the_light_lane(ray_cluster) -> None:
    import re
    from pathlib import Path

    from compute.node import WORKER_NICENESS

    niceness = ray.get([_niceness.options(**task_options(p)).remote() for p in (PROVIDER_A, PROVIDER_C)])
    assert niceness == [WORKER_NICENESS] * 2
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    light = re.search(r"nice -n (\d+) (?:env [^$]*)?\$\(PY\) -m pytest -m light", makefile)
    assert light and int(light[1]) > WORKER_NICENESS, "the light lane beside them runs below the Ray tests"


@ray.remote
def _niceness() -> int:
    import os

    return os.nice(0)


def test_capacity_counts_each_providers_nodes(ray_cluster) -> None:
    assert providers_in_cluster() == sorted([PROVIDER_A, PROVIDER_B, PROVIDER_C])
    a = provider_capacity(PROVIDER_A)
    assert (a.nodes, a.cpus, a.gpus, a.max_workers) == (2, 2.0, 0.0, 2)
    assert provider_capacity(PROVIDER_B).max_workers == 1


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (("j1", "mine-bitcoin", PROVIDER_A, {}), "unknown job kind 'mine-bitcoin'"),
        (("j2", "train", PROVIDER_A, {"workers": 0}), "workers must be at least 1"),
        (("j3", "train", PROVIDER_B, {"workers": 2}), "asks for 2 workers but provider"),
        (("j4", "train", "0x000000000000000000000000000000000000dEaD", {}), "has no live nodes"),
    ],
    ids=["unknown-kind", "zero-workers", "too-many-workers", "unknown-provider"],
)
def test_bad_jobs_fail_fast_with_no_ray_work(ray_cluster, tmp_path, job: tuple, message: str) -> None:
    job_id, kind, provider, fields = job
    with pytest.raises(InvalidJob, match=message):  # refused as the job is read, or before its runner starts
        run_job(ComputeJob.of(job_id, kind, provider, storage=str(tmp_path), **fields))
    assert not (tmp_path / job_id).exists()  # no runner started: runners create it first


def test_capacity_check_passes_for_a_job_that_fits(ray_cluster) -> None:
    assert check_capacity(ComputeJob.of("j5", "train", PROVIDER_A, workers=2)).nodes == 2
