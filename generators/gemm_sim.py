"""The GEMM engine's own parts: memory images of GEMM problems, results read
back, the simulation of commands in the engine's HDL harness, and the
``sim gemm`` flags and stimulus.

The simulated Verilog is that of :class:`~bertforge.sim.gemm_harness.GemmHarness`
(the engine plus an HDL testbench memory); Python lays out the matrices in a
memory image, runs :mod:`bertforge.sim.gemm_tb` and reads the results back.
"""

import dataclasses

import numpy as np

from bertforge.rtl.errors import ParameterError
from bertforge.sim.gemm_harness import harness_verilog
from .cli_common import CliError, load_int_matrix, positive_int
from .simulate import make_stimulus, simulate

__all__ = ["MemoryImage", "layout_problems", "read_matrix", "simulate_gemm"]

#: Largest simulated memory (the harness holds all of it): 2**26 bytes.
MAX_SIM_ADDR_WIDTH = 26


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
        view = np.ndarray(matrix.shape, dtype=dtype, buffer=self.image, offset=addr,
                          strides=(stride, np.dtype(dtype).itemsize))
        view[...] = matrix


def place_dense(memory, p, b, pad):
    """B as it is, after A: the command fields ``b_addr``, ``b_stride``."""
    esize = memory.config.width // 8
    b_addr, b_stride = memory.place(*b.shape, esize, pad)
    memory.write(b_addr, b_stride, b, f"<i{esize}")
    return {"b_addr": b_addr, "b_stride": b_stride}


def layout_problems(config, problems, rng=None, *, extreme=False, b_key="b", place_b=place_dense):
    """Place the matrices of ``problems`` in a memory image.

    Each problem is a dict with ``m, k, n`` and optional ``a``, ``b`` (the
    matrices; random if absent), ``accumulate``, ``int8``, ``multiplier``,
    ``shift``, ``c_old`` (initial C for accumulate; random if absent),
    ``pad`` (extra bytes per row, to test strides), ``extreme`` (operands
    only -128 and 127), ``same_c_as`` (index of an
    earlier problem whose C this one accumulates into) and ``raw`` (fields
    used as they are: for bad commands). ``place_b(memory, problem, b, pad)``
    writes B (the problem's ``b_key``) and returns its command fields: the
    sparse engine places compressed weights there. Returns ``(image, commands)``.
    """
    rng = rng or np.random.default_rng(0)
    esize = config.width // 8
    lo, hi = -(1 << (config.width - 1)), (1 << (config.width - 1)) - 1
    memory = MemoryImage(config)
    commands = []

    for index, p in enumerate(problems):
        if "raw" in p:
            commands.append(dict(p["raw"], tag=p.get("tag", index)))
            continue
        m, k, n = p["m"], p["k"], p["n"]
        pad = p.get("pad", 0)
        int8 = bool(p.get("int8"))
        if "a" in p:
            a, b = np.asarray(p["a"]), np.asarray(p[b_key])
        elif p.get("extreme", extreme):
            a = rng.choice([lo, hi], size=(m, k))
            b = rng.choice([lo, hi], size=(k, n))
        else:
            a = rng.integers(lo, hi + 1, size=(m, k))
            b = rng.integers(lo, hi + 1, size=(k, n))
        a_addr, a_stride = memory.place(m, k, esize, pad)
        b_fields = place_b(memory, p, b, pad)
        memory.write(a_addr, a_stride, a, f"<i{esize}")
        if "same_c_as" in p:
            prior = commands[p["same_c_as"]]
            c_addr, c_stride = prior["c_addr"], prior["c_stride"]
        else:
            c_addr, c_stride = memory.place(m, n, 1 if int8 else 4, pad)
            if p.get("accumulate"):
                c_old = p.get("c_old")
                if c_old is None:
                    c_old = rng.integers(-(1 << 31), 1 << 31, size=(m, n))
                memory.write(c_addr, c_stride, np.asarray(c_old), "<i4")
        commands.append({
            "m": m, "k": k, "n": n, "a_addr": a_addr, "c_addr": c_addr, "a_stride": a_stride,
            "c_stride": c_stride, **b_fields,
            "accumulate": int(bool(p.get("accumulate"))), "int8": int(int8),
            "multiplier": int(p.get("multiplier", 1)), "shift": int(p.get("shift", 0)),
            "tag": int(p.get("tag", index)) & 0xFF})
    return memory.image, commands


def read_matrix(config, image, cmd):
    """C of command ``cmd`` from a memory image (int32 or int8 values, int64)."""
    dtype = np.dtype("<i1" if cmd["int8"] else "<i4")
    view = np.ndarray((cmd["m"], cmd["n"]), dtype=dtype, buffer=image, offset=cmd["c_addr"],
                      strides=(cmd["c_stride"], dtype.itemsize))
    return view.astype(np.int64)


def simulate_gemm(config, image, commands, *, seed=0, lat_min=1, lat_mask=0, p_req=0, p_data=0,
                  p_wr=0, p_cmd=0, p_done=0, bw=0, waves=False, workdir=None, quiet=True,
                  harness=harness_verilog, testbench="bertforge.sim.gemm_tb"):
    """Run ``commands`` on memory ``image`` in the emitted harness (Verilator;
    ``harness`` and ``testbench`` choose another engine's harness and
    cocotb module).

    Returns the testbench's result dict (``cycles``, ``model_cycles``,
    ``ideal_cycles``, ``utilization``, ``match``, ``phases``, ...) with
    ``image``, the memory image read back from the hardware (None if the
    testbench wrote none).
    """
    spec = {"image": image, "commands": commands, "seed": seed, "lat_min": lat_min,
            "lat_mask": lat_mask, "p_req": p_req, "p_data": p_data, "p_wr": p_wr, "p_cmd": p_cmd,
            "p_done": p_done, "bw": bw}
    result = simulate(config, testbench, spec, harness=harness, waves=waves, workdir=workdir,
                      quiet=quiet)
    if not isinstance(result.get("image"), np.ndarray):
        result["image"] = None
    return result


# ---- bertforge sim gemm

def add_sim_args(sub):
    sub.add_argument("--m", type=positive_int, help="rows of A and C")
    sub.add_argument("--k", type=positive_int, help="columns of A, rows of B")
    sub.add_argument("--n", type=positive_int, help="columns of B and C")
    sub.add_argument("--int8", action="store_true", help="requantize C to int8")
    sub.add_argument("--multiplier", type=int, default=1, help="requantization multiplier (default 1)")
    sub.add_argument("--shift", type=int, default=0, help="requantization shift 0..63 (default 0)")
    sub.add_argument("--mem-bytes-per-cycle", type=int, default=0, metavar="BYTES",
                     help="read bandwidth of the simulated memory (default: one full beat per cycle)")
    sub.add_argument("--mem-latency", type=int, default=1, metavar="CYCLES",
                     help="read latency of the simulated memory, 1..255 (default 1)")
    sub.add_argument("--a", metavar="A.npy", help="your A (M x K)")
    sub.add_argument("--b", metavar="B.npy", help="your B (K x N)")
    sub.add_argument("--out", metavar="C.npy", help="where to write C (with --a/--b)")


def _check_knobs(args):
    if not 0 <= args.shift <= 63:
        raise CliError(f"--shift must be in 0..63, not {args.shift}")
    if not 0 <= args.multiplier < 1 << 32:
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


def problem_bytes(config, m, k, n, int8):
    esize = config.width // 8
    return (m * k + k * n) * esize + m * n * (1 if int8 else 4) + 3 * 32 + config.mem_bytes * 2


def _problem(config, args, m, k, n, **operands):
    limit = (1 << config.dim_width) - 1
    if max(m, k, n) > limit:
        raise CliError(f"M, K and N must be at most 2**dim_width - 1 = {limit}")
    problem = {"m": m, "k": k, "n": n, "int8": args.int8, "multiplier": args.multiplier,
               "shift": args.shift, **operands}
    config = sim_config(config, problem_bytes(config, m, k, n, args.int8),
                        args.cfg_addr_width is not None)
    return make_stimulus(config, {"m": m, "k": k, "n": n}, f"{m}x{k}x{n}", config=config,
                         problem=problem)


def user_stimulus(config, args):
    _check_knobs(args)
    if not (args.a and args.b and args.out):
        raise CliError("--a, --b and --out go together: give all three")
    a = load_int_matrix(args.a, "A", config.width)
    b = load_int_matrix(args.b, "B", config.width)
    check_product_shapes(a, b)
    return _problem(config, args, a.shape[0], a.shape[1], b.shape[1], a=a, b=b)


def check_product_shapes(a, b):
    if a.shape[1] != b.shape[0] or 0 in a.shape or 0 in b.shape:
        raise CliError(f"A is {a.shape[0]} x {a.shape[1]} and B is {b.shape[0]} x {b.shape[1]}; "
                       "A must be M x K and B K x N, all at least 1")


def random_stimulus(config, args, rng):
    _check_knobs(args)
    if None in (args.m, args.k, args.n):
        raise CliError("--m, --k and --n are required (or give --a, --b and --out)")
    return _problem(config, args, args.m, args.k, args.n)


def run(config, stimulus, args):
    image, commands = layout_problems(config, [stimulus["problem"]], np.random.default_rng(args.seed))
    p, s = int(args.gap * 256), int(args.stall * 256)
    result = simulate_gemm(config, image, commands, seed=args.seed, lat_min=args.mem_latency,
                           p_req=s, p_data=p, p_wr=s, p_cmd=p, p_done=s,
                           bw=args.mem_bytes_per_cycle, waves=args.waves, quiet=args.json)
    if result["image"] is not None:
        c = read_matrix(config, result["image"], commands[0])
        result["output"] = c.astype(np.int8 if args.int8 else np.int32)
    return result
