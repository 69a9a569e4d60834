"""Workload 'chain_forward': the 'chain' workload's loss without backward (see benchmarks/chain.py).

loss = sum(tanh(x * a + b) * sigmoid(x) - 0.5 * x * x) on 4096x1024 float32; fused, the whole
loss is one pass over x with a trailing reduction.
"""

from __future__ import annotations

from benchmarks.chain import (
    IMPLEMENTATIONS,
    LAZY_TARGET,
    TARGET,
    TRAINING,
    WARMUP,
    make_data,
    scale,
)

NAME = "chain_forward"
TITLE = "sum(tanh(x*a+b)*sigmoid(x)-0.5*x*x), 4096x1024 float32, a/b broadcast, forward only"
UNIT = "ms/step"
DEFAULT = {"rows": 4096, "cols": 1024, "backward": False, "block_rows": 64}
TINY = {"rows": 8, "cols": 4, "backward": False, "block_rows": 3, "tiny": True}

__all__ = ["IMPLEMENTATIONS", "LAZY_TARGET", "TARGET", "TRAINING", "WARMUP", "make_data", "scale"]
