"""Handwritten digits: an MLP and a small CNN trained, checkpointed, reloaded and evaluated.

The everyday supervised loop on fluidtape: scikit-learn's bundled 8x8 digits (1797 images,
no download) split once with a fixed seed; shuffled mini-batches; ``layers.CrossEntropyLoss``;
AdamW with a cosine learning-rate schedule; ``model.train()`` / ``model.eval()`` around dropout;
``tape.no_grad()`` for evaluation; ``tape.save`` of the model and optimizer, then ``tape.load``
into a freshly built model that must score exactly the same; a loss/accuracy curve as a PNG.
Both models reach >= 97% test accuracy (the script exits with status 1 otherwise).

With ``--distributed`` (under ``mpiexec -n N``) the same training runs data-parallel:
``optim.DistributedDataParallel`` keeps the replicas equal and averages gradients over the
ranks, ``optim.DistributedSampler`` gives each rank its part of every shuffled epoch (the global
batch stays ``--batch-size``, so the accuracy is the same), rank 0 writes the checkpoints and
the curves, and every rank loads the checkpoint back.

Run (about 15 s on 2 cores):
    pip install -e ".[examples]" && python examples/train_digits.py
    python examples/train_digits.py --model cnn --epochs 20 --out runs/cnn
    python examples/train_digits.py --quick       # a few steps into runs/digits-quick
    pip install -e ".[examples,dist]" && mpiexec -n 2 python examples/train_digits.py --distributed
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from tqdm import tqdm

import layers
import optim
import tape

TARGET_ACCURACY = 0.97


class MLP(layers.Function):
    """64 pixels -> 256 ReLU units (dropout) -> 10 class scores."""

    def __init__(self, hidden=256, dropout=0.3):
        super().__init__()
        self.net = layers.Sequential(
            layers.Linear(64, hidden),
            layers.ReLU(),
            layers.Dropout(dropout),
            layers.Linear(hidden, 10),
        )

    def forward(self, images):
        return self.net(images.reshape((images.shape[0], 64)))


class CNN(layers.Function):
    """(N, 1, 8, 8) -> two conv 3x3 / ReLU / max-pool 2 stages (8x8 -> 4x4 -> 2x2) -> Linear."""

    def __init__(self, channels=(16, 32), dropout=0.3):
        super().__init__()
        c1, c2 = channels
        self.features = layers.Sequential(
            layers.Conv2D(1, c1, 3, padding=1),
            layers.ReLU(),
            layers.MaxPool2D(2),
            layers.Conv2D(c1, c2, 3, padding=1),
            layers.ReLU(),
            layers.MaxPool2D(2),
        )
        self.dropout = layers.Dropout(dropout)
        self.classifier = layers.Linear(c2 * 2 * 2, 10)

    def forward(self, images):
        features = self.features(images)
        return self.classifier(self.dropout(features.reshape((features.shape[0], -1))))


MODELS = {"mlp": MLP, "cnn": CNN}


def load_data(split_seed=0, test_fraction=0.25):
    """The digits as float32 images (N, 1, 8, 8) scaled to [0, 1] and int64 labels, split once
    (stratified) into train and test."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    labels = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=test_fraction, random_state=split_seed, stratify=labels
    )
    return {"train": (x_train, y_train), "test": (x_test, y_test)}


def make_optimizer(epochs, lr=3e-3, weight_decay=1e-2):
    """AdamW whose rate follows a cosine from ``lr`` to 0 over ``epochs`` (stepped per epoch)."""
    return optim.AdamW(
        lr=optim.CosineAnnealing(lr, T_max=max(epochs, 1)), weight_decay=weight_decay
    )


def epoch_batches(length, batch_size, rng, sampler=None):
    """The epoch's shuffled mini-batches of indices: this rank's part of each global batch when
    a ``DistributedSampler`` is given (``batch_size`` is then the global batch)."""
    if sampler is None:
        order = rng.permutation(length)
        return [order[start : start + batch_size] for start in range(0, length, batch_size)]
    sampler.set_epoch(int(rng.integers(2**31)))
    return sampler.batches(max(batch_size // sampler.size, 1))


def train_epoch(model, loss_fn, optimizer, data, batch_size, rng, max_steps=None, sampler=None):
    """One pass over shuffled mini-batches, a fresh tape per step; returns the step losses."""
    images, labels = data
    batches = epoch_batches(len(images), batch_size, rng, sampler)[:max_steps]
    model.train()
    losses = []
    for batch in batches:
        tape.reset_global_tape()
        loss = loss_fn(model(tape.Variable(images[batch])), tape.Variable(labels[batch]))
        tape.backward(loss)
        optimizer(model.params())
        losses.append(float(loss.value()))
    return losses


def evaluate(model, data, batch_size=500):
    """Test accuracy in eval mode without recording gradients."""
    images, labels = data
    model.eval()
    correct = 0
    with tape.no_grad():
        for start in range(0, len(images), batch_size):
            tape.reset_global_tape()
            logits = model(tape.Variable(images[start : start + batch_size])).numpy()
            correct += int((logits.argmax(axis=1) == labels[start : start + batch_size]).sum())
    return correct / len(images)


def fit(kind, data, epochs, batch_size, seed, max_steps=None, world=None):
    """Trains a new ``kind`` model (data-parallel over ``world``, a communicator, when given);
    returns (model, optimizer, history of per-epoch numbers)."""
    tape.seed(seed)
    rng = np.random.default_rng(seed)
    model, optimizer = MODELS[kind](), make_optimizer(epochs)
    sampler = None
    if world is not None:
        model = optim.DistributedDataParallel(model)  # rank 0's initial parameters everywhere
        sampler = optim.DistributedSampler(len(data["train"][0]), world.rank, world.size, seed=seed)
        tape.seed(seed + 1 + world.rank)  # each rank its own dropout masks
    loss_fn = layers.CrossEntropyLoss()
    history = {"loss": [], "accuracy": [], "step_losses": []}
    quiet = world is not None and world.rank != 0
    bar = tqdm(range(epochs), desc=kind, unit="epoch", leave=True, disable=quiet)
    for _ in bar:
        train = data["train"]
        losses = train_epoch(model, loss_fn, optimizer, train, batch_size, rng, max_steps, sampler)
        optimizer.scheduler.step()  # the cosine schedule advances once per epoch
        history["step_losses"] += losses
        history["loss"].append(float(np.mean(losses)))
        history["accuracy"].append(evaluate(model, data["test"]))
        bar.set_postfix(loss=f"{history['loss'][-1]:.4f}", acc=f"{history['accuracy'][-1]:.4f}")
    return model, optimizer, history


def reload_and_evaluate(kind, path, epochs, data):
    """Builds a fresh model and optimizer, loads the checkpoint into both, returns accuracy."""
    model, optimizer = MODELS[kind](), make_optimizer(epochs)
    tape.load(path, model, optimizer)
    return evaluate(model, data["test"])


def save_curves(histories, path):
    """Training loss and test accuracy per epoch for each model, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, history in histories.items():
        epochs = np.arange(1, len(history["loss"]) + 1)
        loss_ax.plot(epochs, history["loss"], marker=".", label=kind)
        acc_ax.plot(epochs, history["accuracy"], marker=".", label=kind)
    loss_ax.set(xlabel="epoch", ylabel="training loss", yscale="log", title="loss")
    acc_ax.axhline(TARGET_ACCURACY, color="gray", linestyle="--", linewidth=1)
    acc_ax.set(xlabel="epoch", ylabel="test accuracy", title="accuracy")
    for ax in (loss_ax, acc_ax):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("mlp", "cnn", "both"), default="both")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS threads (more only helps much larger matrices)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="directory for checkpoints and the curve PNG (default runs/digits, and "
        "runs/digits-quick with --quick, so a smoke test never overwrites a full run's)",
    )
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="data parallel over the processes mpiexec started (needs the dist extra)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2 epochs of 4 steps each (a smoke test; no accuracy target)",
    )
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = os.path.join("runs", "digits-quick" if args.quick else "digits")
    return args


def main(argv=None):
    """Parses ``argv`` and trains the chosen models; returns {kind: {"accuracy",
    "reloaded_accuracy", "checkpoint", "seconds", "history"}, "curves": path, "passed": bool}."""
    args = parse_args(argv)
    with tape.blas_threads(args.blas_threads):
        return run(args)


def train_save_reload(kind, data, args, epochs, max_steps):
    """Trains a ``kind`` model, checkpoints it with its optimizer, and evaluates a fresh model
    loaded from the checkpoint; returns the numbers and the per-epoch history."""
    start = time.perf_counter()
    world = args.world
    model, optimizer, history = fit(
        kind, data, epochs, args.batch_size, args.seed, max_steps, world
    )
    path = os.path.join(args.out, f"{kind}.npz")
    if world is None or world.rank == 0:
        tape.save(path, model, optimizer)
    if world is not None:
        world.barrier()  # the checkpoint is written before any rank reads it
    reloaded = reload_and_evaluate(kind, path, epochs, data)
    result = {
        "accuracy": history["accuracy"][-1],
        "reloaded_accuracy": reloaded,
        "checkpoint": path,
        "seconds": time.perf_counter() - start,
        "history": history,
    }
    say(
        args,
        f"{kind}: test accuracy {result['accuracy']:.4f} (reloaded from {path}: "
        f"{reloaded:.4f}) in {result['seconds']:.1f} s",
    )
    return result


def say(args, text, **kwargs):
    """Prints on rank 0 only (every rank when not distributed)."""
    if args.world is None or args.world.rank == 0:
        print(text, **kwargs)


def run(args):
    args.world = None
    if args.distributed:
        from ops import communicator

        args.world = communicator.world()
    epochs, max_steps = (2, 4) if args.quick else (args.epochs, None)
    os.makedirs(args.out, exist_ok=True)
    data = load_data()
    kinds = ("mlp", "cnn") if args.model == "both" else (args.model,)
    results = {kind: train_save_reload(kind, data, args, epochs, max_steps) for kind in kinds}
    results["curves"] = os.path.join(args.out, "curves.png")
    if args.world is None or args.world.rank == 0:
        save_curves({kind: results[kind]["history"] for kind in kinds}, results["curves"])
    say(args, f"curves: {results['curves']}")
    results["passed"] = all(
        results[kind]["reloaded_accuracy"] == results[kind]["accuracy"]
        and (args.quick or results[kind]["accuracy"] >= TARGET_ACCURACY)
        for kind in kinds
    )
    if not results["passed"]:
        say(
            args,
            f"FAILED: every model must reach {TARGET_ACCURACY:.0%} and reload to the same accuracy",
            file=sys.stderr,
        )
    return results


if __name__ == "__main__":
    sys.exit(0 if main()["passed"] else 1)
