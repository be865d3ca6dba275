"""A buyer's own program for the tests, as `swarm job post` would pin it: the code packed
(`compute.dataplane.pack`) into a local store, named by its sha256, with the spec around it."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from compute import dataplane
from compute.jobs import ComputeJob
from provider.lease.plan import LeasePlan


def pinned_code(store: Path, files: dict[str, str]) -> dict[str, str]:
    """`files` (name → text) packed and stored in `store` under their sha256: {uri, sha256}."""
    source = store / "sources" / hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
    for name, text in files.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    archive = dataplane.pack(source)
    sha = hashlib.sha256(archive).hexdigest()
    path = store / "code" / f"{sha}.tar"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(archive)
    return {"uri": str(path), "sha256": sha}


def program_spec(store: Path, code: str, *, memory_gb: float = 0.5, cpus: float = 1, max_units: int = 600,
                 deadline: int | str | None = None, output: str | None = None, uses_ray: bool = False,
                 **fields) -> dict:
    """A `ray` job running `code` as main.py, its results to `output` (default: store/results). The
    tests' small programs use no Ray of their own unless `uses_ray` (tests/test_program.py runs
    those that do)."""
    return {"kind": "ray", "code": pinned_code(store, {"main.py": code}),
            "output": output or str(store / "results"),
            "resources": {"workers": 1, "cpus_per_worker": cpus, "memory_gb": memory_gb},
            "max_price_per_unit": "0.000001", "max_units": max_units,
            "deadline": deadline if deadline is not None else int(time.time()) + 3_600,
            "params": {"entrypoint": "python main.py", "ray": uses_ray}} | fields


def program_plan(tmp_path: Path, main: str, **changes) -> LeasePlan:
    data = tmp_path / "data.csv"
    data.write_text("x,y\n1,2\n")
    program = {"entrypoint": "python main.py", "requirements": [], "env": {}, "ray": False,
               "code": pinned_code(tmp_path, {"main.py": main}),
               "inputs": {"table": {"uri": str(data), "sha256": dataplane.digest(str(data))}}} | changes
    return LeasePlan(job_id=1, number=1, job=ComputeJob.of("job-1", "ray", "", program), cpus=1, gpus=0,
                     memory_bytes=2 * 2**30, wall_seconds=120, max_units=100,
                     result=str(tmp_path / "results" / "job-1"))  # the site's: <output>/<compute job id>


def with_program(plan: LeasePlan, **changes) -> LeasePlan:
    """The plan with its program's parameters changed, read again as a site reads them."""
    params = plan.job.to_dict()["params"] | changes
    return plan.but(job=ComputeJob.of(plan.job.job_id, "ray", plan.job.provider, params))


# A Ray Train script as a buyer writes one that resumes: a checkpoint every epoch (rank 0's),
# loaded when the run starts again; each epoch rank 0 appends where it started from to its outputs.
RESUMING = '''
import json, os, tempfile, time
import ray, ray.train, torch
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model

EPOCHS = 8

def loop(config):
    rank = ray.train.get_context().get_world_rank()
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Linear(4, 1))
    inner = model.module if hasattr(model, "module") else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 1
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as directory:
            state = torch.load(os.path.join(directory, "state.pt"))
        inner.load_state_dict(state["model"])
        start = state["epoch"] + 1
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(256, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    for epoch in range(start, EPOCHS + 1):
        for _ in range(10):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        time.sleep(1.5)
        with tempfile.TemporaryDirectory() as directory:
            saved = None
            if rank == 0:
                torch.save({"model": inner.state_dict(), "epoch": epoch}, os.path.join(directory, "state.pt"))
                saved = Checkpoint.from_directory(directory)
            ray.train.report({"epoch": epoch, "loss": loss.item()}, checkpoint=saved)
        if rank == 0:
            with open(os.path.join(os.environ["SWARM_OUTPUT_DIR"], "progress.jsonl"), "a") as f:
                f.write(json.dumps({"epoch": epoch, "from": start, "loss": loss.item()}) + "\\n")

ray.init()
TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(name="resuming")).fit()
print("trained to the last epoch")
'''
