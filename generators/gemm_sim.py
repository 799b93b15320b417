"""The GEMM engine's own parts: memory images of GEMM problems, results read
back, the simulation of commands in the engine's HDL harness, and the
``sim gemm`` flags and stimulus.

The simulated Verilog is that of :class:`~bertforge.sim.gemm_harness.GemmHarness`
(the engine plus an HDL testbench memory); Python lays out the matrices in a
memory image, runs :mod:`bertforge.sim.gemm_tb` and reads the results back.
"""

import dataclasses
import math
import sys

import ml_dtypes
import numpy as np

from bertforge.rtl.errors import ParameterError
from bertforge.sim.fixed_golden import channel_scale_words, command_scale, scale_words
from bertforge.sim.gemm_golden import c_view, matrix_view, operand_dtype, output_dtype
from bertforge.sim.gemm_harness import MAX_COMMANDS, harness_verilog
from bertforge.sim.lowbit_golden import pack_int4
from bertforge.sim.payload_np import pack_codes
from bertforge.sim.sdram import CHIPS
from .cli_common import (CliError, add_operand_files, bounded_int, check_given_sizes, load_int_matrix,
                         load_npy, positive_int, set_help)
from .simulate import make_stimulus, simulate
from .systolic_sim import load_bf16_matrix

__all__ = ["MemoryImage", "layout_problems", "random_operands", "read_matrix", "simulate_gemm"]

#: Largest simulated memory (the harness holds all of it): 2**26 bytes.
MAX_SIM_ADDR_WIDTH = 26
#: Random biases are integers in [-BIAS_RANGE, BIAS_RANGE].
BIAS_RANGE = 1 << 16


class MemoryImage:
    """A zeroed memory image of ``2**addr_width`` bytes and a cursor that
    places matrices one after another (16-byte aligned, ``pad`` extra bytes
    per row to test strides)."""

    def __init__(self, config):
        self.config = config
        self.image = np.zeros(1 << config.addr_width, dtype=np.uint8)
        self.cursor = 0

    def place(self, rows, cols, itemsize, pad=0):
        """Room for a ``rows`` x ``cols`` matrix: ``(address, row stride)``."""
        stride = cols * itemsize + pad
        addr = self.cursor
        self.cursor = -(-(addr + rows * stride + 16) // 16) * 16
        if self.cursor > self.image.size:
            raise ParameterError(f"the matrices need more than the {self.image.size} bytes of a "
                             f"{self.config.addr_width}-bit address space; raise addr_width")
        return addr, stride

    def write(self, addr, stride, matrix, dtype):
        matrix_view(self.image, addr, stride, *matrix.shape, dtype)[...] = matrix

    def vector(self, values, dtype):
        """Place and write a vector of 4-byte values: its address."""
        values = np.asarray(values).reshape(1, -1)
        addr, stride = self.place(*values.shape, 4)
        self.write(addr, stride, values, dtype)
        return addr


def place_dense(memory, p, b, pad):
    """B as it is, after A: the command fields ``b_addr``, ``b_stride``.
    With 4-bit weights (``weight_bits=4``) B is packed two K rows to a
    byte row (``pack_int4(B.T).T``, a zero row past an odd K); so is the
    B of a problem with ``codes`` (an engine with ``weight_group``: 4-bit
    weights, ``codes`` their ``ceil(K / weight_group)`` x N multiplier
    codes 0..15, placed as two a byte along N; the command gets ``w4``
    and ``mult_addr``)."""
    codes = p.get("codes")
    if memory.config.weight_bits == 4 or codes is not None:
        b = np.asarray(b)
        even = np.concatenate([b, np.zeros((b.shape[0] % 2, b.shape[1]), b.dtype)])
        packed = pack_int4(even.T).T
        b_addr, b_stride = memory.place(*packed.shape, 1, pad)
        memory.write(b_addr, b_stride, packed, np.uint8)
        fields = {"b_addr": b_addr, "b_stride": b_stride}
        if codes is not None:
            packed = pack_codes(codes)
            mult_addr, _ = memory.place(*packed.shape, 1)
            memory.write(mult_addr, packed.shape[1], packed, np.uint8)
            fields.update(w4=1, mult_addr=mult_addr)
        return fields
    esize = memory.config.width // 8
    b_addr, b_stride = memory.place(*b.shape, esize, pad)
    memory.write(b_addr, b_stride, b, operand_dtype(memory.config))
    return {"b_addr": b_addr, "b_stride": b_stride}


def random_operands(config, rng, m, k, n, *, extreme=False):
    """Random A (``m`` x ``k``) and B (``k`` x ``n``) of the config's operand
    width; ``extreme``: only its most negative and most positive values.
    bf16: normal values times a power of two from ``2**-8`` to ``2**8`` per
    matrix (``ml_dtypes.bfloat16``; ``extreme``: +-the largest and smallest
    normal bf16 values)."""
    if config.bf16:
        def draw(shape):
            if extreme:
                info = ml_dtypes.finfo(ml_dtypes.bfloat16)
                values = np.array([float(info.max), float(info.tiny)])
                return (rng.choice(values, shape) * rng.choice([-1.0, 1.0], shape)).astype(
                    ml_dtypes.bfloat16)
            scale = 2.0 ** int(rng.integers(-8, 9))
            return (rng.standard_normal(shape) * scale).astype(ml_dtypes.bfloat16)
        return draw((m, k)), draw((k, n))
    lo, hi = -(1 << (config.width - 1)), (1 << (config.width - 1)) - 1
    b_lo, b_hi = (-8, 7) if config.weight_bits == 4 else (lo, hi)
    if extreme:
        return rng.choice([lo, hi], size=(m, k)), rng.choice([b_lo, b_hi], size=(k, n))
    return rng.integers(lo, hi + 1, size=(m, k)), rng.integers(b_lo, b_hi + 1, size=(k, n))


def _bf16_epilogue(memory, p, n, rng):
    """The bias and output format of problem ``p`` for a bf16 engine: float32
    bias (N values, or True for random ones), ``bf16_out``."""
    for key in ("int8", "int16", "scale", "multipliers"):
        if p.get(key) is not None and np.any(p.get(key)):
            raise ParameterError(f"a bf16 engine does not requantize: no {key}")
    fields = {"bf16_out": int(bool(p.get("bf16_out")))}
    bias = p.get("bias")
    if bias is not None and np.ndim(bias) == 0:     # a flag: random or none
        bias = rng.standard_normal(n).astype(np.float32) if bias else None
    if bias is not None:
        bias = np.asarray(bias)
        if bias.shape != (n,) or bias.dtype.kind != "f":
            raise ParameterError(f"bias must be {n} floats (one per column of C), not "
                                 f"{bias.dtype} of shape {bias.shape}")
        fields.update(bias=1, bias_addr=memory.vector(bias.astype(np.float32), "<f4"))
    return fields


def _epilogue(memory, p, n, rng):
    """The bias and requantization of problem ``p`` (C has ``n`` columns):
    vectors placed in ``memory``, the command fields."""
    if memory.config.bf16:
        return _bf16_epilogue(memory, p, n, rng)
    int16 = int(bool(p.get("int16")))
    fields = {"int8": int(bool(p.get("int8"))), "int16": int16,
              "multiplier": int(p.get("multiplier", 1)), "shift": int(p.get("shift", 0))}
    narrow = {"int8": 1 - int16, "int16": int16}    # a scale without int16 means int8
    bias = p.get("bias")
    if bias is not None and np.ndim(bias) == 0:     # a flag: random or none
        bias = rng.integers(-BIAS_RANGE, BIAS_RANGE + 1, n) if bias else None
    if bias is not None:
        bias = np.asarray(bias)
        if bias.shape != (n,) or bias.dtype.kind not in "iu":
            raise ParameterError(f"bias must be {n} integers (one per column of C), not "
                                 f"{bias.dtype} of shape {bias.shape}")
        if bias.min() < -(1 << 31) or bias.max() >= 1 << 31:
            raise ParameterError("bias values must be int32")
        fields.update(bias=1, bias_addr=memory.vector(bias, "<i4"))
    words = None
    if p.get("scale") is not None:
        scale = np.asarray(p["scale"], dtype=np.float64)
        fields.update(narrow)
        if scale.ndim == 0:
            fields["multiplier"], fields["shift"] = command_scale(float(scale))
        elif scale.shape == (n,):
            words = channel_scale_words(scale)
        else:
            raise ParameterError(f"scale must be one number or {n} (one per column of C), "
                                 f"not shape {scale.shape}")
    elif p.get("multipliers") is not None:
        words = scale_words(p["multipliers"], p["shifts"])
        if words.shape != (n,):
            raise ParameterError(f"multipliers and shifts must have {n} values (one per column "
                                 f"of C), not {words.size}")
    if words is not None:
        fields.update(narrow, per_channel=1, scale_addr=memory.vector(words, "<u4"))
    return fields


def layout_problems(config, problems, rng=None, *, extreme=False, b_key="b", place_b=place_dense):
    """Place the matrices of ``problems`` in a memory image.

    Each problem is a dict with ``m, k, n`` and optional ``a``, ``b`` (the
    matrices; random if absent), ``accumulate``, ``int8`` or ``int16``,
    ``multiplier``, ``shift``, ``bias`` (N integers, or True for random
    ones in ``+-BIAS_RANGE``), ``scale`` (real: one for the command's
    multiplier and shift, or N for per-channel scale words; implies
    ``int8`` unless ``int16``), ``multipliers`` and ``shifts`` (N integers
    each: per-channel scale words as they are; the same), ``c_old`` (initial C for
    accumulate; random if absent), for a bf16 engine ``bf16_out`` (A, B,
    bias and ``c_old`` are then floats; no requantization),
    ``pad`` (extra bytes per row, to test strides), ``extreme`` (operands
    only -128 and 127), ``transpose_c`` (C stored transposed: N rows of M
    elements; an engine with ``transpose_c``), ``same_c_as`` (index of an
    earlier problem whose C this one accumulates into) and ``raw`` (fields
    used as they are: for bad commands). ``place_b(memory, problem, b, pad)``
    writes B (the problem's ``b_key``) and returns its command fields: the
    sparse engine places compressed weights there. Returns ``(image, commands)``.
    """
    rng = rng or np.random.default_rng(0)
    esize = config.width // 8
    memory = MemoryImage(config)
    commands = []

    for index, p in enumerate(problems):
        if "raw" in p:
            commands.append(dict(p["raw"], tag=p.get("tag", index)))
            continue
        m, k, n = p["m"], p["k"], p["n"]
        pad = p.get("pad", 0)
        if "a" in p:
            a, b = np.asarray(p["a"]), np.asarray(p[b_key])
        else:
            a, b = random_operands(config, rng, m, k, n, extreme=p.get("extreme", extreme))
        a_addr, a_stride = memory.place(m, k, esize, pad)
        b_fields = place_b(memory, p, b, pad)
        memory.write(a_addr, a_stride, a, operand_dtype(config))
        fields = _epilogue(memory, p, n, rng)
        if "same_c_as" in p:
            prior = commands[p["same_c_as"]]
            c_addr, c_stride = prior["c_addr"], prior["c_stride"]
        elif p.get("transpose_c"):
            c_addr, c_stride = memory.place(n, m, output_dtype(fields, config).itemsize, pad)
            fields["transpose_c"] = 1
        else:
            c_addr, c_stride = memory.place(m, n, output_dtype(fields, config).itemsize, pad)
            if p.get("accumulate"):
                c_old = p.get("c_old")
                if c_old is None and config.bf16:
                    c_old = rng.standard_normal((m, n)).astype(np.float32)
                elif c_old is None:
                    c_old = rng.integers(-(1 << 31), 1 << 31, size=(m, n))
                memory.write(c_addr, c_stride, np.asarray(c_old), "<f4" if config.bf16 else "<i4")
        commands.append({
            "m": m, "k": k, "n": n, "a_addr": a_addr, "c_addr": c_addr, "a_stride": a_stride,
            "c_stride": c_stride, **b_fields, "accumulate": int(bool(p.get("accumulate"))),
            **fields, "tag": int(p.get("tag", index)) & 0xFF})
    return memory.image, commands


def read_matrix(config, image, cmd):
    """C of command ``cmd`` from a memory image (int32, int16 or int8 values,
    int64; bf16 engine: float32, or bfloat16 with ``bf16_out``)."""
    c = c_view(config, image, cmd)
    return c.copy() if config is not None and config.bf16 else c.astype(np.int64)


def simulate_gemm(config, image, commands, *, seed=0, lat_min=1, lat_mask=0, p_req=0, p_data=0,
                  p_wr=0, p_cmd=0, p_done=0, bw=0, waves=False, workdir=None, quiet=True,
                  harness=harness_verilog, testbench="bertforge.sim.gemm_tb", memory=None,
                  clock_mhz=100.0):
    """Run ``commands`` on memory ``image`` in the emitted harness (Verilator;
    ``harness`` and ``testbench`` choose another engine's harness and
    cocotb module; ``memory``, ``clock_mhz``: an sdr
    :class:`~bertforge.sim.sdram.MemoryConfig` whose timing the simulated
    memory follows, ``lat_min`` then including its CAS latency).

    Returns the testbench's result dict (``cycles``, ``model_cycles``,
    ``ideal_cycles``, ``utilization``, ``match``, ``phases``, ...) with
    ``image``, the memory image read back from the hardware (None if the
    testbench wrote none).
    """
    spec = {"image": image, "commands": commands, "seed": seed, "lat_min": lat_min,
            "lat_mask": lat_mask, "p_req": p_req, "p_data": p_data, "p_wr": p_wr, "p_cmd": p_cmd,
            "p_done": p_done, "bw": bw}
    extra = ()
    if memory is not None and not memory.ideal:    # harness_verilog(config, harness_class, memory, clock)
        extra = (None, memory, clock_mhz) if harness is harness_verilog else (memory, clock_mhz)
        spec["sdram_bw"] = memory.sustained_bytes_per_cycle(config.mem_width, clock_mhz)
    from bertforge.sim.gemm_cycles import gemm_cycles
    cycles = (gemm_cycles(config, commands, lat=lat_min, bw=bw)["cycles"]
              if harness is harness_verilog else None)    # (another engine's: no estimate)
    result = simulate(config, testbench, spec, harness=harness, extra=extra, waves=waves,
                      workdir=workdir, quiet=quiet, cycles=cycles)
    if not isinstance(result.get("image"), np.ndarray):
        result["image"] = None
    return result


# ---- bertforge sim gemm

def add_sim_args(sub):
    set_help(sub, "--addr-width", f"default: what the matrices need (the simulated memory "
                                  f"holds at most 2**{MAX_SIM_ADDR_WIDTH} bytes)")
    sub.add_argument("--m", type=positive_int, help="rows of A and C (needed without --a/--b)")
    sub.add_argument("--k", type=positive_int, help="columns of A, rows of B (needed without --a/--b)")
    sub.add_argument("--n", type=positive_int, help="columns of B and C (needed without --a/--b)")
    sub.add_argument("--int8", action="store_true", help="requantize C to int8")
    sub.add_argument("--int16", action="store_true",
                     help="requantize C to int16 (with --scale too: int16 instead of int8)")
    sub.add_argument("--multiplier", type=int, help="requantization multiplier (default 1)")
    sub.add_argument("--shift", type=int, help="requantization shift 0..63 (default 0)")
    sub.add_argument("--bias", nargs="?", const=True, metavar="BIAS.npy",
                     help="add a bias to every row of C: N int32 values (random ones without a file)")
    sub.add_argument("--scale", nargs="?", const=True, metavar="SCALE.npy",
                     help="write int8 (--int16: int16) C = saturate(round((A @ B + bias) * scale)): one positive "
                          "scale (shape () or (1,)) or one per column of C (N); random per-column "
                          "scales without a file")
    sub.add_argument("--batch", type=bounded_int(MAX_COMMANDS, "the harness's command queue"),
                     metavar="H", help="H commands of this shape back to back, each with its own "
                                       "random operands (default 1)")
    sub.add_argument("--mem-bytes-per-cycle", type=int, default=0, metavar="BYTES",
                     help="read bandwidth of the simulated memory (default: one full beat per cycle)")
    sub.add_argument("--mem-latency", type=int, default=1, metavar="CYCLES",
                     help="read latency of the simulated memory, 1..255 (default 1)")
    sub.add_argument("--sdram", choices=sorted(CHIPS), metavar="CHIP",
                     help="the simulated memory follows this SDRAM's timing (ULX3S chips: "
                          f"{', '.join(sorted(CHIPS))}) at --clock-mhz; --mem-latency is then the "
                          "controller's, the CAS latency is added")
    sub.add_argument("--clock-mhz", type=float, default=100.0, metavar="MHZ",
                     help="the accelerator's clock for --sdram's timings (default 100)")
    sub.add_argument("--bf16-out", action="store_true",
                     help="with --arith bf16: write C rounded to bfloat16 (the .npy still float32)")
    add_operand_files(sub, "your A (M x K); floats with --arith bf16 (rounded to bf16)",
                      "your B (K x N)", "where to write C (with --a/--b; float32 with --arith bf16)")


def _check_knobs(args, config):
    if config.bf16:
        given = [flag for flag, value in (("--int8", args.int8), ("--int16", args.int16),
                                          ("--scale", args.scale), ("--multiplier", args.multiplier),
                                          ("--shift", args.shift)) if value not in (None, False)]
        if given:
            raise CliError(f"{given[0]} requantizes; the bf16 engine does not (C is float32, or "
                           "bfloat16 with --bf16-out)")
    elif args.bf16_out:
        raise CliError("--bf16-out needs --arith bf16")
    if args.int8 and args.int16:
        raise CliError("--int8 and --int16 each choose C's type; give one")
    if args.scale is not None and (args.multiplier is not None or args.shift is not None):
        raise CliError("--scale sets the requantization; leave out --multiplier and --shift")
    if args.shift is not None and not 0 <= args.shift <= 63:
        raise CliError(f"--shift must be in 0..63, not {args.shift}")
    if args.multiplier is not None and not 0 <= args.multiplier < 1 << 32:
        raise CliError(f"--multiplier must be in 0..2**32-1, not {args.multiplier}")
    if not 1 <= args.mem_latency <= 255:
        raise CliError(f"--mem-latency must be in 1..255, not {args.mem_latency}")
    if not 0 <= args.mem_bytes_per_cycle < 1 << 16:
        raise CliError(f"--mem-bytes-per-cycle must be in 0..65535, not {args.mem_bytes_per_cycle}")


def sim_config(config, need_bytes, user_set):
    """``config`` with an ``addr_width`` the simulated memory can hold."""
    if user_set:
        if config.addr_width > MAX_SIM_ADDR_WIDTH:
            raise CliError(f"the simulated memory is 2**addr_width bytes; use --addr-width "
                           f"<= {MAX_SIM_ADDR_WIDTH} (or leave it out)")
        return config
    width = max(12, (need_bytes - 1).bit_length())
    if width > MAX_SIM_ADDR_WIDTH:
        raise CliError(f"the matrices need {need_bytes} bytes; the simulated memory holds at most "
                       f"2**{MAX_SIM_ADDR_WIDTH}")
    return dataclasses.replace(config, addr_width=width)


def problem_bytes(config, m, k, n, int8=False, vectors=0, *, int16=False, bf16_out=False):
    """Bytes one problem takes in a :class:`MemoryImage`, C of the type
    ``int8``, ``int16`` and ``bf16_out`` choose (:func:`output_dtype`), with
    ``vectors`` bias or scale vectors."""
    esize = config.width // 8
    osize = output_dtype({"int8": int8, "int16": int16, "bf16_out": bf16_out}, config).itemsize
    b_bytes = -(-k // 2) * n if config.weight_bits == 4 else k * n * esize
    return (m * k * esize + b_bytes + m * n * osize + (3 + vectors) * 32
            + vectors * 4 * n + config.mem_bytes * 2)


def _load_scale(path, n):
    """The scale of ``--scale``: a float, or ``n`` floats (one per column)."""
    scale = load_npy(path, "scale")
    if scale.dtype.kind not in "iuf":
        raise CliError(f"scale file {path} holds {scale.dtype} values; it must hold positive "
                       "real numbers")
    if scale.ndim == 0 or scale.shape == (1,):
        scale = scale.reshape(())
    elif scale.shape != (n,):
        raise CliError(f"scale file {path} has shape {scale.shape}; it must hold one scale "
                       f"(shape () or (1,)) or N = {n}, one per column of C")
    scale = scale.astype(np.float64)
    bad = scale[~(np.isfinite(scale) & (scale > 0))]
    if bad.size:
        raise CliError(f"scale file {path} holds {bad.flat[0]}; scales must be positive and finite")
    try:
        command_scale(float(scale)) if scale.ndim == 0 else channel_scale_words(scale)
    except ParameterError as error:
        raise CliError(f"scale file {path}: {error}") from None
    return float(scale) if scale.ndim == 0 else scale


def _float_bias(path, n):
    """The float32 bias of ``--bias`` for a bf16 engine: N floats."""
    bias = load_npy(path, "bias")
    if bias.dtype.kind != "f" or bias.ndim != 1 or bias.size != n:
        raise CliError(f"bias file {path} holds {bias.dtype} of shape {bias.shape}; with --arith "
                       f"bf16 it must hold N = {n} floats, one per column of C")
    return bias.astype(np.float32)


def _bias_and_scale(config, args, k, n, rng):
    """``(bias, scale)`` of the command line (None where not asked for);
    ``rng`` None (the user's matrices) refuses random ones."""
    for flag in ("bias", "scale"):
        if getattr(args, flag) is True and rng is None:
            raise CliError(f"--{flag} needs a file with --a and --b")
    bias = scale = None
    if config.bf16:
        if args.bias is True:
            bias = rng.standard_normal(n).astype(np.float32)
        elif args.bias is not None:
            bias = _float_bias(args.bias, n)
        return bias, None
    if args.bias is True:
        bias = rng.integers(-BIAS_RANGE, BIAS_RANGE + 1, n)
    elif args.bias is not None:
        bias = load_int_matrix(args.bias, "bias", 32, ndim=1)
        if bias.size != n:
            raise CliError(f"bias file {args.bias} holds {bias.size} values; it must hold "
                           f"N = {n}, one per column of C")
    if args.scale is True:
        # About 32 LSBs for one standard deviation of the sums, 2x either way per column.
        hi = (1 << (config.width - 1)) - 1
        spread = math.sqrt(k * (hi * hi / 3) ** 2 + (np.mean(np.square(bias)) if bias is not None else 0))
        scale = 32 / spread * 2.0 ** rng.uniform(-1, 1, n)
    elif args.scale is not None:
        scale = _load_scale(args.scale, n)
    return bias, scale


def _check_sizes(config, m, k, n):
    limit = (1 << config.dim_width) - 1
    if max(m, k, n) > limit:
        raise CliError(f"M, K and N must be at most 2**dim_width - 1 = {limit}")


def _stimulus(config, args, m, k, n, operands, rng=None):
    """The problems of ``operands`` (``(a, b)`` pairs), with the command line's
    requantization, bias and scale."""
    bias, scale = _bias_and_scale(config, args, k, n, rng)
    int16 = args.int16
    int8 = (args.int8 or scale is not None) and not int16
    multiplier = 1 if args.multiplier is None else args.multiplier
    shift = 0 if args.shift is None else args.shift
    if config.bf16:
        problems = [{"m": m, "k": k, "n": n, "a": a, "b": b, "bias": bias,
                     "bf16_out": args.bf16_out} for a, b in operands]
    else:
        problems = [{"m": m, "k": k, "n": n, "a": a, "b": b, "int8": int8, "int16": int16,
                     "multiplier": multiplier, "shift": shift, "bias": bias, "scale": scale}
                    for a, b in operands]
    vectors = (bias is not None) + (np.ndim(scale) == 1)
    need = problem_bytes(config, m, k, n, int8, vectors, int16=int16, bf16_out=args.bf16_out)
    config = sim_config(config, len(problems) * need, args.cfg_addr_width is not None)
    what = f"{m}x{k}x{n}" + (f" x {len(problems)} commands" if len(problems) > 1 else "")
    return make_stimulus(config, {"m": m, "k": k, "n": n, "batch": len(problems)}, what,
                         config=config, problems=problems)


def user_stimulus(config, args):
    _check_knobs(args, config)
    if not (args.a and args.b and args.out):
        raise CliError("--a, --b and --out go together: give all three")
    if args.batch is not None:
        raise CliError("--batch runs random operands (--m, --k, --n); leave it out with --a and --b")
    note = None
    if config.bf16:
        (a, note_a), (b, note_b) = load_bf16_matrix(args.a, "A"), load_bf16_matrix(args.b, "B")
        note = f"{note_a}; {note_b[len('note: '):]}"
    else:
        a = load_int_matrix(args.a, "A", config.width)
        b = load_int_matrix(args.b, "B", config.weight_bits if config.weight_bits == 4
                            else config.width)
    check_product_shapes(a, b, args)
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    _check_sizes(config, m, k, n)
    stimulus = _stimulus(config, args, m, k, n, [(a, b)])
    if note:     # once the input is known to be good: one line
        print(note, file=sys.stderr)
    return stimulus


def check_product_shapes(a, b, args=None):
    """A (M x K) and B (K x N) fit each other, and the sizes ``args`` gives
    (``--m``, ``--k``, ``--n``, if any) agree with them."""
    if a.shape[1] != b.shape[0] or 0 in a.shape or 0 in b.shape:
        raise CliError(f"A is {a.shape[0]} x {a.shape[1]} and B is {b.shape[0]} x {b.shape[1]}; "
                       "A must be M x K and B K x N, all at least 1")
    check_given_sizes(args, a, m=a.shape[0], k=a.shape[1], n=b.shape[1])


def random_stimulus(config, args, rng):
    _check_knobs(args, config)
    if None in (args.m, args.k, args.n):
        raise CliError("--m, --k and --n are required (or give --a, --b and --out)")
    m, k, n = args.m, args.k, args.n
    _check_sizes(config, m, k, n)
    operands = [random_operands(config, rng, m, k, n) for _ in range(args.batch or 1)]
    return _stimulus(config, args, m, k, n, operands, rng)


def _float_lsb_error(problems, outputs):
    """Largest ``|out - clip((A @ B + bias) * scale, lo, hi)|`` over the
    outputs of ``problems`` (with real scales; int8 or int16 bounds), in
    float64: output LSBs."""
    worst = 0.0
    for p, out in zip(problems, outputs):
        acc = np.asarray(p["a"], dtype=np.int64) @ np.asarray(p["b"], dtype=np.int64)
        if p["bias"] is not None:
            acc = acc + np.asarray(p["bias"], dtype=np.int64)
        hi = (1 << (15 if p["int16"] else 7)) - 1
        reference = np.clip(acc * np.asarray(p["scale"], dtype=np.float64), -hi - 1, hi)
        worst = max(worst, float(np.abs(out - reference).max()))
    return worst


def run(config, stimulus, args):
    problems = stimulus["problems"]
    image, commands = layout_problems(config, problems, np.random.default_rng(args.seed))
    p, s = int(args.gap * 256), int(args.stall * 256)
    memory = CHIPS[args.sdram] if getattr(args, "sdram", None) else None
    if memory is not None and not 0 < args.clock_mhz <= 1000:
        raise CliError(f"--clock-mhz must be in (0, 1000], not {args.clock_mhz:g}")
    latency = args.mem_latency + (memory.cas_latency if memory else 0)
    result = simulate_gemm(config, image, commands, seed=args.seed, lat_min=latency,
                           p_req=s, p_data=p, p_wr=s, p_cmd=p, p_done=s,
                           bw=args.mem_bytes_per_cycle, waves=args.waves, quiet=args.json,
                           memory=memory, clock_mhz=args.clock_mhz)
    result["max_lsb_error_vs_float"] = None
    if result["image"] is not None:
        outputs = [read_matrix(config, result["image"], cmd) for cmd in commands]
        if config.bf16:
            result["output"] = outputs[0].astype(np.float32)
            result.update(bf16_gemm_errors(problems, outputs))
            return result
        result["output"] = outputs[0].astype(output_dtype(commands[0]).type)
        if problems[0]["scale"] is not None:
            result["max_lsb_error_vs_float"] = _float_lsb_error(problems, outputs)
    return result


def bf16_gemm_errors(problems, outputs):
    """A bf16 engine's C against float64 GEMMs of the same (bf16) operands,
    over the finite results: ``max_abs_error_vs_float64`` and
    ``max_rel_error_vs_float64``, the largest ``|C - ref|`` over
    ``|A| @ |B| + |bias|`` (the error relative to the magnitude of the
    terms summed, which cancellation does not inflate), and
    ``error_bound_vs_float64``, that ratio's bound ``gamma(K + 1) =
    (K + 1) u / (1 - (K + 1) u)`` (``u = 2**-24``; at most K + 1 rounded
    adds: the array's, the accumulator's and the bias's), plus ``2**-8``
    with ``bf16_out``. It holds unless a sum overflowed or was flushed."""
    worst_abs = worst_rel = bound = 0.0
    for p, c in zip(problems, outputs):
        a = np.asarray(p["a"], dtype=ml_dtypes.bfloat16).astype(np.float64)
        b = np.asarray(p["b"], dtype=ml_dtypes.bfloat16).astype(np.float64)
        bias = np.zeros(b.shape[1]) if p.get("bias") is None else np.asarray(p["bias"], np.float64)
        steps = (a.shape[1] + 1) * 2.0 ** -24
        bound = max(bound, steps / (1 - steps) + (2.0 ** -8 if p.get("bf16_out") else 0.0))
        with np.errstate(all="ignore"):
            ref = a @ b + bias
            scale = np.abs(a) @ np.abs(b) + np.abs(bias)
            error = np.abs(np.asarray(c, dtype=np.float64) - ref)
            finite = np.isfinite(error) & np.isfinite(scale)
            if np.any(finite):
                worst_abs = max(worst_abs, float(error[finite].max()))
                rel = np.where(scale[finite] > 0, error[finite] / np.where(scale[finite] > 0,
                                                                           scale[finite], 1),
                               np.where(error[finite] > 0, np.inf, 0.0))
                worst_rel = max(worst_rel, float(rel.max()))
    return {"max_abs_error_vs_float64": worst_abs, "max_rel_error_vs_float64": worst_rel,
            "error_bound_vs_float64": bound}
