"""Cases for interpolate and interpolate_grad: the semantics are PyTorch's, so the reference is
torch.nn.functional.interpolate itself (and its autograd for the gradient op)."""

import numpy as np

from tape.testing import OpCase


def _torch_kwargs(mode, out_size, scales=None, align_corners=False):
    kwargs = {"mode": mode}
    if scales is not None:
        kwargs["scale_factor"] = list(scales)
    else:
        kwargs["size"] = list(out_size)
    if mode in ("linear", "bilinear", "bicubic", "trilinear"):
        kwargs["align_corners"] = align_corners
    return kwargs


def interpolate_reference(x, **attrs):
    import torch

    out = torch.nn.functional.interpolate(torch.from_numpy(x.copy()), **_torch_kwargs(**attrs))
    return out.numpy()


def interpolate_grad_reference(gout, input_size, **attrs):
    import torch

    x = torch.zeros(gout.shape[:2] + tuple(input_size), dtype=torch.float64, requires_grad=True)
    out = torch.nn.functional.interpolate(x, **_torch_kwargs(**attrs))
    (gx,) = torch.autograd.grad(out, x, torch.from_numpy(gout.astype(np.float64)))
    return gx.numpy()


# (name, X shape, attributes): every mode, both align_corners, sizes and scale factors,
# growing and shrinking, and axes left unchanged.
GEOMETRIES = [
    ("nearest_1d", (2, 2, 5), {"mode": "nearest", "out_size": [8]}),
    (
        "nearest_scale_2d",
        (1, 2, 3, 4),
        {"mode": "nearest", "out_size": [5, 6], "scales": [1.7, 1.5]},
    ),
    ("nearest_shrink_3d", (1, 1, 4, 5, 3), {"mode": "nearest", "out_size": [2, 3, 3]}),
    ("nearest_exact_2d", (1, 2, 4, 3), {"mode": "nearest-exact", "out_size": [7, 2]}),
    ("linear", (2, 1, 4), {"mode": "linear", "out_size": [7]}),
    (
        "linear_corners_shrink",
        (1, 2, 6),
        {"mode": "linear", "out_size": [4], "align_corners": True},
    ),
    ("bilinear", (1, 2, 3, 4), {"mode": "bilinear", "out_size": [5, 3]}),
    (
        "bilinear_corners_scale",
        (1, 1, 3, 3),
        {"mode": "bilinear", "out_size": [6, 7], "scales": [2.0, 2.5], "align_corners": True},
    ),
    ("bicubic", (1, 2, 4, 3), {"mode": "bicubic", "out_size": [6, 5]}),
    (
        "bicubic_corners",
        (1, 1, 3, 4),
        {"mode": "bicubic", "out_size": [5, 2], "align_corners": True},
    ),
    ("trilinear", (1, 1, 2, 3, 3), {"mode": "trilinear", "out_size": [3, 3, 5]}),
    ("area_2d", (1, 2, 5, 4), {"mode": "area", "out_size": [3, 2]}),
    ("area_grow_1d", (1, 1, 3), {"mode": "area", "out_size": [5]}),
]


def _cases():
    cases = []
    for name, shape, attrs in GEOMETRIES:
        cases.append(
            OpCase(
                "interpolate",
                {"X": shape},
                attrs,
                reference=interpolate_reference,
                double_grad=True,
                name=name,
            )
        )
        gout = shape[:2] + tuple(attrs["out_size"])
        cases.append(
            OpCase(
                "interpolate_grad",
                {"Out@GRAD": gout},
                {**attrs, "input_size": shape[2:]},
                reference=interpolate_grad_reference,
                double_grad=True,
                name=name,
            )
        )
    return cases


CASES = _cases()
