"""The `finetune` runner: LoRA adapters (peft) on a base checkpoint the buyer names.

Params (`job.params`):
  base_checkpoint  a model checkpoint: a train job's result directory, or a directory with
                   model.safetensors and model.json (required)
  dataset          the dataset to adapt to (default: the base model's own kind of data,
                   drawn with the job's seed); a model trained on a table is tuned on a
                   table with the same columns (compute.tabular), read whole
  samples          rows; the last fifth is held out for validation (0, the default: 512 of a
                   built-in dataset, every row of a table)
  epochs           passes over the training split (default 2)
  batch_size       batch size (default 32)
  lr               Adam learning rate for the adapters (default 5e-3)
  lora_rank        rank of each adapter (default 4)
  lora_alpha       adapter scale numerator: updates are scaled by alpha / rank (default 8)

The base weights stay frozen: only the adapters train. The work runs as one Ray task
pinned to the provider's nodes; the base weights travel with the task, so the provider
needs no access to the buyer's files. Outputs: `adapter.safetensors` (the adapters),
`model.safetensors` + `model.json` (the base weights as they stand after training, with
the adapter described in model.json, so `infer` accepts a finetune result) and
`metrics.json`.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import ray
import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file, save_file
from torch import nn
from torch.utils.data import DataLoader

from compute import tabular
from compute.accounting import BusyTimer, usage
from compute.checkpoints import find_checkpoint, load_model, save_model
from compute.catalog import DATASET_FOR, LORA_TARGETS
from compute.data import load_dataset
from compute.jobs import ComputeJob, JobResult
from compute.manifest import OUTPUT_DIR, file_sha256, result_hash
from compute.models import build_model
from compute.placement import task_options
from compute.runners.params import FinetuneParams, require
from compute.tabular import is_named
from compute.runners.supervise import await_pinned
from compute.runners.train import evaluate, make_deterministic, split, where_am_i

ADAPTER = "adapter.safetensors"
RUN_RECORD = "run.json"


def lora_config(model_name: str, rank: int, alpha: float) -> LoraConfig:
    return LoraConfig(r=rank, lora_alpha=alpha, target_modules=LORA_TARGETS[model_name], lora_dropout=0.0)


def attach_lora(model: nn.Module, model_name: str, rank: int, alpha: float, seed: int) -> PeftModel:
    """Wraps `model` with fresh adapters (initialised from `seed`) and freezes everything else."""
    torch.manual_seed(seed)
    return get_peft_model(model, lora_config(model_name, rank, alpha))


def apply_adapter(model: nn.Module, meta: dict[str, Any], directory: Path) -> nn.Module:
    """The base `model` with the adapter that `meta` describes merged in (for inference)."""
    lora = meta["adapter"]
    peft_model = get_peft_model(model, lora_config(meta["model"], lora["rank"], lora["alpha"]))
    set_peft_model_state_dict(peft_model, load_file(str(directory / lora["file"])))
    return peft_model.merge_and_unload()


def _finetune(meta: dict[str, Any], base_state: dict[str, torch.Tensor], params: FinetuneParams, dataset: str,
              seed: int) -> dict[str, Any]:
    """On a provider node: trains the adapters, returns them with the base weights after training."""
    started = time.time()
    make_deterministic(seed)
    model = load_base(meta, base_state)
    peft_model = attach_lora(model, meta["model"], params.lora_rank, params.lora_alpha, seed)
    if "features" in meta:
        inputs, labels, _ = tabular.tensors(dataset, limit=params.samples, features=meta["features"])
        train_set, val_set = split(inputs, labels)
    else:
        train_set, val_set = split(*load_dataset(dataset, seed, n=params.samples))
    loader = DataLoader(train_set, batch_size=params.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=params.lr)
    history, timer = [], BusyTimer()
    with timer:
        for epoch in range(params.epochs):
            loss_sum = 0.0
            for inputs, labels in loader:
                loss = nn.functional.cross_entropy(peft_model(inputs), labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                loss_sum += loss.item() * len(labels)
            val = evaluate(peft_model, val_set)
            history.append({"epoch": epoch + 1, "loss": round(loss_sum / len(train_set), 6),
                            "val_loss": round(val["loss"], 6), "val_accuracy": round(val["accuracy"], 6)})
        adapter = detached(get_peft_model_state_dict(peft_model))
        base_after = detached(peft_model.unload().state_dict())
    return {
        "adapter": adapter, "base_after": base_after, "history": history, "busy_s": timer.seconds,
        "trainable_parameters": sum(p.numel() for p in trainable), "started_at": started,
        "placement": where_am_i(),
    }


def detached(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().contiguous() for k, v in state.items()}


def load_base(meta: dict[str, Any], state: dict[str, torch.Tensor]) -> nn.Module:
    model = build_model(meta["model"], **meta.get("config", {}))
    model.load_state_dict(state)
    return model


_finetune_task = ray.remote(_finetune)


def write_outputs(job: ComputeJob, params: FinetuneParams, meta: dict, base_sha: str, done: dict) -> Path:
    outputs = job.result_dir() / OUTPUT_DIR
    shutil.rmtree(outputs, ignore_errors=True)
    outputs.mkdir(parents=True)
    save_file(done["adapter"], str(outputs / ADAPTER))
    model = load_base(meta, done["base_after"])
    adapter = {"file": ADAPTER, "rank": params.lora_rank, "alpha": params.lora_alpha,
               "targets": LORA_TARGETS[meta["model"]]}
    table = {"features": meta["features"]} if "features" in meta else {}
    save_model(model, meta["model"], meta.get("config", {}), outputs, adapter=adapter, base_sha256=base_sha, **table)
    # A table is named by its file: where a lease staged it differs from site to site.
    dataset = params.dataset if not params.dataset or is_named(params.dataset) else Path(params.dataset).name
    record = {"base_sha256": base_sha, "history": done["history"], "seed": job.seed,
              "params": {k: v for k, v in vars(params).items() if k != "base_checkpoint"} | {"dataset": dataset},
              "trainable_parameters": done["trainable_parameters"]}
    (outputs / "metrics.json").write_text(json.dumps(record, sort_keys=True, indent=2))
    return outputs


def run(job: ComputeJob) -> JobResult:
    """Fine-tunes LoRA adapters on the provider's nodes; the base checkpoint stays as it was."""
    params = FinetuneParams.from_job(job)
    base_dir = find_checkpoint(params.base_checkpoint)
    base, meta = load_model(base_dir)
    require(meta["model"] in LORA_TARGETS, job, f"model {meta['model']} has no LoRA targets.")
    require("adapter" not in meta, job,
            "base_checkpoint is already a finetune result; give the checkpoint it was tuned from.")
    dataset = params.dataset or meta.get("dataset") or DATASET_FOR[meta["model"]]
    if "features" in meta:  # trained on a table: tuned on one with the same columns
        require(not is_named(dataset) and Path(dataset).exists(), job,
                f"model {meta['model']} was trained on the table {meta.get('dataset')}; give the table "
                "to tune it on as the dataset.")
    else:
        require(dataset == DATASET_FOR[meta["model"]], job,
                f"model {meta['model']} trains on {DATASET_FOR[meta['model']]}, not {dataset}.")
    result_dir = job.result_dir()
    result_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    ref = _finetune_task.options(**task_options(job.provider, num_gpus=1 if job.use_gpu else 0)).remote(
        meta, base.state_dict(), params, dataset, job.seed)
    done = await_pinned(ref, job, started)
    base_sha = "0x" + file_sha256(base_dir / "model.safetensors")
    write_outputs(job, params, meta, base_sha, done)
    used = usage([done["busy_s"]], job.use_gpu)
    last = done["history"][-1]
    metrics = {"epochs": params.epochs, "loss": last["loss"], "val_accuracy": last["val_accuracy"],
               "history": done["history"], "trainable_parameters": done["trainable_parameters"],
               "base_checkpoint": str(base_dir), "placement": done["placement"],
               "wall_s": round(time.monotonic() - started, 3)}
    (result_dir / RUN_RECORD).write_text(json.dumps(metrics | {"started_at": done["started_at"]}, indent=2))
    return JobResult(job.job_id, job.kind, job.provider, metrics, str(result_dir), result_hash(result_dir),
                     used.amount, used.unit)
