"""The measurements behind the CPU default of ``fused_elementwise`` (issue 9): its backends on the
chain's forward group and on its (all-arithmetic) gradient group, at sizes from 8x8 to 4M.

    python -m benchmarks.fusion_backends [--sizes 8x8,256x256,4096x1024] [--reps 7]
                                         [--blocks] [--wait-idle SECONDS]

``forward``: tanh(x * a + b) * sigmoid(x) - 0.5 * x * x (float32, a/b broadcast vectors), the
group a fusion pass makes of the chain workload's forward. ``backward``: with t = tanh(u) and
s = sigmoid(x) saved, dx = tanh_grad(t, s) * a + sigmoid_grad(s, t) - x, da = sum_rows(
tanh_grad(t, s) * x), db = sum_rows(tanh_grad(t, s)): exact arithmetic and two reductions.
Rows: ``unfused`` (the reference backend: each op's kernel on whole arrays, what eager runs),
``blocked``, ``numba`` (compile time printed apart; vectorised exp/tanh, parallel chunks from
``numba_loops.PARALLEL_MIN_SIZE`` elements), ``numba serial`` (the same without parallel chunks),
``numba scalar libm`` (numba's own libm calls, as before ``vecmath``; groups with libm functions)
and, for the forward at the largest size, the hand-blocked numpy floor of ``benchmarks/chain.py``.
``--blocks`` times blocked numpy at block sizes from 32 KiB to 1 MiB instead. Same harness as
``python -m benchmarks``: round-robin timed blocks after warm-up, each after a pause and an
untimed settle call; medians; ``others`` is the number of cores other processes kept busy.
"""

from __future__ import annotations

import argparse
import time


def _step(op, args, attrs=(("axis", -1),)):
    from ops.fused_expression import Step

    return Step(op, attrs, args, (op, f"{op}_0", None))


def forward_expression(shape):
    from ops.fused_expression import Expression

    vector = ((shape[-1],), "float32")
    steps = (
        _step("elementwise_mul", (("in", 0), ("in", 1))),
        _step("elementwise_add", (("step", 0), ("in", 2))),
        _step("tanh", (("step", 1),), ()),
        _step("sigmoid", (("in", 0),), ()),
        _step("elementwise_mul", (("step", 2), ("step", 3))),
        _step("scale", (("in", 0),), (("bias", 0.0), ("bias_after_scale", True), ("scale", 0.5))),
        _step("elementwise_mul", (("step", 5), ("in", 0))),
        _step("elementwise_sub", (("step", 4), ("step", 6))),
    )
    inputs = ((shape, "float32"), vector, vector)
    return Expression(inputs, shape, steps, (7,), (), ("float32",))


def backward_expression(shape):
    from ops.fused_expression import Expression, Reduction

    full, vector = (shape, "float32"), ((shape[-1],), "float32")
    steps = (
        _step("tanh_grad", (("in", 2), ("in", 3)), ()),
        _step("elementwise_mul", (("step", 0), ("in", 1))),
        _step("sigmoid_grad", (("in", 3), ("in", 2)), ()),
        _step("elementwise_add", (("step", 1), ("step", 2))),
        _step("elementwise_sub", (("step", 3), ("in", 0))),
        _step("elementwise_mul", (("step", 0), ("in", 0))),
    )
    sums = tuple(Reduction(j, (0,), False, False, shape[1:]) for j in (5, 0))
    return Expression((full, vector, full, full), shape, steps, (4,), sums, ("float32",) * 3)


def _inputs(expression):
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(d) for s, d in expression.inputs]
    if len(arrays) == 4:  # the backward's saved t = tanh(.) and s = sigmoid(.)
        arrays[2], arrays[3] = np.tanh(arrays[2]), 1 / (1 + np.exp(-arrays[3]))
    return arrays


def _backends(expression, arrays, with_numba):
    import numpy as np

    from ops.fusion_backends import blocked, numba_loops, reference

    steps = {"unfused": reference.compile(expression, np)}
    steps["blocked"] = blocked.compile(expression, np)
    notes = []
    if with_numba and numba_loops.available():
        run = numba_loops.compile(expression, np)
        started = time.perf_counter()
        run(*arrays)
        notes.append(f"numba compile {time.perf_counter() - started:.2f} s")
        steps["numba"] = run
        if numba_loops.chunks_for(expression) > 1:  # the same loop without parallel chunks
            before, numba_loops.PARALLEL_MIN_SIZE = numba_loops.PARALLEL_MIN_SIZE, float("inf")
            steps["numba serial"] = numba_loops.compile(expression, np)
            numba_loops.PARALLEL_MIN_SIZE = before
        if numba_loops.scalar_libm(expression) != numba_loops.scalar_libm(expression, False):
            # numba's own scalar libm calls (before ops.fusion_backends.vecmath)
            steps["numba scalar libm"] = numba_loops.compile(expression, np, vectorised=False)
    return {name: (lambda run=run: run(*arrays)) for name, run in steps.items()}, notes


def _floor(shape, arrays):
    from benchmarks import chain

    config = {"rows": shape[0], "cols": shape[1], "backward": False, "block_rows": 64}
    x, a, b = arrays
    return chain.setup_numpy_blocked(config, {"x": x, "a": a, "b": b})


def _report(label, results, notes):
    from benchmarks import harness

    base = next(m.median for m in results if m.name == "unfused")
    for m in results:
        others = f"{m.others:.2f}" if m.others is not None else "?"
        print(f"| {label} | {m.name} | {m.median * 1e6:.1f} | {m.median / base:.2f}x | {others} |")
    for note in notes:
        print(f"|  | ({note}) |  |  |  |")
    del harness


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8x8,64x64,256x256,1024x1024,4096x1024")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--wait-idle", type=float, default=0.0)
    parser.add_argument("--blocks", action="store_true", help="time blocked at block sizes")
    args = parser.parse_args(argv)
    from benchmarks import harness

    harness.set_threads(args.threads)
    options = harness.Options(reps=args.reps, wait_idle=args.wait_idle)
    print("| group, shape | implementation | median us | /unfused | others |")
    print("|---|---|---|---|---|")
    if args.blocks:
        return _blocks(options)
    for size in args.sizes.split(","):
        shape = tuple(int(n) for n in size.split("x"))
        for label, make in (("forward", forward_expression), ("backward", backward_expression)):
            expression = make(shape)
            arrays = _inputs(expression)
            steps, notes = _backends(expression, arrays, with_numba=True)
            if label == "forward" and size == args.sizes.split(",")[-1]:
                steps["numpy-blocked floor"] = _floor(shape, arrays)
            _report(f"{label} {size}", harness.measure(steps, options), notes)


def _blocks(options):
    import numpy as np

    from benchmarks import harness
    from ops.fusion_backends import blocked

    expression = forward_expression((4096, 1024))
    arrays = _inputs(expression)
    steps = {}
    before = blocked.BLOCK_BYTES
    for kib in (32, 64, 128, 256, 512, 1024):
        blocked.BLOCK_BYTES = kib * 1024
        run = blocked.compile(expression, np)
        steps[f"blocked {kib} KiB"] = lambda run=run: run(*arrays)
    blocked.BLOCK_BYTES = before
    from ops.fusion_backends import reference

    unfused = reference.compile(expression, np)
    steps = {"unfused": lambda: unfused(*arrays), **steps}
    _report("forward 4096x1024", harness.measure(steps, options), [])


if __name__ == "__main__":
    main()
