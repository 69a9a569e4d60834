"""Products that contract or combine axes: einsum (Einstein summation over any number of
operands, with PyTorch's equation rules, and a gradient that is einsum again), kron (the
Kronecker product) and cross (the 3-vector cross product), whose gradients are their own ops.

Equations follow torch.einsum: letters a-z and A-Z label axes, ``...`` stands for broadcast
leading axes, a label repeated within an operand takes a diagonal, labels absent from the output
are summed, and without ``->`` the output is ``...`` followed by the labels used exactly once, in
sorted order (uppercase first). A label (or ``...`` axis) of extent 1 broadcasts against the
same label's extent elsewhere; ``...`` axes missing from an explicit output are summed. One
extension, which the gradients need: a label may repeat in the output, which places the result
on that diagonal of zeros (torch rejects such equations).
"""

from __future__ import annotations

import functools
import math
import string

import numpy as np

from ops.compose import mul
from ops.infer import broadcast_shapes, normalize_axis, require_real, result_dtype
from ops.registry import Attr, register
from ops.xp import promote
from tape.errors import AttrError, ShapeError
from tape.tape import apply

_LETTERS = string.ascii_letters


def _attr_error(headline, equation, hint=None):
    return AttrError(None, headline, actual=f"equation={equation!r}", hint=hint)


def _split_terms(equation, count):
    """The operands' terms and the output term (None when implicit), checked for syntax."""
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != count:
        raise _attr_error(
            f"the equation has {len(terms)} operand term(s) but {count} operand(s) were given",
            equation,
        )
    for term in terms + ([rhs] if arrow else []):
        rest = term.replace("...", "", 1)
        if "->" in rhs or any(c not in _LETTERS for c in rest):
            raise _attr_error(
                "an equation term holds something other than letters and one '...'",
                equation,
                hint="terms are letters a-z, A-Z and at most one '...', as in 'bij,bjk->bik'",
            )
    return terms, (rhs if arrow else None)


def _expand(term, ndim, ellipsis, equation, k):
    """The term with its '...' replaced by the letters of its broadcast axes."""
    letters = len(term.replace("...", ""))
    extra = ndim - letters
    if extra < 0 or (extra and "..." not in term):
        raise ShapeError(
            None,
            f"operand {k} has {ndim} axes but its term '{term}' labels {letters}",
            expected="one label per axis, or a '...' for the rest",
            actual=f"equation={equation!r}",
        )
    return term.replace("...", ellipsis[len(ellipsis) - extra :]) if "..." in term else term


@functools.lru_cache(maxsize=512)
def parse(equation, shapes):
    """(operand subscripts, output subscripts, label -> extent) with '...' spelled out."""
    terms, output = _split_terms(equation, len(shapes))
    used = set(equation)
    spare = [c for c in _LETTERS if c not in used]
    width = max(len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes))
    if width > len(spare):
        raise _attr_error("too many axes for einsum's 52 labels", equation)
    ellipsis = "".join(spare[:width])
    subs = [
        _expand(t, len(s), ellipsis, equation, k) for k, (t, s) in enumerate(zip(terms, shapes))
    ]
    sizes = _sizes(subs, shapes, equation, ellipsis)
    if output is None:
        once = sorted(c for c in sizes if c not in ellipsis and "".join(subs).count(c) == 1)
        out = ellipsis + "".join(once)
    else:
        out = output.replace("...", ellipsis)
        missing = [c for c in out if c not in sizes]
        if missing:
            raise _attr_error(f"output label '{missing[0]}' labels no operand axis", equation)
    return tuple(subs), out, sizes


def _sizes(subs, shapes, equation, ellipsis):
    sizes = {}
    for k, (sub, shape) in enumerate(zip(subs, shapes)):
        mine = {}
        for label, n in zip(sub, shape):
            if mine.setdefault(label, n) != n:
                raise ShapeError(
                    None,
                    f"{_name(label, ellipsis)} repeats in operand {k} over axes of "
                    "different extents",
                    expected="equal extents (a diagonal of a square block)",
                    actual=f"operand {k}.shape={shape}, equation={equation!r}",
                )
            seen = sizes.get(label)
            if seen is None or seen == 1:
                sizes[label] = n
            elif n not in (1, seen):
                raise ShapeError(
                    None,
                    f"{_name(label, ellipsis)} has extent {n} in operand {k} but {seen} before",
                    expected="equal extents, or 1 (which broadcasts)",
                    actual=f"shapes={list(shapes)}, equation={equation!r}",
                )
    return sizes


def _name(label, ellipsis):
    if label in ellipsis:
        return f"'...' axis {ellipsis.index(label) - len(ellipsis)}"
    return f"label '{label}'"


def canonical(subs, shapes, sizes):
    """Per operand: the subscripts and shape without its broadcast axes (extent 1 where the
    label's extent is not), which a product then treats as constant along that label."""
    kept = []
    for sub, shape in zip(subs, shapes):
        axes = [i for i, (c, n) in enumerate(zip(sub, shape)) if n == sizes[c]]
        kept.append(("".join(sub[i] for i in axes), tuple(shape[i] for i in axes)))
    return kept


def _infer_einsum(attrs, xs):
    if not xs:
        raise ShapeError(None, "einsum needs at least one operand", actual="X == []")
    _, out, sizes = parse(attrs["equation"], tuple(x.shape for x in xs))
    dtype = xs[0].dtype
    for x in xs[1:]:
        dtype = result_dtype(_Dtyped(dtype), x)
    return tuple(sizes[c] for c in out), dtype


class _Dtyped:
    __slots__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = dtype


@register(
    "einsum",
    inputs=("X*",),
    attrs={"equation": Attr("str", required=True)},
    infer=_infer_einsum,
)
def einsum(xp, attrs, xs):
    """Out = the Einstein sum ``equation`` of the operands X (torch.einsum rules; see the module
    docstring).  dX[k] = einsum of dOut with the other operands onto X[k]'s labels (see
    ``_operand_grad``).

    >>> import numpy as np, tape, ops
    >>> a = tape.Variable(np.arange(6.0).reshape(2, 3))
    >>> ops.einsum([a, a], equation="ij,ij->i").numpy()
    array([ 5., 50.])
    >>> ops.einsum([tape.Variable(np.eye(3))], equation="ii").numpy()  # the trace
    array(3.)
    """
    subs, out, sizes = parse(attrs["equation"], tuple(x.shape for x in xs))
    forms = canonical(subs, [x.shape for x in xs], sizes)
    dtype = np.result_type(*(x.dtype for x in xs))  # computed in it (not pairwise, as optimize)
    arrays = [
        (x if x.shape == shape else x.reshape(shape)).astype(dtype, copy=False)
        for x, (_, shape) in zip(xs, forms)
    ]
    unique = "".join(dict.fromkeys(out))
    equation = ",".join(sub for sub, _ in forms) + "->" + unique
    value = xp.einsum(equation, *arrays, optimize=_optimize(arrays, sizes))
    if unique == out:
        return value
    # Repeated output labels: the result sits on that diagonal of zeros.
    full = xp.zeros(tuple(sizes[c] for c in out), dtype=value.dtype)
    index = tuple(
        xp.arange(sizes[c]).reshape(tuple(sizes[c] if d == c else 1 for d in unique)) for c in out
    )
    full[index] = value
    return full


# numpy's einsum loops in C unless asked to optimize, which plans a contraction order and hands
# pairs to BLAS (tensordot) but costs ~35 us to plan. Measured here: a 16x64x64 batched product
# takes 4.1 ms looped and 0.23 ms optimized; a 4x5 by 5x3 product 7 us looped, 43 us optimized.
# So: optimize for three or more operands (the order matters) and for large loop nests.
_LOOPED_LIMIT = 1 << 14


def _optimize(arrays, sizes):
    return len(arrays) > 2 or (len(arrays) == 2 and math.prod(sizes.values()) > _LOOPED_LIMIT)


@einsum.gradient
def _(g):
    (xs,), (gout,) = g.inputs, g.gouts
    return (
        [
            _operand_grad(xs, k, gout, g.attrs["equation"]) if xs[k].requires_grad else None
            for k in range(len(xs))
        ],
    )


def _operand_grad(xs, k, gout, equation):
    """d<gout, einsum(xs)>/d xs[k] as one einsum of gout and the other operands.

    Its output is operand k's labels without its broadcast axes (summed, then restored as 1s by
    a reshape). A label that no other operand and not the output carries (summed within operand
    k alone) would be unknown to that einsum: a ones-like copy of operand k joins the product to
    supply it, which also keeps a repeated label on its diagonal (the gradient of a trace is dOut
    times the identity).
    """
    from ops.fill import fill_ones_like
    from ops.shape import reshape
    from ops.unary import cast

    shapes = tuple(x.shape for x in xs)
    subs, out, sizes = parse(equation, shapes)
    forms = canonical(subs, shapes, sizes)
    target = forms[k][0]
    known = set(out).union(*(forms[j][0] for j in range(len(xs)) if j != k))
    operands, terms = [gout], [out]
    for j, x in enumerate(xs):
        if j != k:
            operands.append(x)
            terms.append(subs[j])
    if not set(target) <= known:
        operands.append(apply(fill_ones_like, (xs[k],), {}))
        terms.append(subs[k])
    grad = apply(einsum, (operands,), {"equation": ",".join(terms) + "->" + target})
    if grad.shape != xs[k].shape:
        grad = apply(reshape, (grad,), {"shape": xs[k].shape})
    if grad.dtype != xs[k].dtype:
        grad = apply(cast, (grad,), {"out_dtype": xs[k].dtype.name})
    return grad


# ---- kron and cross ---------------------------------------------------------------------------


def _to_input(grad, var):
    """A gradient reduced over the axes broadcasting added and cast to its input's dtype."""
    from ops.reduce import sum_to
    from ops.unary import cast

    grad = sum_to(grad, var.shape)
    if grad.dtype != var.dtype:
        grad = apply(cast, (grad,), {"out_dtype": var.dtype.name})
    return grad


def _kron_shapes(x_shape, y_shape):
    """Both shapes with leading 1s to a common rank (as torch.kron)."""
    ndim = max(len(x_shape), len(y_shape))
    return tuple((1,) * (ndim - len(s)) + tuple(s) for s in (x_shape, y_shape))


def _infer_kron(attrs, x, y):
    require_real(x, "X")
    require_real(y, "Y")
    xs, ys = _kron_shapes(x.shape, y.shape)
    return tuple(a * b for a, b in zip(xs, ys)), result_dtype(x, y)


@register("kron", inputs=("X", "Y"), infer=_infer_kron)
def kron(xp, attrs, x, y):
    """Out = the Kronecker product of X and Y (torch.kron): with both shapes padded with leading
    1s to one rank, Out[i0*m0 + j0, i1*m1 + j1, ...] = X[i0, i1, ...] * Y[j0, j1, ...] for Y of
    shape (m0, m1, ...); Out's extents are the products of theirs.

    With dOut viewed as G[i0, j0, i1, j1, ...]: dX[i] = sum_j G[i, j] Y[j] and
    dY[j] = sum_i G[i, j] X[i].

    >>> import numpy as np, tape, ops
    >>> ops.kron(tape.Variable(np.array([1.0, 10.0])), np.array([[1.0, 2.0]])).numpy()
    array([[ 1.,  2., 10., 20.]])
    """
    x, y = promote(x, y)
    xs, ys = _kron_shapes(x.shape, y.shape)
    ones = (1,) * len(xs)
    blocks = x.reshape(_interleave(xs, ones)) * y.reshape(_interleave(ones, ys))
    return blocks.reshape(tuple(a * b for a, b in zip(xs, ys)))


def _interleave(first, second):
    return tuple(n for pair in zip(first, second) for n in pair)


@kron.gradient
def _(g):
    from ops.reduce import reduce_sum
    from ops.shape import reshape

    (x, y), (gout,) = g.inputs, g.gouts
    xs, ys = _kron_shapes(x.shape, y.shape)
    ones = (1,) * len(xs)
    blocks = apply(reshape, (gout,), {"shape": _interleave(xs, ys)})

    def part(var, other, other_shape, axes):
        """The sum over the other operand's axes of the blocks times it, as ``var``."""
        product = mul(blocks, apply(reshape, (other,), {"shape": other_shape}))
        if axes:
            product = apply(reduce_sum, (product,), {"axis": axes, "keepdim": False})
        return _to_input(apply(reshape, (product,), {"shape": var.shape}), var)

    evens, odds = tuple(range(0, 2 * len(xs), 2)), tuple(range(1, 2 * len(xs), 2))
    gx = part(x, y, _interleave(ones, ys), odds) if g.needs(0) else None
    gy = part(y, x, _interleave(xs, ones), evens) if g.needs(1) else None
    return gx, gy


def _infer_cross(attrs, x, y):
    require_real(x, "X")
    require_real(y, "Y")
    shape = broadcast_shapes(None, tuple(x.shape), tuple(y.shape), "X", "Y")
    if not shape:
        raise ShapeError(
            None,
            "cross needs inputs with at least one axis",
            expected="X and Y with extent 3 along axis",
            actual=f"X.shape={x.shape}, Y.shape={y.shape}",
        )
    axis = normalize_axis(None, attrs["axis"], len(shape))
    extents = [_extent_at(v.shape, axis, len(shape)) for v in (x, y)]
    if extents != [3, 3]:
        raise ShapeError(
            None,
            f"inputs X and Y must have extent 3 along axis {attrs['axis']}",
            expected="X.shape[axis] == Y.shape[axis] == 3 (axis of the broadcast shape)",
            actual=f"{extents[0]} and {extents[1]} (X.shape={x.shape}, Y.shape={y.shape})",
        )
    return shape, result_dtype(x, y)


def _extent_at(shape, axis, ndim):
    """The extent of ``shape`` at the broadcast shape's ``axis`` (1 where it has no such axis)."""
    own = axis - (ndim - len(shape))
    return shape[own] if own >= 0 else 1


@register("cross", inputs=("X", "Y"), attrs={"axis": Attr("int", -1)}, infer=_infer_cross)
def cross(xp, attrs, x, y):
    """Out = X x Y, the cross product of the 3-vectors along ``axis`` (torch.linalg.cross; axis
    is its ``dim``, counted in the broadcast shape), the other axes broadcast as numpy's:
    Out = (X1 Y2 - X2 Y1, X2 Y0 - X0 Y2, X0 Y1 - X1 Y0).

    dX = cross(Y, dOut), dY = cross(dOut, X) (each reduced to its input's shape).

    >>> import numpy as np, tape, ops
    >>> ops.cross(tape.Variable(np.array([1.0, 0.0, 0.0])), np.array([0.0, 1.0, 0.0])).numpy()
    array([0., 0., 1.])
    """
    x, y = promote(x, y)
    ndim = max(x.ndim, y.ndim)
    axis = normalize_axis(None, attrs["axis"], ndim)
    # Each input's axis moved last: the others keep their order, so they still broadcast.
    a = xp.moveaxis(x, axis - (ndim - x.ndim), -1)
    b = xp.moveaxis(y, axis - (ndim - y.ndim), -1)
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    out = xp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
    return xp.moveaxis(out, -1, axis)


@cross.gradient
def _(g):
    (x, y), (gout,) = g.inputs, g.gouts
    gx = _to_input(apply(cross, (y, gout), g.attrs), x) if g.needs(0) else None
    gy = _to_input(apply(cross, (gout, x), g.attrs), y) if g.needs(1) else None
    return gx, gy
