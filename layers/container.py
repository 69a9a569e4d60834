"""Sequential: a Function chaining layers, whose parameters are named by position ("0.weight")."""

from __future__ import annotations

from layers.function import Function


class Sequential(Function):
    """Calls its layers in order, each on the previous one's output.

    Layers are registered as children named "0", "1", ..., so ``named_params()`` gives
    "0.weight", "0.bias", "2.weight", ... (PyTorch's names). Any callable may be a layer; only
    Functions contribute parameters.

    >>> import numpy as np, tape, layers
    >>> model = layers.Sequential(layers.Linear(4, 8), layers.ReLU(), layers.Linear(8, 2))
    >>> model(tape.Variable(np.ones((3, 4), np.float32))).shape
    (3, 2)
    >>> [name for name, _ in model.named_params()]
    ['0.weight', '0.bias', '2.weight', '2.bias']
    >>> len(model), type(model[-1]).__name__, len(model[:2])
    (3, 'Linear', 2)
    """

    def __init__(self, *layers):
        super().__init__()
        self._layers = []
        for layer in layers:
            self.append(layer)

    def append(self, layer):
        """Adds ``layer`` at the end; returns self."""
        if not callable(layer):
            raise TypeError(f"Sequential layers must be callable, got {type(layer).__name__}")
        setattr(self, str(len(self._layers)), layer)
        self._layers.append(layer)
        return self

    def forward(self, x):
        for layer in self._layers:
            x = layer(x)
        return x

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Sequential(*self._layers[index])
        return self._layers[index]

    def __len__(self):
        return len(self._layers)

    def __iter__(self):
        return iter(self._layers)

    def __repr__(self):
        inner = "".join(f"\n  ({i}): {layer!r}" for i, layer in enumerate(self._layers))
        return f"Sequential({inner}\n)" if inner else "Sequential()"
