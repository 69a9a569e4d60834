"""Functions with parameters (the seed's layers): each call appends its ops to the global tape."""

from layers import init
from layers.activation import (
    ELU,
    GELU,
    LeakyReLU,
    LogSoftmax,
    ReLU,
    Sigmoid,
    Softmax,
    Softplus,
    Tanh,
)
from layers.attention import MultiheadAttention
from layers.container import Sequential
from layers.conv import Conv2D
from layers.distance import CosineSimilarity, PairwiseDistance
from layers.dropout import Dropout
from layers.embedding import Embedding
from layers.function import Function
from layers.linear import Linear, Mean
from layers.loss import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, NLLLoss
from layers.loss_more import HuberLoss, KLDivLoss, MSELoss, SmoothL1Loss
from layers.norm import BatchNorm, BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm
from layers.pool import AvgPool2D, MaxPool2D
from layers.recurrent import GRU, LSTM
from layers.rnn import GRUCell, LSTMCell
from layers.transformer import TransformerEncoderLayer

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
    "BCELoss",
    "HuberLoss",
    "SmoothL1Loss",
    "KLDivLoss",
    "CosineSimilarity",
    "PairwiseDistance",
    "GroupNorm",
    "LSTM",
    "GRU",
    "MultiheadAttention",
    "TransformerEncoderLayer",
]
