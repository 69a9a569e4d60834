"""Kernels' shortcuts for large broadcast views (a sum's gradient: ones broadcast to its input's
shape), which hold a few values but read as the full shape.

A unary op on such a view is the op on the values it came from, broadcast again
(``broadcast_source``); a product with a view of ones is the other factor (``times_one``). Each
saves a pass over the full shape -- 16 MiB written per op on the ``chain`` workload's backward --
and gives the same values bit for bit (x * 1 is x for every float). The results are read-only
views, as broadcast views always are, so no kernel writes into them in place (the engine's
in-place paths test ``flags.writeable``).
"""

from __future__ import annotations

import numpy as np

from ops import buffers


def broadcast_source(x):
    """The smallest array a large numpy ``x`` is a broadcast view of (its zero-stride axes cut
    to length 1), or None where it is not one."""
    if x.__class__ is not np.ndarray or x.nbytes < buffers.MIN_BYTES or 0 not in x.strides:
        return None
    return x[tuple(slice(0, 1) if s == 0 else slice(None) for s in x.strides)]


def times_one(x, y):
    """``x * y`` as a read-only view of one factor, where the other is a large broadcast view of
    exactly 1 and the product has that factor's shape and dtype; else None."""
    for one, other in ((x, y), (y, x)):
        source = broadcast_source(one)
        if (
            source is not None
            and source.size == 1
            and other.__class__ is np.ndarray
            and other.shape == one.shape
            and other.dtype == one.dtype
            and source.reshape(()) == 1
        ):
            view = other.view()
            view.flags.writeable = False
            return view
    return None


__all__ = ["broadcast_source", "times_one"]
