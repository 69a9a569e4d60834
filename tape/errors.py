"""The library's exception types and the one message format they share.

Every error names the op, says what was expected and what was found, and where in the user's code
the op was recorded::

    op 'matmul' (matmul_7): inner dimensions differ
      expected: X.shape[-1] == Y.shape[-2]
      actual:   4 != 5
      recorded at: train.py:42 in forward
"""

from __future__ import annotations

import os
import sys

_LIBRARY_DIRS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), pkg) + os.sep
    for pkg in ("tape", "ops", "layers", "optim")
)


def user_location(skip=1):
    """'file.py:42 in fn' for the innermost frame outside the library (the user's line)."""
    frame = sys._getframe(skip)
    while frame is not None:
        code = frame.f_code
        lines = _sites.get(id(code))
        if lines is None:
            lines = _site(code)
        if lines is not False:
            text = lines.get(frame.f_lasti)
            if text is None:
                text = lines[frame.f_lasti] = (
                    f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
                )
            return text
        frame = frame.f_back
    return None


def _site(code):
    """``_sites``' entry for a code object met for the first time."""
    if len(_sites) > 4096:
        _sites.clear()
        _codes.clear()
    _codes[id(code)] = code  # (held: its id cannot be reused while the entry exists)
    lines = _sites[id(code)] = False if code.co_filename.startswith(_LIBRARY_DIRS) else {}
    return lines


# Lazy mode asks for the location of every op it records, so both answers are cached per code
# object: False for the library's code (the walk goes on), else {instruction offset: text}, so
# the walk costs a dict lookup per frame and one for the line. The keys are ids, as a code object
# hashes its bytecode and constants anew every time (~0.3 us); _codes holds each code object.
_sites, _codes = {}, {}


def brief(value, limit=80):
    """A short description of ``value`` for an error message: a Variable's or array's shape and
    dtype instead of its values, a list of Variables by count, other reprs cut to ``limit``."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        name = getattr(value, "_name", None)
        label = f" '{name}'" if name else ""
        return f"{type(value).__name__}{label} of shape {tuple(shape)}, dtype {dtype}"
    if isinstance(value, (list, tuple)) and any(hasattr(v, "shape") for v in value):
        kinds = sorted({type(v).__name__ for v in value})
        return f"{type(value).__name__} of {len(value)} ({', '.join(kinds)})"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + " ..."


class FluidError(Exception):
    """Base of the library's errors; carries the op, the headline, expected/actual and a hint."""

    def __init__(
        self,
        op=None,
        headline="",
        expected=None,
        actual=None,
        hint=None,
        name=None,
        location=None,
        type_error=False,
    ):
        self.op, self.headline, self.expected, self.actual = op, headline, expected, actual
        self.hint, self.name, self.location = hint, name, location
        super().__init__(self.message())

    def with_context(self, name=None, location=None, op=None):
        """Adds the op, its instance name and recording location; returns self for re-raising."""
        if op is not None and self.op is None:
            self.op = op
        if name is not None:
            self.name = name
        if location is not None and self.location is None:
            self.location = location
        self.args = (self.message(),)
        return self

    def message(self):
        head = ""
        if self.op is not None:
            head = f"op '{self.op}'" + (f" ({self.name})" if self.name else "") + ": "
        lines = [head + self.headline]
        if self.expected is not None:
            lines.append(f"  expected: {self.expected}")
        if self.actual is not None:
            lines.append(f"  actual:   {self.actual}")
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        if self.location:
            lines.append(f"  recorded at: {self.location}")
        return "\n".join(lines)

    def __str__(self):
        return self.message()


class ShapeError(FluidError, ValueError):
    """Input shapes an op cannot accept."""


class AxisError(ShapeError, IndexError):
    """An axis outside an input's range: a ShapeError (so a ValueError) and an IndexError, as
    numpy's AxisError is both."""


class DTypeError(FluidError, TypeError):
    """Input dtypes an op cannot accept."""


class AttrError(FluidError, ValueError, TypeError):
    """An unknown, missing, mistyped or invalid attribute (both a ValueError and a TypeError)."""


class InputError(FluidError, TypeError):
    """A missing, unexpected or non-Variable input, or an unknown op type."""


class ScalarOverflowError(FluidError, OverflowError):
    """A Python scalar the dtype it takes cannot hold (``int32_x + 10**12``; numpy raises too)."""


class IndexingError(FluidError, IndexError):
    """An index outside an axis's range, or an index form indexing does not support."""


class GraphError(FluidError, RuntimeError):
    """A tape used in a way it cannot support, e.g. a second backward over released ops."""


class ExecutionError(FluidError, RuntimeError):
    """A kernel failed while running; the original exception is chained as its cause."""


class NonFiniteError(FluidError, FloatingPointError):
    """An op produced NaN or Inf while anomaly mode checked it (``tape.detect_anomaly``).

    ``inputs`` lists ``(slot, finite, description)`` per input array (so the message says which
    input was already non-finite); ``forward`` is ``(type, name, location)`` of the forward op a
    gradient op belongs to, or None for a forward op."""

    def __init__(self, op, headline, inputs=(), forward=None, **kwargs):
        self.inputs, self.forward = tuple(inputs), forward
        super().__init__(op, headline, **kwargs)

    def with_context(self, name=None, location=None, op=None):
        """Keeps the op it names (a fused group or a gradient maker re-raising it adds none)."""
        return super().with_context(None if self.name else name, location, op)

    def message(self):
        lines = super().message().splitlines()
        if self.location:  # (the user's line last, after what the op saw)
            lines.pop()
        lines += [
            f"  input {slot}: {'finite' if finite else 'ALREADY NON-FINITE'} ({text})"
            for slot, finite, text in getattr(self, "inputs", ())
        ]
        if self.location:
            lines.append(f"  recorded at: {self.location}")
        forward = getattr(self, "forward", None)
        if forward is not None:
            kind, name, where = forward
            lines.append(
                f"  gradient of: op '{kind}' ({name}) recorded at {where or '<unknown line>'}"
            )
        return "\n".join(lines)


class MutationError(GraphError):
    """A Variable an op saved for backward was given a new value before that backward."""
