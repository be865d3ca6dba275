"""The `infer` runner: batch inference over a dataset file on the provider's nodes.

Params (`job.params`, a `compute.runners.params` class):
  checkpoint        a model checkpoint: a train or finetune job's result directory, a
                    directory with model.safetensors and model.json, or a transformers
                    sequence classifier's directory (compute.hf), which reads a table's
                    `text` column (required)
  dataset_path      a .npy array, one row per input: float features for the MLP, token ids
                    for the tiny transformer; or a table (compute.tabular) holding the
                    feature columns the MLP was trained on, and if it has a `label` column,
                    the accuracy is measured too (required)
  quantize          None | "int8" — int8 dynamic quantization of the Linear layers (default None)
  batch_size        the largest batch to try (default 64)
  memory_budget_mb  activation memory a batch may use; the batch shrinks to fit (default 256)
  precision         "fp32" | "bf16" — bf16 runs the forward passes under autocast (default "fp32")

With use_gpu the task holds a GPU and computes on it (CUDA), except an int8-quantized model,
whose dynamic kernels are the CPU's.

The batch size adapts to memory: a one-row probe measures the activations a row needs,
the batch is cut to what the budget holds, and a batch that still runs out of memory is
halved and retried. The work runs as one Ray task pinned to the provider's nodes; model
and inputs travel with it. Outputs: `predictions.npy` (one class per input),
`logits.npy` (one row per input) and `metrics.json`.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from compute import hf
from compute.accounting import BusyTimer, usage
from compute.checkpoints import find_checkpoint, load_model
from compute.data import read_inputs
from compute.device import autocast, device_name, task_device
from compute.errors import ComputeError, InvalidJob
from compute.jobs import ComputeJob, JobResult
from compute.manifest import OUTPUT_DIR, result_hash
from compute.models import build_model
from compute.runners.params import InferParams, require
from compute.runners.supervise import on_provider
from compute.runners.train import make_deterministic, where_am_i

CPU = torch.device("cpu")

RUN_RECORD = "run.json"


def quantize_int8(model: nn.Module) -> nn.Module:
    """Dynamic int8 quantization of every Linear layer (weights int8, activations quantized per batch)."""
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():  # torch.ao is deprecated in favour of torchao, which is not installed
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)


def quantized_layers(model: nn.Module) -> int:
    from torch.ao.nn.quantized.dynamic import Linear as QuantizedLinear

    return sum(1 for m in model.modules() if isinstance(m, QuantizedLinear))


@torch.no_grad()
def bytes_per_row(model: nn.Module, row: torch.Tensor) -> int:
    """Activation bytes one input row needs: the outputs of every module in a one-row forward pass."""
    total = 0

    def count(_module: nn.Module, _inputs: Any, output: Any) -> None:
        nonlocal total
        if isinstance(output, torch.Tensor):
            total += output.numel() * output.element_size()

    hooks = [m.register_forward_hook(count) for m in model.modules() if not list(m.children())]
    try:
        model(row)
    finally:
        for hook in hooks:
            hook.remove()
    return max(total, 1)


def fitting_batch(model: nn.Module, inputs: torch.Tensor, largest: int, budget_mb: float) -> int:
    """The largest batch, at most `largest`, whose activations fit in `budget_mb`."""
    per_row = bytes_per_row(model, inputs[:1])
    return max(1, min(largest, int(budget_mb * 2**20) // per_row))


def is_out_of_memory(error: RuntimeError) -> bool:
    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower()


@torch.no_grad()
def predict(model: nn.Module, inputs: torch.Tensor, batch: int, device: torch.device = CPU,
            precision: str = "fp32") -> tuple[torch.Tensor, list[int]]:
    """Logits for every row, in order, on the CPU; the model computes on `device`, under bf16
    autocast for `precision` "bf16"; a batch that runs out of memory is halved and retried."""
    outputs, sizes, start = [], [], 0
    while start < len(inputs):
        try:
            with autocast(device, precision):
                scores = model(inputs[start:start + batch].to(device))
            outputs.append(scores.float().cpu())
        except RuntimeError as error:
            if not is_out_of_memory(error) or batch == 1:
                raise
            batch //= 2
            continue
        sizes.append(batch)
        start += batch
    return torch.cat(outputs), sizes


def _infer(meta: dict[str, Any], state: dict[str, torch.Tensor], inputs: torch.Tensor, params: InferParams,
           seed: int, use_gpu: bool = False) -> dict[str, Any]:
    """On a provider node: the logits of every input row (on its GPU with use_gpu, except an
    int8-quantized model, whose dynamic kernels are the CPU's)."""
    started = time.time()
    make_deterministic(seed)
    timer = BusyTimer()
    device = task_device(use_gpu and params.quantize != "int8")
    with timer:
        model = build_model(meta["model"], **meta.get("config", {}))
        model.load_state_dict(state)
        model.eval()
        if params.quantize == "int8":
            model = quantize_int8(model)
        model = model.to(device)
        batch = fitting_batch(model, inputs.to(device), params.batch_size, params.memory_budget_mb)
        logits, sizes = predict(model, inputs, batch, device, params.precision)
    return {
        "logits": logits, "batch_size": batch, "final_batch_size": sizes[-1] if sizes else batch,
        "batches": len(sizes), "busy_s": timer.seconds, "started_at": started,
        "quantized_layers": quantized_layers(model),
        "placement": where_am_i(), "device": device.type, "device_name": device_name(device),
    }


def model_inputs(inputs: torch.Tensor, model: nn.Module, meta: dict[str, Any],
                 job: ComputeJob) -> torch.Tensor:
    """`inputs` in the dtype the model takes, checked against it with a one-row forward pass."""
    require(inputs.ndim == 2 and len(inputs) > 0, job,
            f"dataset_path must hold a non-empty 2-D array, one row per input; "
            f"got shape {tuple(inputs.shape)}.")
    if meta["model"] == "tiny-transformer":
        require(not inputs.is_floating_point(), job,
                "the tiny transformer takes integer token ids; save the inputs as an integer array.")
        inputs = inputs.long()
    else:
        inputs = inputs.float()
    try:
        with torch.no_grad():
            model(inputs[:1])
    except (RuntimeError, IndexError) as error:
        raise InvalidJob(
            f"job {job.job_id}: rows of shape {tuple(inputs.shape[1:])} do not fit model {meta['model']}; "
            f"save inputs shaped like its training data ({str(error).splitlines()[0]})."
        ) from None
    return inputs


def load_for_inference(path: str) -> tuple[nn.Module, dict[str, Any]]:
    """A checkpoint's model, with a finetune result's adapter merged in."""
    directory = find_checkpoint(path)
    model, meta = load_model(directory)
    if "adapter" in meta:
        from compute.runners.finetune import apply_adapter  # peft loads only for finetune results

        model = apply_adapter(model, meta, directory)
    return model, meta


def _infer_text(directory: str, values: list[str], params: InferParams, seed: int,
                use_gpu: bool = False) -> dict[str, Any]:
    """On a provider node: a transformers classifier's logits for every text."""
    started = time.time()
    make_deterministic(seed)
    timer = BusyTimer()
    device = task_device(use_gpu and params.quantize != "int8")
    with timer:
        model, tokenizer = hf.load(directory)
        if params.quantize == "int8":
            model = quantize_int8(model)
        logits = hf.logits(model.to(device), tokenizer, values, params.batch_size, params.precision)
    return {
        "logits": logits, "batch_size": params.batch_size, "final_batch_size": params.batch_size,
        "batches": -(-len(values) // params.batch_size), "busy_s": timer.seconds, "started_at": started,
        "quantized_layers": quantized_layers(model), "placement": where_am_i(), "device": device.type,
        "device_name": device_name(device),
    }


def run(job: ComputeJob) -> JobResult:
    """Runs the checkpoint's model over every input row on the provider's nodes."""
    params = job.params_of(InferParams)
    if hf.is_checkpoint(params.checkpoint):  # a transformers classifier over a table's texts
        directory, model_type = hf.check(params.checkpoint)
        inputs, labels = hf.texts(params.dataset_path)
        job.result_dir().mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        done = on_provider(_infer_text, job, started, str(directory), inputs, params, job.seed, job.use_gpu)
        return _result(job, params, model_type, inputs, labels, done, started)
    model, meta = load_for_inference(params.checkpoint)
    raw, labels = read_inputs(params.dataset_path, meta.get("features"))
    inputs = model_inputs(raw, model, meta, job)
    job.result_dir().mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    described = {"model": meta["model"], "config": meta.get("config", {})}
    done = on_provider(_infer, job, started, described, model.state_dict(), inputs, params, job.seed,
                       job.use_gpu)
    return _result(job, params, meta["model"], inputs, labels, done, started)


def _result(job: ComputeJob, params: InferParams, model: str, inputs: Any, labels: torch.Tensor | None,
            done: dict[str, Any], started: float) -> JobResult:
    """The outputs of a finished inference: predictions, logits, metrics, and its record."""
    result_dir = job.result_dir()
    logits = done["logits"]
    if len(logits) != len(inputs):
        raise ComputeError(f"job {job.job_id}: {len(logits)} outputs for {len(inputs)} inputs; run it again.")
    outputs = result_dir / OUTPUT_DIR
    shutil.rmtree(outputs, ignore_errors=True)
    outputs.mkdir(parents=True)
    np.save(outputs / "logits.npy", logits.numpy())
    np.save(outputs / "predictions.npy", logits.argmax(dim=1).numpy())
    record = {"count": len(inputs), "model": model, "quantize": params.quantize,
              "batch_size": done["batch_size"], "seed": job.seed}
    if labels is not None:
        record["accuracy"] = round(float((logits.argmax(dim=1) == labels).double().mean()), 6)
    (outputs / "metrics.json").write_text(json.dumps(record, sort_keys=True, indent=2))
    used = usage([done["busy_s"]], job.use_gpu)
    observed = ("final_batch_size", "batches", "quantized_layers", "placement", "device", "device_name")
    metrics = record | {key: done[key] for key in observed} | {"wall_s": round(time.monotonic() - started, 3)}
    (result_dir / RUN_RECORD).write_text(json.dumps(metrics | {"started_at": done["started_at"]}, indent=2))
    return JobResult(job.job_id, job.kind, job.provider, metrics, str(result_dir), result_hash(result_dir),
                     used.amount, used.unit)
