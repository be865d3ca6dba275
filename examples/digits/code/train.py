"""A Ray Train script as a Ray user writes it: a TorchTrainer that learns scikit-learn's
handwritten digits, its data streamed by Ray Data to each worker's shard.

It runs on any Ray cluster:

    python train.py --data digits.parquet --workers 2 --epochs 12

and on Swarm unchanged: ../job.yaml names this directory as the code and the
Parquet file as an input, which the site hands it as inputs/digits. The trained model and
its metrics go to $SWARM_OUTPUT_DIR (./outputs elsewhere), which Swarm's result hash covers.
"""

import argparse
import json
import os
import tempfile

import numpy as np
import ray
import ray.train
import torch
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model

FEATURES = [f"px_{i}" for i in range(64)]


def batches(shard, batch_size):
    for batch in shard.iter_batches(batch_size=batch_size, batch_format="numpy"):
        x = np.stack([batch[c] for c in FEATURES], axis=1).astype("float32") / 16.0
        yield torch.from_numpy(x), torch.from_numpy(batch["label"].astype("int64"))


def train_loop(config):
    torch.manual_seed(config["seed"])
    model = prepare_model(torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)))
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    loss_fn = torch.nn.CrossEntropyLoss()
    train_shard = ray.train.get_dataset_shard("train")
    validation_shard = ray.train.get_dataset_shard("validation")
    for epoch in range(1, config["epochs"] + 1):
        model.train()
        total, seen = 0.0, 0
        for x, y in batches(train_shard, config["batch_size"]):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total, seen = total + loss.item() * len(y), seen + len(y)
        model.eval()
        correct, count = 0, 0
        with torch.no_grad():
            for x, y in batches(validation_shard, 256):
                correct += int((model(x).argmax(1) == y).sum())
                count += len(y)
        metrics = {"epoch": epoch, "loss": total / max(seen, 1), "val_accuracy": correct / max(count, 1)}
        with tempfile.TemporaryDirectory() as directory:
            checkpoint = None
            if ray.train.get_context().get_world_rank() == 0:
                state = model.module.state_dict() if hasattr(model, "module") else model.state_dict()
                torch.save(state, os.path.join(directory, "model.pt"))
                checkpoint = Checkpoint.from_directory(directory)
            ray.train.report(metrics, checkpoint=checkpoint)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("SWARM_INPUT_DIGITS", "digits.parquet"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    ray.init()
    dataset = ray.data.read_parquet(args.data)
    train, validation = dataset.train_test_split(test_size=0.2, shuffle=True, seed=args.seed)
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={
            "epochs": args.epochs,
            "lr": args.lr,
            "batch_size": args.batch_size,
            "seed": args.seed,
        },
        scaling_config=ScalingConfig(num_workers=args.workers),
        datasets={"train": train, "validation": validation},
        run_config=RunConfig(name="digits"),
    )
    result = trainer.fit()

    out = os.environ.get("SWARM_OUTPUT_DIR", "outputs")
    os.makedirs(out, exist_ok=True)
    with (
        result.checkpoint.as_directory() as directory, open(os.path.join(directory, "model.pt"), "rb") as src,
        open(os.path.join(out, "model.pt"), "wb") as dst,
    ):
        dst.write(src.read())
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(result.metrics, f, indent=2, sort_keys=True, default=str)
    print(f"validation accuracy {result.metrics['val_accuracy']:.3f} after {result.metrics['epoch']} epochs")


if __name__ == "__main__":
    main()
