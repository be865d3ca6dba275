"""The `train` runner: Ray Train's TorchTrainer on the provider's nodes only.

Params (`job.params`, a `compute.runners.params` class):
  model         "mlp" | "tiny-transformer"                        (default "mlp"), or a Hugging Face
                sequence classifier's directory the buyer brings (compute.hf)
  dataset       "synthetic-classification" | "synthetic-sequences" (default: the model's own), or a
                table the buyer brings (compute.tabular: Parquet, CSV or JSON Lines): numbers for
                the mlp, a `text` column for a Hugging Face classifier; with a `label` column
  samples       rows; the last fifth is held out for validation (0, the default: 1024 of a
                built-in dataset, every row of a table)
  epochs        passes over the training split, a checkpoint after each (default 3)
  batch_size    per-worker batch size (default 32)
  lr            Adam learning rate (default 1e-3)
  precision     "fp32" | "bf16" — bf16 runs forward passes under autocast (default "fp32")
  max_failures  worker-group failures to recover from, each from the last checkpoint (default 2)

A table larger than WHOLE_TABLE_BYTES streams through Ray Data: the driver reads it in blocks
into the cluster's object store, holds out a fifth of its rows drawn with the job's seed, and
each worker iterates its own shard of the rest (`ray.train.get_dataset_shard`), shuffled locally
with the job's seed. A smaller one is read whole by the driver, as `finetune` and `infer` read
theirs, split the same way and handed to the workers with their config, each taking an equal
share of the rest: Ray Data's actors and tasks would cost a small table's lease more than the
table (`metrics["dataset_read"]` says which). The MLP is sized to the table's columns and
classes. A Hugging Face classifier trains every weight from its checkpoint, its packed files
sent to the workers in their config; each worker tokenizes its batches, and the outputs are the
trained model and its tokenizer as `save_pretrained` writes them, which `infer` and `finetune` read.

`job.workers` workers, each pinned to the provider by label selector and a sliver of its
custom resource. A checkpoint is written every epoch under `job.storage` (a local directory
or any pyarrow filesystem URI) in `<storage>/<job_id>`; running the same job id again
resumes from the last one (a run of one worker in a lease runs in the lease's own process,
`one_process`, and keeps its checkpoints the same way). The job's outputs — the final model
and its per-epoch metrics — go to `<result_dir>/outputs`; where and when it ran goes to
`<result_dir>/run.json`, so on the CPU with one seed the resultHash is the same on every provider.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import ray
import ray.train
import torch
import torch.distributed as dist
from ray.train import Checkpoint, CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from compute import hf, tabular
from compute.accounting import BusyTimer, usage
from compute.checkpoints import save_model
from compute.context import in_place_provider
from compute.data import load_dataset
from compute.device import autocast, device_name, model_device, require_cuda
from compute.errors import InvalidJob, ProviderFault
from compute.jobs import ComputeJob, JobResult
from compute.manifest import OUTPUT_DIR, result_hash
from compute.models import build_model
from compute.node import TRAIN_HELPERS_OFF, TRAIN_POLL
from compute.placement import LABEL, PIN, label_selector, provider_resource
from compute.ray_private import TorchTrainer, train_in_place
from compute.runners.params import TrainParams
from compute.runners.supervise import ProviderWatch, failure_for, release_placement_groups

STATE = "state.json"
OPTIMIZER = "optimizer.pt"
WEIGHTS = "model.safetensors"
RUN_RECORD = "run.json"
# A table whose files hold at most this many bytes is read whole; a larger one streams. Streaming
# starts Ray Data's coordinator, stats and autoscaling actors and its read and split tasks, each a
# process of its own: about 12 CPU-seconds and as many seconds before the first step on two cores.
WHOLE_TABLE_BYTES = 8 * 2**20
CHECKPOINTS_KEPT = 2  # the newest of a run's checkpoints kept under its storage


# ── on the workers ───────────────────────────────────────────────────────────


def make_deterministic(seed: int) -> None:
    """One thread, deterministic kernels, every generator seeded: the same numbers on any CPU node."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)


def split(inputs: torch.Tensor, labels: torch.Tensor) -> tuple[TensorDataset, TensorDataset]:
    """(training, validation): the validation set is the last fifth of the samples."""
    held_out = max(1, len(labels) // 5)
    cut = len(labels) - held_out
    return TensorDataset(inputs[:cut], labels[:cut]), TensorDataset(inputs[cut:], labels[cut:])


def validation_set(params: TrainParams, seed: int) -> TensorDataset:
    return split(*load_dataset(params.dataset, seed, n=params.samples))[1]


Tensors = Callable[[dict[str, np.ndarray]], tuple[torch.Tensor, torch.Tensor]]


def table_tensors(features: list[str]) -> Tensors:
    """A batch of a table's columns as (float features, labels)."""
    def tensors(batch: dict[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = tabular.arrays(batch, features)
        return torch.from_numpy(x), torch.from_numpy(y)
    return tensors


def text_tensors(tokenizer) -> Tensors:
    """A batch of a table's texts as (token ids, labels)."""
    def tensors(batch: dict[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        labels = np.asarray(batch[tabular.LABEL], dtype=np.int64)
        return hf.token_ids(tokenizer, [str(t) for t in batch[hf.TEXT]]), torch.from_numpy(labels)
    return tensors


def table_batches(shard: ray.data.DataIterator, tensors: Tensors, batch_size: int, seed: int | None = None):
    """(inputs, labels) batches of a worker's shard of a table, shuffled locally with `seed`."""
    shuffle = {} if seed is None else {"local_shuffle_buffer_size": max(256, 8 * batch_size),
                                       "local_shuffle_seed": seed}
    for batch in shard.iter_batches(batch_size=batch_size, batch_format="numpy", **shuffle):
        yield tensors(batch)


def table_validation(shard: ray.data.DataIterator | dict[str, np.ndarray], tensors: Tensors) -> TensorDataset:
    """The held-out rows of a table, whole on every worker (a fifth, and not split), as one batch."""
    if isinstance(shard, dict):  # read whole by the driver
        return TensorDataset(*tensors(shard))
    parts = list(shard.iter_batches(batch_size=1024, batch_format="numpy"))
    return TensorDataset(*tensors({k: np.concatenate([p[k] for p in parts]) for k in parts[0]}))


def share_of(rows: dict[str, np.ndarray], rank: int, world: int) -> dict[str, np.ndarray]:
    """A worker's equal share of a table read whole: every world-th row from its rank, the same
    count on every worker (so DDP's all-reduces pair up); at most world − 1 rows are left out."""
    each = len(rows[tabular.LABEL]) // world
    return {k: v[rank::world][:each] for k, v in rows.items()}


def row_batches(rows: dict[str, np.ndarray], tensors: Tensors, batch_size: int, seed: int):
    """(inputs, labels) batches of a worker's share of a table read whole, in an order drawn with `seed`."""
    order = np.random.default_rng(seed).permutation(len(rows[tabular.LABEL]))
    for start in range(0, len(order), batch_size):
        take = order[start:start + batch_size]
        yield tensors({k: v[take] for k, v in rows.items()})


@torch.no_grad()
def evaluate(model: nn.Module, data: TensorDataset, precision: str = "fp32", batch_size: int = 256) -> dict:
    """Mean cross-entropy and accuracy of `model` on `data`."""
    model.eval()
    device = model_device(model)
    loss_sum, correct = 0.0, 0
    for inputs, labels in DataLoader(data, batch_size=batch_size):
        inputs, labels = inputs.to(device), labels.to(device)
        with autocast(device, precision):
            logits = model(inputs)
        loss_sum += nn.functional.cross_entropy(logits.float(), labels, reduction="sum").item()
        correct += (logits.argmax(dim=1) == labels).sum().item()
    model.train()
    return {"loss": loss_sum / len(data), "accuracy": correct / len(data)}


def gather(value: Any) -> list[Any]:
    """`value` from every worker, in rank order."""
    if not dist.is_initialized():
        return [value]
    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def where_am_i(**extra: Any) -> dict[str, Any]:
    """The node this process runs on and the provider its label names; in place (a lease,
    `compute.context.in_place`), the provider alone: the lease has no Ray node of its own."""
    here = in_place_provider()
    if here is not None:
        return extra | {"node_id": None, "provider": here}
    context = ray.get_runtime_context()
    return extra | {"node_id": context.get_node_id(), "provider": context.get_node_labels().get(LABEL, "")}


def load_state(checkpoint: Checkpoint | None, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Restores model and optimizer from `checkpoint`; returns the run's state (epoch 0 if none)."""
    if checkpoint is None:
        return {"epoch": 0, "history": [], "units": 0.0, "placements": [], "first_step_at": None}
    with checkpoint.as_directory() as directory:
        model.load_state_dict(load_file(str(Path(directory) / WEIGHTS)))
        optimizer.load_state_dict(torch.load(Path(directory) / OPTIMIZER, weights_only=True))
        return json.loads((Path(directory) / STATE).read_text())


def save_state(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    weights = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(directory / WEIGHTS))
    torch.save(optimizer.state_dict(), directory / OPTIMIZER)
    (directory / STATE).write_text(json.dumps(state, sort_keys=True))


# ── FSDP: each worker holds a shard ─────────────────────────────────────────


def shard_model(model: nn.Module) -> nn.Module:
    """The model sharded over the workers (FSDP2's `fully_shard`): each block that holds
    parameters, then the whole, so a block's parameters are gathered only while it computes."""
    from torch.distributed.fsdp import fully_shard

    for child in model.children():
        if any(p.requires_grad for p in child.parameters()):
            fully_shard(child)
    return fully_shard(model)


def local_parameters(model: nn.Module) -> int:
    """The parameters this worker holds: its shards' elements, or all of an unsharded model's."""
    return sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())


def load_sharded(checkpoint: Checkpoint | None, model: nn.Module, optimizer: torch.optim.Optimizer,
                 state: dict) -> dict:
    """Restores a sharded model and its optimizer from a checkpoint of their whole state (every
    worker reads it and keeps its shards): the run's state, epoch 0 if none."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    if checkpoint is None:
        return state
    whole = StateDictOptions(full_state_dict=True)
    with checkpoint.as_directory() as directory:
        set_model_state_dict(model, load_file(str(Path(directory) / WEIGHTS)), options=whole)
        saved = torch.load(Path(directory) / OPTIMIZER, weights_only=True)
        set_optimizer_state_dict(model, optimizer, optim_state_dict=saved, options=whole)
        return json.loads((Path(directory) / STATE).read_text())


def save_sharded(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict,
                 rank: int) -> None:
    """Writes the whole of a sharded model and its optimizer, gathered from every worker (each must
    call it), as rank 0: the same weights file a DDP run writes, so its result reads the same."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    whole = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = get_model_state_dict(model, options=whole)
    optimizer_state = get_optimizer_state_dict(model, optimizer, options=whole)
    if rank == 0:
        save_file({k: v.detach().contiguous() for k, v in weights.items()}, str(directory / WEIGHTS))
        torch.save(optimizer_state, directory / OPTIMIZER)
        (directory / STATE).write_text(json.dumps(state, sort_keys=True))


def train_epoch(model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer, device: torch.device,
                precision: str, state: dict) -> tuple[float, int, str]:
    """One pass over this worker's shard: (summed loss, samples seen, dtype of the logits)."""
    loss_sum, count = torch.zeros((), dtype=torch.float64), 0
    for inputs, labels in loader:
        if state["first_step_at"] is None:
            state["first_step_at"] = time.time()
        inputs, labels = inputs.to(device), labels.to(device)
        with autocast(device, precision):
            logits = model(inputs)
        loss = nn.functional.cross_entropy(logits.float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum += loss.detach().double().cpu() * len(labels)
        count += len(labels)
    return loss_sum.item(), count, str(logits.dtype).removeprefix("torch.")


def train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: `config` is {"params": TrainParams as a dict, "seed": int}.
    Plain enough to hand to any TorchTrainer (the dispatch benchmark does)."""
    params, seed = TrainParams(**config["params"]), int(config["seed"])
    make_deterministic(seed)
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()
    if config.get("use_gpu") and device.type != "cuda":  # a worker that holds a GPU trains on it
        require_cuda()

    table = config.get("table")  # a table's {"features", "classes"}; None for a built-in dataset
    if params.brought:  # a transformers classifier, from its packed checkpoint, on a table of texts
        model, tokenizer = hf.classifier(config["checkpoint"])
        tensors = text_tensors(tokenizer)
    else:
        model = build_model(params.model, **model_config(table))
        tensors = table_tensors(table["features"] if table else [])  # read only with a table
    model = model.to(device)
    if table is None:
        train_set, val_set = split(*load_dataset(params.dataset, seed, n=params.samples))
        sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=seed)
        loader = DataLoader(train_set, batch_size=params.batch_size, sampler=sampler)
    else:
        whole = config.get("rows")  # a small table, read whole by the driver
        held_out = whole["validation"] if whole else ray.train.get_dataset_shard("validation")
        val_set = table_validation(held_out, tensors)
        shard = share_of(whole["train"], rank, world) if whole else ray.train.get_dataset_shard("train")
    sharded = params.parallelism == "fsdp" and world > 1
    if sharded:  # the optimizer steps the shards: made once the model is sharded
        model = shard_model(model)
        optimizer = torch.optim.Adam(model.parameters(), lr=params.lr)
        state = load_sharded(ray.train.get_checkpoint(), model, optimizer, load_state(None, model, optimizer))
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=params.lr)
        state = load_state(ray.train.get_checkpoint(), model, optimizer)
    state["parallelism"] = "fsdp" if sharded else "ddp" if world > 1 else "none"
    state["local_parameters"] = gather(local_parameters(model))
    state["resumed_from_epoch"] = state["epoch"]
    state["model_config"] = {} if params.brought else model_config(table)
    state["features"] = table and table["features"]
    state["device_name"] = device_name(device)
    state["placements"].append(gather(where_am_i(rank=rank)))
    ddp = DistributedDataParallel(model) if world > 1 and not sharded else model

    for epoch in range(state["epoch"], params.epochs):
        if table is None:
            sampler.set_epoch(epoch)
        else:
            epoch_seed = seed * 1_000 + epoch
            loader = (row_batches(shard, tensors, params.batch_size, epoch_seed) if isinstance(shard, dict)
                      else table_batches(shard, tensors, params.batch_size, seed=epoch_seed))
        with BusyTimer() as timer:
            loss_sum, count, state["compute_dtype"] = train_epoch(ddp, loader, optimizer, device,
                                                                  params.precision, state)
            val = evaluate(model, val_set, params.precision)
        totals = gather((loss_sum, count, timer.seconds))
        state["epoch"] = epoch + 1
        state["units"] += sum(t[2] for t in totals)
        state["history"].append({
            "epoch": epoch + 1,
            "loss": round(sum(t[0] for t in totals) / sum(t[1] for t in totals), 6),
            "val_loss": round(val["loss"], 6),
            "val_accuracy": round(val["accuracy"], 6),
        })
        if rank == 0:  # what the job's log shows of it (`swarm job logs`)
            print(progress_line(state["history"][-1], params.epochs), flush=True)
        with tempfile.TemporaryDirectory() as directory:
            checkpoint = None
            if sharded:  # gathered from every worker's shards, written by rank 0
                save_sharded(Path(directory), model, optimizer, state, rank)
            elif rank == 0:  # the model is the same on every rank after DDP's all-reduce
                save_state(Path(directory), model, optimizer, state)
            if rank == 0:
                checkpoint = Checkpoint.from_directory(directory)
            ray.train.report(state["history"][-1], checkpoint=checkpoint)


def progress_line(entry: dict[str, Any], epochs: int) -> str:
    """One epoch of a run as its log shows it."""
    return (f"epoch {entry['epoch']}/{epochs}: loss {entry['loss']:.4f}, val_loss {entry['val_loss']:.4f}, "
            f"val_accuracy {entry['val_accuracy']:.4f}")


# ── on the driver ────────────────────────────────────────────────────────────


def model_config(table: dict[str, Any] | None) -> dict[str, int]:
    """The MLP's size for a table: one input per feature column, one output per class."""
    return {} if table is None else {"in_features": len(table["features"]), "classes": table["classes"]}


def loop_config(job: ComputeJob, params: TrainParams, table: dict[str, Any] | None = None,
                checkpoint: dict[str, bytes] | None = None,
                rows: dict[str, dict[str, np.ndarray]] | None = None) -> dict[str, Any]:
    """The workers' config; `checkpoint` is a brought transformers checkpoint's files (hf.pack),
    `rows` a small table's training and validation rows, read whole."""
    return {"params": asdict(params), "seed": job.seed, "table": table, "use_gpu": job.use_gpu} | (
        {"checkpoint": checkpoint} if checkpoint is not None else {}) | ({"rows": rows} if rows else {})


def table_layout(names: list[str], types: list[Any], path: str, brought: bool) -> tuple[list[str], list[str]]:
    """(feature columns, columns kept) of a table with these columns: numbers with a label, or for a
    transformers checkpoint texts with a label; anything else is the buyer's to fix."""
    import pyarrow as pa

    if brought:
        if hf.TEXT not in names or tabular.LABEL not in names:
            raise InvalidJob(
                f"dataset {Path(path).name} needs a {hf.TEXT!r} and a {tabular.LABEL!r} column; a "
                f"text model trains on each row's text and its class"
            )
        features, kept, numeric = [hf.TEXT], [hf.TEXT, tabular.LABEL], [tabular.LABEL]
    else:
        features = tabular.features_of(list(names), Path(path).name)
        kept = numeric = list(names)
    odd = [n for n, t in zip(names, types, strict=True) if n in numeric
           and not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t))]
    if odd:
        raise InvalidJob(f"dataset {Path(path).name}: column(s) {', '.join(odd)} are not numbers; every "
                         f"feature and {tabular.LABEL!r} must be numeric")
    return features, kept


def table_classes(low: int | None, high: int | None, rows: int, path: str) -> int:
    """How many classes a table's labels name, from their range; a table too small or with a label
    below 0 is refused."""
    if rows < 10 or low is None or high is None or low < 0:
        raise InvalidJob(
            f"dataset {Path(path).name} needs at least 10 rows with labels that are integers from 0"
        )
    return high + 1


def dataset_read(params: TrainParams) -> str:
    """How the job's dataset reaches the workers: "built-in" (made by each worker), "whole" (a
    table of at most WHOLE_TABLE_BYTES, read by the driver) or "streamed" (through Ray Data)."""
    if tabular.is_named(params.dataset):
        return "built-in"
    _, files = tabular.files_of(params.dataset)
    return "whole" if sum(Path(f).stat().st_size for f in files) <= WHOLE_TABLE_BYTES else "streamed"


def table_rows(params: TrainParams, seed: int) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, Any]]:
    """A small table read whole: its training and validation rows (a fifth held out, drawn with
    the job's seed) as columns, and its layout."""
    path = params.dataset
    table = tabular.read_table(path)
    if params.samples:
        table = table.slice(0, params.samples)
    features, kept = table_layout(table.schema.names, table.schema.types, path, params.brought)
    columns = {c: table.column(c).to_numpy(zero_copy_only=False) for c in kept}
    labels = columns[tabular.LABEL]
    every_row_labelled = len(labels) > 0 and bool(np.all(np.isfinite(labels.astype(np.float64))))
    low, high = (int(labels.min()), int(labels.max())) if every_row_labelled else (None, None)
    classes = table_classes(low, high, len(labels), path)
    order = np.random.default_rng(seed).permutation(len(labels))
    held_out = max(1, round(len(labels) * 0.2))
    splits = {"validation": np.sort(order[:held_out]), "train": order[held_out:]}
    rows = {name: {c: v[index] for c, v in columns.items()} for name, index in splits.items()}
    return rows, {"features": features, "classes": classes}


def table_datasets(params: TrainParams, seed: int) -> tuple[dict[str, ray.data.Dataset], dict[str, Any]]:
    """A larger table streamed: its training and validation splits (a fifth of its rows, drawn
    with the job's seed: a table's rows are often in the order they were gathered) as Ray Data
    datasets, and its layout."""
    import pyarrow as pa

    path = params.dataset
    context = ray.data.DataContext.get_current()
    # a lease's log is for the buyer
    context.enable_progress_bars, context.print_on_execution_start = False, False
    dataset = tabular.read(path)
    if params.samples:
        dataset = dataset.limit(params.samples)
    try:
        dataset = dataset.materialize()  # blocks in the cluster's object store, not in this process
        schema = dataset.schema()
    except (ray.exceptions.RayError, pa.ArrowException, ValueError, OSError) as exc:
        raise InvalidJob(
            f"dataset {Path(path).name} cannot be read: {str(exc).strip().splitlines()[-1]}"
        ) from None
    features, kept = table_layout(list(schema.names), list(schema.types), path, params.brought)
    if kept != list(schema.names):
        dataset = dataset.select_columns(kept)
    # The classes: the label column's range, block by block (an aggregate would start a shuffle).
    low, high = None, None
    for block in dataset.iter_batches(batch_size=None, batch_format="numpy"):
        labels = block[tabular.LABEL]
        if len(labels):
            low = int(labels.min()) if low is None else min(low, int(labels.min()))
            high = int(labels.max()) if high is None else max(high, int(labels.max()))
    classes = table_classes(low, high, dataset.count(), path)
    train, validation = dataset.train_test_split(test_size=0.2, shuffle=True, seed=seed)
    return {"train": train, "validation": validation}, {"features": features, "classes": classes}


def scaling_config(job: ComputeJob) -> ScalingConfig:
    """`job.workers` workers of one CPU (or GPU), on the job's provider's nodes only."""
    devices = {"CPU": 1, "GPU": 1} if job.use_gpu else {"CPU": 1}
    return ScalingConfig(
        num_workers=job.workers,
        use_gpu=job.use_gpu,
        resources_per_worker=devices | {provider_resource(job.provider): PIN},
        label_selector=label_selector(job.provider),
    )


def storage_path(job: ComputeJob) -> str:
    """Where Ray Train keeps the job's checkpoints: `<storage_path>/<job_id>`."""
    if "://" in job.storage:
        return job.storage
    return str(job.result_dir().parent.resolve())


def run_config(job: ComputeJob, params: TrainParams) -> RunConfig:
    return RunConfig(
        name=job.job_id,
        storage_path=storage_path(job),
        failure_config=FailureConfig(max_failures=params.max_failures),
        checkpoint_config=CheckpointConfig(num_to_keep=CHECKPOINTS_KEPT),
        callbacks=[ProviderWatch(job.provider, deadline=time.time() + job.timeout_s)],
    )


def one_process(job: ComputeJob) -> bool:
    """Whether the run is one worker whose checkpoints go to a local directory and whose table,
    if any, is read whole: in a lease (`compute.context.in_place`) it then runs in the lease's own
    process, as the worker, and starts no Ray. Ray Train's controller, its worker actor and the
    lease's Ray cost a small job about 15 CPU-seconds and as many seconds before its first step."""
    params = job.params_of(TrainParams)
    return job.workers == 1 and "://" not in job.storage and dataset_read(params) != "streamed"


def fit(job: ComputeJob, params: TrainParams) -> ray.train.Result:
    """Runs the trainer; a lost provider, a timeout or dead workers become compute errors. In
    place (`one_process`, which `compute.dispatch.run_job` checked) the loop runs in this process."""
    started = time.monotonic()
    # Read by the controller when it starts: as in a lease, wherever the runner runs.
    for name, value in (TRAIN_POLL | TRAIN_HELPERS_OFF).items():
        os.environ.setdefault(name, value)
    checkpoint = None
    if params.brought:  # its configuration and tokenizer load, before any Ray work
        directory, _ = hf.check(params.model)
        checkpoint = hf.pack(directory)
    datasets: dict[str, ray.data.Dataset] = {}
    rows, table = None, None
    read = dataset_read(params)
    if read == "whole":
        rows, table = table_rows(params, job.seed)
    elif read == "streamed":
        datasets, table = table_datasets(params, job.seed)
    if params.brought:
        if table is None:  # TrainParams holds a brought checkpoint to a table: a job read otherwise
            raise InvalidJob(f"job {job.job_id}: a transformers checkpoint trains on a table of texts; name "
                             "one as its dataset.", "dataset")
        hf.check_classes(directory, table["classes"], params.dataset)
    if in_place_provider() == job.provider:
        return train_in_place(train_loop, loop_config(job, params, table, checkpoint, rows),
                              Path(storage_path(job)) / job.job_id, keep=CHECKPOINTS_KEPT)
    trainer = TorchTrainer(train_loop, train_loop_config=loop_config(job, params, table, checkpoint, rows),
                           scaling_config=scaling_config(job), run_config=run_config(job, params),
                           datasets=datasets or None, dataset_config=DataConfig(datasets_to_split=["train"]))
    try:
        return trainer.fit()
    except (ray.exceptions.RayError, ray.train.TrainingFailedError) as error:
        failure = failure_for(job, started)
        if failure is not None:
            # The watch killed the controller: a placement group it asked for (again, or before an
            # abort that did not finish in its grace) would otherwise hold the provider's resources.
            release_placement_groups(job.provider)
            raise failure from error
        if workers_died(error):
            raise ProviderFault(
                job.provider,
                f"job {job.job_id}: workers on provider {job.provider} died more than max_failures="
                f"{params.max_failures} times; post it again or raise max_failures.",
            ) from error
        raise


def workers_died(error: BaseException) -> bool:
    """True when a worker group failed because its actors died (a node loss), not a bug in the loop."""
    failures = getattr(error, "worker_failures", None) or {}
    return any(isinstance(e, ray.exceptions.RayActorError) for e in failures.values())


def write_outputs(
    job: ComputeJob, params: TrainParams, model: nn.Module, state: dict, tokenizer=None
) -> Path:
    """The deterministic part of the result: the model and its per-epoch metrics; a transformers
    classifier (with its `tokenizer`) as save_pretrained writes it."""
    outputs = job.result_dir() / OUTPUT_DIR
    shutil.rmtree(outputs, ignore_errors=True)
    # A table (or a checkpoint) is named by its file: where a lease staged it differs from site to site.
    dataset = params.dataset if tabular.is_named(params.dataset) else Path(params.dataset).name
    table = {"features": state["features"]} if state.get("features") else {}
    if tokenizer is not None:
        hf.save(model.model, tokenizer, outputs)
    else:
        save_model(
            model,
            params.model,
            state.get("model_config", {}),
            outputs,
            dataset=dataset,
            samples=params.samples,
            seed=job.seed,
            precision=params.precision,
            **table,
        )
    shown = {"dataset": dataset} | ({"model": Path(params.model).name} if params.brought else {})
    record = {
        "params": asdict(params) | shown,
        "seed": job.seed,
        "workers": job.workers,
        "history": state["history"],
        "compute_dtype": state["compute_dtype"],
        "device_name": state.get("device_name"),
    }
    (outputs / "metrics.json").write_text(json.dumps(record, sort_keys=True, indent=2))
    return outputs


def run(job: ComputeJob) -> JobResult:
    """Trains on the provider's nodes and returns the result with its hash and units."""
    params = job.params_of(TrainParams)
    started = time.time()
    result = fit(job, params)
    with result.checkpoint.as_directory() as directory:
        state = json.loads((Path(directory) / STATE).read_text())
        weights = load_file(str(Path(directory) / WEIGHTS))
    tokenizer = None
    if params.brought:
        model, tokenizer = hf.classifier(hf.pack(hf.check(params.model)[0]))
    else:
        model = build_model(params.model, **state.get("model_config", {}))
    model.load_state_dict(weights)
    write_outputs(job, params, model, state, tokenizer)
    result_dir = job.result_dir()
    used = usage([state["units"]], job.use_gpu)
    last = state["history"][-1]
    metrics = {
        "epochs": state["epoch"], "loss": last["loss"], "val_loss": last["val_loss"],
        "val_accuracy": last["val_accuracy"], "history": state["history"], "precision": params.precision,
        "compute_dtype": state["compute_dtype"], "device_name": state.get("device_name"),
        "resumed_from_epoch": state["resumed_from_epoch"], "placements": state["placements"],
        "first_step_at": state["first_step_at"], "parallelism": state.get("parallelism", "ddp"),
        "local_parameters": state.get("local_parameters"),
        "checkpoint": result.checkpoint.path, "wall_s": round(time.time() - started, 3),
        "dataset_read": dataset_read(params),
    }
    record = metrics | {"started_at": started}
    (result_dir / RUN_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True))
    return JobResult(job.job_id, job.kind, job.provider, metrics, str(result_dir), result_hash(result_dir),
                     used.amount, used.unit)
