"""Sharded data loading for data parallel: each rank's part of every epoch (PyTorch's
DistributedSampler).

Every rank draws the same seeded permutation of the epoch and takes every ``size``-th index from
its rank on, so batch b of size B/N on each of N ranks together hold exactly batch b of size B of
one process reading the same permutation: N ranks at B/N train as one process at B.

    >>> sampler = DistributedSampler(10, rank=1, size=2, shuffle=False)
    >>> list(sampler)
    [1, 3, 5, 7, 9]
    >>> [batch.tolist() for batch in sampler.batches(2)]
    [[1, 3], [5, 7], [9]]
"""

from __future__ import annotations

import numpy as np


class DistributedSampler:
    """The indices of rank ``rank`` of ``size`` over a data set of ``length`` samples.

    Args:
        length: the number of samples.
        rank, size: this process's rank and the number of ranks (default: the world's).
        shuffle: draw a new permutation every epoch (seeded by ``seed`` and the epoch).
        seed: the seed every rank shares.
        drop_last: drop the tail that does not divide evenly (else it wraps around, so every
            rank gets the same number of samples, as PyTorch pads).
    """

    def __init__(self, length, rank=None, size=None, shuffle=True, seed=0, drop_last=False):
        if rank is None or size is None:
            from ops.communicator import world

            rank, size = world().rank, world().size
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} is outside 0 <= rank < {size}")
        self.length, self.rank, self.size = int(length), int(rank), int(size)
        self.shuffle, self.seed, self.drop_last, self.epoch = bool(shuffle), int(seed), drop_last, 0
        per_rank = self.length // size if drop_last else -(-self.length // size)
        self.per_rank, self.total = per_rank, per_rank * size

    def set_epoch(self, epoch):
        """Selects the permutation of ``epoch`` (call it every epoch, on every rank)."""
        self.epoch = int(epoch)

    def global_order(self):
        """The epoch's order of all samples, the same on every rank (padded or cut to a
        multiple of the number of ranks)."""
        if self.shuffle:
            order = np.random.default_rng((self.seed, self.epoch)).permutation(self.length)
        else:
            order = np.arange(self.length)
        if self.total > self.length:
            order = np.concatenate([order, order[: self.total - self.length]])
        return order[: self.total]

    def indices(self):
        """This rank's indices of the epoch."""
        return self.global_order()[self.rank :: self.size]

    def __iter__(self):
        return iter(self.indices().tolist())

    def __len__(self):
        return self.per_rank

    def batches(self, batch_size):
        """This rank's indices in batches of ``batch_size`` (the per-rank batch)."""
        indices = self.indices()
        return [indices[i : i + batch_size] for i in range(0, len(indices), batch_size)]


__all__ = ["DistributedSampler"]
