"""Functions with parameters (the seed's layers): each call appends its ops to the global tape."""

from layers.linear import Linear, Mean

__all__ = ["Linear", "Mean"]
