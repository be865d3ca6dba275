"""A buyer's own Ray program, and Ray Data's ingest of the buyer's data.

Run: make bench-program   (or .venv/bin/python bench/program.py --runs 5)

  first-step  The Ray Train example (examples/digits/code/train.py, unchanged) through Swarm
              against `ray job submit` of the same script on the same site. Through Swarm: the
              job posted with its code and data pinned in the buyer's storage (a local
              directory), assigned, and its lease started through the site's agent; the clock
              runs from the start request to the first training result Ray Train reports
              ("Reporting training result 1"), read from the lease's log through the agent as
              the buyer reads it. Directly: Ray's job submission API on the site's own cluster,
              the code as the job's working_dir, from the submission to the same line in the
              job's log. One worker, one CPU; medians after a warm-up; the ratio of the medians.
  ingest      Reading the digits, repeated to about 64 MiB of Parquet, from a local file and from
              a real S3 server (SeaweedFS, as in the tests): Ray Data's read_parquet consumed by
              one worker's iterator, against pyarrow reading the same file whole, in MB/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sites import staked_sites, wait_until

from anvil import dev_account

RESULTS = Path(__file__).resolve().parent / "results" / "program.json"
EXAMPLE = ROOT / "examples" / "digits"
FIRST_RESULT = "Reporting training result 1:"
BUYER = dev_account(5)
EPOCHS = 2
BATCH_ROWS = 65_536
POLL_S = 0.25  # both sides' logs are read this often
OBJECT_STORE_BYTES = 2**30


def digits(path: Path, repeat: int = 1) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from sklearn.datasets import load_digits

    data = load_digits()
    columns = {f"px_{i}": pa.array(data.data[:, i].astype("float32")) for i in range(64)}
    columns["label"] = pa.array(data.target.astype("int64"))
    table = pa.concat_tables([pa.table(columns)] * repeat)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=max(1, table.num_rows // 16))
    return path


def bench_first_step(swarm, home: Path, site, runs: int) -> dict:
    from ray.job_submission import JobSubmissionClient

    from compute.node import RayHome, use_auth
    from ledger import jobs
    from ledger.specs import canonical, store_spec
    from market.spec import validate_spec
    from market.storage import pin
    from wire.client import SiteAddress, SiteClient

    data = digits(home / "buyer" / "digits.parquet")
    entry = f"python train.py --data {{data}} --workers 1 --epochs {EPOCHS}"
    spec = validate_spec(
        {
            "kind": "ray",
            "code": str(EXAMPLE / "code"),
            "inputs": {"digits": str(data)},
            "output": str(home / "buyer" / "runs"),
            "resources": {"workers": 1, "cpus_per_worker": 1, "memory_gb": 2},
            "max_price_per_unit": "0.001",
            "max_units": 3_000,
            "deadline": swarm.chain.timestamp() + 7_200,
            "params": {"entrypoint": entry.format(data="inputs/digits")},
        },
        now=swarm.chain.timestamp(),
    )
    spec = pin(spec, home)
    matcher = swarm.sender(dev_account(0).key)
    client = SiteClient(SiteAddress(site.provider, site.url, site.fingerprint), matcher.sign_typed_data,
                        swarm.chain.chain_id, swarm.market.address)
    buyer_client = SiteClient(
        SiteAddress(site.provider, site.url, site.fingerprint),
        swarm.sender(BUYER.key).sign_typed_data,
        swarm.chain.chain_id,
        swarm.market.address,
    )
    site_home = Path(site.home)
    use_auth(RayHome.of(site_home))  # the bench holds the site's token, as its provider does
    direct = JobSubmissionClient(json.loads((site_home / "ray" / "cluster.json").read_text())["dashboard"])

    swarm_s, direct_s = [], []
    for run in range(runs + 1):  # the first of each is a warm-up
        body = canonical(spec.canonical() | {"seed": run})
        digest = store_spec(home, json.loads(body))
        job_id, _ = jobs.post_job(
            swarm, swarm.sender(BUYER.key), digest, spec.max_price_per_unit, spec.max_units, spec.deadline
        )
        jobs.assign_job(swarm, matcher, job_id, site.provider, 10**15)
        started = time.monotonic()
        client.start_lease(job_id, body)
        wait_until(lambda job_id=job_id: FIRST_RESULT in buyer_client.logs(job_id)
                   or client.status(job_id)["state"] in ("failed", "stopped"), poll=POLL_S)
        through_swarm = time.monotonic() - started
        final = wait_until(
            lambda job_id=job_id: (s := client.status(job_id))["state"] in ("succeeded", "failed") and s,
            poll=POLL_S,
        )
        assert final["state"] == "succeeded", (final, buyer_client.logs(job_id)[-3000:])

        started = time.monotonic()
        # The site's Python, as a lease's PATH finds it first.
        submission = direct.submit_job(
            entrypoint=entry.format(data=str(data)).replace("python", sys.executable, 1),
            runtime_env={
                "working_dir": str(EXAMPLE / "code"),
                "env_vars": {"SWARM_OUTPUT_DIR": str(home / f"direct-{run}")},
            },
        )
        wait_until(lambda submission=submission: FIRST_RESULT in direct.get_job_logs(submission)
                   or direct.get_job_status(submission).is_terminal(), poll=POLL_S)
        submitted = time.monotonic() - started
        wait_until(lambda submission=submission: direct.get_job_status(submission).is_terminal(), poll=POLL_S)
        assert direct.get_job_status(submission).value == "SUCCEEDED", direct.get_job_logs(submission)[-3000:]
        print(f"run {run}: through Swarm {through_swarm:.2f} s, ray job submit {submitted:.2f} s", flush=True)
        if run:
            swarm_s.append(through_swarm)
            direct_s.append(submitted)
    a, b = statistics.median(swarm_s), statistics.median(direct_s)
    return {"runs": runs, "swarm_s": round(a, 3), "ray_job_submit_s": round(b, 3), "ratio": round(a / b, 3),
            "swarm_all": [round(x, 3) for x in swarm_s], "direct_all": [round(x, 3) for x in direct_s]}


def bench_ingest(runs: int) -> dict:
    """MB/s of one worker's Ray Data iterator over Parquet, local and S3, against pyarrow alone."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq
    import ray

    sys.path.insert(0, str(ROOT))
    from tests.object_store import TempObjectStore

    figures = {}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        local = digits(Path(tmp) / "digits.parquet", repeat=1_550)
        size = local.stat().st_size
        store = TempObjectStore()
        s3 = store.start()
        try:
            import os

            os.environ.update(s3.environment)
            s3.filesystem().create_dir("bench")
            pafs.copy_files(str(local), "bench/digits.parquet", source_filesystem=pafs.LocalFileSystem(),
                            destination_filesystem=s3.filesystem())
            uri = s3.uri("bench/digits.parquet")
            # One CPU, and the object store of a lease that asked for 4 GB
            # (provider.lease.worker.object_store_bytes).
            ray.init(num_cpus=1, object_store_memory=OBJECT_STORE_BYTES, include_dashboard=False,
                     configure_logging=False)
            ray.data.DataContext.get_current().enable_progress_bars = False
            for where, location in (("local", str(local)), ("s3", uri)):
                ray_mbs, arrow_mbs = [], []
                for _ in range(runs + 1):
                    started = time.monotonic()
                    rows = 0
                    for batch in ray.data.read_parquet(location).iter_batches(batch_size=BATCH_ROWS,
                                                                              batch_format="pyarrow"):
                        rows += batch.num_rows
                    ray_mbs.append(size / 1e6 / (time.monotonic() - started))
                    fs, path = pafs.FileSystem.from_uri(location) if "://" in location else (None, location)
                    started = time.monotonic()
                    table = pq.read_table(path, filesystem=fs)
                    arrow_mbs.append(size / 1e6 / (time.monotonic() - started))
                    assert table.num_rows == rows
                figures[where] = {"ray_data_mb_s": round(statistics.median(ray_mbs[1:]), 1),
                                  "pyarrow_mb_s": round(statistics.median(arrow_mbs[1:]), 1),
                                  "ray_all": [round(x, 1) for x in ray_mbs[1:]],
                                  "pyarrow_all": [round(x, 1) for x in arrow_mbs[1:]]}
            ray.shutdown()
        finally:
            store.stop()
    return {"file_mb": round(size / 1e6, 1), "rows": rows, **figures}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", choices=("first-step", "ingest"), default=None)
    args = parser.parse_args()

    figures = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    if args.only in (None, "ingest"):
        figures["ingest"] = bench_ingest(args.runs)
        print("ingest", json.dumps(figures["ingest"]), flush=True)
    if args.only in (None, "first-step"):
        with staked_sites({1: 1}) as (swarm, home, (site,)):
            figures["first_step"] = bench_first_step(swarm, home, site, args.runs)
            print("first-step", json.dumps(figures["first_step"]), flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
