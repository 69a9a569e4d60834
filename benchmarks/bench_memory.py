"""Peak memory of one training step: a 16-layer ReLU MLP, width 2048, batch 256, float32.

One SGD step (forward, mean-squared error, backward, update) per implementation, each in a fresh
process. The figure is the peak resident set during the step (VmHWM, reset just before it, see
proc(5) ``clear_refs``) minus the resident set before anything was allocated: parameters, data
and everything the step holds at its worst moment. RSS sees every allocator (numpy, torch), which
tracemalloc would not. The theoretical minimum is the parameters, their gradients and the
activations backward needs (each layer's input and the output error).

    python -m benchmarks.bench_memory [--impls numpy,torch,autograd,fluidtape,fluidtape-lazy]

``fluidtape-lazy`` is a first step (interpreted), ``fluidtape-lazy-warm`` the sixth step of the
same process, a cached compiled plan (what a training loop runs from then on; its peak includes
whatever the first steps left resident).

Targets (the issue): fluidtape lazy <= 1.05x the minimum; fluidtape eager no worse than torch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

LAYERS, WIDTH, BATCH, LR = 16, 2048, 256, 1e-3
MIB = 2**20
IMPLS = ("numpy", "torch", "autograd", "fluidtape", "fluidtape-lazy", "fluidtape-lazy-warm")


def minimum_bytes():
    """Parameters + gradients + layer inputs (the input included) + the output error, float32."""
    params = LAYERS * (WIDTH * WIDTH + WIDTH) * 4
    activations = (LAYERS + 1) * BATCH * WIDTH * 4
    return 2 * params + activations


def _status(field):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak():
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def _data():
    import numpy as np

    rng = np.random.default_rng(0)
    weights, biases = [], []
    for _ in range(LAYERS):
        w = rng.standard_normal((WIDTH, WIDTH), dtype=np.float32)
        w *= 1.0 / WIDTH**0.5
        weights.append(w)
        biases.append(np.zeros(WIDTH, np.float32))
    x = rng.standard_normal((BATCH, WIDTH), dtype=np.float32)
    y = rng.standard_normal((BATCH, WIDTH), dtype=np.float32)
    return weights, biases, x, y


def setup_numpy(weights, biases, x, y):
    """Hand-written: saves each layer's input, computes all gradients, then updates."""
    import numpy as np

    def step():
        inputs, h = [], x
        for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
            inputs.append(h)
            h = h @ w
            h += b
            if i < LAYERS - 1:
                np.maximum(h, 0, out=h)
        error = h
        error -= y
        loss = float(np.mean(error * error))
        g = error
        g *= 2.0 / error.size
        grads = []
        for i in range(LAYERS - 1, -1, -1):
            grads.append((inputs[i].T @ g, g.sum(axis=0)))
            if i > 0:
                g = g @ weights[i].T
                g *= inputs[i] > 0
            inputs[i] = None
        for (gw, gb), w, b in zip(reversed(grads), weights, biases, strict=True):
            w -= LR * gw
            b -= LR * gb
        return loss

    return step


def setup_torch(weights, biases, x, y):
    import torch

    layers = []
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        linear = torch.nn.Linear(WIDTH, WIDTH, device="meta")  # no buffers of its own
        # nn.Linear's (out, in) layout, contiguous (a transposed view would be copied by every
        # matmul): the square weight is transposed in place, sharing the numpy buffer.
        w[...] = w.T.copy()
        linear.weight = torch.nn.Parameter(torch.from_numpy(w))
        linear.bias = torch.nn.Parameter(torch.from_numpy(b))
        layers += [linear, torch.nn.ReLU()] if i < LAYERS - 1 else [linear]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(tx), ty)
        loss.backward()
        opt.step()
        return float(loss)

    return step


def setup_autograd(weights, biases, x, y):
    import autograd
    import autograd.numpy as anp

    params = list(weights) + list(biases)

    def loss_of(params):
        h = x
        for i in range(LAYERS):
            h = anp.dot(h, params[i]) + params[LAYERS + i]
            if i < LAYERS - 1:
                h = anp.maximum(h, 0.0)
        return anp.mean((h - y) ** 2)

    value_and_grad = autograd.value_and_grad(loss_of)

    def step():
        loss, grads = value_and_grad(params)
        for p, g in zip(params, grads, strict=True):
            p -= LR * g
        return float(loss)

    return step


def setup_fluidtape(weights, biases, x, y, lazy=False):
    import layers
    import ops
    import optim
    import tape

    model = layers.Sequential(
        *[
            layers.Linear(
                WIDTH,
                WIDTH,
                act="relu" if i < LAYERS - 1 else None,
                weight_init=lambda shape, dtype, w=w: w,
                bias_init=lambda shape, dtype, b=b: b,
            )
            for i, (w, b) in enumerate(zip(weights, biases, strict=True))
        ]
    )
    opt = optim.SGD(lr=LR)
    tx, ty = tape.Variable(x), tape.Variable(y)

    def step():
        with tape.lazy(lazy):
            tape.reset_global_tape()
            loss = ops.square(model(tx) - ty).mean()
            tape.backward(loss)
            opt(model.params())
            return float(loss.numpy())  # lazy: forward, backward and updates run as one plan

    return step


SETUPS = {
    "numpy": setup_numpy,
    "torch": setup_torch,
    "autograd": setup_autograd,
    "fluidtape": setup_fluidtape,
    "fluidtape-lazy": lambda *data: setup_fluidtape(*data, lazy=True),
    "fluidtape-lazy-warm": lambda *data: _warmed(setup_fluidtape(*data, lazy=True)),
}


def _warmed(step, steps=5):
    """``step`` after ``steps`` untimed steps: lazy mode's steady state, a structure seen
    before run whole at its backward (the first two steps run their backward the eager way, the
    third records it and is interpreted, the fourth compiles the whole step, the fifth is the
    first to run it: see ``tape.replay`` and ``tape.step_program``)."""
    for _ in range(steps):
        step()
    return step


MODULES = {
    "numpy": ["numpy"],
    "torch": ["numpy", "torch"],
    "autograd": ["numpy", "autograd"],
    "fluidtape": ["numpy", "tape", "layers", "ops", "optim"],
}


def child(impl):
    """Runs in a fresh process: one step of ``impl``; prints its peak and loss as JSON.

    Libraries are imported first: their code and static data are not the step's memory.
    """
    for module in MODULES[impl.split("-")[0]]:
        __import__(module)
    before = _status("VmRSS")
    step = SETUPS[impl](*_data())
    ready = _status("VmRSS") - before
    _reset_peak()
    loss = step()
    peak = _status("VmHWM") - before
    print(json.dumps({"impl": impl, "peak": peak, "loss": loss, "setup": ready}))


def run(impls):
    """{impl: (peak bytes, loss)} measured in one fresh process each (None if unavailable)."""
    results = {}
    for impl in impls:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench_memory", "--child", impl],
            capture_output=True,
            text=True,
            env=dict(os.environ),
        )
        if done.returncode != 0:
            results[impl] = None
            print(f"{impl}: unavailable ({done.stderr.strip().splitlines()[-1:]})", file=sys.stderr)
            continue
        report = json.loads(done.stdout.strip().splitlines()[-1])
        results[impl] = (report["peak"], report["loss"])
        print(f"{impl}: {report['setup'] / MIB:.0f} MiB resident after setup", file=sys.stderr)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--child")
    args = parser.parse_args(argv)
    if args.child:
        child(args.child)
        return
    minimum = minimum_bytes()
    print(
        f"peak memory, one training step: {LAYERS}-layer MLP, width {WIDTH}, batch {BATCH}, float32"
    )
    print(f"  {'theoretical minimum':22s} {minimum / MIB:8.0f} MiB  1.00x")
    for impl, result in run(args.impls.split(",")).items():
        if result is not None:
            peak, loss = result
            print(f"  {impl:22s} {peak / MIB:8.0f} MiB  {peak / minimum:.2f}x   (loss {loss:.5f})")


if __name__ == "__main__":
    main()
