"""Variable methods for the movement, indexing and matrix ops, with PyTorch's signatures
(``dim`` first where PyTorch puts it): ``x.flip(0)``, ``x.permute(1, 0)``, ``x.gather(1, idx)``,
``a.inverse()``, ... Each records the op (or composition) of the same name in ``ops``;
``tape.operators`` installs them.

``x.gather(dim, index)`` is torch.gather (``ops.take_along_dim`` over index's own extent), not
``ops.gather`` (Paddle's ``np.take``).
"""

from __future__ import annotations

from ops import decompositions, rearrange
from ops.along_axis import pick
from ops.masking import index_select, masked_fill
from ops.registry import REGISTRY
from tape.constants import as_variable


def _ints(values):
    if len(values) == 1 and isinstance(values[0], (tuple, list)):
        return tuple(values[0])
    return tuple(values)


def flip(self, *dims):
    """torch.Tensor.flip: reversed along ``dims``."""
    return REGISTRY["flip"](self, axis=_ints(dims))


def roll(self, shifts, dims=None):
    """torch.Tensor.roll."""
    return REGISTRY["roll"](self, shifts=shifts, axis=dims)


def tile(self, *dims):
    """torch.Tensor.tile."""
    return REGISTRY["tile"](self, repeats=_ints(dims))


def repeat_interleave(self, repeats, dim=None):
    """torch.Tensor.repeat_interleave (a Variable of repeats is read now: the output's shape
    depends on its values)."""
    if hasattr(repeats, "numpy"):
        repeats = repeats.numpy().tolist()
    return REGISTRY["repeat_interleave"](self, repeats=repeats, axis=dim)


def flatten(self, start_dim=0, end_dim=-1):
    """torch.Tensor.flatten."""
    return rearrange.flatten(self, start_dim, end_dim)


def chunk(self, chunks, dim=0):
    """torch.Tensor.chunk (a list)."""
    return rearrange.chunk(self, chunks, dim)


def unbind(self, dim=0):
    """torch.Tensor.unbind (a tuple)."""
    return rearrange.unbind(self, dim)


def tril(self, diagonal=0):
    return REGISTRY["tril"](self, diagonal=diagonal)


def triu(self, diagonal=0):
    return REGISTRY["triu"](self, diagonal=diagonal)


def diagonal(self, offset=0, dim1=0, dim2=1):
    """torch.Tensor.diagonal."""
    return REGISTRY["diagonal"](self, offset=offset, axis1=dim1, axis2=dim2)


def masked_select(self, mask):
    return REGISTRY["masked_select"](self, as_variable(mask))


def gather(self, dim, index):
    """torch.Tensor.gather: out[i][j] = self[index[i][j]][j] for dim 0, over index's shape."""
    index = as_variable(index)
    return pick(self, index, dim % max(len(self.shape), 1))


def take_along_dim(self, indices, dim=None):
    return REGISTRY["take_along_dim"](self, as_variable(indices), axis=dim)


def scatter(self, dim, index, src=None, value=None):
    """torch.Tensor.scatter with ``src`` (a Variable) or ``value`` (a number)."""
    return REGISTRY["scatter"](self, index, value if src is None else src, axis=dim)


def scatter_add(self, dim, index, src):
    return REGISTRY["scatter_add"](self, index, src, axis=dim)


def scatter_reduce(self, dim, index, src, reduce, include_self=True):
    return REGISTRY["scatter_reduce"](
        self, index, src, axis=dim, reduce=reduce, include_self=include_self
    )


def index_put(self, indices, values, accumulate=False):
    """torch.Tensor.index_put (out of place): ``self[indices] = values`` on a copy."""
    return REGISTRY["index_put"](self, list(indices), values, accumulate=accumulate)


def cross(self, other, dim=-1):
    """torch.Tensor.cross (torch.linalg.cross's default ``dim=-1``)."""
    return REGISTRY["cross"](self, other, axis=dim)


def _matrix(op_type):
    """The method recording ``op_type`` on the Variable (and ``other``, for binary ones)."""

    def method(self, *other):
        return REGISTRY[op_type](self, *other)

    method.__name__ = op_type
    method.__doc__ = f"torch.Tensor.{op_type}: op '{op_type}'."
    return method


METHODS = {
    "flip": flip,
    "roll": roll,
    "tile": tile,
    "repeat": rearrange.repeat,
    "repeat_interleave": repeat_interleave,
    "permute": rearrange.permute,
    "movedim": rearrange.movedim,
    "expand": rearrange.expand,
    "flatten": flatten,
    "unflatten": lambda self, dim, sizes: rearrange.unflatten(self, dim, sizes),
    "chunk": chunk,
    "unbind": unbind,
    "tril": tril,
    "triu": triu,
    "diagonal": diagonal,
    "masked_fill": masked_fill,
    "masked_select": masked_select,
    "index_select": lambda self, dim, index: index_select(self, index, dim),
    "gather": gather,
    "take_along_dim": take_along_dim,
    "scatter": scatter,
    "scatter_add": scatter_add,
    "scatter_reduce": scatter_reduce,
    "index_put": index_put,
    # Matrix ops (ops.linalg, ops.determinant, ops.contraction), as torch.Tensor's methods.
    **{name: _matrix(name) for name in ("inverse", "det", "slogdet", "trace", "kron")},
    "cross": cross,
    "matrix_power": lambda self, n: decompositions.matrix_power(self, n),
}
