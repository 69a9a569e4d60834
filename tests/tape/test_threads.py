"""Each thread has its own global tape: two threads train independently and get exactly what
they get when training alone."""

import threading

import numpy as np

import ops
import tape


def _train(seed, steps=30):
    rng = np.random.default_rng(seed)
    w = tape.Variable(rng.standard_normal((4, 2)), requires_grad=True)
    tapes = []  # hold the tapes themselves: ids of collected objects get reused
    for _ in range(steps):
        tape.reset_global_tape()
        tapes.append(tape.get_global_tape())
        x = tape.Variable(rng.standard_normal((8, 4)))
        loss = ops.mean(ops.relu(x @ w))
        tape.backward(loss)
        with tape.no_grad():
            w.set_value(w.numpy() - 0.1 * w.grad().numpy())
        w.clear_grad()
    return w.numpy(), tapes


def test_two_threads_train_independently_on_their_own_tapes():
    alone = [_train(1)[0], _train(2)[0]]
    results, barrier = {}, threading.Barrier(2)

    def worker(seed):
        barrier.wait()
        results[seed] = _train(seed)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(results[1][0], alone[0])
    np.testing.assert_array_equal(results[2][0], alone[1])
    shared = {id(t) for t in results[1][1]} & {id(t) for t in results[2][1]}
    assert not shared  # no tape was shared between the threads


def test_no_grad_in_one_thread_does_not_affect_another():
    seen = {}
    inside, done = threading.Event(), threading.Event()

    def frozen():
        with tape.no_grad():
            inside.set()
            done.wait(5)

    t = threading.Thread(target=frozen)
    t.start()
    inside.wait(5)
    w = tape.Variable(np.ones(2), requires_grad=True)
    seen["requires_grad"] = (w * 2.0).requires_grad
    done.set()
    t.join()
    assert seen["requires_grad"]
