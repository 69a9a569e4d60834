"""Benchmarks: fluidtape against plain numpy (the floor), PyTorch and HIPS autograd.

Run ``python -m benchmarks`` (see ``benchmarks/run.py`` and ``benchmarks/README.md``). This
package imports nothing heavy, so the runner can fix thread counts before numpy loads.
Benchmarks never run under pytest; ``tests/test_benchmarks_smoke.py`` checks that every
implementation computes the same loss and gradients at a tiny size.
"""

# Workload modules (benchmarks/<name>.py), in the order the table lists them.
WORKLOADS = (
    "overhead",
    "mlp",
    "lstm",
    "cnn",
    "lstm_lm",
    "chain_forward",
    "chain",
    "tree_rnn",
    "treelstm",
    "tagger",
    "parallel",
    "scaling",
)
