"""What the linear-algebra tests against torch share (tests/ops/test_linalg.py and
test_decompositions.py): tolerances and hypothesis strategies for batches, sizes, dtypes."""

from hypothesis import strategies as st

# Forward tolerances against torch in float64 on the same numbers: float32 kernels round at
# ~1e-7 relative, amplified by the small (< 10) condition numbers of the inputs drawn there.
TOL = {"float32": (1e-4, 1e-5), "float64": (1e-9, 1e-11)}
GRAD_TOL = (1e-8, 1e-10)  # gradients: float64 throughout

batches = st.lists(st.integers(0, 3), max_size=2).map(tuple)
sizes = st.integers(1, 4)
dtypes = st.sampled_from(["float32", "float64"])
seeds = st.integers(0, 2**31 - 1)
