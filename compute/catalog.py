"""The built-in models and datasets by name: what a job spec may name, known without
loading torch (compute.models and compute.data build them; a test holds the two together)."""

from __future__ import annotations

# Each model's constructor arguments, in compute.models.
MODEL_ARGS = {
    "mlp": ("in_features", "hidden", "classes"),
    "tiny-transformer": ("vocab", "dim", "heads", "layers", "seq_len", "classes"),
}
MODEL_NAMES = tuple(MODEL_ARGS)
DATASETS = ("synthetic-classification", "synthetic-sequences")
DATASET_FOR = {"mlp": "synthetic-classification", "tiny-transformer": "synthetic-sequences"}
LORA_TARGETS = {"tiny-transformer": ["q_proj", "v_proj"], "mlp": ["net.0", "net.2"]}
