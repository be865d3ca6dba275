"""Model checkpoints as job outputs: `model.safetensors` (deterministic bytes) plus
`model.json` (which model, its config). A `train` job's outputs are a valid base for
`finetune` and a model for `infer`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file
from torch import nn

from compute.errors import InvalidJob
from compute.models import build_model

WEIGHTS = "model.safetensors"
META = "model.json"


def save_model(model: nn.Module, name: str, config: dict[str, Any], directory: Path, **extra: Any) -> None:
    """Writes the model's weights and description into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(directory / WEIGHTS))
    meta = {"model": name, "config": config} | extra
    (directory / META).write_text(json.dumps(meta, sort_keys=True, indent=2))


def find_checkpoint(path: str | Path) -> Path:
    """The directory holding model.safetensors: `path` itself, or a job's result dir/outputs."""
    path = Path(path)
    for candidate in (path, path / "outputs"):
        if (candidate / WEIGHTS).exists() and (candidate / META).exists():
            return candidate
    raise InvalidJob(
        f"no model checkpoint at {path}; give the result directory of a train job "
        f"(or a directory with {WEIGHTS} and {META})."
    )


def load_model(path: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuilds the model a checkpoint describes and loads its weights."""
    directory = find_checkpoint(path)
    meta = json.loads((directory / META).read_text())
    model = build_model(meta["model"], **meta.get("config", {}))
    model.load_state_dict(load_file(str(directory / WEIGHTS)))
    return model, meta


def registered_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint Ray Train has registered for the run kept in `run_dir` (its
    storage path / the job id), or None before the first. A checkpoint written but not yet
    registered is not one a restarted run resumes from, so only registered ones count."""
    snapshot = Path(run_dir) / "checkpoint_manager_snapshot.json"
    try:
        latest = json.loads(snapshot.read_text()).get("latest_checkpoint_result")
    except (OSError, ValueError):  # not written yet, or caught mid-write
        return None
    return Path(run_dir) / latest["checkpoint_dir_name"] if latest else None
