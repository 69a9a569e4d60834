"""Cases for the collective ops in a group of one process (the sum over one rank is the input
itself) and for send/recv against a loopback peer; tests/distributed runs them under mpiexec."""

import numpy as np

from ops import communicator
from tape.testing import OpCase


class Loopback(communicator.Communicator):
    """A test double for a second rank: ``recv`` gives what that rank 'sent' (a known pattern of
    the asked shape and dtype), ``send`` keeps what it was handed."""

    def __init__(self):
        super().__init__(None)
        self.size, self.sent = 2, []

    def send(self, xp, array, peer, tag, what="send"):
        self._check_peer(peer, what, "peer")
        self.sent.append((peer, tag, np.array(xp.asnumpy(array) if xp is not np else array)))

    def recv(self, xp, shape, dtype, peer, tag, what="recv"):
        self._check_peer(peer, what, "peer")
        return xp.asarray(pattern(shape, dtype, peer, tag))


def pattern(shape, dtype, peer, tag):
    return (np.arange(int(np.prod(shape))).reshape(shape) * 0.5 + peer + tag).astype(dtype)


LOOPBACK = Loopback()
RING = communicator.register(LOOPBACK, ring_id=7)


def _check_sent(outputs, inputs, attrs):
    """send returns nothing and handed X, unchanged, to its peer under its tag."""
    assert outputs == []
    peer, tag, array = LOOPBACK.sent[-1]
    assert (peer, tag) == (attrs["peer"], attrs["tag"])
    np.testing.assert_array_equal(array, inputs[0])
    assert array.dtype == inputs[0].dtype


def _recv_reference(shape, dtype, peer, tag, ring_id):
    return pattern(shape, dtype, peer, tag)


def _gathered(x, ring_id=0, nranks=0):
    return x.copy()


CASES = [
    # Each tensor of a bucket keeps its own dtype (one float input here: the project's mixed
    # float test would promote them all, which a bucket of independent tensors must not do).
    OpCase(
        "c_allreduce_sum",
        {"X": [(3, 4)]},
        reference=lambda xs, ring_id=0: list(xs),
        double_grad=True,
    ),
    OpCase(
        "c_allreduce_sum",
        {"X": [(2, 5), np.array([1, -2, 3], np.int32)]},
        reference=lambda xs, ring_id=0: list(xs),
        grad=False,
        name="with_int",
    ),
    OpCase(
        "c_allreduce_sum",
        {"X": [()]},
        reference=lambda xs, ring_id=0: list(xs),
        double_grad=True,
        name="0d",
    ),
    OpCase("c_broadcast", {"X": (2, 3)}, {"root": 0}, reference=lambda x, **a: x, double_grad=True),
    OpCase("c_allgather", {"X": (2, 3)}, reference=_gathered, double_grad=True),
    OpCase("c_allgather", {"X": (4,)}, {"nranks": 1}, reference=_gathered, name="explicit_nranks"),
    OpCase(
        "send", {"X": (2, 3)}, {"peer": 1, "tag": 5, "ring_id": RING}, check=_check_sent, grad=False
    ),
    OpCase(
        "recv",
        {},
        {"shape": [2, 3], "dtype": "float32", "peer": 1, "tag": 4, "ring_id": RING},
        reference=_recv_reference,
        grad=False,
        dtypes=("float32",),
    ),
    OpCase(
        "recv",
        {},
        {"shape": [3], "dtype": "float64", "peer": 1, "tag": 2, "ring_id": RING},
        reference=_recv_reference,
        grad=False,
        name="float64",
    ),
]
