"""The `finetune` runner: LoRA adapters (peft) on a base checkpoint the buyer names.

Params (`job.params`, a `compute.runners.params` class):
  base_checkpoint  a model checkpoint: a train job's result directory, a directory with
                   model.safetensors and model.json, or a Hugging Face sequence classifier's
                   directory (compute.hf) (required)
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
  precision        "fp32" | "bf16" — bf16 runs forward passes under autocast (default "fp32")

With use_gpu the task holds a GPU and trains on it (CUDA); the adapters and weights it
returns are on the CPU.

The base weights stay frozen: only the adapters train. The work runs as one Ray task
pinned to the provider's nodes; the base weights travel with the task, so the provider
needs no access to the buyer's files. Outputs: `adapter.safetensors` (the adapters),
`model.safetensors` + `model.json` (the base weights as they stand after training, with
the adapter described in model.json, so `infer` accepts a finetune result) and
`metrics.json`.

A Hugging Face classifier is tuned on a table of texts (`text`, `label`; the dataset is
required) with peft's LoRA on the attention projections (compute.hf.LORA_TARGETS) and the
classifier head trained in full. Its outputs: the merged model and its tokenizer as
`save_pretrained` writes them (so `infer`, and another job building on this one, read it as
any transformers checkpoint), the adapter alone in `adapter/` (adapter_config.json and
adapter_model.safetensors, for peft's `PeftModel.from_pretrained`), and `metrics.json`.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file, save_file
from torch import nn
from torch.utils.data import DataLoader

from compute import hf, tabular
from compute.accounting import BusyTimer, usage
from compute.catalog import DATASET_FOR, LORA_TARGETS
from compute.checkpoints import find_checkpoint, load_model, save_model
from compute.data import load_dataset
from compute.dataplane import digest
from compute.device import autocast, device_name, task_device
from compute.jobs import ComputeJob, JobResult
from compute.manifest import OUTPUT_DIR, file_sha256, result_hash
from compute.models import build_model
from compute.runners.params import FinetuneParams, require
from compute.runners.supervise import on_provider
from compute.runners.train import evaluate, make_deterministic, progress_line, split, where_am_i
from compute.tabular import is_named

ADAPTER = "adapter.safetensors"
HF_ADAPTER_DIR = "adapter"
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
              seed: int, use_gpu: bool = False) -> dict[str, Any]:
    """On a provider node: trains the adapters, returns them with the base weights after training."""
    started = time.time()
    make_deterministic(seed)
    device = task_device(use_gpu)
    model = load_base(meta, base_state)
    peft_model = attach_lora(model, meta["model"], params.lora_rank, params.lora_alpha, seed).to(device)
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
                inputs, labels = inputs.to(device), labels.to(device)
                with autocast(device, params.precision):
                    scores = peft_model(inputs)
                loss = nn.functional.cross_entropy(scores.float(), labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                loss_sum += loss.item() * len(labels)
            val = evaluate(peft_model, val_set, params.precision)
            history.append({"epoch": epoch + 1, "loss": round(loss_sum / len(train_set), 6),
                            "val_loss": round(val["loss"], 6), "val_accuracy": round(val["accuracy"], 6)})
            print(progress_line(history[-1], params.epochs), flush=True)
        adapter = detached(get_peft_model_state_dict(peft_model))
        base_after = detached(peft_model.unload().state_dict())
    return {
        "adapter": adapter, "base_after": base_after, "history": history, "busy_s": timer.seconds,
        "trainable_parameters": sum(p.numel() for p in trainable), "started_at": started,
        "placement": where_am_i(), "device": device.type, "device_name": device_name(device),
    }


def detached(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone().contiguous() for k, v in state.items()}


def load_base(meta: dict[str, Any], state: dict[str, torch.Tensor]) -> nn.Module:
    model = build_model(meta["model"], **meta.get("config", {}))
    model.load_state_dict(state)
    return model


def write_outputs(job: ComputeJob, params: FinetuneParams, meta: dict, base_sha: str, done: dict) -> Path:
    outputs = job.result_dir() / OUTPUT_DIR
    shutil.rmtree(outputs, ignore_errors=True)
    outputs.mkdir(parents=True)
    save_file(done["adapter"], str(outputs / ADAPTER))
    model = load_base(meta, done["base_after"])
    adapter = {"file": ADAPTER, "rank": params.lora_rank, "alpha": params.lora_alpha,
               "targets": LORA_TARGETS[meta["model"]]}
    table = {"features": meta["features"]} if "features" in meta else {}
    save_model(
        model, meta["model"], meta.get("config", {}), outputs, adapter=adapter, base_sha256=base_sha, **table
    )
    # A table is named by its file: where a lease staged it differs from site to site.
    dataset = params.dataset if not params.dataset or is_named(params.dataset) else Path(params.dataset).name
    record = {
        "base_sha256": base_sha,
        "history": done["history"],
        "seed": job.seed,
        "params": {k: v for k, v in vars(params).items() if k != "base_checkpoint"} | {"dataset": dataset},
        "trainable_parameters": done["trainable_parameters"],
    }
    (outputs / "metrics.json").write_text(json.dumps(record, sort_keys=True, indent=2))
    return outputs


# ── a Hugging Face classifier ───────────────────────────────────────────────


def _finetune_text(files: dict[str, bytes], params: FinetuneParams, dataset: str, seed: int,
                   use_gpu: bool = False) -> dict[str, Any]:
    """On a provider node: LoRA adapters on a transformers classifier over a table's texts;
    returns the adapter's files and the merged model's."""
    started = time.time()
    make_deterministic(seed)
    device = task_device(use_gpu)
    with tempfile.TemporaryDirectory() as tmp:
        model, tokenizer = hf.load(hf.unpack(files, Path(tmp) / "base"))
        model_type = model.config.model_type
        values, labels = hf.labelled(dataset, params.samples)
        cut = len(values) - max(1, len(values) // 5)  # the last fifth is held out
        torch.manual_seed(seed)
        peft_model = get_peft_model(
            model, hf.lora_config(model_type, params.lora_rank, params.lora_alpha)
        ).to(device)
        trainable = [p for p in peft_model.parameters() if p.requires_grad]
        optimizer = torch.optim.Adam(trainable, lr=params.lr)
        history, timer = [], BusyTimer()
        with timer:
            for epoch in range(params.epochs):
                loss_sum, count = hf.train_epoch(peft_model, tokenizer, optimizer, values[:cut], labels[:cut],
                                                 params.batch_size, seed * 1_000 + epoch, params.precision)
                val = hf.evaluate(
                    peft_model, tokenizer, values[cut:], labels[cut:], precision=params.precision
                )
                history.append({"epoch": epoch + 1, "loss": round(loss_sum / count, 6),
                                "val_loss": round(val["loss"], 6), "val_accuracy": round(val["accuracy"], 6)})
                print(progress_line(history[-1], params.epochs), flush=True)
            adapter_dir = Path(tmp) / HF_ADAPTER_DIR
            peft_model.save_pretrained(adapter_dir)
            # The same bytes on every node: no model card, and no base named by this node's temporary path.
            (adapter_dir / "README.md").unlink(missing_ok=True)
            adapter_config = adapter_dir / "adapter_config.json"
            adapter_config.write_text(
                json.dumps(
                    json.loads(adapter_config.read_text()) | {"base_model_name_or_path": None},
                    indent=2,
                    sort_keys=True,
                )
            )
            merged = hf.save(peft_model.merge_and_unload().cpu(), tokenizer, Path(tmp) / "merged")
        return {
            "adapter": hf.pack(adapter_dir), "model": hf.pack(merged), "model_type": model_type,
            "history": history, "busy_s": timer.seconds, "started_at": started, "placement": where_am_i(),
            "trainable_parameters": sum(p.numel() for p in trainable), "device": device.type,
            "device_name": device_name(device),
        }


def run_text(job: ComputeJob, params: FinetuneParams) -> JobResult:
    """LoRA on a transformers classifier the buyer brings, over a table of texts they bring."""
    directory, model_type = hf.check(params.base_checkpoint)
    require(model_type in hf.LORA_TARGETS, job,
            f"a {model_type} checkpoint has no LoRA targets here; give one of {', '.join(hf.LORA_TARGETS)}.")
    require(bool(params.dataset) and not is_named(params.dataset), job,
            "a transformers checkpoint is tuned on a table of texts; give it as the dataset.")
    values, labels = hf.labelled(params.dataset, params.samples)  # refused before any Ray work
    hf.check_classes(directory, int(labels.max()) + 1, params.dataset)
    result_dir = job.result_dir()
    result_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = on_provider(_finetune_text, job, started, hf.pack(directory), params, params.dataset, job.seed,
                       job.use_gpu)
    outputs = result_dir / OUTPUT_DIR
    shutil.rmtree(outputs, ignore_errors=True)
    hf.unpack(done["model"], outputs)
    hf.unpack(done["adapter"], outputs / HF_ADAPTER_DIR)
    # The base as a spec pins it: the sha256 of the directory's manifest.
    record = {"base_sha256": "0x" + digest(str(directory), "base_checkpoint"), "history": done["history"],
              "model": model_type, "seed": job.seed, "trainable_parameters": done["trainable_parameters"],
              "params": {k: v for k, v in vars(params).items() if k != "base_checkpoint"}
              | {"dataset": Path(params.dataset).name, "rows": len(values)}}
    (outputs / "metrics.json").write_text(json.dumps(record, sort_keys=True, indent=2))
    last = done["history"][-1]
    metrics = {"epochs": params.epochs, "loss": last["loss"], "val_accuracy": last["val_accuracy"],
               "history": done["history"], "trainable_parameters": done["trainable_parameters"],
               "model": model_type, "base_checkpoint": str(directory), "placement": done["placement"],
               "device": done["device"], "device_name": done["device_name"],
               "wall_s": round(time.monotonic() - started, 3)}
    (result_dir / RUN_RECORD).write_text(json.dumps(metrics | {"started_at": done["started_at"]}, indent=2))
    used = usage([done["busy_s"]], job.use_gpu)
    return JobResult(job.job_id, job.kind, job.provider, metrics, str(result_dir), result_hash(result_dir),
                     used.amount, used.unit)


def run(job: ComputeJob) -> JobResult:
    """Fine-tunes LoRA adapters on the provider's nodes; the base checkpoint stays as it was."""
    params = job.params_of(FinetuneParams)
    if hf.is_checkpoint(params.base_checkpoint):
        return run_text(job, params)
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
    done = on_provider(_finetune, job, started, meta, base.state_dict(), params, dataset, job.seed,
                       job.use_gpu)
    base_sha = "0x" + file_sha256(base_dir / "model.safetensors")
    write_outputs(job, params, meta, base_sha, done)
    used = usage([done["busy_s"]], job.use_gpu)
    last = done["history"][-1]
    metrics = {"epochs": params.epochs, "loss": last["loss"], "val_accuracy": last["val_accuracy"],
               "history": done["history"], "trainable_parameters": done["trainable_parameters"],
               "base_checkpoint": str(base_dir), "placement": done["placement"], "device": done["device"],
               "device_name": done["device_name"], "wall_s": round(time.monotonic() - started, 3)}
    (result_dir / RUN_RECORD).write_text(json.dumps(metrics | {"started_at": done["started_at"]}, indent=2))
    return JobResult(job.job_id, job.kind, job.provider, metrics, str(result_dir), result_hash(result_dir),
                     used.amount, used.unit)
