"""What each rank runs in the distributed tests (``mpiexec -n N python worker.py SCENARIO ...``).

Training scenarios train a small float64 MLP for a number of steps on a fixed data set, with a
global batch of 8 split over the ranks by ``DistributedSampler``, and write the parameters to
``OUT.rank<r>.npz``; called in-process with a world of one, the same functions are the
single-process reference.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import layers  # noqa: E402
import ops  # noqa: E402
import optim  # noqa: E402
import tape  # noqa: E402
from ops import communicator  # noqa: E402
from tape.passes import pserver  # noqa: E402
from tape.passes.data_parallel import insert_allreduce  # noqa: E402

GLOBAL_BATCH, SAMPLES = int(os.environ.get("DP_GLOBAL_BATCH", "8")), 48
OPTIMIZERS = {
    "sgd": lambda: optim.SGD(lr=0.1),
    "momentum": lambda: optim.Momentum(lr=0.1, momentum=0.9),
    "adam": lambda: optim.Adam(lr=0.01),
}


def data():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((SAMPLES, 5))
    labels = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(np.int64) + (x[:, 3] > 1)
    return x, labels


def model():
    tape.seed(4)
    return layers.Sequential(
        layers.Linear(5, 16, act="tanh", dtype="float64"), layers.Linear(16, 3, dtype="float64")
    )


def batches(steps, rank, size):
    """This rank's (x, labels) of each step: batch b of the epoch's order, this rank's part."""
    x, labels = data()
    sampler = optim.DistributedSampler(SAMPLES, rank, size, seed=7)
    per_rank, out, epoch = GLOBAL_BATCH // size, [], 0
    while len(out) < steps:
        sampler.set_epoch(epoch)
        out += [(x[i], labels[i]) for i in sampler.batches(per_rank)]
        epoch += 1
    return out[:steps]


def train_eager(opt_name, steps, lazy=False, model_=None, opt=None, first_step=0):
    world = communicator.world()
    net = optim.DistributedDataParallel(model_ or model(), bucket_cap_mb=0.0005)
    opt = opt or OPTIMIZERS[opt_name]()
    loss_fn = layers.CrossEntropyLoss()
    for x, labels in batches(first_step + steps, world.rank, world.size)[first_step:]:
        with tape.lazy(lazy, threads=2 if lazy else 0):
            tape.reset_global_tape()
            loss = loss_fn(net(tape.Variable(x)), labels)
            tape.backward(loss)
            opt(net.params())
    return net, opt


def record_step(net, opt, ranks):
    """A Program of one training step (forward, backward, updates) on GLOBAL_BATCH / ranks."""
    recording = tape.Tape(lazy=True)
    previous, tape.tape.state.tape = tape.tape.state.tape, recording
    try:
        x = tape.Variable(np.zeros((GLOBAL_BATCH // ranks, 5)), name="x")
        labels = tape.Variable(np.zeros(x.shape[0], np.int64), name="labels")
        loss = layers.CrossEntropyLoss()(net(x), labels)
        loss.name = "loss"
        tape.backward(loss)
        opt(net.params())
    finally:
        tape.tape.state.tape = previous
    return tape.Program.from_tape(recording)


def train_static(opt_name, steps):
    world = communicator.world()
    net = model()
    recorded = insert_allreduce(record_step(net, OPTIMIZERS[opt_name](), world.size), world.size)
    program = tape.Program.from_text(recorded.to_text())  # what another process would load
    assert program == recorded
    variables = program.global_block().vars  # bound to this process's parameters and state
    program.bindings = {n: v for n, v in recorded.bindings.items() if n in variables}
    executor = tape.Executor(threads=2)
    targets = [op.name for op in program.global_block().ops if op.type in OPTIMIZERS]
    for x, labels in batches(steps, world.rank, world.size):
        executor.run(program, feed={"x": x, "labels": labels}, fetch_list=["loss"], targets=targets)
    return net


def train_pserver(steps):
    """Ranks 0 .. size-2 train, the last rank serves the parameters (SGD, synchronous)."""
    world = communicator.world()
    trainers = world.size - 1
    net = model()
    parts = pserver.split(record_step(net, optim.SGD(lr=0.1), trainers), trainers, 1)
    if world.rank < trainers:
        for x, labels in batches(steps, world.rank, trainers):
            feed = {"x": x, "labels": labels}
            tape.Executor(threads=2).run(parts.trainer, feed=feed, fetch_list=["loss"])
    else:
        for _ in range(steps):
            tape.Executor().run(parts.pservers[0])
    return net


def save_params(net, out):
    rank = communicator.world().rank
    np.savez(f"{out}.rank{rank}.npz", *[p.numpy() for p in net.params()])


def main(argv):
    scenario, args = argv[0], argv[1:]
    if scenario == "train":  # train OPTIMIZER[,OPTIMIZER...] MODE STEPS OUT: OUT-OPTIMIZER.*
        mode, steps, out = args[1], int(args[2]), args[3]
        for opt_name in args[0].split(","):
            if mode == "static":
                net = train_static(opt_name, steps)
            else:
                net, _ = train_eager(opt_name, steps, lazy=mode == "lazy")
            save_params(net, f"{out}-{opt_name}")
    elif scenario == "pserver":  # pserver STEPS OUT
        save_params(train_pserver(int(args[0])), args[1])
    elif scenario == "checkpoint":  # checkpoint STEPS PATH OUT: save after STEPS, go on STEPS
        steps, path, out = int(args[0]), args[1], args[2]
        net, opt = train_eager("adam", steps)
        if communicator.world().rank == 0:
            tape.save(path, net, opt)
        communicator.world().barrier()
        train_eager("adam", steps, model_=net.module, opt=opt, first_step=steps)
        save_params(net, out)
    elif scenario == "raise":  # rank 1 fails while rank 0 waits in an all-reduce
        world = communicator.world()
        if world.rank == 1:
            raise ValueError("rank one failed on purpose")
        world.allreduce_sum(np, [np.ones(3)])
    elif scenario == "unused":  # rank 1 leaves the second layer's bias out of its loss
        world = communicator.world()
        net = optim.DistributedDataParallel(model())
        hidden = net.module[0](tape.Variable(np.ones((2, 5))))
        out = net.module[1]
        logits = hidden @ out.weight if world.rank == 1 else out(hidden)
        net(tape.Variable(np.ones((2, 5))))  # attaches the reducer to this tape
        tape.backward(logits.sum())
    elif scenario == "absent":  # rank 1 never arrives; rank 0 times out after TIMEOUT seconds
        world = communicator.world()
        communicator.set_timeout(float(args[0]))
        if world.rank == 1:
            time.sleep(60)
        ops.c_allreduce_sum([tape.Variable(np.ones(3))])
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
