"""Simulate the GEMM engine: the Python API behind ``bertforge sim gemm`` and
``bertforge bench gemm``.

The emitted Verilog is that of :class:`~bertforge.sim.gemm_harness.GemmHarness`
(the engine plus an HDL testbench memory); Python lays out the matrices in a
memory image, runs :mod:`bertforge.sim.gemm_tb` and reads the results back.
"""

import functools
import sys
import tempfile
from pathlib import Path

import numpy as np
from bertforge.sim import runner
from bertforge.sim import gemm_harness
from bertforge.sim.gemm_harness import harness_name
from bertforge.rtl.errors import ParameterError

__all__ = ["harness_verilog", "MemoryImage", "layout_problems", "read_matrix", "simulate_gemm"]


#: Verilog of the harness around a config's engine (memoized: emission takes seconds).
harness_verilog = functools.lru_cache(maxsize=16)(gemm_harness.harness_verilog)


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


def layout_problems(config, problems, rng=None, *, extreme=False):
    """Place the matrices of ``problems`` in a memory image.

    Each problem is a dict with ``m, k, n`` and optional ``a``, ``b`` (the
    matrices; random if absent), ``accumulate``, ``int8``, ``multiplier``,
    ``shift``, ``c_old`` (initial C for accumulate; random if absent),
    ``pad`` (extra bytes per row, to test strides), ``extreme`` (operands
    only -128 and 127), ``same_c_as`` (index of an
    earlier problem whose C this one accumulates into) and ``raw`` (fields
    used as they are: for bad commands). Returns ``(image, commands)``.
    """
    rng = rng or np.random.default_rng(0)
    esize = config.width // 8
    lo, hi = -(1 << (config.width - 1)), (1 << (config.width - 1)) - 1
    memory = MemoryImage(config)
    place, write, image = memory.place, memory.write, memory.image
    commands = []

    for index, p in enumerate(problems):
        if "raw" in p:
            commands.append(dict(p["raw"], tag=p.get("tag", index)))
            continue
        m, k, n = p["m"], p["k"], p["n"]
        pad = p.get("pad", 0)
        int8 = bool(p.get("int8"))
        if "a" in p:
            a, b = np.asarray(p["a"]), np.asarray(p["b"])
        elif p.get("extreme", extreme):
            a = rng.choice([lo, hi], size=(m, k))
            b = rng.choice([lo, hi], size=(k, n))
        else:
            a = rng.integers(lo, hi + 1, size=(m, k))
            b = rng.integers(lo, hi + 1, size=(k, n))
        a_addr, a_stride = place(m, k, esize, pad)
        b_addr, b_stride = place(k, n, esize, pad)
        write(a_addr, a_stride, a, f"<i{esize}")
        write(b_addr, b_stride, b, f"<i{esize}")
        if "same_c_as" in p:
            prior = commands[p["same_c_as"]]
            c_addr, c_stride = prior["c_addr"], prior["c_stride"]
        else:
            c_addr, c_stride = place(m, n, 1 if int8 else 4, pad)
            if p.get("accumulate"):
                c_old = p.get("c_old")
                if c_old is None:
                    c_old = rng.integers(-(1 << 31), 1 << 31, size=(m, n))
                write(c_addr, c_stride, np.asarray(c_old), "<i4")
        commands.append({
            "m": m, "k": k, "n": n, "a_addr": a_addr, "b_addr": b_addr, "c_addr": c_addr,
            "a_stride": a_stride, "b_stride": b_stride, "c_stride": c_stride,
            "accumulate": int(bool(p.get("accumulate"))), "int8": int(int8),
            "multiplier": int(p.get("multiplier", 1)), "shift": int(p.get("shift", 0)),
            "tag": int(p.get("tag", index)) & 0xFF})
    return image, commands


def read_matrix(config, image, cmd):
    """C of command ``cmd`` from a memory image (int32 or int8 values, int64)."""
    dtype = np.dtype("<i1" if cmd["int8"] else "<i4")
    view = np.ndarray((cmd["m"], cmd["n"]), dtype=dtype, buffer=image, offset=cmd["c_addr"],
                      strides=(cmd["c_stride"], dtype.itemsize))
    return view.astype(np.int64)


def simulate_gemm(config, image, commands, *, seed=0, lat_min=1, lat_mask=0, p_req=0, p_data=0,
                  p_wr=0, p_cmd=0, p_done=0, bw=0, waves=False, workdir=None, quiet=True,
                  verilog=None, testbench="bertforge.sim.gemm_tb"):
    """Run ``commands`` on memory ``image`` in the emitted harness (Verilator;
    ``verilog`` and ``testbench`` choose another engine's harness and
    cocotb module).

    Returns the testbench's result dict (``cycles``, ``model_cycles``,
    ``ideal_cycles``, ``utilization``, ``match``, ...) with ``image``, the
    memory image read back from the hardware.
    """
    text = verilog or harness_verilog(config)
    top = harness_name(config)
    if not runner.is_built(text, top, waves=waves) and not quiet:
        print(f"building the Verilator model of {top} (once per design; cached after)...",
              file=sys.stderr, flush=True)
    runner.build(text, top, waves=waves)
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"bertforge-{top}-"))
    work.mkdir(parents=True, exist_ok=True)
    np.save(work / "image.npy", image)
    spec = {"config": config.to_dict(), "image": str(work / "image.npy"), "commands": commands,
            "seed": seed, "lat_min": lat_min, "lat_mask": lat_mask, "p_req": p_req,
            "p_data": p_data, "p_wr": p_wr, "p_cmd": p_cmd, "p_done": p_done, "bw": bw}
    result = runner.run(text, top, testbench, spec, waves=waves, workdir=work)
    path = Path(result.get("image", ""))
    result["image"] = np.load(path) if path.is_file() else None
    return result
