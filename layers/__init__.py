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
from layers.conv import Conv1D, Conv2D, Conv3D
from layers.conv_transpose import ConvTranspose1D, ConvTranspose2D, ConvTranspose3D
from layers.dropout import Dropout
from layers.embedding import Embedding
from layers.function import Function
from layers.linear import Linear, Mean
from layers.loss import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss, NLLLoss
from layers.norm import BatchNorm, BatchNorm1d, BatchNorm2d, LayerNorm
from layers.pool import AvgPool1D, AvgPool2D, AvgPool3D, MaxPool1D, MaxPool2D, MaxPool3D
from layers.pool_adaptive import (
    AdaptiveAvgPool1D,
    AdaptiveAvgPool2D,
    AdaptiveAvgPool3D,
    AdaptiveMaxPool1D,
    AdaptiveMaxPool2D,
    AdaptiveMaxPool3D,
    MaxUnpool1D,
    MaxUnpool2D,
    MaxUnpool3D,
)
from layers.rnn import GRUCell, LSTMCell
from layers.upsample import Upsample

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
    "Conv1D",
    "Conv3D",
    "ConvTranspose1D",
    "ConvTranspose2D",
    "ConvTranspose3D",
    "MaxPool1D",
    "MaxPool3D",
    "AvgPool1D",
    "AvgPool3D",
    "AdaptiveAvgPool1D",
    "AdaptiveAvgPool2D",
    "AdaptiveAvgPool3D",
    "AdaptiveMaxPool1D",
    "AdaptiveMaxPool2D",
    "AdaptiveMaxPool3D",
    "MaxUnpool1D",
    "MaxUnpool2D",
    "MaxUnpool3D",
    "Upsample",
]
