"""Matrix products: the seed's ``mul`` (2-D product after flattening), batched ``matmul`` and the
``outer`` product of two vectors."""

from __future__ import annotations

import math
import time

import numpy as np

from ops import batching
from ops.blas import single_threaded, single_threaded_open
from ops.infer import broadcast_shapes, result_dtype
from ops.registry import Attr, register
from tape.errors import ShapeError
from tape.tape import apply

# Between UNTHREADED and this many multiply-adds, whether a product runs on one BLAS thread or
# on all is measured (``ThreadChoice``): on two cores other processes keep busy, waking a second
# thread costs more than it saves (a 16x64 @ 64x512 product, as in an LSTM step, was several
# times slower on two threads than on one), on two idle cores it halves the time (16x128 @
# 128x512: 27 -> 15 us; the LSTM benchmark's eager step 10.6 -> 7.7 ms). Above it, all threads.
SMALL_PRODUCT = 1 << 21
# Below this many multiply-adds OpenBLAS itself runs a product on one thread (its thresholds:
# 9216 matrix elements for a matrix-vector product, 2^18 multiply-adds for a matrix product),
# so switching to one thread only costs its two library calls (~0.85 us a product measured
# here, nearly as much as a 1x32 @ 32x32 product itself: the nodes of a per-example tree).
UNTHREADED = 1 << 13


def product(xp, x, y):
    """x @ y, with the BLAS choices measured fastest here (numpy with OpenBLAS, 2 cores).

    A product below ``SMALL_PRODUCT`` multiply-adds runs on one BLAS thread or on all, as
    ``ThreadChoice`` measures faster (on one, below ``UNTHREADED``). A small product of a short
    X and a transposed weight view (``x @ W.T``, as in an LSTM step with PyTorch's weight
    layout) is computed as ``(W @ x.T).T``:
    OpenBLAS's transposed-B path was ~2x slower there. Large products keep the plain form: their
    F-ordered result made the next elementwise op (relu_grad in an MLP backward) 3x slower than
    the product gained.

    An outer product (contraction over one element: ``x_i^T @ g_i``, a weight's gradient from
    one example) is a broadcast multiply, 3-5x faster than the BLAS call here and bit-identical
    (each element is one product either way).
    """
    if x.ndim == 2 and y.ndim == 2 and xp is np:  # (the common case first: fewer tests)
        rows, inner = x.shape
        columns = y.shape[1]
        if inner == 1 == y.shape[0]:
            return x * y
        macs = rows * inner * columns
        if macs >= SMALL_PRODUCT:
            return x @ y
        if macs < UNTHREADED:
            return _small_product(x, y)
        return _CHOICES[macs.bit_length()].run(_small_product, x, y)
    if x.ndim >= 2 and y.ndim >= 2 and x.shape[-1] == 1 == y.shape[-2]:
        return x * y
    if xp is not np:
        return xp.matmul(x, y)
    macs = x.size * (y.shape[-1] if y.ndim > 1 else 1)
    if macs < UNTHREADED:
        return xp.matmul(x, y)
    if macs < SMALL_PRODUCT:
        return _CHOICES[macs.bit_length()].run(np.matmul, x, y)
    return xp.matmul(x, y)


class ThreadChoice:
    """Whether products of one size class (multiply-adds within a power of two) run on one BLAS
    thread or on all: measured, as the machine's load decides (``SMALL_PRODUCT``'s comment).
    The first ``2 * PROBES`` products alternate, then the faster by median runs for ``KEEP``
    products, then both are probed again. Inside a ``single_threaded`` block (a lazy plan's pool
    workers) a product runs as the block says, untimed."""

    PROBES, KEEP = 3, 512
    __slots__ = ("one", "every", "threaded", "left")

    def __init__(self):
        self.one, self.every, self.threaded, self.left = [], [], False, 0

    def run(self, alone, x, y):
        """x @ y: with ``alone`` (the single-threaded product) on one thread, plainly on all."""
        if self.left > 0:
            self.left -= 1
            if self.threaded:
                return x @ y
            if single_threaded_open():
                return alone(x, y)
            with single_threaded():
                return alone(x, y)
        if single_threaded_open():
            return alone(x, y)
        threaded = len(self.every) < len(self.one)
        started = time.perf_counter()
        if threaded:
            out = x @ y
        else:
            with single_threaded():
                out = alone(x, y)
        (self.every if threaded else self.one).append(time.perf_counter() - started)
        if len(self.one) >= self.PROBES and len(self.every) >= self.PROBES:
            middle = self.PROBES // 2
            self.threaded = sorted(self.every)[middle] < sorted(self.one)[middle]
            self.one, self.every, self.left = [], [], self.KEEP
        return out


_CHOICES = [ThreadChoice() for _ in range(SMALL_PRODUCT.bit_length() + 1)]


def _small_product(x, y):
    if x.shape[0] < y.shape[1] and not y.flags.c_contiguous and y.flags.f_contiguous:
        return (y.T @ x.T).T
    return x @ y


def _flat2d(shape, num_col_dims):
    return math.prod(shape[:num_col_dims]), math.prod(shape[num_col_dims:])


def _infer_mul(attrs, x, y):
    xn, yn = attrs["x_num_col_dims"], attrs["y_num_col_dims"]
    if not 1 <= xn < max(len(x.shape), 2) or not 1 <= yn < max(len(y.shape), 2):
        raise ShapeError(
            None,
            "num_col_dims out of range",
            expected="1 <= x_num_col_dims < X.ndim and 1 <= y_num_col_dims < Y.ndim",
            actual=f"x_num_col_dims={xn}, y_num_col_dims={yn}, "
            f"X.shape={x.shape}, Y.shape={y.shape}",
        )
    (_, xk), (yk, _) = _flat2d(x.shape, xn), _flat2d(y.shape, yn)
    if xk != yk:
        raise ShapeError(
            None,
            "inner dimensions differ",
            expected="prod(X.shape[x_num_col_dims:]) == prod(Y.shape[:y_num_col_dims])",
            actual=f"{xk} != {yk} (X.shape={x.shape}, Y.shape={y.shape})",
        )
    return tuple(x.shape[:xn]) + tuple(y.shape[yn:]), result_dtype(x, y)


@register(
    "mul",
    inputs=("X", "Y"),
    attrs={
        "x_num_col_dims": Attr("int", 1, check=lambda v: v >= 1, rule=">= 1"),
        "y_num_col_dims": Attr("int", 1, check=lambda v: v >= 1, rule=">= 1"),
    },
    infer=_infer_mul,
)
def mul(xp, attrs, x, y):
    """Out = flatten(X) @ flatten(Y), X flattened to 2-D at ``x_num_col_dims`` (Y likewise).

    Out's shape is X.shape[:x_num_col_dims] + Y.shape[y_num_col_dims:].
    dX = dOut @ Y^T, dY = X^T @ dOut (on the flattened forms).
    """
    xn, yn = attrs["x_num_col_dims"], attrs["y_num_col_dims"]
    x2 = x if x.ndim == 2 and xn == 1 else x.reshape(_flat2d(x.shape, xn))
    y2 = y if y.ndim == 2 and yn == 1 else y.reshape(_flat2d(y.shape, yn))
    out = product(xp, x2, y2)
    return out.reshape(x.shape[:xn] + y.shape[yn:]) if out.ndim != xn + y.ndim - yn else out


@mul.gradient
def _(g):
    from ops.shape import reshape

    x, y = g.inputs
    (gout,) = g.gouts
    xn, yn = g.attrs["x_num_col_dims"], g.attrs["y_num_col_dims"]
    x2 = x if len(x.shape) == 2 else reshape(x, shape=_flat2d(x.shape, xn))
    y2 = y if len(y.shape) == 2 else reshape(y, shape=_flat2d(y.shape, yn))
    rows, cols = _flat2d(x.shape, xn)[0], _flat2d(y.shape, yn)[1]
    g2 = gout if len(gout.shape) == 2 else reshape(gout, shape=(rows, cols))
    gx = gy = None
    if g.needs(0):
        gx = apply(matmul, (g2, y2), _NT)
        gx = gx if gx.shape == x.shape else reshape(gx, shape=x.shape)
    if g.needs(1):
        gy = apply(matmul, (x2, g2), _TN)
        gy = gy if gy.shape == y.shape else reshape(gy, shape=y.shape)
    return gx, gy


_NT = {"transpose_x": False, "transpose_y": True}
_TN = {"transpose_x": True, "transpose_y": False}


def _infer_matmul(attrs, x, y):
    xs, ys = x.shape, y.shape
    if (  # (a vector or matrix times a matrix, untransposed: the common case, kept short)
        len(ys) == 2
        and 0 < len(xs) <= 2
        and xs[-1] == ys[0]
        and not attrs["transpose_x"]
        and not attrs["transpose_y"]
    ):
        dtype = x.dtype if x.dtype is y.dtype else result_dtype(x, y)
        return (*xs[:-1], ys[1]), dtype
    xs, ys = list(xs), list(ys)
    if not xs or not ys:
        raise ShapeError(
            None,
            "inputs must have at least one dimension",
            actual=f"X.shape={x.shape}, Y.shape={y.shape}",
        )
    if attrs["transpose_x"] and len(xs) >= 2:
        xs[-1], xs[-2] = xs[-2], xs[-1]
    if attrs["transpose_y"] and len(ys) >= 2:
        ys[-1], ys[-2] = ys[-2], ys[-1]
    x_vec, y_vec = len(xs) == 1, len(ys) == 1
    xs = [1] + xs if x_vec else xs
    ys = ys + [1] if y_vec else ys
    if xs[-1] != ys[-2]:
        raise ShapeError(
            None,
            "inner dimensions differ",
            expected="X.shape[-1] == Y.shape[-2] (after transpose flags)",
            actual=f"{xs[-1]} != {ys[-2]} (X.shape={x.shape}, Y.shape={y.shape})",
        )
    batch = broadcast_shapes(None, tuple(xs[:-2]), tuple(ys[:-2]))
    shape = batch + ((xs[-2],) if not x_vec else ()) + ((ys[-1],) if not y_vec else ())
    return shape, result_dtype(x, y)


def _t(a):
    return a.swapaxes(-1, -2) if a.ndim >= 2 else a


@register(
    "matmul",
    inputs=("X", "Y"),
    attrs={
        "transpose_x": Attr("bool", False),
        "transpose_y": Attr("bool", False),
    },
    infer=_infer_matmul,
    batch=batching.MATMUL,
)
def matmul(xp, attrs, x, y):
    """Out = op(X) @ op(Y), op transposing the last two axes when its flag is set; batch axes
    broadcast and 1-D inputs act as vectors, as in numpy.matmul.

    dX = dOut @ op(Y)^T and dY = op(X)^T @ dOut (transposed back, summed over broadcast axes).
    """
    if attrs["transpose_x"]:
        x = _t(x)
    if attrs["transpose_y"]:
        y = _t(y)
    return product(xp, x, y)


@matmul.gradient
def _(g):
    from ops.reduce import sum_to
    from ops.shape import reshape, unsqueeze

    x, y = g.inputs
    (gout,) = g.gouts
    x_vec, y_vec = len(x.shape) == 1, len(y.shape) == 1
    tx = g.attrs["transpose_x"] and not x_vec
    ty = g.attrs["transpose_y"] and not y_vec
    if x_vec != y_vec and len(y.shape if x_vec else x.shape) == 2:
        return _vector_matrix_gradient(g, x, y, gout, tx, ty, x_vec)
    xm = unsqueeze(x, axes=[0]) if x_vec else x
    ym = unsqueeze(y, axes=[1]) if y_vec else y
    gm = gout
    if x_vec:
        gm = unsqueeze(gm, axes=[len(gm.shape) - (0 if y_vec else 1)])
    if y_vec:
        gm = unsqueeze(gm, axes=[len(gm.shape)])
    gx = gy = None
    if g.needs(0):
        # d op(X) = dOut @ op(Y)^T; dX is its transpose when transpose_x.
        gx = (
            apply(matmul, (ym, gm), {"transpose_x": ty, "transpose_y": True})
            if tx
            else apply(matmul, (gm, ym), {"transpose_x": False, "transpose_y": not ty})
        )
        gx = sum_to(gx, xm.shape)
        gx = reshape(gx, shape=x.shape) if x_vec else gx
    if g.needs(1):
        gy = (
            apply(matmul, (gm, xm), {"transpose_x": True, "transpose_y": tx})
            if ty
            else apply(matmul, (xm, gm), {"transpose_x": not tx, "transpose_y": False})
        )
        gy = sum_to(gy, ym.shape)
        gy = reshape(gy, shape=y.shape) if y_vec else gy
    return gx, gy


def _vector_matrix_gradient(g, x, y, gout, tx, ty, x_vec):
    """The gradients of ``x @ op(W)`` or ``op(W) @ y`` for a vector and a 2-D ``W`` (a layer
    applied to one example): the vector's is one vector-matrix product and the matrix's one
    ``outer`` op, two ops where the general rule records five."""
    vector, matrix = (x, y) if x_vec else (y, x)
    flipped = ty if x_vec else tx  # whether op(W) transposes the stored matrix
    # d vector = gout contracted with op(W) over op(W)'s output axis
    gv = None
    if g.needs(0 if x_vec else 1):
        gv = apply(matmul, (gout, matrix), {"transpose_x": False, "transpose_y": flipped != x_vec})
    gw = None
    if g.needs(1 if x_vec else 0):
        # d op(W) = outer(x, gout) for x @ op(W), outer(gout, y) for op(W) @ y; d W is that,
        # transposed back when op transposes
        first, second = (vector, gout) if x_vec != flipped else (gout, vector)
        gw = apply(outer, (first, second), {})
    return (gv, gw) if x_vec else (gw, gv)


def _infer_outer(attrs, x, y):
    if len(x.shape) != 1 or len(y.shape) != 1:
        raise ShapeError(
            None,
            "both inputs must be vectors (1-D)",
            expected="X.shape == (m,) and Y.shape == (n,)",
            actual=f"X.shape={tuple(x.shape)}, Y.shape={tuple(y.shape)}",
            hint="for matrices use matmul, or reshape them to vectors first",
        )
    return (x.shape[0], y.shape[0]), result_dtype(x, y)


@register("outer", inputs=("X", "Y"), infer=_infer_outer, batch=batching.ROWS_FORWARD)
def outer(xp, attrs, x, y):
    """Out[i, j] = X[i] * Y[j] for vectors X (m,) and Y (n,) (torch.outer, numpy.outer).

    dX = dOut @ Y and dY = dOut^T @ X: one product each. It is the weight gradient of a layer
    applied to one example (``_vector_matrix_gradient``), one op where unsqueezing both vectors
    into a 1-deep product took three. The kernel broadcasts over leading axes (each element is
    one multiply, as in BLAS, so results are bit-identical to ``X[:, None] @ Y[None, :]``), which
    is how autobatching runs a group: stacked vectors (n, m) and (n, k) give (n, m, k).
    """
    return x[..., :, None] * y[..., None, :]


@outer.gradient
def _(g):
    x, y = g.inputs
    (gout,) = g.gouts
    gx = apply(matmul, (gout, y), matmul.defaults) if g.needs(0) else None
    gy = apply(matmul, (x, gout), matmul.defaults) if g.needs(1) else None
    return gx, gy
