"""Bit-exact golden model of the GEMM engine (:class:`~bertforge.rtl.gemm.GemmEngine`),
integer (:func:`gemm_golden`) and bf16 (:func:`bf16_gemm_golden`)."""

import ml_dtypes
import numpy as np

from .fixed_golden import requantize, split_scale_words
from .systolic_golden import FP32_MIN_NORMAL, bf16_matmul, round_fp32_ftz, saturating_matmul
from bertforge.rtl.arith import FP32_NAN
from bertforge.rtl.errors import ParameterError

__all__ = ["gemm_golden", "bf16_gemm_golden", "fp32_add", "command_error", "command_rejected",
           "command_fields", "FIELDS", "reduction_pieces", "run_commands", "write_result",
           "matrix_view", "c_view", "packed_b_view", "group_mults_view", "output_dtype",
           "operand_dtype"]

#: The fields :func:`command_error` checks.
_CHECKED = ("m", "k", "n", "a_addr", "b_addr", "c_addr", "a_stride", "b_stride", "c_stride",
            "accumulate", "int8", "bias", "per_channel", "bias_addr", "scale_addr", "int16",
            "bf16_out", "transpose_c", "w4", "mult_addr")
#: Fields of a dense command that the golden and cycle models read (``tag`` aside).
FIELDS = _CHECKED + ("multiplier", "shift")
_INT32 = (-(1 << 31), (1 << 31) - 1)


def reduction_pieces(config, k):
    """``(start, stop)`` ranges of K that the array reduces in one go (with
    step-by-step saturation) before the sum is added to the accumulator: K
    chunks of ``k_chunk`` (OS); in WS, weight blocks of ``rows``, each
    memory beat of K (``mem_width // width`` elements) cut into blocks from
    its start."""
    lanes = config.lanes
    if config.dataflow == "os":
        return [(k0, min(k0 + config.k_chunk, k)) for k0 in range(0, k, config.k_chunk)]
    return [(s + b, min(s + b + config.rows, s + lanes, k))
            for s in range(0, k, lanes) for b in range(0, min(lanes, k - s), config.rows)]


def gemm_golden(config, a, b, *, c_old=None, bias=None, int8=False, int16=False, multiplier=1,
                shift=0, bf16_out=False):
    """``A @ B`` as the engine computes it (a bf16 engine:
    :func:`bf16_gemm_golden`, which has no ``int8``, ``int16``, ``multiplier``
    or ``shift``).

    ``acc = clamp(c_old)`` (accumulate) or 0; for each reduction piece ``p``
    (:func:`reduction_pieces`: K chunks in OS, weight blocks in WS):
    ``acc = clamp(acc + saturating_matmul(A[:, p], B[p]))``, clamping to
    ``signed(acc_width)``; with ``bias`` (N integers, one per column)
    ``acc = clamp(acc + bias)`` to int32. Returns ``acc`` (int64, the int32
    output) or, with ``int8`` (``int16``), ``requantize(acc, multiplier,
    shift)`` (round to nearest, ties up, saturate to int8 or int16), ``multiplier`` and ``shift``
    scalars or one per column (length N). When no sum saturates this is the
    plain product (plus the bias).
    """
    if config.bf16:
        if int8 or int16:
            raise ParameterError("a bf16 engine does not requantize: no int8 or int16 output")
        return bf16_gemm_golden(config, a, b, c_old=c_old, bias=bias, bf16_out=bf16_out)
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ParameterError(f"cannot multiply shapes {a.shape} and {b.shape}")
    hi = (1 << (config.acc_width - 1)) - 1
    lo = -hi - 1
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.int64)
    if c_old is not None:
        acc = np.clip(np.asarray(c_old, dtype=np.int64), lo, hi)
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    if c_old is None and float(np.max(bound, initial=0.0)) <= hi:
        acc = a @ b     # no partial sum can saturate: order does not matter
    else:
        for start, stop in reduction_pieces(config, a.shape[1]):
            part = saturating_matmul(a[:, start:stop], b[start:stop], config.acc_width)
            acc = np.clip(acc + part, lo, hi)
    if bias is not None:
        bias = np.asarray(bias, dtype=np.int64)
        if bias.shape != (b.shape[1],):
            raise ParameterError(f"bias must have one value per column of B ({b.shape[1]}), "
                                 f"not shape {bias.shape}")
        acc = np.clip(acc + bias, *_INT32)
    if int8 or int16:
        return requantize(acc, multiplier, shift, 8 if int8 else 16)
    return acc


def fp32_add(x, y):
    """``round(x + y)`` elementwise as
    :meth:`~bertforge.rtl.arith.Bf16Arith.add` computes it: float32 ``x``
    and ``y`` (a subnormal counts as a zero of its sign), the sum rounded to
    nearest even with :func:`~bertforge.sim.systolic_golden.round_fp32_ftz`
    (the float64 sum of two 24-bit significands rounds once more without
    harm: 53 >= 2 * 24 + 1), NaNs as :data:`~bertforge.rtl.arith.FP32_NAN`.
    Returns float32."""
    with np.errstate(invalid="ignore", over="ignore"):
        x, y = (np.asarray(v, dtype=np.float32).astype(np.float64) for v in (x, y))
        x, y = (np.where(np.abs(v) < FP32_MIN_NORMAL, np.copysign(0.0, v), v) for v in (x, y))
        total = round_fp32_ftz(x + y)
    total.view(np.uint32)[np.isnan(total)] = FP32_NAN
    return total


def bf16_gemm_golden(config, a, b, *, c_old=None, bias=None, bf16_out=False):
    """``A @ B`` as a bf16 engine (``config.arith == "bf16"``) computes it.

    Per reduction piece ``p`` (:func:`reduction_pieces`) the array's sum
    ``part = bf16_matmul(A[:, p], B[p])`` (in K order from +0, rounded to
    binary32 at every add, subnormals flushed:
    :func:`~bertforge.sim.systolic_golden.bf16_matmul`); the accumulator
    takes the first piece as it is, or ``fp32_add(c_old, part)`` with
    accumulate (float32 ``c_old``), and adds each later piece with
    :func:`fp32_add`; then ``fp32_add(acc, bias)`` (N float32 values) with a
    bias. Returns float32 C, or with ``bf16_out`` C rounded to bfloat16
    (nearest even).
    """
    a = np.asarray(a, dtype=ml_dtypes.bfloat16)
    b = np.asarray(b, dtype=ml_dtypes.bfloat16)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ParameterError(f"cannot multiply shapes {a.shape} and {b.shape}")
    acc = None if c_old is None else np.asarray(c_old, dtype=np.float32)
    for start, stop in reduction_pieces(config, a.shape[1]):
        part = bf16_matmul(a[:, start:stop], b[start:stop])
        acc = part if acc is None else fp32_add(acc, part)
    if bias is not None:
        bias = np.asarray(bias, dtype=np.float32)
        if bias.shape != (b.shape[1],):
            raise ParameterError(f"bias must have one value per column of B ({b.shape[1]}), "
                                 f"not shape {bias.shape}")
        acc = fp32_add(acc, bias[None, :])
    return acc.astype(ml_dtypes.bfloat16) if bf16_out else acc


def output_dtype(cmd, config=None):
    """C's little-endian dtype for command dict ``cmd``: int8, int16 or
    int32; for a bf16 engine's ``config`` float32, or bfloat16 with
    ``bf16_out``."""
    if config is not None and config.bf16:
        return np.dtype(ml_dtypes.bfloat16 if cmd.get("bf16_out") else "<f4")
    return np.dtype("<i1" if cmd.get("int8") else "<i2" if cmd.get("int16") else "<i4")


def operand_dtype(config):
    """The dtype of A and B in memory: int8, int16 or bfloat16."""
    return np.dtype(ml_dtypes.bfloat16) if config.bf16 else np.dtype(f"<i{config.width // 8}")


def command_error(config, m, k, n, a_addr, b_addr, c_addr, a_stride, b_stride, c_stride,
                  accumulate=False, int8=False, *, bias=False, per_channel=False, bias_addr=0,
                  scale_addr=0, int16=False, bf16_out=False, transpose_c=False, w4=False,
                  mult_addr=0):
    """True if the engine rejects this command: a size of 0, a matrix (or,
    when used, the bias vector or the per-channel scale words: N 4-byte
    values each) that leaves the ``2**addr_width`` byte address space,
    accumulate with int8 or int16 output, both int8 and int16, or
    per-channel scales with int32 output. A bf16 engine also rejects int8,
    int16, per-channel scales and accumulate with ``bf16_out`` (old C is
    float32); an integer engine has no ``bf16_out`` (it is ignored). With
    ``transpose_c`` (an engine with ``config.transpose_c``; the others
    ignore it) C is stored transposed (N rows of M elements, ``c_stride``
    apart), and accumulate is rejected. With ``w4`` (an engine with
    ``config.weight_group``; the others ignore it) B is packed and its
    multiplier codes (``ceil(k / weight_group)`` rows of ``ceil(n / 2)``
    bytes at ``mult_addr``) must fit too."""
    narrow = int8 or int16
    group = getattr(config, "weight_group", 0) if w4 else 0
    transpose_c = transpose_c and config.transpose_c
    if min(m, k, n) == 0 or (accumulate and narrow) or (int8 and int16) or (per_channel and not narrow):
        return True
    if accumulate and transpose_c:
        return True
    if config.bf16 and (narrow or (accumulate and bf16_out)):
        return True
    osize = output_dtype({"int8": int8, "int16": int16, "bf16_out": bf16_out}, config).itemsize
    esize, limit = config.width // 8, 1 << config.addr_width
    if config.weight_bits == 4 or group:     # packed B: ceil(k / 2) rows of n bytes
        b_end = b_addr + (k - 1) // 2 * b_stride + n
    else:
        b_end = b_addr + (k - 1) * b_stride + n * esize
    return bool(a_addr + (m - 1) * a_stride + k * esize > limit
                or b_end > limit
                or c_addr + ((n if transpose_c else m) - 1) * c_stride
                + (m if transpose_c else n) * osize > limit
                or (bias and bias_addr + 4 * n > limit)
                or (per_channel and scale_addr + 4 * n > limit)
                or (group and mult_addr + -(-k // group) * -(-n // 2) > limit))


def command_fields(cmd, fields=FIELDS):
    """``fields`` of command dict ``cmd`` as ints (missing ones 0)."""
    return {key: int(cmd.get(key, 0)) for key in fields}


def command_rejected(config, cmd):
    """:func:`command_error` of command dict ``cmd`` (missing fields 0)."""
    return command_error(config, **command_fields(cmd, _CHECKED))


def matrix_view(image, addr, stride, rows, cols, dtype):
    """A ``rows`` x ``cols`` matrix of ``dtype`` in byte ``image`` at byte
    ``addr`` with row stride ``stride`` bytes (a view: writes go to ``image``)."""
    dtype = np.dtype(dtype)
    return np.ndarray((rows, cols), dtype=dtype, buffer=image, offset=addr,
                      strides=(stride, dtype.itemsize))


def packed_b_view(image, addr, stride, k, n):
    """The ``k`` x ``n`` 4-bit weights B (int64) stored packed at byte
    ``addr``: ``ceil(k / 2)`` rows of ``n`` bytes, ``stride`` bytes apart,
    byte ``(p, j)`` holding ``B[2p, j]`` in its low nibble and ``B[2p + 1, j]``
    in its high nibble (zero past K): ``pack_int4(B.T).T``, unpacked by
    :func:`~bertforge.sim.payload_np.unpack_int4`."""
    from .payload_np import unpack_int4
    packed = matrix_view(image, addr, stride, -(-k // 2), n, np.uint8)
    return unpack_int4(packed.T).T[:k]


def group_mults_view(config, image, addr, k, n):
    """The ``k`` x ``n`` group multipliers of 4-bit weights whose codes are
    at byte ``addr``: ``ceil(k / weight_group)`` rows of ``ceil(n / 2)``
    bytes, column ``2i``'s code in the low nibble of byte ``i`` and
    ``2i + 1``'s in the high one, decoded through
    :data:`~bertforge.rtl.accumulator.GROUP_MULTS` and repeated over each
    group's K rows (int64)."""
    from bertforge.rtl.accumulator import GROUP_MULTS
    g = config.weight_group
    rows, width = -(-k // g), -(-n // 2)
    raw = matrix_view(image, addr, width, rows, width, np.uint8)
    codes = np.stack([raw & 15, raw >> 4], axis=2).reshape(rows, 2 * width)[:, :n]
    return np.repeat(np.array(GROUP_MULTS)[codes], g, axis=0)[:k]


def c_view(config, image, c):
    """Command ``c``'s C in byte ``image`` (a view, M x N): row-major, or
    transposed with ``transpose_c`` (on an engine that has it; ``config``
    None: an integer engine without it)."""
    dtype = output_dtype(c, config)
    if c.get("transpose_c") and config is not None and config.transpose_c:
        return matrix_view(image, c["c_addr"], c["c_stride"], c["n"], c["m"], dtype).T
    return matrix_view(image, c["c_addr"], c["c_stride"], c["m"], c["n"], dtype)


def write_result(config, image, c, a, b):
    """Command ``c`` (a dict of :data:`FIELDS`) with operands ``a``, ``b``:
    read its old C, bias and scale words from ``image``, compute C with
    :func:`gemm_golden` and write it into ``image``."""
    n = c["n"]
    out = c_view(config, image, c)
    if config.bf16:
        c_old = out.copy() if c["accumulate"] else None
        bias = matrix_view(image, c["bias_addr"], 4, 1, n, "<f4")[0] if c["bias"] else None
        out[...] = bf16_gemm_golden(config, a, b, c_old=c_old, bias=bias,
                                    bf16_out=bool(c["bf16_out"]))
        return
    c_old = out.astype(np.int64) if c["accumulate"] else None
    bias = matrix_view(image, c["bias_addr"], 4, 1, n, "<i4")[0] if c["bias"] else None
    multiplier, shift = c["multiplier"], c["shift"]
    if c["per_channel"]:
        multiplier, shift = split_scale_words(matrix_view(image, c["scale_addr"], 4, 1, n, "<u4")[0])
    out[...] = gemm_golden(config, a, b, c_old=c_old, bias=bias, int8=bool(c["int8"]),
                           int16=bool(c["int16"]), multiplier=multiplier, shift=shift)


def run_commands(config, image, commands):
    """Run ``commands`` (dicts with the command fields) in order on a byte
    image of memory (a ``uint8`` array, updated in place) as the engine does.
    Returns the list of error flags."""
    operand = operand_dtype(config)
    errors = []
    for cmd in commands:
        c = command_fields(cmd)
        bad = command_rejected(config, c)
        errors.append(bad)
        if bad:
            continue
        a = matrix_view(image, c["a_addr"], c["a_stride"], c["m"], c["k"], operand)
        if config.weight_bits == 4:
            b = packed_b_view(image, c["b_addr"], c["b_stride"], c["k"], c["n"])
        elif c["w4"] and getattr(config, "weight_group", 0):     # q * its group's multiplier
            b = (packed_b_view(image, c["b_addr"], c["b_stride"], c["k"], c["n"])
                 * group_mults_view(config, image, c["mult_addr"], c["k"], c["n"]))
        else:
            b = matrix_view(image, c["b_addr"], c["b_stride"], c["k"], c["n"], operand)
        write_result(config, image, c, a, b)
    return errors
