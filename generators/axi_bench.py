"""``bertforge bench axi``: the AXI tops on the ULX3S 85F's device, built
out of context (their ports are far more than the package's pins) at
100 MHz, against the stream engines built the same way: LUTs, FFs, DSPs,
block RAMs, Fmax, and the LUTs the AXI adapters (master, register file,
program fetcher) add, part by part (a synthesis with each part kept whole).
A design that does not fit the device (the 8x8 encoder top) is synthesized
only."""

import json
import sys
from dataclasses import replace
from pathlib import Path

from bertforge.boards.build import BuildError
from bertforge.boards.ooc_build import build_out_of_context, out_of_context_sha256
from bertforge.boards.targets import array_multiply, board
from .bench import add_bench_out, write_results
from .gemm_board import gemm_top_config
from .cli_common import CliError

BLOCK = "axi"
BOARD = "ulx3s-85f"
CLOCK_MHZ = 100.0
#: The issue's bound on the LUTs the AXI adapters add over the stream engine.
MAX_OVERHEAD_PERCENT = 5.0
#: Design name -> (kind, bus, rows and cols); the order they are built in.
DESIGNS = {
    "gemm-4x4-stream": ("gemm", "stream", 4),
    "gemm-4x4-axi4": ("gemm", "axi4", 4),
    "gemm-8x8-stream": ("gemm", "stream", 8),
    "gemm-8x8-axi4": ("gemm", "axi4", 8),
    "encoder-8x8-axi4": ("encoder", "axi4", 8),
    "encoder-8x8-stream": ("encoder", "stream", 8),
}
DEFAULT_DESIGNS = [name for name in DESIGNS if name != "encoder-8x8-stream"]
#: Designs that do not fit the 85F (279 MULT18X18D of 156): synthesized only.
SYNTH_ONLY = ("encoder-8x8-axi4", "encoder-8x8-stream")
#: The AXI top's parts as the breakdown names them -> their RTLIL modules
#: (kept whole in its synthesis); the top's own cells are the program
#: fetcher and the glue.
PARTS = {"engine": "top.engine", "master": "top.master", "registers": "top.regs",
         "counters": "top.counters", "fetcher": "top"}
#: yosys cell -> the key it is counted under in a breakdown.
_CELLS = {"LUT4": "lut4", "CCU2C": "ccu2c", "TRELLIS_DPR16X4": "dpr16x4", "TRELLIS_FF": "ffs",
          "MULT18X18D": "dsps", "DP16KD": "block_rams"}


def add_bench_args(sub):
    add_bench_out(sub, BLOCK)
    sub.add_argument("--designs", default=",".join(DEFAULT_DESIGNS),
                     help=f"comma-separated designs: {', '.join(DESIGNS)} (default all but "
                          "the stream encoder)")
    sub.add_argument("--rebuild", action="store_true",
                     help="build every design again, even where DIR holds a build of it")
    sub.add_argument("--reuse-only", action="store_true",
                     help="build nothing: tabulate the designs DIR holds builds of")


def design_config(name):
    """The engine (a GemmConfig) or encoder (an EncoderConfig) of design
    ``name``: the GEMM engine of ``bertforge build``'s ECP5 defaults at that
    size; the encoder of ``configs/minilm_8x8.toml``; both with the ECP5
    multiply fields (:func:`~bertforge.boards.targets.array_multiply`)."""
    kind, _, size = DESIGNS[name]
    target = board(BOARD)
    if kind == "gemm":
        return gemm_top_config(target, CLOCK_MHZ, rows=size, cols=size).engine
    from .analyze import load_hardware
    from .encoder_sim import encoder_config
    path = Path(__file__).parent / "configs" / "minilm_8x8.toml"
    config = encoder_config(load_hardware(path), path)
    return replace(config, gemm=array_multiply(config.gemm, target.family))


def design_component(name):
    """The component of design ``name``: :class:`AxiGemmTop` for ``axi4``,
    else the bare engine or :class:`EncoderTop`."""
    from bertforge.rtl.axi_top import AxiGemmTop, engine_parts
    _, bus, _ = DESIGNS[name]
    config = design_config(name)
    if bus == "axi4":
        return AxiGemmTop(config)
    return engine_parts(config)[0](config)


def _reusable(directory, sha, name="report.json"):
    try:
        report = json.loads((directory / name).read_text())
    except (OSError, ValueError):
        return None
    return report if report.get("rtlil_sha256") == sha else None


def _counts(stat):
    """A yosys ``stat`` (``synth_ecp5_modules``) as the breakdown's keys;
    ``luts``: LUT4s plus 2 a CCU2C (a carry cell fills two of nextpnr's
    LUTs; the distributed RAMs, ``dpr16x4``, are counted apart)."""
    counts = {key: stat.get(cell, 0) for cell, key in _CELLS.items()}
    return {"luts": counts["lut4"] + 2 * counts["ccu2c"], **counts}


def synth_breakdown(component, directory, sha, *, reuse=True):
    """The yosys synth_ecp5 counts (:func:`_counts`) of an AxiGemmTop's
    :data:`PARTS`, each kept whole (``breakdown.json`` in ``directory``,
    reused while its RTLIL is unchanged)."""
    from amaranth.back import rtlil
    from .bench import synth_ecp5_modules
    cached = _reusable(directory, sha, "breakdown.json") if reuse else None
    if cached:
        return cached["parts"]
    print("  synthesizing its parts (yosys synth_ecp5, each part kept whole)", file=sys.stderr,
          flush=True)
    stats = synth_ecp5_modules(rtlil.convert(component, name="top"),
                               [module for module in PARTS.values() if module != "top"])
    parts = {part: _counts(stats[module]) for part, module in PARTS.items()}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "breakdown.json").write_text(json.dumps({"rtlil_sha256": sha, "parts": parts},
                                                         indent=1) + "\n")
    return parts


def synth_only(component, directory, sha, *, reuse=True):
    """The flattened yosys synth_ecp5 counts (:func:`_counts`) of a design
    that does not fit the device (``synth.json`` in ``directory``)."""
    from amaranth.back import rtlil
    from .bench import synth_ecp5_modules
    cached = _reusable(directory, sha, "synth.json") if reuse else None
    if cached:
        return cached["counts"]
    counts = _counts(synth_ecp5_modules(rtlil.convert(component, name="top"), [])["top"])
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "synth.json").write_text(json.dumps({"rtlil_sha256": sha, "counts": counts},
                                                     indent=1) + "\n")
    return counts


def bench_axi(out_dir, designs=DEFAULT_DESIGNS, *, reuse=True, build=True):
    rows = []
    missing = []
    for name in designs:
        kind, bus, size = DESIGNS[name]
        component = design_component(name)
        directory = Path(out_dir) / name
        sha = out_of_context_sha256(component)
        if name in SYNTH_ONLY:
            cached = _reusable(directory, sha, "synth.json")
            if not build and not cached:
                missing.append(name)
                continue
            print(f"{name}: synthesis only (does not fit the {BOARD})", file=sys.stderr, flush=True)
            rows.append({"design": name, "kind": kind, "bus": bus, "size": f"{size}x{size}",
                         "config": None, "rtlil_sha256": sha,
                         "synth": synth_only(component, directory, sha, reuse=reuse)})
            continue
        report = _reusable(directory, sha) if reuse else None
        if report is None and not build:
            missing.append(name)
            continue
        print(f"{name}: out of context on {BOARD} at {CLOCK_MHZ:g} MHz"
              + (" (reusing its build)" if report else ""), file=sys.stderr, flush=True)
        if report is None:
            try:
                report = build_out_of_context(BOARD, component, clock_mhz=CLOCK_MHZ,
                                              out_dir=directory)
            except BuildError as error:
                rows.append({"design": name, "kind": kind, "bus": bus, "size": f"{size}x{size}",
                             "error": str(error)})
                continue
        rows.append({"design": name, "kind": kind, "bus": bus, "size": f"{size}x{size}",
                     "config": design_config(name).to_dict() if kind == "gemm" else None,
                     **{key: report[key] for key in ("resources", "fmax_mhz", "timing_met",
                                                     "critical_path", "seconds",
                                                     "rtlil_sha256")}})
        if bus == "axi4":
            rows[-1]["breakdown"] = synth_breakdown(component, directory, sha, reuse=reuse)
    _overheads(rows)
    write_results(out_dir, BLOCK, rows, _COLUMNS, "bertforge bench axi", notes=_notes(missing))
    return rows


def _overheads(rows):
    """``lut_overhead_percent`` etc. of each AXI row over its stream row."""
    by_name = {row["design"]: row for row in rows}
    for row in rows:
        stream = by_name.get(row["design"].replace("-axi4", "-stream"))
        if row["bus"] != "axi4" or not stream or "resources" not in row or "resources" not in stream:
            continue
        for kind, key in (("LUTs", "lut"), ("FFs", "ff")):
            axi, base = row["resources"][kind]["used"], stream["resources"][kind]["used"]
            row[f"{key}_overhead"] = axi - base
            row[f"{key}_overhead_percent"] = 100.0 * (axi - base) / base
        row["lut_overhead_within_bound"] = row["lut_overhead_percent"] <= MAX_OVERHEAD_PERCENT


#: Resource row -> the synthesis count a synthesis-only row shows in it.
_SYNTH_KEYS = {"LUTs": "luts", "FFs": "ffs", "DSPs": "dsps", "block RAMs": "block_rams"}


def _used(kind):
    def fmt(row):
        if "synth" in row:
            rams = f"+{row['synth']['dpr16x4']}R" if kind == "LUTs" else ""
            return f"{row['synth'][_SYNTH_KEYS[kind]]}{rams} (synth)"
        return str(row["resources"][kind]["used"]) if "resources" in row else "-"
    return fmt


def _parts(row):
    """The adapters' synthesis LUTs part by part (:data:`PARTS`)."""
    if "breakdown" not in row:
        return "-"
    parts = row["breakdown"]
    return " / ".join(f"{parts[part]['luts']}" + (f"+{parts[part]['dpr16x4']}R"
                                                   if parts[part]["dpr16x4"] else "")
                      for part in PARTS if part != "engine")


def _timing(row):
    if "timing_met" in row:
        return "met" if row["timing_met"] else "missed"
    if "synth" in row:
        return "does not fit"
    return row.get("error", "-")


def _overhead(row):
    if "lut_overhead" not in row:
        return "-"
    return f"+{row['lut_overhead']} ({row['lut_overhead_percent']:+.1f}%)"


_COLUMNS = [
    ("design", lambda r: r["design"]),
    ("Fmax MHz", lambda r: f"{r['fmax_mhz']:.1f}" if r.get("fmax_mhz") else "-"),
    ("100 MHz", _timing),
    ("LUTs", _used("LUTs")), ("FFs", _used("FFs")), ("DSPs", _used("DSPs")),
    ("block RAMs", _used("block RAMs")),
    ("AXI LUTs over stream", _overhead),
    ("master / registers / counters / fetcher (synth LUTs)", _parts),
    ("build s", lambda r: f"{r['seconds']:.0f}" if r.get("seconds") else "-"),
]


def _notes(missing):
    notes = [
        f"out of context on the ULX3S 85F's LFE5U-85F (yosys synth_ecp5, nextpnr-ecp5 "
        f"--out-of-context --freq {CLOCK_MHZ:g}, seed 1): no I/O buffers, the ports left as nets",
        "gemm: the staged GEMM engine of `bertforge build`'s ECP5 defaults (32 KiB address "
        "space, memory word max(32, cols x 8) bits), MULT18X18D with 3 multiply stages; stream: "
        "the bare engine (its three memory streams and command stream as ports), axi4: "
        "AxiGemmTop (the engine, AXI4 master, AXI4-Lite registers, program fetcher, irq; 32-bit "
        "AXI addresses, read bursts up to 16 beats, write bursts up to 8, 4 reads and 4 writes "
        "outstanding)",
        "encoder: configs/minilm_8x8.toml (int16 activations, 8 lanes) with the same multiply "
        "fields; axi4: AxiGemmTop around EncoderTop",
        f"AXI LUTs over stream: the AXI top's LUTs minus the stream engine's; the issue's bound "
        f"is {MAX_OVERHEAD_PERCENT:g}%",
    ]
    notes += [
        "master / registers / counters / fetcher: the AXI adapters' parts in a yosys synth_ecp5 "
        "of the AXI top with the engine, the AXI4 master (its queues inside), the AXI4-Lite "
        "register file (its read multiplexer) and the performance counters each kept whole "
        "(keep_hierarchy); fetcher: the top's own cells (program fetcher, its FSM and record "
        "register, the memory ports' sharing, irq); LUTs = LUT4 + 2 x CCU2C (a carry cell takes "
        "two of nextpnr's LUTs), +NR: N distributed RAMs (TRELLIS_DPR16X4, the master's queues); "
        "kept whole, the parts miss some optimization across them, so their sum exceeds the "
        "flattened build's overhead",
        "(synth): a design that does not fit the 85F, counted by a flattened yosys synth_ecp5 "
        "(LUTs = LUT4 + 2 x CCU2C, +NR: N distributed RAMs, about 6 of nextpnr's LUTs each), "
        "not placed",
    ]
    return notes + ([f"not built: {', '.join(missing)}"] if missing else [])


def run_bench(args):
    if args.rebuild and args.reuse_only:
        raise CliError("--rebuild and --reuse-only contradict each other: give one")
    designs = args.designs.split(",")
    for name in designs:
        if name not in DESIGNS:
            raise CliError(f"unknown design {name!r} for bench axi; designs: {', '.join(DESIGNS)}")
    bench_axi(args.out, designs, reuse=not args.rebuild, build=not args.reuse_only)
    return 0
