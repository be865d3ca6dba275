"""A lease across nodes (provider/lease/gang.py) on the session's Ray cluster, whose provider A
has two nodes: the coordinator places the lease's two nodes all at once, one on each, joins them
by the lease's own network (provider/lease/network.py), and a buyer's Ray Train script trains
with DDP across them: each rank on a node of its own, its gradients all-reduced over the link.
What every rank writes lands in the directory the nodes share, and the result is stored with
its manifest and log as a one-node lease's is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from compute.jobs import ComputeJob
from provider.lease import PLAN_ENV, PROJECT, WORK
from provider.lease.launch import leases_root, node_directory
from provider.lease.network import node_address
from provider.lease.outcome import verdict
from provider.lease.plan import LeasePlan
from tests.programs import pinned_code
from tests.ray_cluster import PROVIDER_A

RAYLET_ENV: dict[str, str] = {}  # the session cluster's raylets were started with no SWARM_HOME

DDP = '''
import json, os
import ray, ray.train, torch
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model

def loop(config):
    import torch.distributed as dist
    rank = ray.train.get_context().get_world_rank()
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(256, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    for step in range(60):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    weights = (model.module if hasattr(model, "module") else model).weight.detach().flatten().tolist()
    with open(os.path.join(os.environ["SWARM_OUTPUT_DIR"], f"rank{rank}.json"), "w") as f:
        json.dump({"ip": ray.util.get_node_ip_address(), "sum": total.item(), "loss": loss.item(),
                   "weights": weights}, f)
    ray.train.report({"loss": loss.item()})

ray.init()
TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2)).fit()
print("trained across nodes")
'''


def test_a_ray_train_script_trains_with_ddp_across_two_nodes_of_a_lease(ray_cluster, tmp_path: Path) -> None:
    program = {"entrypoint": "python main.py", "requirements": [], "env": {}, "ray": True,
               "code": pinned_code(tmp_path, {"main.py": DDP}), "inputs": {}}
    plan = LeasePlan(job_id=1, number=41, job=ComputeJob.of("job-1", "ray", PROVIDER_A, program), cpus=1,
                     gpus=0, memory_bytes=3 * 2**30, wall_seconds=420, max_units=2_000,
                     result=str(tmp_path / "results" / "job-1"), verdict_key="v" * 32, nodes=2,
                     shared=str(tmp_path / "shared" / "lease-1"))
    name = f"gang-{tmp_path.name}"
    env = os.environ | {PLAN_ENV: plan.encode(), "RAY_ADDRESS": ray_cluster.address}
    try:
        done = subprocess.run([sys.executable, "-m", "provider.lease.gang", name], env=env,
                              capture_output=True, text=True, timeout=600, cwd=PROJECT, check=False)
        # Its result stored, the lease leaves nothing: not what its nodes shared, not node 1's inputs.
        left = [p for p in (Path(plan.shared), leases_root(RAYLET_ENV) / node_directory(name, 1) / WORK)
                if p.exists()]
    finally:  # the nodes' directories, in the SWARM_HOME of the session cluster's raylets
        for index in (0, 1):
            shutil.rmtree(leases_root(RAYLET_ENV) / node_directory(name, index), ignore_errors=True)
    outcome = verdict(done.stdout, plan.verdict_key)
    assert outcome is not None and outcome.state == "succeeded", (done.stdout[-4000:], done.stderr[-3000:])

    outputs = tmp_path / "results" / "job-1" / "outputs"
    ranks = [json.loads((outputs / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert {r["ip"] for r in ranks} == {node_address(0), node_address(1)}, "one rank on each node"
    assert all(r["sum"] == 3.0 for r in ranks), "the all-reduce crossed the lease's link"
    assert ranks[0]["weights"] == ranks[1]["weights"], "DDP kept the replicas equal"
    assert ranks[0]["loss"] < 0.05
    assert "trained across nodes" in (tmp_path / "results" / "job-1" / "log").read_text()
    assert "[node 1]" in done.stdout, "node 1's output is relayed, marked"
    assert outcome.units >= 2 * outcome.seconds - 2, "metered on both nodes"
    assert left == [], left

