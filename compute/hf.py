"""Hugging Face transformers checkpoints: a directory `save_pretrained` wrote — `config.json`,
`model.safetensors` and the tokenizer's files — read from local files only, so a site never
reaches a model hub; the lease has the directory staged from the buyer's URI and checked
against its pin like any input. With hub access a buyer saves a hub model the same way
(`from_pretrained(name).save_pretrained(directory)`) and brings the directory.

Text jobs read a table (compute.tabular) with a `text` column, and a `label` (the class, an
integer from 0) to train on or to score against. `finetune` trains LoRA adapters (peft) on
the attention projections a model type names in `LORA_TARGETS`, with the classifier head
trained beside them; `train` trains every weight. A checkpoint travels to a provider's
node as its files (`pack`/`unpack`), so the node needs no access to the buyer's storage.
`make_tiny` builds a small real architecture offline — a GPT-2 or BERT configuration with a
word-level tokenizer trained on a corpus, initialised from a seed — which the examples and
tests use where a hub model would be.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from compute import tabular
from compute.device import autocast, model_device
from compute.errors import InvalidJob

CONFIG = "config.json"
TEXT = "text"
ARCHITECTURES = ("gpt2", "bert")
SPECIAL = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]"}
MAX_LENGTH = 64  # tokens a text is cut to (and the tiny models' positions)
CAUSAL_POSITIONS = 256  # a tiny language model's positions: its prompt and its completion
# The attention projections LoRA adapts, by model type; the classifier head trains in full.
LORA_TARGETS = {"gpt2": ["c_attn"], "bert": ["query", "value"]}
TRANSPOSED = ("gpt2",)  # model types whose projections store their weights (in, out): GPT-2's Conv1D


def is_checkpoint(path: str | Path) -> bool:
    """True for a transformers checkpoint directory (or a job's result directory holding one in outputs/)."""
    return find(path) is not None


def find(path: str | Path) -> Path | None:
    path = Path(path)
    for candidate in (path, path / "outputs"):
        if (candidate / CONFIG).is_file() and "model_type" in _read_json(candidate / CONFIG):
            return candidate
    return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def check(path: str | Path) -> tuple[Path, str]:
    """(directory, model type) of a checkpoint whose configuration and tokenizer load, before
    any weights are read; one that does not is the buyer's to fix."""
    from transformers import AutoConfig, AutoTokenizer

    directory = _found(path)
    try:
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
        AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise _unloadable(directory, exc) from None
    return directory, config.model_type


def _found(path: str | Path) -> Path:
    directory = find(path)
    if directory is None:
        raise InvalidJob(f"no transformers checkpoint at {path}; give a directory save_pretrained wrote "
                         f"({CONFIG}, the weights and the tokenizer's files)")
    return directory


def _unloadable(directory: Path, exc: Exception) -> InvalidJob:
    return InvalidJob(f"the transformers checkpoint {directory.name} cannot be loaded: "
                      f"{str(exc).strip().splitlines()[0]}")


def load(path: str | Path):
    """(model, tokenizer) of a checkpoint directory: a sequence classifier in eval mode."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    directory = _found(path)
    quiet()
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise _unloadable(directory, exc) from None
    if tokenizer.pad_token is None:  # GPT-2's own tokenizer has none: pad with its end of text
        tokenizer.pad_token = tokenizer.eos_token
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model, tokenizer


def texts(path: str | Path, limit: int = 0) -> tuple[list[str], torch.Tensor | None]:
    """(texts, labels or None) of a table with a `text` column, its first `limit` rows if set."""
    table = tabular.read_table(path)
    if limit:
        table = table.slice(0, limit)
    if TEXT not in table.column_names:
        raise InvalidJob(
            f"dataset {Path(path).name} has no {TEXT!r} column; a text model reads one text per row "
            f"from {TEXT!r} (and its class from {tabular.LABEL!r})"
        )
    values = table.column(TEXT).to_pylist()
    if not values or not all(isinstance(v, str) for v in values):
        raise InvalidJob(f"dataset {Path(path).name}: every row needs a {TEXT!r} that is text")
    if tabular.LABEL not in table.column_names:
        return values, None
    try:
        labels = np.asarray(table.column(tabular.LABEL).to_numpy(), dtype=np.int64)
    except (TypeError, ValueError):
        raise InvalidJob(
            f"dataset {Path(path).name}: {tabular.LABEL!r} must be an integer class from 0"
        ) from None
    if len(labels) and int(labels.min()) < 0:
        raise InvalidJob(
            f"dataset {Path(path).name} has a negative {tabular.LABEL}; classes are integers from 0"
        )
    return values, torch.from_numpy(labels.copy())


def labelled(path: str | Path, limit: int = 0) -> tuple[list[str], torch.Tensor]:
    """(texts, labels) of a table to train on: every row needs both."""
    values, labels = texts(path, limit)
    if labels is None:
        raise InvalidJob(f"dataset {Path(path).name} has no {tabular.LABEL!r} column; a text model trains on "
                         f"each row's class in {tabular.LABEL!r}")
    if len(values) < 10:
        raise InvalidJob(f"dataset {Path(path).name} has {len(values)} rows; training needs at least 10")
    return values, labels


def check_classes(directory: Path, classes: int, table: str | Path) -> None:
    """A table of more `classes` than the checkpoint's classifier tells apart is the buyer's to fix."""
    from transformers import AutoConfig

    known = AutoConfig.from_pretrained(directory, local_files_only=True).num_labels
    if classes > known:
        raise InvalidJob(f"dataset {Path(table).name} has class {classes - 1}, but the checkpoint "
                         f"{directory.name} classifies into {known} (labels 0–{known - 1})")


def lora_config(model_type: str, rank: int, alpha: float):
    """peft's LoRA for a sequence classifier of `model_type`: adapters on its attention
    projections, its classifier head trained in full."""
    from peft import LoraConfig

    return LoraConfig(task_type="SEQ_CLS", r=rank, lora_alpha=alpha, lora_dropout=0.0,
                      target_modules=LORA_TARGETS[model_type], fan_in_fan_out=model_type in TRANSPOSED)


def quiet() -> None:
    """No notes on unused weights and no progress bars: a lease's log is for the buyer."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def pack(directory: Path) -> dict[str, bytes]:
    """A checkpoint directory's files, to send to a node in a task's arguments."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def unpack(files: dict[str, bytes], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return directory


def save(model, tokenizer, directory: Path) -> Path:
    """`save_pretrained` of the model and its tokenizer: the same bytes for the same weights."""
    quiet()
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def batches(values: list[str], labels: torch.Tensor, batch_size: int, seed: int | None = None):
    """(texts, labels) batches, in an order drawn from `seed` (in order without one)."""
    order = (torch.randperm(len(values), generator=torch.Generator().manual_seed(seed)) if seed is not None
             else torch.arange(len(values)))
    for start in range(0, len(values), batch_size):
        chosen = order[start:start + batch_size]
        yield [values[i] for i in chosen.tolist()], labels[chosen]


def train_epoch(model, tokenizer, optimizer, values: list[str], labels: torch.Tensor, batch_size: int,
                seed: int, precision: str = "fp32") -> tuple[float, int]:
    """One pass over (values, labels) on the model's device, under bf16 autocast for
    `precision` "bf16": (summed loss, texts seen)."""
    model.train()
    loss_sum, count = 0.0, 0
    device = model_device(model)
    for batch, target in batches(values, labels, batch_size, seed):
        with autocast(device, precision):
            scores = model(**encode(tokenizer, batch, device=device)).logits
        loss = torch.nn.functional.cross_entropy(scores.float(), target.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum += loss.item() * len(target)
        count += len(target)
    return loss_sum, count


@torch.no_grad()
def evaluate(model, tokenizer, values: list[str], labels: torch.Tensor, batch_size: int = 64,
             precision: str = "fp32") -> dict[str, float]:
    """Mean cross-entropy and accuracy of the classifier on (values, labels)."""
    model.eval()
    scores = logits(model, tokenizer, values, batch_size, precision)
    loss = torch.nn.functional.cross_entropy(scores, labels).item()
    return {"loss": loss, "accuracy": (scores.argmax(dim=1) == labels).float().mean().item()}


class TextClassifier(torch.nn.Module):
    """A transformers classifier called on token ids padded with its pad token, as train's loop
    calls a model on a batch of inputs; `model` is the classifier itself."""

    def __init__(self, model, pad_token_id: int) -> None:
        super().__init__()
        self.model = model
        self.pad_token_id = pad_token_id

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=(ids != self.pad_token_id).long()).logits


def classifier(files: dict[str, bytes]):
    """(TextClassifier, tokenizer) of a packed checkpoint, ready to train."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        model, tokenizer = load(unpack(files, Path(tmp)))
    model.train()
    return TextClassifier(model, tokenizer.pad_token_id), tokenizer


def token_ids(tokenizer, values: list[str]) -> torch.Tensor:
    """The texts' token ids, cut to MAX_LENGTH and padded to the longest."""
    return encode(tokenizer, values)["input_ids"]


def encode(tokenizer, batch: list[str], max_length: int = MAX_LENGTH,
           device: torch.device | None = None) -> dict[str, torch.Tensor]:
    encoded = tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    return {k: v.to(device) for k, v in encoded.items()} if device is not None else encoded


@torch.no_grad()
def logits(model, tokenizer, values: list[str], batch_size: int, precision: str = "fp32") -> torch.Tensor:
    """The classifier's logits for every text, in order, on the CPU."""
    parts, device = [], model_device(model)
    for start in range(0, len(values), batch_size):
        with autocast(device, precision):
            scores = model(**encode(tokenizer, values[start:start + batch_size], device=device)).logits
        parts.append(scores.float().cpu())
    return torch.cat(parts)


def make_tiny(directory: Path, corpus: list[str], classes: int, architecture: str = "gpt2", seed: int = 0,
              width: int = 32, layers: int = 2, causal: bool = False) -> Path:
    """A small real transformers sequence classifier, built and saved offline: a word-level
    tokenizer trained on `corpus` and a GPT-2 or BERT configuration initialised from `seed`.
    With `causal`, a GPT-2 language model instead (`classes` unused), with room for
    CAUSAL_POSITIONS tokens of prompt and completion."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import (
        AutoModelForSequenceClassification,
        BertConfig,
        GPT2Config,
        PreTrainedTokenizerFast,
    )

    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {', '.join(ARCHITECTURES)}, got {architecture!r}")
    words = Tokenizer(models.WordLevel(unk_token=SPECIAL["unk_token"]))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=list(SPECIAL.values())))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, model_max_length=MAX_LENGTH, **SPECIAL)
    shape = {
        "vocab_size": words.get_vocab_size(),
        "num_labels": classes,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.cls_token_id,
        "eos_token_id": tokenizer.sep_token_id,
    }
    if causal:
        from transformers import GPT2LMHeadModel

        del shape["num_labels"]
        torch.manual_seed(seed)
        lm = GPT2LMHeadModel(GPT2Config(n_positions=CAUSAL_POSITIONS, n_embd=width, n_layer=layers, n_head=2,
                                        **shape))
        directory.mkdir(parents=True, exist_ok=True)
        lm.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        return directory
    if architecture == "gpt2":
        config = GPT2Config(n_positions=MAX_LENGTH, n_embd=width, n_layer=layers, n_head=2, **shape)
    else:
        config = BertConfig(hidden_size=width, num_hidden_layers=layers, num_attention_heads=2,
                            intermediate_size=2 * width, max_position_embeddings=MAX_LENGTH, **shape)
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
