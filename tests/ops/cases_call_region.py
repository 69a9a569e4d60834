"""Cases for ``call_region`` and ``call_region_grad``: a lazy step's traced calls recorded as
one region (``tape.call_region``), against the calls' arithmetic in numpy, and the region's
gradient against the same calls differentiated eagerly. Traced in float64 (a program is
traced for one dtype).

The region: four calls of ``f(x, p) = (tanh(x @ w) * p, x * p)``, ``p`` a parameter passed
as an argument (shared by the calls), ``w`` one the function reads (captured), ``x`` an array
for the first two and the previous call's first result for the others (three levels). The
results held: the first call's second, the second call's first, and both of the last call's.
Its inputs, in the order the calls first read them: ``p``, ``w``."""

import numpy as np

import ops
import tape
from tape import call_region
from tape.tape import Tape
from tape.testing import OpCase

_STARTS = (np.array([0.5, -1.0]), np.array([1.5, 0.25]))


def _region(values=None):
    """A sealed region of the calls above (on a tape of its own); with ``values`` (of p and
    w), its forward run on them, as before a backward."""
    p = tape.Variable(np.ones(2), requires_grad=True)
    w = tape.Variable(np.eye(2), requires_grad=True)
    w.persistable = True
    f = tape.traced(lambda x, p: (ops.tanh(ops.matmul(x, w)) * p, x * p))
    recording = Tape(lazy=True)
    first = call_region.record(f, recording, (_STARTS[0], p), True, "cases")
    other = call_region.record(f, recording, (_STARTS[1], p), True, "cases")
    second = call_region.record(f, recording, (first[0], p), True, "cases")
    last = call_region.record(f, recording, (second[0], p), True, "cases")
    held = [first[1], other[0], *last]  # (what the user holds: the region's outputs)
    del first, other, second, last  # (held by nobody else: not outputs)
    region = call_region.seal(recording).attrs["region"]
    assert [var is p for var in region.live] == [True, False] and len(held) == 4
    if values is not None:
        import ops.regions as kernels

        kernels.forward(region, np, list(values))
    return region


def _calls(p, w):
    """The held results, in numpy."""

    def f(x):
        return np.tanh(x @ w) * p, x * p

    first, other = f(_STARTS[0]), f(_STARTS[1])
    last = f(f(first[0])[0])
    return [first[1], other[0], *last]


def _forward_reference(xs, region):
    p, w = xs
    return (_calls(p, w),)


_AT = (np.array([0.75, -1.25]), np.array([[0.5, -0.3], [0.2, 0.9]]))


def _gradient_reference(gouts, region, given, wanted):
    """The gradient of sum(gout * result) over the held results at ``_AT``, eagerly."""
    tape.reset_global_tape()
    p, w = (tape.Variable(v.copy(), requires_grad=True) for v in _AT)

    def f(x):
        return ops.tanh(ops.matmul(x, w)) * p, x * p

    first, other = f(tape.Variable(_STARTS[0])), f(tape.Variable(_STARTS[1]))
    last = f(f(first[0])[0])
    results = [first[1], other[0], *last]
    total = None
    for result, gout in zip(results, gouts, strict=True):
        term = (result * tape.Variable(gout)).sum()
        total = term if total is None else total + term
    grads = tape.grad(total, [p, w])
    return ([g.numpy() for g in grads],)


CASES = [
    OpCase(
        "call_region",
        {"X": [(2,), (2, 2)]},
        {"region": _region()},
        reference=_forward_reference,
        dtypes=("float64",),
        fresh_inputs=True,
        name="tree-of-calls",
    ),
    OpCase(
        "call_region_grad",
        {"G": [(2,), (2,), (2,), (2,)]},
        {"region": _region(_AT), "given": (0, 1, 2, 3), "wanted": (0, 1)},
        reference=_gradient_reference,
        grad=False,
        dtypes=("float64",),
        fresh_inputs=True,
        name="tree-of-calls",
    ),
]
