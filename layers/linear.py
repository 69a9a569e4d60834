"""Linear (the seed's fully connected layer) and Mean."""

from __future__ import annotations

import tape
from ops.registry import REGISTRY


class Linear:
    """``act(x @ W + b)`` with W of shape (in_dim, out_dim), as in the seed.

    >>> import numpy as np, tape, layers
    >>> layer = layers.Linear(3, 2, act="relu")
    >>> layer(tape.Variable(np.ones((4, 3), np.float32))).shape
    (4, 2)
    """

    def __init__(self, in_dim, out_dim, act=None):
        self.weight = tape.Variable(name="LinearWeight")
        self.bias = tape.Variable(name="LinearBias")
        self.act = act
        init_tape = tape.Tape()
        init_tape.add_op("fill_constant", {}, {"Out": [self.weight]},
                         {"dtype": "float32", "shape": [in_dim, out_dim], "value": 1.0})
        init_tape.add_op("fill_constant", {}, {"Out": [self.bias]},
                         {"dtype": "float32", "shape": [out_dim], "value": 1.0})
        init_tape.forward()
        for param in (self.weight, self.bias):
            param.requires_grad = param.persistable = True

    def __call__(self, x):
        global_tape = tape.get_global_tape()
        pre_bias = tape.Variable(name="linear")
        global_tape.add_op("mul", {"X": [x], "Y": [self.weight]}, {"Out": [pre_bias]},
                           {"x_num_col_dims": 1, "y_num_col_dims": 1})
        pre_act = tape.Variable(name="linear")
        global_tape.add_op("elementwise_add", {"X": [pre_bias], "Y": [self.bias]},
                           {"Out": [pre_act]}, {"axis": 1})
        if self.act is None:
            return pre_act
        post_act = tape.Variable(name="linear")
        global_tape.add_op(self.act, {"X": [pre_act]}, {"Out": [post_act]}, {})
        return post_act

    def params(self):
        return [self.weight, self.bias]


class Mean:
    """The mean of all elements (the seed's Mean)."""

    def __call__(self, x):
        return REGISTRY["mean"](x)

    def params(self):
        return []
