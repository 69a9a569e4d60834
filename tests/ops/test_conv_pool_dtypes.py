"""Mixed float dtypes through the convolution, pooling and resampling ops: for every case with
several float inputs and every float32/float64 mix, the output has numpy's promoted dtype (the
kernel's value too) and each input's gradient has that input's dtype."""

import itertools

import numpy as np
import pytest

import tape
from ops.registry import REGISTRY
from tests.ops import cases_conv, cases_interpolate, cases_pool, cases_pool_index


def _float_slots(case):
    arrays = case.arrays("float64")
    return [
        slot
        for slot in REGISTRY[case.op].input_slots
        if isinstance(arrays.get(slot), np.ndarray) and arrays[slot].dtype.kind == "f"
    ]


CASES = [
    case
    for module in (cases_conv, cases_pool, cases_pool_index, cases_interpolate)
    for case in module.CASES
    if len(_float_slots(case)) >= 2
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_mixed_float_inputs_promote_and_gradients_keep_their_dtype(case):
    defn, slots, arrays = REGISTRY[case.op], _float_slots(case), case.arrays("float64")
    for mix in itertools.product(("float32", "float64"), repeat=len(slots)):
        tape.reset_global_tape()
        dtypes = dict(zip(slots, mix, strict=True))
        inputs = [
            None
            if slot not in arrays
            else tape.Variable(
                arrays[slot].astype(dtypes[slot]) if slot in dtypes else arrays[slot],
                requires_grad=slot in dtypes,
            )
            for slot in defn.input_slots
        ]
        out = defn(*inputs, **case.attrs)
        out = out[0] if isinstance(out, tuple) else out
        expected = np.result_type(*mix)
        assert out.dtype == expected and out.value().dtype == expected, (mix, out.dtype)
        leaves = [v for slot, v in zip(defn.input_slots, inputs, strict=True) if slot in dtypes]
        for leaf, grad in zip(leaves, tape.grad(out.sum(), leaves), strict=True):
            assert grad is None or grad.dtype == leaf.dtype, (mix, leaf.dtype, grad.dtype)
