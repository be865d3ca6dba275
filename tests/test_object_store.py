"""A lease's results to an S3-compatible store: a real SeaweedFS server on 127.0.0.1
(tests/object_store.py), written by the site's own launcher and read back from the store."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from compute.dataplane import join
from compute.jobs import ComputeJob
from compute.manifest import MANIFEST, build_manifest, canonical, manifest_hash
from provider.lease.launch import launch
from provider.lease.plan import LeasePlan
from tests.object_store import S3Store
from tests.programs import pinned_code

MAIN = "open('outputs/answer.txt', 'w').write(str(sum(range(10))))\n"


def program_lease(store: Path, job_id: int, output: str) -> LeasePlan:
    program = ComputeJob.of(str(job_id), "ray", "", {"entrypoint": "python3 main.py", "ray": False,
                                                     "code": pinned_code(store, {"main.py": MAIN})})
    return LeasePlan(job_id=job_id, number=job_id, job=program, cpus=1, gpus=0, memory_bytes=2 * 2**30,
                     wall_seconds=60, max_units=10, result=join(output, str(job_id)))


def test_a_leases_result_goes_to_the_store_whole_and_its_hash_covers_what_arrived(
        s3_store: S3Store, bucket: str, tmp_path: Path) -> None:
    outcome = launch(tmp_path / "lease", program_lease(tmp_path, 41, s3_store.uri(f"{bucket}/jobs")))
    assert outcome.state == "succeeded", outcome.error

    fetched = tmp_path / "fetched"
    pafs.copy_files(f"{bucket}/jobs/41", str(fetched), source_filesystem=s3_store.filesystem(),
                    destination_filesystem=pafs.LocalFileSystem())
    assert (fetched / "outputs" / "answer.txt").read_text() == "45"
    arrived = build_manifest(fetched)  # what came back from the store, file by file
    assert outcome.result_record is not None
    assert manifest_hash(arrived) == outcome.result_record["outputs"]
    assert (fetched / MANIFEST).read_bytes() == canonical(arrived)  # the site's manifest travelled with it


def test_a_store_that_refuses_the_keys_fails_the_lease_with_a_sentence_and_stores_nothing(
        s3_store: S3Store, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-" + s3_store.secret_key)
    outcome = launch(tmp_path / "lease", program_lease(tmp_path, 42, s3_store.uri(f"{bucket}/jobs")))
    assert outcome.state == "failed" and outcome.error is not None
    assert outcome.error.startswith(f"the site could not store the result in s3://{bucket}/jobs")
    assert s3_store.secret_key not in outcome.error
    stored = s3_store.filesystem().get_file_info(pafs.FileSelector(bucket, recursive=True))
    assert stored == []
