"""Map a BERT encoder layer onto a generated design and cost every operation
with that unit's cycle model: where do the cycles go?

A hardware config is a TOML file (examples in ``generators/configs/``)::

    [hardware]
    clock_mhz = 200            # to turn cycles into time
    mem_bytes_per_cycle = 64   # external memory bandwidth
    mem_latency = 8            # read latency, cycles
    [gemm]                     # GemmConfig fields
    rows = 16
    cols = 16
    [softmax]                  # SoftmaxConfig fields (l_max >= sequence)
    lanes = 16
    [layernorm]                # LayerNormConfig fields (h_max >= hidden)
    lanes = 16
    [gelu]                     # GeluConfig fields
    lanes = 16
    [sparse]                   # optional: the GEMM engine is a SparseEngine
    m_max = 8                  # largest group size of the N:M sparse array
    pattern = "2:4"            # N:M of the pruned weights

Overlap model, as :class:`~bertforge.rtl.encoder.EncoderTop`'s
sequencer runs a layer: the commands of one GEMM operation (the heads of
attention, the q and v projections) run back to back in the engine, which
loads the next tile while it computes the current one; different operations
run one after another (the next starts when the previous one's last result
is written), so the total is the sum. Overlapping units (e.g. the softmax
of one head with the next head's score GEMM) is not modelled.

Costs: a GEMM operation is :func:`~bertforge.sim.gemm_cycles.gemm_cycles` of
its commands (int8 or int32 results, the memory's latency and bandwidth;
the linear layers' commands read their bias and per-channel scale words,
see :func:`~bertforge.generators.workload.encoder_layer`).
With a [sparse] section the engine is a
:class:`~bertforge.rtl.sparse_engine.SparseEngine` (the [gemm]
fields plus ``m_max``, output stationary) costed by
:func:`~bertforge.sim.sparse_engine_cycles.sparse_engine_cycles`: GEMMs whose
B operand is a weight matrix (q, v, output projections, both FFN GEMMs) run
with the pruned ``pattern``; the attention GEMMs (activations times
activations), the k projection (its weight is the A operand of
``Wk^T X^T``, and the engine prunes B) and training's gradient GEMMs run in
dense mode (1:1) on the same engine;
a softmax, layernorm or GELU operation is its unit's cycle model plus
:func:`~bertforge.sim.encoder_cycles.operation_gap` (the sequencer and the
memory adapter filling the unit) and, if the memory cannot deliver one
input beat per cycle, no less than its bytes read over the bandwidth (a
bound; the RTL-validated case is a memory of one word per cycle).
Elementwise work with no unit (``other``: dropout in training) costs its
bytes over the memory bandwidth. ``bertforge sim encoder`` runs the tiny
model's layer in Verilator and compares with this prediction.

Training (``training=True``) adds the backward pass and the optimizer
step (class ``optimizer``, its bytes over the bandwidth, see
:mod:`~bertforge.generators.workload`); backward GEMMs are their own
class, ``gemm backward``. ``precision="bf16"`` costs every GEMM on the bf16
``GemmEngine`` of the [gemm] size (``arith = "bf16"``: bf16 operands, 2
bytes, and float32 results, 4 bytes; no requantization) through
:func:`~bertforge.sim.gemm_cycles.gemm_cycles`, the model its Verilator
tests hold exact (``bertforge sim gemm --arith bf16``). The softmax,
layernorm and GELU units keep their lanes per cycle and read bf16 (2-byte)
activations.
Memory-bound work is everything but the GEMMs (``memory_bound_share``).
"""

import csv
import dataclasses
import functools
import json
import math
import tomllib
from pathlib import Path

from bertforge.rtl.gelu import GeluConfig
from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.layernorm import LayerNormConfig
from bertforge.rtl.softmax import SoftmaxConfig
from bertforge.rtl.sparse_engine import SparseEngineConfig
from bertforge.sim.encoder_cycles import (ADAPTER_FILL, fused_gelu_cycles, lowbit_layernorm_cycles,
                                          operation_gap)
from bertforge.sim.gelu_cycles import gelu_cycles
from bertforge.sim.gemm_cycles import b_rows, chunks, gemm_cycles, ideal_cycles, load_beats
from bertforge.sim.sdram import LiteDram, MemoryConfig, memory_from_table
from bertforge.sim.layernorm_cycles import layernorm_cycles
from bertforge.sim.sparse_engine_cycles import sparse_engine_cycles, sparse_ideal_cycles
from bertforge.sim.sparse_golden import check_pattern, parse_pattern
from bertforge.sim.softmax_cycles import softmax_cycles
from .presets import ConfigError
from .workload import MODELS, encoder_layer

__all__ = ["Hardware", "load_hardware", "hardware_from_table", "analyze", "CLASSES", "format_table", "write_outputs"]

CLASSES = ("gemm", "gemm backward", "softmax", "layernorm", "gelu", "other", "optimizer")
#: The classes of work that is not a GEMM (memory bound, as the study finds).
MEMORY_BOUND = ("softmax", "layernorm", "gelu", "other", "optimizer")
_UNITS = {"gemm": GemmConfig, "softmax": SoftmaxConfig, "layernorm": LayerNormConfig,
          "gelu": GeluConfig}


@dataclasses.dataclass(frozen=True)
class Hardware:
    name: str
    gemm: GemmConfig
    softmax: SoftmaxConfig
    layernorm: LayerNormConfig
    gelu: GeluConfig
    clock_mhz: float = 200.0
    mem_bytes_per_cycle: float = 64.0
    mem_latency: int = 1
    sparse: SparseEngineConfig = None
    pattern: tuple = None
    memory: MemoryConfig = MemoryConfig()
    clock_status: str = ""      # "reached" (a board build closed clock_mhz) or "what-if"
    board: str = ""             # the board build the clock statement refers to
    board_mhz: float = 0.0      # the clock that build reached (0: none)

    @property
    def board_clock_mhz(self):
        """The clock to quote time at on a board: the one its build reached, else clock_mhz."""
        return self.board_mhz or self.clock_mhz


def _load_sparse(path, table, gemm):
    """``(SparseEngineConfig, (n, m))`` from a [sparse] section, or ``(None, None)``."""
    if "sparse" not in table:
        return None, None
    fields = dict(table["sparse"])
    bad = sorted(set(fields) - {"m_max", "pattern"})
    if bad:
        raise ConfigError(f"{path}: unknown sparse field {bad[0]!r}; fields: m_max, pattern")
    if "pattern" not in fields:
        raise ConfigError(f'{path}: [sparse] needs a pattern, like pattern = "2:4"')
    try:
        config = SparseEngineConfig(**{**gemm.to_dict(), "m_max": fields.get("m_max", 8)})
        n, m = check_pattern(*parse_pattern(fields["pattern"]), config.m_max)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{path}: [sparse] {error}") from None
    if m & (m - 1):
        raise ConfigError(f"{path}: [sparse] the sparse engine takes M a power of two, not {m}")
    return config, (n, m)


def load_hardware(path):
    """A :class:`Hardware` from a TOML file; one-line :class:`ConfigError`
    for anything wrong in it."""
    from .userfiles import read_text
    path = Path(path)
    try:
        table = tomllib.loads(read_text(path, "hardware config"))
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"hardware config {path} is not valid TOML: {error}") from None
    return hardware_from_table(table, path, path.stem)


def hardware_from_table(table, path, default_name):
    """A :class:`Hardware` from the parsed TOML ``table`` of a hardware
    config; errors name ``path``; named ``default_name`` unless [hardware] names it."""
    unknown = sorted(set(table) - set(_UNITS) - {"hardware", "sparse", "memory"})
    if unknown:
        raise ConfigError(f"{path}: unknown section [{unknown[0]}]; sections: hardware, "
                          f"{', '.join(_UNITS)}, sparse, memory")
    units = {}
    for name, cls in _UNITS.items():
        fields = table.get(name, {})
        known = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(fields) - known)
        if bad:
            raise ConfigError(f"{path}: unknown {name} field {bad[0]!r}; fields: {', '.join(sorted(known))}")
        if name == "layernorm" and "in_width" not in fields:
            # LayerNorm's input is the activations': int8 with an int8 engine
            # (the low-bit top's second_output takes the int16 residual stream)
            int8 = units["gemm"].width == 8 and not fields.get("second_output", False)
            fields = {**fields, "in_width": 8 if int8 else 16}
        try:
            units[name] = cls(**fields)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"{path}: [{name}] {error}") from None
    hw = table.get("hardware", {})
    allowed = {"clock_mhz", "mem_bytes_per_cycle", "mem_latency", "name", "clock_status", "board",
               "board_mhz"}
    bad = sorted(set(hw) - allowed)
    if bad:
        raise ConfigError(f"{path}: unknown hardware field {bad[0]!r}; fields: {', '.join(sorted(allowed))}")
    for key in ("clock_mhz", "mem_bytes_per_cycle"):
        if key in hw and not (isinstance(hw[key], (int, float)) and hw[key] > 0):
            raise ConfigError(f"{path}: {key} must be a positive number, not {hw[key]!r}")
    if "mem_latency" in hw and not (isinstance(hw["mem_latency"], int) and hw["mem_latency"] >= 1):
        raise ConfigError(f"{path}: mem_latency must be a positive integer, not {hw['mem_latency']!r}")
    if hw.get("clock_status", "reached") not in ("reached", "what-if"):
        raise ConfigError(f'{path}: clock_status must be "reached" or "what-if", not '
                          f'{hw["clock_status"]!r}')
    if "board_mhz" in hw and not (isinstance(hw["board_mhz"], (int, float)) and hw["board_mhz"] > 0):
        raise ConfigError(f"{path}: board_mhz must be a positive number, not {hw['board_mhz']!r}")
    sparse, pattern = _load_sparse(path, table, units["gemm"])
    try:
        memory = memory_from_table(table.get("memory", {}))
        if not memory.ideal:
            memory.row_words(units["gemm"].mem_width)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{path}: [memory] {error}") from None
    clock = float(hw.get("clock_mhz", 200.0))
    bandwidth = float(hw.get("mem_bytes_per_cycle", 64.0))
    latency = int(hw.get("mem_latency", 1))
    if not memory.ideal:    # the SDRAM's sustained bandwidth; its CAS latency on the read latency
        if "mem_bytes_per_cycle" in hw:
            raise ConfigError(f"{path}: with an sdr [memory] the bandwidth follows from its "
                              "timings; remove [hardware] mem_bytes_per_cycle")
        bandwidth = memory.sustained_bytes_per_cycle(units["gemm"].mem_width, clock)
        latency += memory.cas_latency
    return Hardware(sparse=sparse, pattern=pattern, name=hw.get("name", default_name),
                    clock_mhz=clock, mem_bytes_per_cycle=bandwidth, mem_latency=latency,
                    memory=memory, clock_status=hw.get("clock_status", ""),
                    board=str(hw.get("board", "")), board_mhz=float(hw.get("board_mhz", 0.0)),
                    **units)


def _precision_engine(hw, precision):
    """The GEMM engine config that moves the bytes of ``precision``'s
    operands: the [gemm] engine, with 16-bit operands for bf16."""
    if precision == "int8":
        return hw.gemm
    if hw.sparse is not None:
        raise ConfigError(f"{hw.name}: the sparse engine is int8 only; --precision bf16 takes a "
                          "hardware config without [sparse]")
    try:
        return dataclasses.replace(hw.gemm, arith="bf16")
    except ValueError as error:
        raise ConfigError(f"{hw.name}: [gemm] as a bf16 engine (16-bit operands): {error}") from None


def _gemm(hw, op, engine, program=None):
    """Cycles of ``op.count`` commands back to back (the model's walk over
    all of them: small memory-bound commands, such as the attention GEMMs
    on a 16 x 16 engine, need not add the same cycles each), and the ideal
    cycles of the MACs the array must do (compressed ones when sparse)."""
    narrow = op.int8_out and not engine.bf16    # a bf16 engine writes float32
    command = {"m": op.m, "k": op.k, "n": op.n, "int8": int(narrow), "bias": int(op.bias),
               "per_channel": int(op.per_channel and narrow), "transpose_c": int(op.transpose_c),
               "w4": int(op.w4)}
    if op.int16_out:
        command.update(int16=1, per_channel=int(op.per_channel))
    if hw.sparse is None:   # the encoder top's engine: its completions are never held
        model, ideal = functools.partial(gemm_cycles, done_always_ready=True), ideal_cycles
        config = dataclasses.replace(engine, transpose_c=True) if op.transpose_c else engine
    else:
        n, m = hw.pattern if op.sparse_weights else (1, 1)
        command.update(pat_n=n, pat_m=m)
        model, config, ideal = sparse_engine_cycles, hw.sparse, sparse_ideal_cycles
    if not hw.memory.ideal and hw.memory.controller == "litedram" and hw.sparse is None:
        return _litedram_gemm(hw, op, config, command, program), op.count * ideal(config, command)
    bw = hw.mem_bytes_per_cycle if hw.memory.ideal else _sdram_bandwidth(hw, op, engine, command)
    cycles = model(config, [command] * op.count, lat=hw.mem_latency, bw=bw)["cycles"]
    if op.gelu:         # GELU on the writer: its scale words first, its pipeline after
        cycles += fused_gelu_cycles(hw.mem_latency, op.n, engine.mem_bytes)
    return cycles, op.count * ideal(config, command)


def _gemm_command(engine, op, command):
    """``command`` of GEMM ``op`` with addresses and strides: its operands
    laid one after another (A, C, B, bias, scales, each from a port word
    on), row-major."""
    mb, eb = engine.mem_bytes, engine.width // 8
    size = 1 if command["int8"] else 2 if command.get("int16") else 4
    a_row, b_row = _row_strides(op)
    cmd = dict(command, a_stride=a_row * eb, b_stride=b_row * eb,
               c_stride=(op.m if op.transpose_c else op.n) * size)
    at = 0
    for name, nbytes in (("a_addr", op.m * a_row * eb), ("c_addr", op.m * op.n * size),
                         ("b_addr", op.k * b_row * eb), ("bias_addr", 4 * op.n),
                         ("scale_addr", 4 * op.n)):
        cmd[name] = at
        at += -(-nbytes // mb) * mb
    return cmd


def _command_stream(engine, cmd):
    """A GEMM command (with its addresses and strides) as LiteDRAM's port
    sees it: ``(per chunk, tail, read bytes)``, each a stream
    :class:`~bertforge.sim.sdram.LiteDram` takes. A chunk's read requests
    (:func:`~bertforge.sim.axi_cycles.chunk_requests`: old C, bias and
    scales, A rows, B rows), a burst each; a block's results are written
    while the next chunk loads (``tail``: the last block's), a write burst
    (:func:`_block_writes`) between two read requests (LiteDRAM's AXI
    frontend alternates between its read and write sides, a whole burst
    each)."""
    from bertforge.sim.axi_cycles import chunk_requests
    mb = engine.mem_bytes
    size = 1 if cmd.get("int8") else 2 if cmd.get("int16") else 4
    streams, pending, read_bytes = [], [], 0
    for chunk, requests in zip(chunks(engine, cmd), chunk_requests(engine, cmd)):
        stream = []
        for addr, beats in requests:
            nbytes = (beats + (addr % mb != 0)) * mb
            stream.append((0, addr - addr % mb, nbytes))
            read_bytes += nbytes
            if pending:
                stream += pending.pop(0)
        streams.append(stream + [write for burst in pending for write in burst])
        pending = _block_writes(cmd, chunk, size, mb) if chunk["last"] else []
    return streams, [write for burst in pending for write in burst], read_bytes


def _block_writes(cmd, chunk, size, mb):
    """The write bursts of the block ``chunk`` ends, each a list of
    ``(1, address, bytes)``. The writer stores an output row a piece at a
    time (an element a cycle, each to another row of C^T, when C is stored
    transposed); the AXI master merges what falls in one port word into a
    beat (the SDRAM writes only the words it touches) and a beat to the
    next port word into the burst, up to
    :data:`~bertforge.rtl.axi.MAX_WRITE_BURST` beats and not across a 4 KB
    page."""
    from bertforge.rtl.axi import MAX_WRITE_BURST
    if cmd.get("transpose_c"):
        pieces = [(cmd["c_addr"] + (chunk["n0"] + n) * cmd["c_stride"] + (chunk["m0"] + r) * size,
                   size) for r in range(chunk["m_len"]) for n in range(chunk["n_len"])]
    else:
        pieces = []
        for r in range(chunk["m_len"]):
            addr = cmd["c_addr"] + (chunk["m0"] + r) * cmd["c_stride"] + chunk["n0"] * size
            end = addr + chunk["n_len"] * size
            while addr < end:
                step = min(end, (addr // mb + 1) * mb) - addr
                pieces.append((addr, step))
                addr += step
    bursts, last, beats = [], None, 0
    for addr, nbytes in pieces:
        word = addr // mb
        if bursts and word == last:                     # merges into the beat
            bursts[-1].append((1, addr, nbytes))
            continue
        if bursts and word == last + 1 and beats < MAX_WRITE_BURST and word % (4096 // mb):
            beats += 1                                  # extends the burst
            bursts[-1].append((1, addr, nbytes))
        else:
            bursts.append([(1, addr, nbytes)])
            beats = 1
        last = word
    return bursts


def _litedram_gemm(hw, op, config, command, program=None):
    """Cycles of GEMM ``op`` behind LiteDRAM's controller: the engine's
    walk (:func:`~bertforge.sim.gemm_cycles.gemm_cycles`) with the
    controller as its memory: a chunk's requests, offered once the engine
    may load it, arrive the read latency later, or once the controller has
    spent its cycles on them (:class:`~bertforge.sim.sdram.LiteDram`, the
    writes of the block before taken between them); then the last block's
    writes. The commands are ``program``'s (with their addresses; a
    command with a ``record`` has it fetched first, :func:`_record_fetch`),
    or else ``op.count`` commands laid out by :func:`_gemm_stream`."""
    commands = program or [_gemm_command(config, op, command)] * op.count
    total = 0
    for cmd in commands:
        dram = LiteDram(hw.memory, config.mem_width, hw.clock_mhz)
        total += _record_fetch(dram, cmd, config.mem_bytes)
        cmd = {key: value for key, value in cmd.items() if key != "record"}
        streams, tail, _ = _command_stream(config, cmd)
        free = [0]

        def memory(index, ready, streams=streams, dram=dram, free=free):
            free[0] = max(ready + hw.mem_latency, free[0]) + dram.run(streams[index])
            return free[0]
        total += gemm_cycles(config, [cmd], lat=hw.mem_latency, memory=memory,
                             done_always_ready=True)["cycles"]
        total += dram.run(tail)
    return math.ceil(total)


def _record_fetch(dram, cmd, mb):
    """Cycles ``dram`` (a :class:`~bertforge.sim.sdram.LiteDram`) spends
    on the program record of ``cmd`` (its ``record``: byte address and
    bytes, read a port word of ``mb`` bytes at a time, as the program
    fetcher does before each command); 0 without one."""
    if cmd.get("record") is None:
        return 0
    at, size = cmd["record"]
    return dram.run([(0, at + offset, mb) for offset in range(0, size, mb)])


def _row_strides(op):
    """Elements from one row of GEMM ``op``'s A (B) to the next in memory:
    ``op.a_stride`` (``op.b_stride``), or ``K`` (``N``) when packed."""
    return op.a_stride or op.k, op.b_stride or op.n


def _sdram_bandwidth(hw, op, engine, command):
    """Bytes per cycle the SDRAM gives the engine's reads of one command of
    ``op``: its read beats at the SDRAM's word cycles, plus a row miss
    (tRP + tRCD) each time a request enters another SDRAM row (row-major
    operands: A rows ``K`` elements apart, B rows ``N`` apart, or the
    op's strides when they are slices of wider matrices; a strided
    row crosses into the next row once per ``row bytes / stride``
    requests), plus refresh."""
    mem, mb = hw.memory, engine.mem_bytes
    t = mem.timing(hw.clock_mhz)
    page = mem.row_words(engine.mem_width) * mb
    eb = engine.width // 8
    a_row, b_row = _row_strides(op)
    beats = misses = 0.0
    for ch in chunks(engine, command):
        beats += load_beats(engine, ch)
        a_bytes = -(-ch["k_len"] // engine.lanes) * mb     # an A row's request
        for rows, stride, size in ((ch["m_len"], a_row * eb, a_bytes),
                                   (ch["k_len"], b_row * eb, mb)):
            span = rows * size if stride <= size else rows * stride   # contiguous, or strided
            misses += min(rows, span / page)
    cycles = beats * mem.word_cycles(engine.mem_width, hw.clock_mhz) + misses * (t["trp"] + t["trcd"])
    return beats * mb / cycles * (1 - (t["trp"] + t["trfc"]) / t["trefi"])


def _unit(hw, op, model, commands=1, program=None):
    """Cycles and ideal cycles of an elementwise operation run as
    ``commands`` commands (each waits its own operation gap)."""
    cfg = getattr(hw, op.kind)
    limit = cfg.l_max if op.kind == "softmax" else getattr(cfg, "h_max", None)
    if limit is not None and op.length > limit:
        field = "l_max" if op.kind == "softmax" else "h_max"
        raise ConfigError(f"the {op.kind} unit takes rows up to {field} = {limit}, but "
                          f"{op.name} has rows of {op.length}; raise [{op.kind}] {field}")
    gap = operation_gap(op.kind, hw.mem_latency, layernorm=hw.layernorm, length=op.length,
                        mem_bytes=hw.gemm.mem_bytes)
    if op.kind == "layernorm" and hw.layernorm.second_output:
        cycles = commands * lowbit_layernorm_cycles(cfg, op.count * op.rows // commands, op.length)
    elif op.kind == "gelu":
        beats = -(-op.elements // cfg.lanes)
        cycles = gelu_cycles(cfg, beats)
    else:
        cycles = commands * model(cfg, [op.length] * (op.count * op.rows // commands))
    gap *= commands
    # Bytes read per element (writes have their own stream): softmax int32,
    # layernorm x and the residual, GELU one (of op.element_bytes each).
    read = op.elements * {"softmax": 4, "layernorm": 2 * op.element_bytes,
                          "gelu": op.element_bytes}[op.kind]
    if not hw.memory.ideal:     # the SDRAM streams the operands: fill, the reads, the last row's tail
        eb = max(op.element_bytes, hw.gemm.width // 8)
        read = op.elements * {"softmax": 4, "layernorm": 2 * eb, "gelu": eb}[op.kind]
        if op.kind == "layernorm":       # gamma and beta (the low-bit top: two pairs of int16)
            read += commands * 2 * op.length * (4 if hw.layernorm.second_output else eb)
        if op.kind == "gelu" and hw.layernorm.second_output:
            read += commands * 4 * op.length            # the low-bit GELU's scale words
        beats = -(-op.length // cfg.lanes)
        tail = (gelu_cycles(cfg, 1) - 1 if op.kind == "gelu"
                else model(cfg, [op.length]) - beats)
        if hw.memory.controller == "litedram":
            memory = _litedram_unit_cycles(hw, op, read, commands, program)
        else:
            memory = read / hw.mem_bytes_per_cycle
        streamed = commands * (ADAPTER_FILL + hw.mem_latency + tail) + memory
        return max(gap + cycles, math.ceil(streamed)), op.elements / cfg.lanes
    return max(gap + cycles, math.ceil(read / hw.mem_bytes_per_cycle)), op.elements / cfg.lanes


def _litedram_unit_cycles(hw, op, read, commands, program=None):
    """Cycles LiteDRAM's controller spends on an elementwise operation's
    ``read`` bytes and its results (:func:`_unit_bytes`'s outputs), run as
    ``commands`` commands. With ``program`` (the operation's commands, each
    with its ``record``: the address and bytes of its program record) each
    command first has its record fetched, then reads its sources and
    writes its results at its own addresses (a layernorm its gamma and
    beta first); without, the sources lie one after another, each from a
    port word on, layernorm's x and residual half the banks apart (as the
    encoder program lays them out). Layernorm reads a port word of each
    source in turn. Softmax and layernorm write a row's results at once,
    as one AXI burst (they leave the unit's row buffer a beat a cycle),
    while the next row is read; GELU's results leave as fast as its reads
    come, so each port word is a burst of its own between two reads (every
    write a read-to-write turnaround and back)."""
    mb = hw.gemm.mem_bytes
    out = _unit_bytes(op, hw.gemm, hw.layernorm.second_output)[2] // commands
    read //= commands
    mem = hw.memory
    if program is None:
        period = mem.columns * mem.data_width // 8 * mem.banks
        half = read // 2
        other = -(-half // period) * period + period // 2
        end = -(-(other + half if op.kind == "layernorm" else read) // period) * period
        program = [{"src": 0, "src2": other, "dst": end,
                    "rows": op.count * op.rows // commands}] * commands
    total = 0
    for cmd in program:
        dram = LiteDram(mem, hw.gemm.mem_width, hw.clock_mhz)
        total += _record_fetch(dram, cmd, mb)
        sources, params = read, 0
        if op.kind == "layernorm" and "params" in cmd:
            params = read - 2 * (op.elements // commands) * max(op.element_bytes, hw.gemm.width // 8)
        reads = [(0, cmd["params"] + at, mb) for at in range(0, params, mb)] if params else []
        if op.kind == "layernorm":       # x and the residual interleave
            reads += [(0, base + at, mb) for at in range(0, (sources - params) // 2, mb)
                      for base in (cmd["src"], cmd["src2"])]
        else:
            reads += [(0, cmd["src"] + at, mb) for at in range(0, sources, mb)]
        step = mb if op.kind == "gelu" else out // cmd["rows"]
        writes = [(1, cmd["dst"] + at, step) for at in range(0, out, step)]
        stream, done = [], 0
        for index, item in enumerate(reads):
            stream.append(item)
            due = (index + 1) * len(writes) // len(reads)
            stream += writes[done:due]
            done = due
        total += dram.run(stream)
    return total


#: ECP5 DP16KD block RAM shapes (width, depth): 18 Kbit, 16 Kbit of it below 9 bits wide.
ECP5_BRAM_SHAPES = ((36, 512), (18, 1024), (9, 2048), (4, 4096), (2, 8192), (1, 16384))
#: Block RAMs of the ULX3S's LFE5U-85F.
ECP5_85F_BRAMS = 208
#: Memories at most this deep are taken as LUT RAM (ECP5 distributed RAM is
#: 16 deep; yosys keeps shallow, wide buffers out of block RAM).
LUTRAM_DEPTH = 32


def engine_buffers(config):
    """The staged GEMM engine's on-chip buffers (``config`` a
    :class:`GemmConfig`): a list of ``(name, count, depth, width)`` memories
    as :mod:`bertforge.rtl.gemm` and :mod:`bertforge.rtl.engine` declare
    them. Every operand buffer holds two chunks (the loader fills one while
    the array reads the other: double buffering) and every block buffer two
    blocks."""
    seg, kc, mt, p = config.segments, config.k_chunk, config.block_rows, config.panel
    word = config.mem_width
    if config.dataflow == "ws":
        a = [("A operand", 1, 2 * seg * mt, word)]
    else:
        a = [("A operand (one per array row)", config.rows, 2 * seg, word)]
    depth, width = (2 * -(-p // (config.mem_bytes // 4)), config.mem_bytes * 8) if config.compact \
        else (2, p * 32)
    out = a + [("B operand", 1, 2 * kc, word),
               ("accumulator", 1, 2 * mt, p * config.acc_width)]
    if not config.compact:
        out.append(("old C", 1, 2 * mt, p * config.acc_width))
    return out + [("bias", 1, depth, width), ("scales", 1, depth, width)]


def block_rams(depth, width):
    """ECP5 block RAMs one memory of ``depth`` x ``width`` bits takes, all of
    it in block RAM."""
    return min(-(-width // w) * -(-depth // d) for w, d in ECP5_BRAM_SHAPES)


def buffer_report(config):
    """The engine's buffers (:func:`engine_buffers`): ``memories``,
    ``bytes``, ``block_rams`` (an estimate: memories deeper than
    :data:`LUTRAM_DEPTH` in block RAM, the others LUT RAM),
    ``block_rams_all`` (every buffer in block RAM: the upper bound) and
    ``fits_85f`` (the estimate within the 85F's 208)."""
    memories = [{"name": name, "count": count, "depth": depth, "width": width,
                 "block_rams_all": count * block_rams(depth, width),
                 "block_rams": count * block_rams(depth, width) if depth > LUTRAM_DEPTH else 0}
                for name, count, depth, width in engine_buffers(config)]
    brams = sum(m["block_rams"] for m in memories)
    return {"memories": memories,
            "bytes": sum(m["count"] * m["depth"] * m["width"] for m in memories) // 8,
            "block_rams": brams, "block_rams_all": sum(m["block_rams_all"] for m in memories),
            "fits_85f": brams <= ECP5_85F_BRAMS}


def _gemm_bytes(hw, op, engine):
    """``(weights, activations, outputs, traffic)`` bytes of a GEMM
    operation: the distinct bytes of its weight operand (B of the
    projections and FFN, A of the k projection (B when it is ``X Wk``
    stored transposed), with their bias and scale words), of its activation operands, of its results, and ``traffic``:
    what the engine reads and writes (its chunks' read beats, A and B read
    again for every panel and block of rows, plus the results)."""
    eb = engine.width // 8
    narrow = op.int8_out and not engine.bf16
    a, b = op.m * op.k * eb, op.k * op.n * eb
    if op.w4:       # packed 4-bit weights and their multiplier codes
        b = -(-op.k // 2) * op.n + -(-op.k // engine.weight_group) * -(-op.n // 2)
    out = op.m * op.n * (eb if narrow else 2 if op.int16_out else 4)
    extra = 4 * op.n * (int(op.bias) + int(op.per_channel and (narrow or op.int16_out)))
    if op.gelu:     # GELU on the writer: int8 results, and GELU's scale words
        out, extra = op.m * op.n, extra + 4 * op.n
    if op.sparse_weights or op.transpose_c:
        weights, acts = b + extra, a
    elif op.name == "k projection":
        weights, acts = a + extra, b
    else:
        weights, acts = extra, a + b
    if hw.sparse is None:
        command = {"m": op.m, "k": op.k, "n": op.n, "int8": int(narrow), "bias": int(op.bias),
                   "per_channel": int(op.per_channel and narrow), "w4": int(op.w4)}
        reads = sum(load_beats(engine, ch, b_rows(engine, ch))
                    for ch in chunks(engine, command)) * engine.mem_bytes
    else:
        reads = a + b + extra
    return (op.count * weights, op.count * acts, op.count * out, op.count * (reads + out))


def _unit_bytes(op, engine, lowbit=False):
    """``(weights, activations, outputs)`` bytes of an elementwise operation
    (layernorm's gamma and beta are its weights); activations are as wide
    as the GEMM engine's operands (int16 on a width-16 engine). The
    low-bit top (``lowbit``): layernorm reads int16 and two gamma/beta pairs
    and writes int16 and int8; GELU reads int16 and a scale word per
    channel and writes int8."""
    eb = max(op.element_bytes, engine.width // 8)
    if lowbit and op.kind == "layernorm":
        return op.count * 8 * op.length, op.elements * 4, op.elements * 3
    if lowbit and op.kind == "gelu":
        return op.count * 4 * op.length, op.elements * 2, op.elements
    if op.kind == "softmax":
        return 0, op.elements * 4, op.elements * eb
    if op.kind == "layernorm":
        return op.count * 2 * op.length * eb, op.elements * 2 * eb, op.elements * eb
    if op.kind == "gelu":
        return 0, op.elements * eb, op.elements * eb
    return 0, op.elements * op.passes * op.element_bytes, 0


def _lowbit_operation(op, w4=False):
    """``op`` as the low-bit top runs it (``lowbit_program`` of
    :mod:`bertforge.sim.encoder_run`): K with its bias and per-channel
    scales, the output projection and the FFN int16 out of the engine,
    FFN 1's through GELU on its writer (``gelu``: int8 out), layernorm on
    int16 inputs; with ``w4`` (an engine with group multipliers: W4A8)
    every weight GEMM's B is packed 4-bit weights with their codes. The
    q and v projections are one GEMM (``[Wq | Wv]``, N = 2H) writing q's
    and v's rows side by side, so the attention GEMMs read their head
    slices with a row stride of 2H."""
    if w4 and op.name in ("q, v projections", "k projection", "output projection", "ffn 1",
                          "ffn 2"):
        op = dataclasses.replace(op, w4=True)
    if op.name == "q, v projections":
        return dataclasses.replace(op, count=1, n=2 * op.n)
    if op.name == "attention scores":
        return dataclasses.replace(op, a_stride=2 * op.a_stride)
    if op.name == "attention context":
        return dataclasses.replace(op, b_stride=2 * op.b_stride)
    if op.name == "k projection":
        return dataclasses.replace(op, bias=True, per_channel=True)
    if op.name == "ffn 1":      # int16 out of the engine, through GELU on its writer
        return dataclasses.replace(op, int8_out=False, int16_out=True, gelu=True)
    if op.name in ("output projection", "ffn 2"):
        return dataclasses.replace(op, int8_out=False, int16_out=True)
    if op.kind in ("layernorm", "gelu"):
        return dataclasses.replace(op, element_bytes=2)
    return op


def analyze(model, seq, hw, *, batch=1, training=False, bias=True, precision="int8",
            optimizer="adam", transpose=False, program=None):
    """Per-operation and per-class cycles of one encoder layer (``bias``:
    the linear layers' biases and per-channel scales; ``precision``,
    ``optimizer``: as :func:`~bertforge.generators.workload.encoder_layer`
    takes them; ``transpose``: the layer as
    :mod:`bertforge.sim.encoder_run` programs the encoder top: the k
    projection is ``X Wk`` (tokens x H x H) stored transposed
    (``transpose_c``, :func:`~bertforge.sim.gemm_cycles.write_cycles`),
    on the dense engine). ``program``: per operation's name, the
    commands a program runs for it (dicts with their addresses and
    strides, as :mod:`bertforge.sim.encoder_run` lays out the layer; a
    softmax, layernorm or GELU command also with its ``record``: the
    address and bytes of its program record): a LiteDRAM controller
    (``[memory] controller = "litedram"``) then replays their reads and
    writes at those addresses, a unit's after its record's fetch."""
    ops = encoder_layer(model, seq, batch, training, bias=bias, precision=precision,
                        optimizer=optimizer)
    if transpose:
        if hw.sparse is not None:
            raise ConfigError(f"{hw.name}: the encoder top's program runs the dense engine; "
                              "take a hardware config without [sparse]")
        ops = [dataclasses.replace(op, m=op.n, n=op.m, transpose_c=True)
               if op.name == "k projection" else op for op in ops]
    if hw.layernorm.second_output:      # GELU runs on FFN 1's writer: no GELU operation
        ops = [_lowbit_operation(op, bool(hw.gemm.weight_group)) for op in ops
               if (op.name, op.backward) != ("gelu", False)]
    engine = _precision_engine(hw, precision)
    rows = []
    for op in ops:
        if op.kind == "gemm":
            cycles, ideal = _gemm(hw, op, engine, (program or {}).get(op.name))
            work = op.macs
            weights, acts, outs, traffic = _gemm_bytes(hw, op, engine)
            ops_count, compute = 2 * op.macs, ideal
        elif op.kind in ("other", "optimizer"):
            cycles = math.ceil(op.elements * op.passes * op.element_bytes / hw.mem_bytes_per_cycle)
            ideal, work = None, op.elements
            weights, acts, outs = _unit_bytes(op, engine)
            traffic, ops_count, compute = weights + acts + outs, op.elements, 0
        else:
            model_fn = {"softmax": softmax_cycles, "layernorm": layernorm_cycles}.get(op.kind)
            # the encoder top's program: a softmax command per sentence
            per = batch if transpose and op.kind == "softmax" else 1
            cycles, ideal = _unit(hw, op, model_fn, per, (program or {}).get(op.name))
            work = op.elements
            weights, acts, outs = _unit_bytes(op, engine, hw.layernorm.second_output)
            traffic, ops_count, compute = weights + acts + outs, op.elements, ideal
        memory_cycles = traffic / hw.mem_bytes_per_cycle
        kind = "gemm backward" if op.kind == "gemm" and op.backward else op.kind
        phase = "optimizer" if op.kind == "optimizer" else "backward" if op.backward else "forward"
        rows.append({"operation": op.name, "class": kind, "phase": phase, "count": op.count,
                     "shape": f"{op.m}x{op.k}x{op.n}" if op.kind == "gemm" else f"{op.rows}x{op.length}",
                     "work": work, "work_unit": "MACs" if op.kind == "gemm" else "elements",
                     "cycles": int(cycles), "ideal_cycles": ideal,
                     "utilization": (ideal / cycles) if ideal else None,
                     "bytes": {"weights": weights, "activations": acts, "outputs": outs},
                     "traffic_bytes": traffic, "ops": ops_count,
                     "intensity": ops_count / traffic if traffic else None,
                     "memory_cycles": memory_cycles,
                     "bound": "memory" if memory_cycles > compute else "compute"})
    total = sum(r["cycles"] for r in rows)
    for r in rows:
        r["share"] = r["cycles"] / total
    classes = []
    for name in CLASSES:
        members = [r for r in rows if r["class"] == name]
        if not members:
            continue
        cycles = sum(r["cycles"] for r in members)
        ideal = [r["ideal_cycles"] for r in members if r["ideal_cycles"] is not None]
        classes.append({"class": name, "count": sum(r["count"] for r in members),
                        "work": sum(r["work"] for r in members),
                        "work_unit": members[0]["work_unit"], "cycles": cycles,
                        "share": cycles / total,
                        "utilization": sum(ideal) / cycles if ideal else None})
    phases = {phase: sum(r["cycles"] for r in rows if r["phase"] == phase)
              for phase in ("forward", "backward", "optimizer")}
    memory_bound = sum(c["cycles"] for c in classes if c["class"] in MEMORY_BOUND)
    layers = (MODELS[model] if isinstance(model, str) else model).layers
    moved = {key: sum(r["bytes"][key] for r in rows) for key in ("weights", "activations", "outputs")}
    gemm = engine.rows * engine.cols
    totals = {
        "layers": layers,
        "bytes_per_sentence": layers * sum(moved.values()) / batch,
        "traffic_bytes_per_sentence": layers * sum(r["traffic_bytes"] for r in rows) / batch,
        "bytes_per_layer": moved,
        "cycles_per_sentence": layers * total / batch,
        "sentence_ms": layers * total / batch / (hw.clock_mhz * 1e3),
        "sentences_per_second": batch * hw.clock_mhz * 1e6 / (layers * total),
        "board_mhz": hw.board_clock_mhz,
        "sentence_ms_at_board_clock": layers * total / batch / (hw.board_clock_mhz * 1e3),
        "sentences_per_second_at_board_clock": batch * hw.board_clock_mhz * 1e6 / (layers * total),
        "compute_gops": 2 * gemm * hw.clock_mhz / 1e3,
        "bandwidth_gbps": hw.mem_bytes_per_cycle * hw.clock_mhz / 1e3,
        "memory": hw.memory.kind if not hw.memory.chip else f"{hw.memory.kind} {hw.memory.chip}",
        "memory_bound_operations": [r["operation"] for r in rows if r["bound"] == "memory"],
        "engine_buffers": buffer_report(engine) if hw.sparse is None else None,
    }
    return {"totals": totals, "clock_status": hw.clock_status or None, "board": hw.board or None,
            "model": model, "seq": seq, "batch": batch, "training": training,
            "precision": precision, "optimizer": optimizer if training else None,
            "hardware": hw.name, "clock_mhz": hw.clock_mhz, "total_cycles": total,
            "phases": phases, "memory_bound_share": memory_bound / total,
            "layer_ms": total / (hw.clock_mhz * 1e3), "classes": classes, "operations": rows,
            "hardware_config": {k: (v.to_dict() if hasattr(v, "to_dict") else v)
                                for k, v in dataclasses.asdict(hw).items()}}


def format_table(result):
    training = f", training ({result['optimizer']})" if result["training"] else ""
    lines = [f"{result['model']}, seq {result['seq']}, batch {result['batch']}, "
             f"{result['precision']}{training} on {result['hardware']}: "
             f"{result['total_cycles']:,} cycles per layer ({result['layer_ms']:.3f} ms at "
             f"{result['clock_mhz']:g} MHz)",
             f"{'class':<13} {'count':>6} {'work':>16} {'cycles':>14} {'share':>7} {'util':>6}"]
    for c in result["classes"]:
        util = f"{c['utilization']:.0%}" if c["utilization"] is not None else "-"
        lines.append(f"{c['class']:<13} {c['count']:>6} {c['work']:>12,} {c['work_unit'][:3]:<3} "
                     f"{c['cycles']:>14,} {c['share']:>7.1%} {util:>6}")
    total = result["total_cycles"]
    if result["training"]:
        lines.append("phases: " + ", ".join(f"{phase} {cycles / total:.1%}"
                                            for phase, cycles in result["phases"].items()))
    lines.append(f"memory-bound share (all but GEMMs): {result['memory_bound_share']:.1%}")
    t = result["totals"]
    lines.append(f"memory {t['memory']}: {t['bandwidth_gbps']:.2f} GB/s; memory-bound operations: "
                 f"{', '.join(t['memory_bound_operations']) or 'none'}")
    board = f" ({t['sentence_ms_at_board_clock']:.2f} ms at the {t['board_mhz']:g} MHz a board reached)" \
        if t["board_mhz"] != result["clock_mhz"] else ""
    lines.append(f"per sentence: {t['bytes_per_sentence'] / 1e6:.2f} MB, {t['sentence_ms']:.2f} ms at "
                 f"{result['clock_mhz']:g} MHz{board}")
    return "\n".join(lines)


def write_outputs(results, out_dir):
    """``analysis.json``, ``analysis.csv`` and ``breakdown.png`` (one stacked
    bar per result)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "analysis.json.tmp"
    tmp.write_text(json.dumps(results if len(results) > 1 else results[0], indent=2) + "\n")
    tmp.replace(out / "analysis.json")
    tmp = out / "analysis.csv.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["hardware", "operation", "class", "count", "shape", "work", "work_unit",
                         "cycles", "share", "utilization"])
        for result in results:
            for r in result["operations"]:
                writer.writerow([result["hardware"], r["operation"], r["class"], r["count"],
                                 r["shape"], r["work"], r["work_unit"], r["cycles"],
                                 f"{r['share']:.6f}",
                                 "" if r["utilization"] is None else f"{r['utilization']:.6f}"])
    tmp.replace(out / "analysis.csv")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # cycles (left) and shares (right), one stacked bar per result, by class
    fig, (ax, share_ax) = plt.subplots(1, 2, figsize=(3.5 + 2.6 * len(results), 4.8))
    colors = {"gemm": "#4c72b0", "gemm backward": "#8172b3", "softmax": "#dd8452",
              "layernorm": "#55a868", "gelu": "#c44e52", "other": "#8c8c8c", "optimizer": "#937860"}
    names = {"gemm": "GEMM (forward)", "other": "dropout", "gemm backward": "GEMM backward"}
    labels = [f"{r['hardware']}\n{r.get('precision', 'int8')} "
              f"{'training' if r['training'] else 'inference'}" for r in results]
    bottoms, share_bottoms = [0.0] * len(results), [0.0] * len(results)
    for name in CLASSES:
        cycles = [next((c["cycles"] for c in r["classes"] if c["class"] == name), 0) for r in results]
        if any(cycles):
            values = [v / 1e6 for v in cycles]
            shares = [100 * v / r["total_cycles"] for v, r in zip(cycles, results)]
            ax.bar(labels, values, bottom=bottoms, color=colors[name], width=0.6,
                   label=names.get(name, name))
            share_ax.bar(labels, shares, bottom=share_bottoms, color=colors[name], width=0.6)
            bottoms = [b + v for b, v in zip(bottoms, values)]
            share_bottoms = [b + v for b, v in zip(share_bottoms, shares)]
    for r, label in zip(results, labels):
        share_ax.annotate(f"memory bound\n{r['memory_bound_share']:.0%}", (label, 101),
                          ha="center", va="bottom", fontsize=8)
    first = results[0]
    ax.set_ylabel("cycles per encoder layer (millions)")
    share_ax.set_ylabel("share of the layer's cycles (%)")
    share_ax.set_ylim(0, 115)
    fig.suptitle(f"{first['model']}, seq {first['seq']}, batch {first['batch']}")
    share_ax.legend(*ax.get_legend_handles_labels(), loc="upper left", bbox_to_anchor=(1.0, 1.0))
    for axis in (ax, share_ax):
        axis.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(out / "breakdown.png.tmp.png", dpi=120)
    plt.close(fig)
    (out / "breakdown.png.tmp.png").replace(out / "breakdown.png")
    write_roofline(results, out / "roofline.png")


def write_roofline(results, path):
    """A roofline PNG at ``path``: operational intensity (operations per
    byte the engine and units move) against GOPS at the config's clock,
    the compute ceiling (2 x rows x cols operations a cycle) and the
    memory's bandwidth ceiling, and each operation of each result as a
    point (its work over its predicted time)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    path = Path(path)
    fig, ax = plt.subplots(figsize=(7.5, 5))
    markers = "osd^v<>"
    for number, r in enumerate(results):
        t = r["totals"]
        peak, bandwidth = t["compute_gops"], t["bandwidth_gbps"]
        xs = [0.01, peak / bandwidth, 1000]
        line = ax.plot(xs, [min(peak, x * bandwidth) for x in xs], lw=1.5,
                       label=f"{r['hardware']} ({t['memory']}): {peak:g} GOPS, {bandwidth:.2f} GB/s")
        color = line[0].get_color()
        for op in r["operations"]:
            if not op["intensity"]:
                continue
            gops = op["ops"] / op["cycles"] * r["clock_mhz"] / 1e3
            ax.scatter(op["intensity"], gops, color=color, marker=markers[number % len(markers)], s=22)
            if number == 0:
                ax.annotate(op["operation"], (op["intensity"], gops), fontsize=6,
                            xytext=(3, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operational intensity (operations per byte moved)")
    ax.set_ylabel("GOPS at the config's clock")
    first = results[0]
    ax.set_title(f"{first['model']}, seq {first['seq']}, batch {first['batch']}: roofline")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
