"""Leaves are shared state: threads running backward on their own tapes into the same
parameters lose no gradient (PyTorch's guarantee), while their tapes stay independent."""

import threading

import numpy as np

import tape


def test_concurrent_backwards_into_shared_parameters_lose_no_gradient():
    threads, steps = 4, 100
    w = tape.Variable(np.zeros(16, np.float32), requires_grad=True)
    barrier = threading.Barrier(threads)

    def work():
        barrier.wait()
        for _ in range(steps):
            tape.reset_global_tape()
            tape.backward((w * 2.0).sum() + w.sum() * 2.0)  # d/dw = 4 per step

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    np.testing.assert_array_equal(w.grad().numpy(), np.full(16, 4.0 * threads * steps))


def test_concurrent_lazy_backwards_lose_no_gradient_either():
    threads, steps = 2, 40
    w = tape.Variable(np.zeros(4, np.float32), requires_grad=True)
    barrier = threading.Barrier(threads)

    def work():
        barrier.wait()
        with tape.lazy():
            for _ in range(steps):
                tape.reset_global_tape()
                tape.backward((w * 3.0).sum())
                w.grad().numpy()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    np.testing.assert_array_equal(w.grad().numpy(), np.full(4, 3.0 * threads * steps))
