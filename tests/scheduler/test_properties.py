"""Properties of the scheduler on random tapes drawn from the registry (hypothesis).

A random tape chains registry-sweep cases: each op's float inputs are either fresh arrays from its
case or variables recorded earlier with the same shape and dtype, so ops feed each other,
in-place updates rewrite values later ops read, and random ops interleave. On such tapes: lazy
equals eager (values and gradients), the thread pool equals program order, prune keeps exactly the
ancestors of its targets, nothing is freed before its last use and everything freeable is freed,
and the plan cache hits for the same structure and misses when a shape or attribute changes.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ops
import tape
from ops.registry import REGISTRY
from tape.passes import execute, pipeline
from tape.passes.plan import CACHE, stand_ins
from tape.passes.prune import prune
from tape.testing import _ordered
from tests.ops.test_registry_sweep import CASES

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _record(choose, lazy, threads=0, steps=None, exact=True, keep_history=False, compile=None):
    """Records a random tape; ``choose(n)`` picks in range(n). Returns the recorded Variables'
    values, the gradients of a weighted sum of them, and the tape. Lazy runs are ``exact`` by
    default, so they equal eager mode bit for bit even in the rare tape where enough products
    share an operand for ``batch_products`` to join them (test_batch_products covers that)."""
    tape.seed(0)
    with np.errstate(all="ignore"), tape.lazy(lazy, threads=threads, exact=exact, compile=compile):
        recording = tape.reset_global_tape()
        recording.keep_history = keep_history  # (a Program is built from it afterwards)
        pool = []
        for step in range(choose(6) + 1 if steps is None else steps):
            case = CASES[choose(len(CASES))]
            args = [
                _argument(value, pool, choose, case)
                for value in _ordered(case, case.arrays("float64", seed=step))
            ]
            outputs = REGISTRY[case.op](*args, **case.attrs)
            pool.extend(_flat(outputs))
        grads = _gradients(pool)
        values = [v.numpy() for v in pool] + [g.numpy() for g in grads]
    return values, recording


def _argument(value, pool, choose, case=None):
    """The Variable an op of a random tape reads for ``value``: an earlier op's output of its
    shape and dtype, or a new leaf; always a new one where the case asks (``fresh_inputs``),
    differentiated only if the case checks gradients (a singular matrix's case does not)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [_argument(v, pool, choose, case) for v in value]
    if value.dtype.kind != "f":
        return tape.Variable(value)
    if case is not None and case.fresh_inputs:
        return tape.Variable(value, requires_grad=case.grad)
    same = [v for v in pool if v.shape == value.shape and v.dtype == value.dtype]
    pick = choose(len(same) + 1)
    return same[pick - 1] if pick else tape.Variable(value, requires_grad=True)


def _flat(outputs):
    if isinstance(outputs, tape.Variable):
        return [outputs]
    return [v for out in outputs for v in (out if isinstance(out, list) else [out])]


def _gradients(pool):
    wanted = [v for v in pool if v.requires_grad]
    if not wanted:
        return []
    loss = None
    for i, var in enumerate(wanted):
        term = (var * float(i + 1)).sum()
        loss = term if loss is None else loss + term
    leaves = [
        v
        for op in tape.get_global_tape().ops
        for v in op.input_vars()
        if v.is_leaf and v.requires_grad
    ]
    leaves = list({id(v): v for v in leaves}.values())
    return [g for g in tape.grad(loss, leaves) if g is not None]


def _chooser(data, log):
    def choose(n):
        pick = data.draw(st.integers(0, n - 1)) if n > 1 else 0
        log.append(pick)
        return pick

    return choose


def _replay(log):
    picks = iter(log)
    return lambda n: next(picks)


def _assert_same(want, got):
    assert len(want) == len(got)
    for a, b in zip(want, got, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # errstate does not reach pool threads
@SETTINGS
@given(st.data())
def test_lazy_equals_eager_and_threads_equal_program_order(data):
    log = []
    eager, _ = _record(_chooser(data, log), lazy=False)
    lazy, _ = _record(_replay(log), lazy=True)
    _assert_same(eager, lazy)
    threaded, _ = _record(_replay(log), lazy=True, threads=2)
    _assert_same(eager, threaded)


def _program(data):
    _, recording = _record(_chooser(data, []), lazy=True, keep_history=True)
    return tape.Program.from_tape(recording)


def _ancestors(block, target_ops, target_vars):
    """Brute force: the targets and every op whose output some needed op reads (from the last
    writer before the read)."""
    ops = block.ops

    def writer(name, before):
        return next((i for i in range(before - 1, -1, -1) if name in ops[i].output_names()), None)

    todo = list(target_ops) + [
        w for w in (writer(n, len(ops)) for n in target_vars) if w is not None
    ]
    found = set()
    while todo:
        index = todo.pop()
        if index in found:
            continue
        found.add(index)
        todo.extend(
            w for w in (writer(n, index) for n in ops[index].input_names()) if w is not None
        )
    return found


@SETTINGS
@given(st.data())
def test_prune_keeps_exactly_the_ancestors_of_the_targets(data):
    program = _program(data)
    block = program.global_block()
    names = list(block.vars)
    target_vars = data.draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
    target_ops = data.draw(st.lists(st.integers(0, len(block.ops) - 1), max_size=2, unique=True))
    for index in target_ops:
        block.ops[index].is_target = True
    assert set(prune(program, target_vars).kept) == _ancestors(block, target_ops, target_vars)


class _Watched(list):
    """Value slots that remember any read of a slot that was expected to hold a value."""

    def __init__(self, size, stubs):
        super().__init__([None] * size)
        self.stubs, self.bad_reads = stubs, []

    def __getitem__(self, slot):
        value = super().__getitem__(slot)
        if value is None and slot not in self.stubs:
            self.bad_reads.append(slot)
        return value


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # errstate does not reach pool threads
@SETTINGS
@given(st.data(), st.sampled_from([0, 2]))
def test_nothing_is_freed_before_its_last_use_and_everything_freeable_is_freed(data, threads):
    program = _program(data)
    block = program.global_block()
    fetch = data.draw(
        st.lists(st.sampled_from(list(block.vars)), min_size=1, max_size=3, unique=True)
    )
    for op in block.ops:
        op.is_target = op.type in ("sgd", "adam", "save")
    compiled = pipeline.compile_program(program, fetch, keep=fetch)
    order = list(compiled.analysis.analysis.pruned.program.global_block().vars)
    vals = _Watched(compiled.slots, {slot for slot, _, _ in compiled.stubs})
    for slot in compiled.inputs:
        list.__setitem__(vals, slot, program.bindings[order[slot]].value().copy())
    for slot, array in stand_ins(compiled):
        list.__setitem__(vals, slot, array)
    with np.errstate(all="ignore"):
        execute.run(compiled, vals, threads)
    assert vals.bad_reads == []
    assert all(list.__getitem__(vals, slot) is None for slot in compiled.freed)
    kept = compiled.analysis.analysis.pruned.kept
    written = {n for i in kept for n in block.ops[i].output_names()}
    assert all(
        list.__getitem__(vals, order.index(name)) is not None for name in fetch if name in written
    )


def _extended(log, attrs, shape):
    """Replays a tape, adds one scale op, and returns how many plan-cache misses running it
    cost (1 for a structure never seen, 0 for a cached one)."""
    with tape.lazy(compile=True):
        _record(_replay(log), lazy=True, compile=True)
        extra = ops.scale(tape.Variable(np.ones(shape, np.float32)), **attrs)
        before = CACHE.misses
        extra.numpy()
        return CACHE.misses - before


@SETTINGS
@given(st.data(), st.floats(0.5, 2.0).filter(lambda s: s != 1.0))
def test_the_plan_cache_hits_for_the_same_structure_and_misses_for_a_change(data, scale):
    CACHE.clear()
    log = []
    _record(_chooser(data, log), lazy=True, compile=True)
    misses = CACHE.misses
    _record(_replay(log), lazy=True, compile=True)  # new Variables, same structure
    assert CACHE.misses == misses
    assert _extended(log, {"scale": scale}, (3,)) == 1
    assert _extended(log, {"scale": scale}, (3,)) == 0
    assert _extended(log, {"scale": scale}, (4,)) == 1
    assert _extended(log, {"scale": scale * 2}, (3,)) == 1
