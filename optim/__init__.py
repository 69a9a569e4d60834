"""Optimizers, gradient clipping, regularization and learning-rate schedules.

An optimizer is called on a parameter list after backward; it clips the gradients, adds the
regularization terms, records one in-place update op per parameter and consumes the gradients::

    >>> import numpy as np, tape, optim
    >>> w = tape.Variable(np.array([1.0, 2.0]), requires_grad=True)
    >>> opt = optim.Adam(lr=0.1, grad_clip=optim.ClipGradByGlobalNorm(1.0))
    >>> tape.backward((w * w).sum())
    >>> opt([w])
    >>> w.numpy(), w.grad
    (array([0.9, 1.9]), None)
"""

from optim import lr_scheduler
from optim.adagrad import Adagrad
from optim.adam import Adam, AdamW
from optim.clip import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue
from optim.data_parallel import DistributedDataParallel
from optim.lr_scheduler import (
    CosineAnnealing,
    ExponentialDecay,
    LinearWarmup,
    LRScheduler,
    StepDecay,
)
from optim.optimizer import Optimizer
from optim.regularizer import L1Decay, L2Decay
from optim.rmsprop import RMSProp, RMSprop
from optim.sampler import DistributedSampler
from optim.sgd import SGD, Momentum

__all__ = [
    "Optimizer",
    "DistributedDataParallel",
    "DistributedSampler",
    "SGD",
    "Momentum",
    "Adam",
    "AdamW",
    "RMSProp",
    "RMSprop",
    "Adagrad",
    "ClipGradByValue",
    "ClipGradByNorm",
    "ClipGradByGlobalNorm",
    "L1Decay",
    "L2Decay",
    "lr_scheduler",
    "LRScheduler",
    "StepDecay",
    "ExponentialDecay",
    "CosineAnnealing",
    "LinearWarmup",
]
