"""Hugging Face transformers checkpoints: a directory `save_pretrained` wrote — `config.json`,
`model.safetensors` and the tokenizer's files — read from local files only, so a site never
reaches a model hub; the lease has the directory staged from the buyer's URI and checked
against its pin like any input. With hub access a buyer saves a hub model the same way
(`from_pretrained(name).save_pretrained(directory)`) and brings the directory.

Text jobs read a table (compute.tabular) with a `text` column, and a `label` (the class, an
integer from 0) to train on or to score against. `make_tiny` builds a small real
architecture offline — a GPT-2 or BERT configuration with a word-level tokenizer trained on
a corpus, initialised from a seed — which the examples and tests use where a hub model would be.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from compute import tabular
from compute.errors import InvalidJob

CONFIG = "config.json"
TEXT = "text"
ARCHITECTURES = ("gpt2", "bert")
SPECIAL = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]"}
MAX_LENGTH = 64  # tokens a text is cut to (and the tiny models' positions)


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

    directory = find(path)
    if directory is None:
        raise InvalidJob(f"no transformers checkpoint at {path}; give a directory save_pretrained wrote "
                         f"({CONFIG}, the weights and the tokenizer's files)")
    try:
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
        AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise InvalidJob(f"the transformers checkpoint {directory.name} cannot be loaded: "
                         f"{str(exc).strip().splitlines()[0]}") from None
    return directory, config.model_type


def load(path: str | Path):
    """(model, tokenizer) of a checkpoint directory: a sequence classifier in eval mode."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging

    directory = find(path)
    if directory is None:
        raise InvalidJob(f"no transformers checkpoint at {path}; give a directory save_pretrained wrote "
                         f"({CONFIG}, the weights and the tokenizer's files)")
    logging.set_verbosity_error()  # the lease's log is for the buyer: no notes on unused weights
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise InvalidJob(f"the transformers checkpoint at {directory.name} cannot be loaded: "
                         f"{str(exc).strip().splitlines()[0]}") from None
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
        raise InvalidJob(f"dataset {Path(path).name} has no {TEXT!r} column; a text model reads one text per row "
                         f"from {TEXT!r} (and its class from {tabular.LABEL!r})")
    values = table.column(TEXT).to_pylist()
    if not values or not all(isinstance(v, str) for v in values):
        raise InvalidJob(f"dataset {Path(path).name}: every row needs a {TEXT!r} that is text")
    if tabular.LABEL not in table.column_names:
        return values, None
    try:
        labels = np.asarray(table.column(tabular.LABEL).to_numpy(), dtype=np.int64)
    except (TypeError, ValueError):
        raise InvalidJob(f"dataset {Path(path).name}: {tabular.LABEL!r} must be an integer class from 0") from None
    if len(labels) and int(labels.min()) < 0:
        raise InvalidJob(f"dataset {Path(path).name} has a negative {tabular.LABEL}; classes are integers from 0")
    return values, torch.from_numpy(labels.copy())


def encode(tokenizer, batch: list[str], max_length: int = MAX_LENGTH) -> dict[str, torch.Tensor]:
    return tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")


@torch.no_grad()
def logits(model, tokenizer, values: list[str], batch_size: int) -> torch.Tensor:
    """The classifier's logits for every text, in order."""
    parts = []
    for start in range(0, len(values), batch_size):
        parts.append(model(**encode(tokenizer, values[start:start + batch_size])).logits.float())
    return torch.cat(parts)


def make_tiny(directory: Path, corpus: list[str], classes: int, architecture: str = "gpt2", seed: int = 0,
              width: int = 32, layers: int = 2) -> Path:
    """A small real transformers sequence classifier, built and saved offline: a word-level
    tokenizer trained on `corpus` and a GPT-2 or BERT configuration initialised from `seed`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoModelForSequenceClassification, BertConfig, GPT2Config, PreTrainedTokenizerFast

    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {', '.join(ARCHITECTURES)}, got {architecture!r}")
    words = Tokenizer(models.WordLevel(unk_token=SPECIAL["unk_token"]))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=list(SPECIAL.values())))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, model_max_length=MAX_LENGTH, **SPECIAL)
    shape = {"vocab_size": words.get_vocab_size(), "num_labels": classes, "pad_token_id": tokenizer.pad_token_id}
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
