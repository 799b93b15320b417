"""The bf16 PE arithmetic (``Bf16Arith``) and its golden model, without
Verilator: the golden step against exact rational arithmetic, the PE's
product-and-add in amaranth.sim against the golden step (special values,
cancellation, overflow, flushing, random), and the error of a whole bf16
GEMM against float64."""

from fractions import Fraction
import math

import ml_dtypes
import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from bertforge.rtl.arith import FP32_NAN, Bf16Arith
from bertforge.sim.systolic_golden import bf16_mac, bf16_matmul

BF16_SPECIAL = [0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80,
                0x7FC0, 0x7F81, 0xFFC1, 0x3F80, 0xBF80, 0x3F81, 0x4000, 0x0100, 0x1F80]
FP32_SPECIAL = [0x00000000, 0x80000000, 0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF,
                0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC00000, 0x3F800000,
                0xBF800000, 0x3F800001, 0x4B800000, 0x33800000, 0x00800001]


def bits_to_float(bits, dtype, view):
    return np.array(bits, dtype=view).view(dtype)


def exact_step(acc_bits, a_bits, b_bits):
    """binary32 bits of one PE step by exact rational arithmetic (the
    documented rules, written out independently of the golden model)."""
    acc = float(bits_to_float(acc_bits, np.float32, np.uint32))
    a = float(bits_to_float(a_bits, ml_dtypes.bfloat16, np.uint16))
    b = float(bits_to_float(b_bits, ml_dtypes.bfloat16, np.uint16))
    acc = math.copysign(0.0, acc) if abs(acc) < 2.0 ** -126 else acc   # DAZ (acc too)
    a = math.copysign(0.0, a) if abs(a) < 2.0 ** -126 else a
    b = math.copysign(0.0, b) if abs(b) < 2.0 ** -126 else b
    if any(math.isnan(x) for x in (acc, a, b)) or (math.isinf(a) and b == 0) \
            or (math.isinf(b) and a == 0):
        return FP32_NAN
    p_inf = math.isinf(a) or math.isinf(b)
    p_sign = math.copysign(1, a) * math.copysign(1, b) < 0
    if math.isinf(acc) or p_inf:
        if math.isinf(acc) and p_inf and (acc < 0) != p_sign:
            return FP32_NAN
        negative = acc < 0 if math.isinf(acc) else p_sign
        return 0xFF800000 if negative else 0x7F800000
    p = Fraction(a) * Fraction(b)
    if acc == 0 and p == 0:
        negative = math.copysign(1, acc) < 0 and p_sign
        return 0x80000000 if negative else 0
    return binary32_bits(Fraction(acc) + p)


def binary32_bits(total):
    """The exact sum ``total`` (a Fraction) rounded by the documented rules:
    binary32 bits, nearest even, +0 for 0, inf past the range, FTZ."""
    if total == 0:
        return 0
    negative, mag = total < 0, abs(total)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e > mag:
        e -= 1
    sig = round(mag / Fraction(2) ** (e - 23))     # ties to even
    if sig == 1 << 24:
        sig, e = 1 << 23, e + 1
    sign = 0x80000000 if negative else 0
    if e > 127:
        return sign | 0x7F800000
    if e < -126:
        return sign
    return sign | ((e + 127) << 23) | (sig - (1 << 23))


def random_cases(rng, n):
    """(acc, a, b) bits: random normals of all exponents, cancellations
    (acc close to -a*b), near-overflow and near-underflow sums."""
    cases = []
    for _ in range(n):
        kind = rng.integers(5)
        a = int(rng.integers(0, 1 << 16))
        b = int(rng.integers(0, 1 << 16))
        if kind == 0:
            acc = int(rng.integers(0, 0x7F800000)) | (int(rng.integers(2)) << 31)
        else:
            fa = float(bits_to_float(a, ml_dtypes.bfloat16, np.uint16))
            fb = float(bits_to_float(b, ml_dtypes.bfloat16, np.uint16))
            if not np.isfinite(fa * fb) or fa * fb == 0 or abs(fa * fb) > 3e38 \
                    or abs(fa * fb) < 1.2e-38:
                # products of moderate size for cancellations
                a = int(rng.integers(0x3000, 0x5000)) | (int(rng.integers(2)) << 15)
                b = int(rng.integers(0x3000, 0x5000)) | (int(rng.integers(2)) << 15)
                fa = float(bits_to_float(a, ml_dtypes.bfloat16, np.uint16))
                fb = float(bits_to_float(b, ml_dtypes.bfloat16, np.uint16))
            near = np.float32(-fa * fb).view(np.uint32)
            acc = int(near) + int(rng.integers(-3, 4)) if kind < 4 else int(near) ^ 0x80000000
            acc &= 0xFFFFFFFF
        cases.append((acc, a, b))
    return cases


def all_cases(seed, n):
    special = [(acc, a, b) for acc in FP32_SPECIAL for a in BF16_SPECIAL[:10]
               for b in BF16_SPECIAL[::3]]
    return special + random_cases(np.random.default_rng(seed), n)


def test_golden_step_is_exact_rounding():
    for acc, a, b in all_cases(1, 4000):
        got = bf16_mac(bits_to_float(acc, np.float32, np.uint32),
                       bits_to_float([a], ml_dtypes.bfloat16, np.uint16),
                       bits_to_float([b], ml_dtypes.bfloat16, np.uint16))
        assert int(got.view(np.uint32)[0]) == exact_step(acc, a, b), (hex(acc), hex(a), hex(b))


def test_golden_rules_by_example():
    bf = lambda *v: np.array(v, dtype=ml_dtypes.bfloat16)
    big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    tiny = float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_subnormal)
    # the product is exact: 2**-100 * 2**-100 survives, added to 1 it rounds away
    assert bf16_matmul(bf(2.0 ** -100, 1.0)[None], bf(2.0 ** 100, 2.0 ** 100)[:, None]) == 2.0 ** 100
    # max * max overflows to inf; subnormal operands are zeros; inf * subnormal is NaN
    assert bf16_matmul(bf(big)[None], bf(big)[:, None])[0, 0] == np.inf
    assert bf16_matmul(bf(tiny)[None], bf(1.0)[:, None]).view(np.uint32)[0, 0] == 0
    assert bf16_matmul(bf(-tiny)[None], bf(1.0)[:, None]).view(np.uint32)[0, 0] == 0  # +0 + -0
    assert bf16_matmul(bf(np.inf)[None], bf(tiny)[:, None]).view(np.uint32)[0, 0] == FP32_NAN
    # x - x is +0; a sum below 2**-126 flushes to a zero of its sign
    assert bf16_matmul(bf(3.0, -3.0)[None], bf(1.0, 1.0)[:, None]).view(np.uint32)[0, 0] == 0
    assert bf16_matmul(bf(-2.0 ** -70)[None], bf(2.0 ** -60)[:, None]).view(np.uint32)[0, 0] \
        == 0x80000000
    flushed = bf16_matmul(bf(1.0, -2.0 ** -70)[None], bf(-1.0, 2.0 ** -60)[:, None])
    assert flushed.view(np.uint32)[0, 0] == 0xBF800000     # -1 - 2**-130: rounds to -1


def test_pe_step_matches_golden():
    """One product and add of the PE (amaranth.sim) against the golden
    step: special values of both formats crossed, then random, cancelling,
    overflowing and flushing cases."""
    arith = Bf16Arith()
    m = Module()
    a, b = Signal(16), Signal(16)
    acc = Signal(32)
    product = arith.registered_product(m, a, b, "pe")
    out = Signal(32)
    m.d.comb += out.eq(arith.accumulate(m, acc, product))
    cases = all_cases(2, 1500)

    async def bench(ctx):
        for x, y, z in cases:
            ctx.set(a, y)
            ctx.set(b, z)
            await ctx.tick()
            ctx.set(acc, x)
            assert ctx.get(out) == exact_step(x, y, z), (hex(x), hex(y), hex(z), hex(ctx.get(out)))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("k", [16, 768, 4096])
def test_bf16_gemm_error_is_within_the_summation_bound(k):
    """|C - A @ B| <= gamma(K-1) * |A| @ |B| elementwise against float64
    (products are exact, K - 1 rounded adds, u = 2**-24), and the bound is
    not vacuous: the error is far above float64's and not zero."""
    rng = np.random.default_rng(k)
    a = rng.standard_normal((8, k)).astype(ml_dtypes.bfloat16)
    b = (rng.standard_normal((k, 8)) * 4).astype(ml_dtypes.bfloat16)
    c = bf16_matmul(a, b).astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = a64 @ b64
    u = 2.0 ** -24
    gamma = (k - 1) * u / (1 - (k - 1) * u)
    bound = gamma * (np.abs(a64) @ np.abs(b64))
    error = np.abs(c - exact)
    assert np.all(error <= bound)
    assert np.max(error) > 0
    # typical error grows like sqrt(K) u, well under the worst case
    assert np.max(error / bound) < 0.5
