"""Input/output ops of the static API: ``feed`` and ``fetch`` (seed: Executor) and ``save``.

Feed and fetch are ordinary ops so that pruning and scheduling treat a program's inputs and
outputs like any other data flow: the Executor puts a fed array in a holder variable that a
``feed`` op copies into the program, and reads results from the holders ``fetch`` ops write.
``save`` is the checkpoint op of the seed's third case: it has no outputs, only a side effect,
so it runs when it is a target (or, on a lazy tape, with the next run).
"""

from __future__ import annotations

import numpy as np

from ops.registry import Attr, register
from ops.xp import to_numpy
from tape.errors import AttrError


def _same(attrs, x):
    return x.shape, x.dtype


@register("feed", inputs=("X",), attrs={"name": Attr("str", "")}, infer=_same, differentiable=False)
def feed(xp, attrs, x):
    """Out = X (the same buffer): moves a fed array from holder X into the program. No gradient."""
    return x


@register(
    "fetch", inputs=("X",), attrs={"name": Attr("str", "")}, infer=_same, differentiable=False
)
def fetch(xp, attrs, x):
    """Out = a copy of X, so later in-place ops (optimizer updates) cannot change a fetched
    value. No gradient."""
    return x.copy()


def _names_ok(names):
    return names is None or (
        isinstance(names, (list, tuple)) and all(isinstance(n, str) and n for n in names)
    )


def _infer_save(attrs, xs):
    names = attrs["names"]
    if names is not None and len(names) != len(xs):
        raise AttrError(
            None,
            "attribute 'names' must name every input",
            expected=f"{len(xs)} names",
            actual=f"{len(names)} names",
        )
    if names is not None and len(set(names)) != len(names):
        raise AttrError(None, "attribute 'names' repeats a name", actual=repr(tuple(names)))
    return ()


@register(
    "save",
    inputs=("X*",),
    outputs=(),
    attrs={
        "path": Attr("str", required=True),
        "names": Attr("any", None, check=_names_ok, rule="None or a list of non-empty strings"),
    },
    infer=_infer_save,
    differentiable=False,
    side_effect=True,
)
def save(xp, attrs, xs):
    """Writes X[i] to the .npz file ``path`` under ``names[i]`` (default "0", "1", ...).

    The file is written to a temporary name and renamed, so a crash never leaves half a
    checkpoint; it loads with ``numpy.load(path, allow_pickle=False)``. No outputs, no gradient.
    """
    from tape.atomic import write_atomic

    names = attrs["names"] or [str(i) for i in range(len(xs))]
    arrays = {name: to_numpy(x) for name, x in zip(names, xs, strict=True)}
    write_atomic(attrs["path"], lambda file: np.savez(file, **arrays))
    return ()
