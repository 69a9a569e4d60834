"""Branch-free exp and tanh for numba loops that LLVM vectorises (the ``numba`` backend's libm).

numba compiles ``np.exp``/``np.tanh`` on scalars to calls of the C library, one element at a
time: ~15 ns per element against numpy's SIMD loops' ~1 ns, which kept every fused group with a
libm function off numba on large arrays. These versions are straight-line arithmetic (range
reduction, a polynomial, selects, an integer bit trick for 2^n), written only with operations
that LLVM turns into vector instructions, so a generated loop nest calling them vectorises whole.

- ``exp(x)``: x = n ln2 + r (Cody-Waite, ln2 in two parts), |r| <= ln2/2, exp(r) by its Taylor
  polynomial (degree 7 for float32, 13 for float64: truncation below 1e-8 / 1e-17 relative), then
  times 2^n as two factors 2^(n//2) 2^(n - n//2) so that results in the denormal range are
  rounded once and overflow gives inf. exp(-inf) = 0, exp(inf) = inf, NaN propagates.
- ``tanh(x)`` (float32): |x| < 0.625: x + x^3 P(x^2), P of degree 4 fitted here to a relative
  error of 4.4e-9 (least squares, reweighted towards the maximum, against mpmath); else
  sign(x) (1 - 2 / (exp(2|x|) + 1)), which saturates to +-1 by itself (exp overflows to inf).
  tanh(+-inf) = +-1, tanh(-0) = -0, NaN propagates. float64 tanh calls the C library's (a
  float64 polynomial of the small range needs ~12 terms; not done).

Accuracy (``tests/ops/test_vecmath.py``: every 1021st float32 bit pattern, denormals, inf and NaN
included, plus dense grids where the functions change regime): float32 exp and tanh within 1 ulp
of the correctly rounded value (numpy's own float32 exp is up to 2 ulp off it); float64 exp within
1 ulp of numpy's over 2e6 points. Only the non-exact path uses these: ``exact=True`` never fuses a
libm function into numba (``ops.fused``).

The functions are numba intrinsics that emit their LLVM instructions at each call site: no call
for the vectoriser to stop at, and no numba-level inlining (which cost ~1 s of compile per call).
``namespace()`` is a stand-in for the ``np`` module that generated code sees, with these in
place of numpy's exp and tanh.
"""

from __future__ import annotations

import functools
import math
import types as pytypes

import numpy as np

# The parts of ln 2 (Cody-Waite): the high part has 9 significant bits (float32) / 32 bits
# (float64), so n * hi is exact for every n the reduction meets.
_LN2_HI32, _LN2_LO32 = 0.693359375, -2.12194440054690583e-4
_LN2_HI64, _LN2_LO64 = 6.93147180369123816490e-01, 1.90821492927058770002e-10
# exp's clamps: above the first every result is inf, below the second 0 (in both dtypes the
# clamp leaves the result's rounding untouched: it only cuts where it is already saturated).
_EXP32_HIGH, _EXP32_LOW = 89.0, -104.0
_EXP64_HIGH, _EXP64_LOW = 710.0, -746.0
# tanh float32: below this |x|, the odd polynomial (see the module docstring).
_TANH32_SMALL = 0.625
_TANH32_P = (
    -0.3333328194939195,
    0.1333144235080943,
    -0.05373972528500151,
    0.020639114678330718,
    -0.005705012743342426,
)


class _Emit:
    """Builds one function's instructions at the call site (LLVM IR, no branch)."""

    def __init__(self, builder, ty):
        from llvmlite import ir

        self.b, self.ty, self.ir = builder, ty, ir
        self.bits = 32 if isinstance(ty, ir.FloatType) else 64
        self.int = ir.IntType(self.bits)

    def k(self, value):
        return self.ir.Constant(self.ty, float(value))

    def i(self, value):
        return self.ir.Constant(self.int, value)

    def horner(self, x, coefficients):
        """c[0] + x (c[1] + x (c[2] + ...)), highest first as written out by hand."""
        b, p = self.b, self.k(coefficients[-1])
        for c in reversed(coefficients[:-1]):
            p = b.fadd(b.fmul(p, x), self.k(c))
        return p

    def exp(self, x):
        b, k = self.b, self.k
        f32 = self.bits == 32
        top, bottom = (_EXP32_HIGH, _EXP32_LOW) if f32 else (_EXP64_HIGH, _EXP64_LOW)
        hi, lo = (_LN2_HI32, _LN2_LO32) if f32 else (_LN2_HI64, _LN2_LO64)
        degree = 7 if f32 else 13
        nan = b.fcmp_unordered("uno", x, x)
        clamped = b.select(b.fcmp_ordered(">", x, k(top)), k(top), x)
        clamped = b.select(b.fcmp_ordered("<", clamped, k(bottom)), k(bottom), clamped)
        safe = b.select(nan, k(0.0), clamped)
        floor = b.module.declare_intrinsic("llvm.floor", [self.ty])
        n = b.call(floor, [b.fadd(b.fmul(safe, k(1 / math.log(2))), k(0.5))])
        r = b.fsub(safe, b.fmul(n, k(hi)))
        r = b.fsub(r, b.fmul(n, k(lo)))
        # 1 + r + r^2 (1/2! + r/3! + ...): the two largest terms added last.
        p = self.horner(r, [1 / math.factorial(j) for j in range(2, degree + 1)])
        p = b.fadd(b.fadd(b.fmul(p, b.fmul(r, r)), r), k(1.0))
        whole = b.fptosi(n, self.int)
        half = b.ashr(whole, self.i(1))
        bias, shift = (127, 23) if f32 else (1023, 52)
        for part in (half, b.sub(whole, half)):
            field = b.shl(b.add(part, self.i(bias)), self.i(shift))
            p = b.fmul(p, b.bitcast(field, self.ty))
        return b.select(nan, x, p)

    def tanh(self, x):
        b, k = self.b, self.k
        negative = b.fcmp_ordered("<", x, k(0.0))
        a = b.select(negative, b.fneg(x), x)
        z = b.fmul(x, x)
        small = b.fadd(x, b.fmul(b.fmul(x, z), self.horner(z, _TANH32_P)))
        small = b.select(b.fcmp_ordered("==", x, k(0.0)), x, small)  # keeps -0's sign
        e = self.exp(b.fadd(a, a))
        large = b.fsub(k(1.0), b.fdiv(k(2.0), b.fadd(e, k(1.0))))
        large = b.select(negative, b.fneg(large), large)
        # NaN compares false: it takes the large branch, where exp kept it NaN.
        return b.select(b.fcmp_ordered("<", a, k(_TANH32_SMALL)), small, large)


@functools.lru_cache(maxsize=1)
def functions():
    """{"exp": ..., "tanh": ...}: numba intrinsics, callable in numba-compiled code on float32
    and float64 scalars (defined on first use: importing this module needs no numba)."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    def libm(builder, name, ty, x):
        fnty = ir.FunctionType(ty, [ty])
        return builder.call(cgutils.get_or_insert_function(builder.module, fnty, name), [x])

    @intrinsic
    def vexp(typingctx, x):
        if x not in (types.float32, types.float64):
            return None

        def codegen(context, builder, signature, args):
            return _Emit(builder, args[0].type).exp(args[0])

        return x(x), codegen

    @intrinsic
    def vtanh(typingctx, x):
        if x not in (types.float32, types.float64):
            return None

        def codegen(context, builder, signature, args):
            if x == types.float64:  # float64: the C library's (module docstring)
                return libm(builder, "tanh", args[0].type, args[0])
            return _Emit(builder, args[0].type).tanh(args[0])

        return x(x), codegen

    return {"exp": vexp, "tanh": vtanh}


class _Numpy(pytypes.ModuleType):
    """numpy as generated code sees it, with the vectorisable functions in place of its own."""

    def __getattr__(self, name):
        return getattr(np, name)


@functools.lru_cache(maxsize=1)
def namespace():
    """A module standing for ``np`` in generated numba code: numpy's names, with ``exp`` and
    ``tanh`` replaced by this module's (numba resolves a module's attributes at compile time)."""
    module = _Numpy("fluidtape_vecmath_np")
    for name, function in functions().items():
        setattr(module, name, function)
    return module


# (function, dtype) pairs computed here; float64 tanh calls the C library (module docstring).
VECTORISED = frozenset({("exp", "float32"), ("exp", "float64"), ("tanh", "float32")})

__all__ = ["functions", "namespace", "VECTORISED"]
