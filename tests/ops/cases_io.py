"""Cases for the static API's io ops: feed and fetch (identity and copy) and save (a checkpoint)."""

import os
import tempfile

import numpy as np

from tape.testing import OpCase

_SAVE_PATH = os.path.join(tempfile.gettempdir(), f"fluidtape_save_case_{os.getpid()}.npz")


def _check_saved(outputs, inputs, attrs):
    """The file holds every input under its name, bit for bit; the op returns nothing."""
    assert outputs == []
    with np.load(attrs["path"], allow_pickle=False) as saved:
        assert sorted(saved.files) == sorted(attrs["names"])
        for name, value in zip(attrs["names"], inputs[0], strict=True):
            np.testing.assert_array_equal(saved[name], value)
            assert saved[name].dtype == value.dtype


CASES = [
    OpCase("feed", {"X": (2, 3)}, {"name": "x"}, reference=lambda x, name: x, grad=False),
    OpCase("fetch", {"X": (4,)}, {"name": "loss"}, reference=lambda x, name: x, grad=False),
    OpCase(
        "save",
        {"X": [(2, 3), (3,)]},
        {"path": _SAVE_PATH, "names": ["w", "b"]},
        check=_check_saved,
        grad=False,
    ),
]
