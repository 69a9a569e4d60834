"""Optimizers: called on a parameter list, each records one update op per parameter."""

from optim.sgd import SGD

__all__ = ["SGD"]
