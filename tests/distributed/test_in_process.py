"""The distributed pieces that need no second process: the engine's gradient hook, the program
passes (structure, text round trip, a world of one), bucketing, the sampler and the errors."""

import numpy as np
import pytest

import layers
import optim
import tape
from ops import communicator
from optim.data_parallel import _make_buckets
from tape.passes import pserver
from tape.passes.data_parallel import insert_allreduce
from tests.distributed import worker
from tests.ops.cases_collective import RING

# ---- the engine hook --------------------------------------------------------------------------


def _chain():
    tape.seed(0)
    first, second = layers.Linear(3, 4, act="tanh"), layers.Linear(4, 2)
    return first, second


def test_grad_ready_fires_once_per_leaf_as_soon_as_its_gradient_is_final():
    first, second = _chain()
    tape.reset_global_tape()
    t = tape.get_global_tape()
    seen = []
    t.on_grad_ready(lambda var, g: seen.append((var, len(t.ops), g.numpy().copy())))
    loss = second(first(tape.Variable(np.ones((5, 3), np.float32)))).sum()
    tape.backward(loss)
    order = [id(var) for var, _, _ in seen]
    assert sorted(order[:2]) == sorted([id(second.weight), id(second.bias)])
    assert sorted(order[2:]) == sorted([id(first.weight), id(first.bias)])
    for var, _, g in seen:
        np.testing.assert_array_equal(var.grad().numpy(), g)
    # The last layer's gradients are final before backward has reached the first layer: the
    # scan releases ops as it goes, so fewer ops were left when they were announced.
    left = {id(var): count for var, count, _ in seen}
    assert left[id(second.weight)] > left[id(first.weight)]


def test_a_hook_may_replace_a_gradient_now_or_once_the_scan_has_ended():
    first, second = _chain()
    tape.reset_global_tape()
    calls = []

    def hook(var, g):
        if var is second.bias:
            return tape.Variable(g.numpy() * 2)
        if var is first.bias:
            return lambda: calls.append(var) or tape.Variable(g.numpy() * 3)
        return None

    tape.get_global_tape().on_grad_ready(hook)
    tape.backward(second(first(tape.Variable(np.ones((5, 3), np.float32)))).sum())
    np.testing.assert_array_equal(second.bias.grad().numpy(), np.full(2, 10.0, np.float32))
    assert calls == [first.bias]
    expected = tape.grad(
        second(first(tape.Variable(np.ones((5, 3), np.float32)))).sum(), [first.bias]
    )
    np.testing.assert_allclose(first.bias.grad().numpy(), 3 * expected[0].numpy(), rtol=1e-6)


def test_a_tape_without_hooks_has_nothing_to_check():
    assert tape.Tape()._grad_hooks == []


# ---- the program passes -----------------------------------------------------------------------


def _program(opt=None, ranks=1):
    net = worker.model()
    return worker.record_step(net, opt or optim.SGD(lr=0.1), ranks), net


def test_insert_allreduce_reduces_each_bucket_after_its_last_producer():
    program, _ = _program()
    dp = insert_allreduce(program, 2, bucket_cap_mb=(3 * 16 + 3) * 8 / 2**20)
    ops = dp.global_block().ops
    reduces = [i for i, op in enumerate(ops) if op.type == "c_allreduce_sum"]
    # the last layer's weight and bias fit one bucket; the first layer's do not fit together
    assert [len(ops[i].inputs["X"]) for i in reduces] == [2, 1, 1]
    written = {n: i for i, op in enumerate(ops[: reduces[0]]) for n in op.output_names()}
    assert max(written[n] for n in ops[reduces[0]].inputs["X"]) == reduces[0] - 1
    assert reduces[-1] < min(i for i, op in enumerate(ops) if op.type == "sgd")
    # the first layer's backward comes after the first reduction: they can overlap
    assert reduces[0] < [op.type for op in ops].index("tanh_grad")
    for op in ops:
        if op.type == "sgd":
            assert op.inputs["Grad"][0].endswith("@AVG")
            scale = next(o for o in ops if o.outputs.get("Out") == op.inputs["Grad"])
            assert scale.type == "scale" and scale.attrs["scale"] == 0.5
    assert tape.Program.from_text(dp.to_text()) == dp


def test_in_a_world_of_one_the_transformed_program_trains_as_the_original():
    results = []
    for transform in (False, True):
        program, net = _program(optim.Adam(lr=0.01))
        if transform:
            program = insert_allreduce(program, 1)
        targets = [op.name for op in program.global_block().ops if op.type == "adam"]
        for x, labels in worker.batches(5, 0, 1):
            feed = {"x": x, "labels": labels}
            tape.Executor(threads=2).run(program, feed=feed, fetch_list=["loss"], targets=targets)
        results.append([p.numpy() for p in net.params()])
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


def test_pserver_split_places_by_size_and_orders_the_transfers():
    program, _ = _program(ranks=2)
    parts = pserver.split(program, trainers=2, pservers=2)
    sizes = {n: np.prod(program.global_block().var(n).shape) for n in parts.placement}
    largest = max(sizes, key=sizes.get)
    assert sum(1 for s in parts.placement.values() if s == parts.placement[largest]) == 1
    trainer = parts.trainer.global_block().ops
    assert not any(op.type == "sgd" for op in trainer)
    sends = [op for op in trainer if op.type == "send"]
    recvs = [op for op in trainer if op.type == "recv"]
    assert len(sends) == len(recvs) == 4 and all(op.is_target for op in sends + recvs)
    assert trainer[-4:] == recvs  # new values arrive after every gradient left
    assert {op.attrs["peer"] for op in sends} == {2, 3}
    for server in parts.pservers:
        kinds = [op.type for op in server.global_block().ops]
        first_send = kinds.index("send")
        assert set(kinds[:first_send]) == {"recv", "sum", "scale", "sgd"}
        assert set(kinds[first_send:]) == {"send"}
        assert tape.Program.from_text(server.to_text()) == server
    assert tape.Program.from_text(parts.trainer.to_text()) == parts.trainer


def test_buckets_follow_reverse_order_dtype_and_the_size_cap():
    params = [tape.Variable(np.zeros(n, dtype)) for n, dtype in [(4, "f4"), (4, "f4"), (2, "f8")]]
    buckets = _make_buckets([(str(i), p) for i, p in enumerate(params)], cap_bytes=16)
    assert [b.names for b in buckets] == [["2"], ["1"], ["0"]]
    buckets = _make_buckets([(str(i), p) for i, p in enumerate(params)], cap_bytes=32)
    assert [b.names for b in buckets] == [["2"], ["1", "0"]]


# ---- the sampler ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 3])
def test_the_ranks_batches_together_are_the_single_process_batch(size):
    length, per_rank = 30, 2
    whole = optim.DistributedSampler(length, 0, 1, seed=5, drop_last=True)
    whole.set_epoch(3)
    parts = [optim.DistributedSampler(length, r, size, seed=5, drop_last=True) for r in range(size)]
    for part in parts:
        part.set_epoch(3)
    global_batches = whole.batches(per_rank * size)
    for step, batch in enumerate(global_batches[: len(parts[0].batches(per_rank))]):
        joined = sorted(np.concatenate([p.batches(per_rank)[step] for p in parts]).tolist())
        assert joined == sorted(batch.tolist())
    assert sorted(np.concatenate([p.indices() for p in parts]).tolist()) == sorted(
        whole.global_order()[: parts[0].total].tolist()
    )


def test_the_sampler_is_reproducible_and_changes_with_the_epoch():
    a, b = optim.DistributedSampler(20, 1, 2, seed=1), optim.DistributedSampler(20, 1, 2, seed=1)
    assert list(a) == list(b)
    b.set_epoch(1)
    assert list(a) != list(b) and sorted(a.global_order()) == sorted(b.global_order())
    padded = optim.DistributedSampler(5, 1, 2, shuffle=False)
    assert list(padded) == [1, 3, 0] and len(padded) == 3
    with pytest.raises(ValueError, match="rank 2 is outside 0 <= rank < 2"):
        optim.DistributedSampler(5, 2, 2)


# ---- errors -----------------------------------------------------------------------------------


def test_a_peer_outside_the_group_is_named():
    import ops

    with pytest.raises(communicator.DistributedError) as err:
        ops.send(tape.Variable(np.ones(2)), peer=5, ring_id=RING)
    assert "op 'send': peer rank is outside the group" in str(err.value)
    assert "expected: 0 <= peer < 2" in str(err.value) and "actual:   5" in str(err.value)


def test_an_unknown_ring_is_named():
    import ops

    with pytest.raises(communicator.DistributedError, match="no communicator is registered as"):
        ops.c_allreduce_sum([tape.Variable(np.ones(2))], ring_id=41)


def test_allgather_checks_its_declared_group_size():
    import ops

    with pytest.raises(communicator.DistributedError) as err:
        ops.c_allgather(tape.Variable(np.ones(2)), nranks=3)
    assert "op 'c_allgather'" in str(err.value) and "attribute 'nranks' differs" in str(err.value)
    assert "expected: 1" in str(err.value) and "actual:   3" in str(err.value)


def test_ddp_in_a_world_of_one_trains_as_the_bare_model():
    bare, _ = worker.train_eager("momentum", 5)
    plain = worker.model()
    opt = optim.Momentum(lr=0.1, momentum=0.9)
    for x, labels in worker.batches(5, 0, 1):
        tape.reset_global_tape()
        tape.backward(layers.CrossEntropyLoss()(plain(tape.Variable(x)), labels))
        opt(plain.params())
    for a, b in zip(bare.params(), plain.params(), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert [n for n, _ in bare.named_params()] == [n for n, _ in plain.named_params()]


class _Recurrence(layers.Function):
    def __init__(self):
        super().__init__()
        self.weight = self.create_parameter((3, 3), lambda s, d: np.eye(3, dtype=d) * 0.5)

    def forward(self, h):
        for _ in range(3):
            h = h @ self.weight
        return h


class _Loop(layers.Function):
    """The output layer is declared first, the loop weight (final only at the end) last."""

    def __init__(self):
        super().__init__()
        self.out = layers.Linear(3, 2)
        self.loop = _Recurrence()

    def forward(self, x):
        return self.out(self.loop(x))


def test_buckets_follow_the_order_the_first_backward_finished_the_gradients():
    net = optim.DistributedDataParallel(_Loop(), bucket_cap_mb=1e-6)
    names = lambda: [b.names for b in net.reducer.buckets]  # noqa: E731
    assert names() == [["loop.weight"], ["out.bias"], ["out.weight"]]  # declared order, reversed
    for _ in range(2):
        tape.reset_global_tape()
        tape.backward(net(tape.Variable(np.ones((4, 3), np.float32))).sum())
        optim.SGD(lr=0.1)(net.params())
    assert sorted(names()[:2]) == [["out.bias"], ["out.weight"]]
    assert names()[2] == ["loop.weight"]
