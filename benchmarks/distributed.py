"""Data-parallel throughput: the MLP and LSTM-LM training steps on 1 and 2 processes.

    python -m benchmarks.distributed            # launches mpiexec -n 1 and -n 2, prints a table
    python -m benchmarks.distributed --steps 10 --blocks 5

Each process runs one BLAS thread. One process trains at the global batch (MLP 128, LSTM LM 16);
N processes train at batch/N each under ``optim.DistributedDataParallel``, so samples/s compare
like for like. Per workload and world size it measures the step with the all-reduce overlapping
backward (buckets of 1 MiB, started as gradients become final), the step with one bucket started
only when backward has finished (communication exposed), the step without communication at the
per-rank batch (compute only), and the all-reduce of all gradients alone. Hidden communication =
1 - (overlapped step - compute step) / all-reduce alone. ``others`` is the number of cores that
processes outside the job kept busy while it was timed (from /proc/stat); well above 0 means the
machine was shared and the numbers are noisy. Never run under pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import layers  # noqa: I001  (fluidtape: the engine loads with the first of them)
import ops
import optim
import tape
from benchmarks import lstm_lm, mlp
from benchmarks.harness import cpu_snapshot

WORKLOADS = {"mlp": mlp, "lstm_lm": lstm_lm}


class LanguageModel(layers.Function):
    """benchmarks.lstm_lm's model as layers: embedding -> LSTMCell over the steps -> linear."""

    def __init__(self, config):
        super().__init__()
        self.hidden = config["hidden"]
        self.embedding = layers.Embedding(config["vocab"], config["embed"])
        self.cell = layers.LSTMCell(config["embed"], config["hidden"])
        self.output = layers.Linear(config["hidden"], config["vocab"])

    def forward(self, tokens):
        embedded = self.embedding(tokens)
        zeros = tape.Variable(np.zeros((tokens.shape[1], self.hidden), np.float32))
        h, c, hs = zeros, zeros, []
        for t in range(embedded.shape[0]):
            h, c = self.cell(embedded[t], (h, c))
            hs.append(h)
        return self.output(ops.stack(hs, axis=0).reshape(-1, self.hidden))


def _model(name, config, data):
    """The workload's model as fluidtape layers holding its parameters."""
    if name == "mlp":
        sizes, acts = config["sizes"], ["relu"] * (len(config["sizes"]) - 2) + [None]
        shapes = zip(sizes[:-1], sizes[1:], acts, strict=True)
        net = layers.Sequential(*[layers.Linear(i, o, act=a) for i, o, a in shapes])
    else:
        net = LanguageModel(config)
    for param, value in zip(net.params(), data["params"], strict=True):
        param.set_value(value)
    return net


def _loss(model, x, labels):
    _, loss = ops.softmax_with_cross_entropy(model(x), labels)
    return ops.mean(loss)


def _shard(name, data, rank, size):
    """This rank's part of the global batch (rows of the MLP batch, columns of the token grid)."""
    if name == "mlp":
        rows = slice(rank * len(data["x"]) // size, (rank + 1) * len(data["x"]) // size)
        return data["x"][rows], data["labels"][rows].reshape(-1, 1)
    cols = slice(
        rank * data["inputs"].shape[1] // size, (rank + 1) * data["inputs"].shape[1] // size
    )
    return data["inputs"][:, cols], data["targets"][:, cols].reshape(-1, 1)


def measure(name, mode, world, steps, blocks):
    """Median seconds per step of ``mode`` ('overlap', 'end', 'local'), and others' load."""
    module = WORKLOADS[name]
    data = module.make_data(module.DEFAULT)
    net = _model(name, module.DEFAULT, data)
    if mode != "local":
        net = optim.DistributedDataParallel(net, bucket_cap_mb=1.0 if mode == "overlap" else 1e6)
    inputs, labels = _shard(name, data, world.rank, world.size)
    x, y, sgd = tape.Variable(inputs.copy()), tape.Variable(labels.copy()), optim.SGD(lr=0.01)

    def step():
        tape.reset_global_tape()
        tape.backward(_loss(net, x, y))
        sgd(net.params())

    return _time(step, world, steps, blocks)


def measure_allreduce(name, world, steps, blocks):
    """Seconds of one all-reduce of all the workload's gradients (as one float32 buffer)."""
    module = WORKLOADS[name]
    size = sum(p.size for p in module.make_data(module.DEFAULT)["params"])
    flat = np.ones(size, np.float32)
    return _time(lambda: world.allreduce_sum(np, [flat]), world, steps, blocks)


def _time(step, world, steps, blocks):
    for _ in range(3):
        step()
    times, spans = [], []
    for _ in range(blocks):
        world.barrier()
        before, start = cpu_snapshot(), time.perf_counter()
        for _ in range(steps):
            step()
        world.barrier()
        times.append((time.perf_counter() - start) / steps)
        spans.append((before, cpu_snapshot()))
    return statistics.median(times), _others(world, spans)


def _others(world, spans):
    """Cores kept busy by processes outside the job during ``spans`` (rank 0's view)."""
    if any(a is None or b is None for a, b in spans):
        return None
    own = sum(b[1] - a[1] for a, b in spans)
    job = own if world.size == 1 else sum(world.comm.allgather(own))
    busy = sum(b[0] - a[0] for a, b in spans)
    wall = sum(b[2] - a[2] for a, b in spans)
    return max(busy - job, 0.0) / wall


def worker(args):
    from ops import communicator

    world = communicator.world()
    results = {}
    for name in args.only.split(","):
        for mode in ("local", "overlap", "end") if world.size > 1 else ("local",):
            results[f"{name}/{mode}"] = measure(name, mode, world, args.steps, args.blocks)
        if world.size > 1:
            results[f"{name}/allreduce"] = measure_allreduce(name, world, args.steps, args.blocks)
    if world.rank == 0:
        print("RESULTS " + json.dumps(results), flush=True)


def launch(size, args):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    command = [mpiexec, "-n", str(size), sys.executable, "-m", "benchmarks.distributed"]
    command += ["--worker", "--only", args.only, "--steps", str(args.steps)]
    command += ["--blocks", str(args.blocks)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"mpiexec -n {size} failed:\n{done.stderr}")
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULTS "))
    return json.loads(line[len("RESULTS ") :])


def report(one, two, args):
    print(f"load average before: {os.getloadavg()[0]:.2f} (1 min)")
    print(
        "| workload | 1 process | 2 processes | speedup (samples/s) | compute-only step at "
        "batch/2 | comm alone | exposed (overlap) | exposed (at the end) | hidden | others |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.only.split(","):
        single, _ = one[f"{name}/local"]
        overlap, others = two[f"{name}/overlap"]
        local, _ = two[f"{name}/local"]
        end, _ = two[f"{name}/end"]
        comm, _ = two[f"{name}/allreduce"]
        hidden = 1.0 - (overlap - local) / comm
        print(
            f"| {name} | {single * 1e3:.2f} ms | {overlap * 1e3:.2f} ms | "
            f"{single / overlap:.2f}x | {local * 1e3:.2f} ms | {comm * 1e3:.2f} ms | "
            f"{(overlap - local) * 1e3:.2f} ms | {(end - local) * 1e3:.2f} ms | "
            f"{hidden:.0%} | {others:.2f} |"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mlp,lstm_lm")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--blocks", type=int, default=7, help="timed blocks (median)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    one, two = launch(1, args), launch(2, args)
    report(one, two, args)


if __name__ == "__main__":
    main()
