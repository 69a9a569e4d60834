"""Functions with parameters (the seed's layers): each call appends its ops to the global tape."""

from layers import init
from layers.activation import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    PReLU,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Softsign,
    Tanh,
)
from layers.container import Sequential
from layers.conv import Conv2D
from layers.dropout import Dropout
from layers.embedding import Embedding
from layers.function import Function
from layers.linear import Linear, Mean
from layers.loss import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss, NLLLoss
from layers.norm import BatchNorm, BatchNorm1d, BatchNorm2d, LayerNorm
from layers.pool import AvgPool2D, MaxPool2D
from layers.rnn import GRUCell, LSTMCell

__all__ = [
    "Linear",
    "Mean",
    "Function",
    "Sequential",
    "init",
    "ReLU",
    "Tanh",
    "Sigmoid",
    "GELU",
    "LeakyReLU",
    "ELU",
    "Softplus",
    "Softmax",
    "LogSoftmax",
    "Embedding",
    "Dropout",
    "LSTMCell",
    "GRUCell",
    "MSELoss",
    "CrossEntropyLoss",
    "NLLLoss",
    "BCEWithLogitsLoss",
]
__all__ += [
    "Conv2D",
    "MaxPool2D",
    "AvgPool2D",
    "BatchNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "LayerNorm",
]
__all__ += [
    "SiLU",
    "Mish",
    "SELU",
    "CELU",
    "Softsign",
    "Hardswish",
    "Hardsigmoid",
    "Hardtanh",
    "ReLU6",
    "LogSigmoid",
    "GLU",
    "PReLU",
]
