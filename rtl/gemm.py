"""GEMM engine: the stages of :mod:`bertforge.rtl.engine` around a systolic
array, with the dense feeders (output and weight stationary)."""

from dataclasses import dataclass, replace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory

from .engine import STAGE_QUEUE, feeder_members, operand_queue, outstanding, read_port
from .loader import Job, packed_read
from .requantizer import Requantizer
from .staged_engine import StagedEngine
from .arith import BF16_NEG_ZERO
from .params import (Config, check_bool, check_choice, check_instance, check_int, check_operands,
                     check_size)
from .stream import Queue, delay
from .systolic import SystolicArray, SystolicConfig, check_arith
from .tile_scheduler import TileScheduler, command_layout, completion_layout
from bertforge.rtl.errors import ParameterError

__all__ = ["GemmConfig", "GemmEngine", "OSFeeder", "WSActivationFeeder", "WSWeightFeeder", "a_job",
           "requantizer_dsps", "schedule"]


@dataclass(frozen=True, kw_only=True)
class GemmConfig(Config):
    """Parameters of a :class:`GemmEngine`.

    Parameters
    ----------
    rows, cols : int
        Systolic array size.
    dataflow : "os" or "ws"
        Output stationary or weight stationary.
    width : 8 or 16
        Signed operand width (A and B elements are ``width // 8`` bytes; set
        by ``arith``).
    acc_width : int
        Accumulator width, ``2 * width`` to 32; sums saturate to it. C is
        written as int32 (sign-extended) or requantized int8. 32 (binary32)
        for bf16.
    mem_width : int
        External memory data width in bits (a power of two, at least 32 and
        at least ``max(rows, cols) * width``). One read-data or write beat
        carries ``mem_width // 8`` bytes.
    addr_width : int
        Byte address width of external memory (8 to 48).
    dim_width : int
        Width of the M, K, N command fields (4 to 24).
    k_chunk : int
        Reduction length held by the A and B buffers per slot (a multiple of
        ``mem_width // width``). Longer K runs in chunks.
    m_tile : int
        WS only: activation rows per weight block (rows of the A and
        accumulator buffers); at least ``rows`` keeps the array busy (a block
        takes ``max(m_tile, rows)`` cycles). OS blocks are always ``rows`` rows.
    multiply_stages, multiplier_cell
        The PEs' multiply pipeline, as in
        :class:`~bertforge.rtl.systolic.SystolicConfig` (each stage a cycle
        more of array latency; the cycle model follows).
    arith : "int", "int8", "int16" or "bf16"
        The number format, as :class:`~bertforge.rtl.systolic.SystolicConfig`'s
        (``"int8"`` and ``"int16"`` set ``width`` and are stored as
        ``"int"``). ``"bf16"``: A and B are bfloat16 (2 bytes an element),
        the array's binary32 partial sums are added in the accumulator
        with the PEs' rounded binary32 add
        (:meth:`~bertforge.rtl.arith.Bf16Arith.add`), old C and the bias are
        binary32, and C is written as float32 or, with the command's
        ``bf16_out``, rounded to bfloat16 (nearest even); no requantization
        (commands with ``int8``, ``int16`` or ``per_channel`` are errors, as
        is ``accumulate`` with ``bf16_out``). Same cycles as the integer
        engine (:mod:`bertforge.sim.gemm_cycles`).
    command_queue : int
        Commands the engine's own queue holds (0 to 64); 0: none, the
        scheduler takes ``cmd`` directly (a caller that holds its commands,
        as a board top does, saves the queue's flip-flops; the first command
        reaches the scheduler 2 cycles earlier, see
        :func:`~bertforge.sim.gemm_cycles.start_cycles`).
    stage_queue : int
        Depth of the descriptor queues in front of the stages, of the
        loader's issuer-to-receiver queue and of the completion queue (3 to
        64: the loader runs up to two chunks ahead of the accumulator, so
        its queue holds three descriptors). 3 suits small engines (on iCE40
        these queues are flip-flops): the cycles are the same where the
        cycle model is exact (compute bound); memory-bound runs of short
        commands overlap less and may take a few per cent more.
    compact : bool
        Area over width for small FPGAs (iCE40, no distributed RAM): the
        bias and scale buffers hold one memory beat per address (narrow
        and deep: block RAM, not flip-flops); old C is loaded into the
        accumulator buffer (no buffer of its own), which is read
        combinationally, each reader registering only the lanes it uses;
        the writer uses the compact
        :class:`~bertforge.rtl.requantizer.Requantizer`, which also carries int32
        results (no separate delay line); the scheduler's range check
        multiplies most significant bit first (no shifted strides). Same
        results and cycles.
    serial : bool
        Build the :class:`~bertforge.rtl.serial_engine.SerialGemmEngine`
        instead (for the smallest FPGAs): one stage at a time, operands read
        from memory element by element, a bit-serial requantizer; output
        stationary integer only, ``panel == cols``, no stage queues
        (``stage_queue`` is unused). Same results
        (:func:`~bertforge.sim.gemm_golden.gemm_golden`), its own cycles
        (:func:`~bertforge.sim.gemm_cycles.serial_cycles`).
    weight_bits : 8 or 4
        8: B is stored as operands (``width // 8`` bytes each). 4: B holds
        signed 4-bit weights, packed two K rows to a byte row: byte ``j``
        of packed row ``p`` has ``B[2p, j]`` in its low nibble and
        ``B[2p + 1, j]`` in its high nibble (``pack_int4(B.T).T`` of
        :mod:`bertforge.sim.lowbit_golden`); a command's ``b_stride`` is
        the bytes between packed rows. The loader reads ``ceil(k_len / 2)``
        beats of B a chunk instead of ``k_len`` (half B's traffic and B
        buffer), and the B buffer's reads are sign-extended to ``width``
        (:class:`~bertforge.rtl.loader.Int4Unpack`): the feeders and PEs
        are unchanged. Integer, not serial.
    transpose_c : bool
        Commands get a ``transpose_c`` field: store C transposed, element
        ``(i, j)`` at ``c_addr + j * c_stride + i * size`` (``c_stride``:
        bytes between C's columns), so a product is written in the layout
        that a later command reads as its B operand (the encoder's ``K^T``)
        without a transposing command. The writer then writes one element a
        cycle (:func:`~bertforge.sim.gemm_cycles.write_cycles`); such a
        command cannot ``accumulate``. Not serial, not sparse. False: the
        engine (and its Verilog) as without the field.
    weight_group : int
        0 (default): no group multipliers (the engine and its Verilog as
        without the field). Otherwise the 4-bit weight format of
        ``generators/docs/lowbit.md`` per command: commands get a ``w4``
        field (B packed as with ``weight_bits=4``, ``ceil(k_len / 2)``
        beats a chunk) and a ``mult_addr``: one 4-bit multiplier code per
        group of ``weight_group`` K rows and output column, ``ceil(K /
        group)`` rows of ``ceil(N / 2)`` bytes (two codes a byte, column
        ``2i`` in the low nibble), decoded through
        :data:`~bertforge.rtl.accumulator.GROUP_MULTS`. A group is a chunk
        (``k_chunk == weight_group``): the accumulator multiplies the
        chunk's sums by their column's multiplier (exact: at most 2**23 for
        groups of 32), and the loader reads the chunk's codes as one more
        beat. Commands without ``w4`` run as on the plain engine (dense int8
        B). Needs an output stationary integer width-8 engine, not
        compact, ``weight_bits`` 8 (packing is per command).
    """

    rows: int = 4
    cols: int = 4
    dataflow: str = "os"
    width: int = 8
    acc_width: int = 32
    mem_width: int = 512
    addr_width: int = 32
    dim_width: int = 16
    k_chunk: int = 256
    m_tile: int = 16
    multiply_stages: int = 1
    multiplier_cell: str = "inferred"
    arith: str = "int"
    command_queue: int = STAGE_QUEUE
    stage_queue: int = STAGE_QUEUE
    compact: bool = False
    serial: bool = False
    weight_bits: int = 8
    transpose_c: bool = False
    weight_group: int = 0

    LATE_FIELDS = ("multiply_stages", "multiplier_cell", "arith", "command_queue", "stage_queue",
                   "compact", "serial", "weight_bits", "transpose_c", "weight_group")

    def __post_init__(self):
        check_size(self, 64)
        check_choice("dataflow", self.dataflow, ("os", "ws"))
        check_arith(self)
        check_operands(self, 32)
        check_int("mem_width", self.mem_width, minimum=32, maximum=4096)
        if self.mem_width & (self.mem_width - 1):
            raise ParameterError(f"mem_width must be a power of two, not {self.mem_width}")
        need = max(self.rows, self.cols) * self.width
        if self.mem_width < need:
            raise ParameterError(f"mem_width must be at least max(rows, cols) * width = {need}, "
                             f"not {self.mem_width}")
        check_int("addr_width", self.addr_width, minimum=8, maximum=48)
        check_int("dim_width", self.dim_width, minimum=4, maximum=24)
        check_int("k_chunk", self.k_chunk, maximum=1 << 16)
        if self.k_chunk % self.lanes:
            raise ParameterError(f"k_chunk must be a multiple of mem_width // width = {self.lanes}, "
                             f"not {self.k_chunk}")
        check_int("m_tile", self.m_tile, maximum=4096)
        check_int("command_queue", self.command_queue, minimum=0, maximum=64)
        check_int("stage_queue", self.stage_queue, minimum=3, maximum=64)
        check_bool("compact", self.compact)
        check_bool("serial", self.serial)
        if self.serial and (self.dataflow != "os" or self.bf16):
            raise ParameterError(f"the serial engine is output stationary and integer: set "
                                 f"dataflow 'os' and arith 'int', not {self.dataflow!r} and "
                                 f"{self.arith!r}")
        check_choice("weight_bits", self.weight_bits, (8, 4))
        if self.weight_bits == 4 and (self.bf16 or self.serial):
            raise ParameterError(f"weight_bits 4 needs arith 'int' and serial False, not "
                                 f"{self.arith!r} and {self.serial}")
        check_bool("transpose_c", self.transpose_c)
        if self.transpose_c and self.serial:
            raise ParameterError("transpose_c needs the staged engine: set serial to false")
        check_int("weight_group", self.weight_group, minimum=0, maximum=1 << 16)
        if self.weight_group:
            if (self.width, self.arith, self.dataflow, self.weight_bits, self.serial,
                    self.compact) != (8, "int", "os", 8, False, False):
                raise ParameterError("weight_group needs an output stationary int8 engine: width 8, "
                                     "arith 'int', dataflow 'os', weight_bits 8 (packing is per "
                                     "command), serial and compact false")
            if self.weight_group & (self.weight_group - 1) or self.weight_group < 2:
                raise ParameterError(f"weight_group must be a power of two, not {self.weight_group}")
            if self.k_chunk != self.weight_group:
                raise ParameterError(f"k_chunk must equal weight_group = {self.weight_group} (a "
                                     f"chunk's sums take one multiplier), not {self.k_chunk}")
        self.systolic       # checks multiply_stages, multiplier_cell and bf16's acc_width

    @property
    def name(self):
        suffix = "_bf16" if self.bf16 else "_serial" if self.serial else ""
        if self.weight_bits == 4:
            suffix += "_w4"
        if self.transpose_c:
            suffix += "_tc"
        if self.weight_group:
            suffix += f"_g{self.weight_group}"
        return f"gemm_{self.rows}x{self.cols}_{self.dataflow}{suffix}"

    @property
    def bf16(self):
        """bf16 operands, binary32 sums (``arith == "bf16"``)."""
        return self.arith == "bf16"

    @property
    def systolic(self):
        """The config of the engine's :class:`SystolicArray`."""
        return SystolicConfig(rows=self.rows, cols=self.cols, dataflow=self.dataflow,
                              width=self.width, acc_width=self.acc_width,
                              multiply_stages=self.multiply_stages,
                              multiplier_cell=self.multiplier_cell, arith=self.arith)

    @property
    def mem_bytes(self):
        """Bytes per memory beat."""
        return self.mem_width // 8

    @property
    def lanes(self):
        """Operand elements per memory beat (L)."""
        return self.mem_width // self.width

    @property
    def lane_bits(self):
        return self.lanes.bit_length() - 1

    @property
    def group(self):
        """Array tiles side by side in one column panel (G = L // cols; 1
        in the serial engine)."""
        return 1 if self.serial else self.lanes // self.cols

    @property
    def panel(self):
        """Output columns per block: ``G * cols``."""
        return self.group * self.cols

    @property
    def block_rows(self):
        """Output rows per block: ``rows`` (OS) or ``m_tile`` (WS)."""
        return self.rows if self.dataflow == "os" else self.m_tile

    @property
    def segments(self):
        """Memory beats per A row in one chunk: ``k_chunk // L``."""
        return self.k_chunk // self.lanes

    @property
    def blocks_per_seg(self):
        """WS weight blocks per memory beat of K: ``ceil(L / rows)``."""
        return -(-self.lanes // self.rows)

    @property
    def max_kblocks(self):
        return self.segments * self.blocks_per_seg if self.dataflow == "ws" else 1



def schedule(m, config, cmd):
    """The chunk descriptors of the engine's commands ``cmd`` (its input
    stream): a :class:`TileScheduler`, behind a command queue of
    ``config.command_queue`` commands (if any)."""
    sched = m.submodules.scheduler = TileScheduler(config)
    if config.command_queue:
        cmd_q = m.submodules.cmd_queue = Queue(shape=command_layout(config),
                                               depth=config.command_queue)
        wiring.connect(m, wiring.flipped(cmd), cmd_q.i)
        wiring.connect(m, cmd_q.o, sched.cmd)
    else:
        wiring.connect(m, wiring.flipped(cmd), sched.cmd)
    return sched.chunk


def requantizer_dsps(config):
    """DSP blocks the writer's :class:`~bertforge.rtl.requantizer.Requantizer`
    takes (none in bf16: it has no requantizer)."""
    if config.bf16:
        return 0
    return Requantizer.DSPS_PER_LANE * (config.mem_bytes // 4)


class OSFeeder(wiring.Component):
    """Output stationary feeder: per tile of a loaded chunk, ``k_len`` beats
    of one column of A (a lane of each row's bank) and one row of B's tile.

    ``chunk``: descriptors (``k_len``, ``tiles``); ``loaded``: a chunk is in
    its slot (a token from the loader); ``freed``: pulses when the last read
    of a chunk is issued. ``a_rd`` (one per A bank) and ``b_rd`` read the
    buffers; ``a`` and ``b`` go to the array, handshaking together."""

    def __init__(self, config, layout, array):
        self.config = config
        super().__init__(feeder_members(layout, self.buffer_ports(config),
                                        {"a": array.a.payload.shape(), "b": array.b.payload.shape()}))

    @staticmethod
    def buffer_ports(config):
        word = unsigned(config.mem_width)
        return {"a_rd": read_port(2 * config.segments, word).array(config.rows),
                "b_rd": read_port(2 * config.k_chunk, word)}

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        w, C, SEG, Kc = cfg.width, cfg.cols, cfg.segments, cfg.k_chunk
        d = self.chunk.payload
        beat_layout = data.StructLayout({"a": unsigned(cfg.rows * w), "b": unsigned(C * w),
                                         "last": 1})
        out, issue, space = operand_queue(m, "os_operands", beat_layout)
        k = Signal(range(Kc + 1))
        j = Signal(range(cfg.group + 1))
        slot = Signal()
        ready_chunks = outstanding(m, "chunks_loaded", self.loaded, self.freed)
        go = self.chunk.valid & (ready_chunks != 0) & space
        for port in self.a_rd:
            m.d.comb += port.addr.eq(slot * SEG + (k >> cfg.lane_bits))
        m.d.comb += self.b_rd.addr.eq(slot * Kc + k)
        lane = Signal(cfg.lane_bits or 1)
        col = Signal(range(cfg.group + 1))
        last = Signal()
        m.d.comb += issue.eq(go)
        with m.If(go):
            m.d.sync += [lane.eq(k), col.eq(j), last.eq(k == d.k_len - 1), k.eq(k + 1)]
            with m.If(k == d.k_len - 1):
                m.d.sync += [k.eq(0), j.eq(j + 1)]
                with m.If(j == d.tiles - 1):
                    m.d.sync += [j.eq(0), slot.eq(~slot)]
                    m.d.comb += [self.chunk.ready.eq(1), self.freed.eq(1)]
        beat = Signal(beat_layout)
        a_data = [delay(m, p.data, 1, f"a_data{i}") for i, p in enumerate(self.a_rd)]
        b_data = delay(m, self.b_rd.data, 1, "b_data")
        lane, col, last = delay(m, lane, 1, "lane"), delay(m, col, 1, "col"), delay(m, last, 1, "last")
        m.d.comb += [
            beat.a.eq(Cat(*[data.word_select(lane, w) for data in a_data])),
            beat.b.eq(b_data.word_select(col, C * w)),
            beat.last.eq(last),
            out.i.payload.eq(beat),
        ]
        head = out.o.payload
        m.d.comb += [
            self.a.payload.data.eq(head.a), self.a.payload.last.eq(head.last),
            self.b.payload.eq(head.b),
            self.a.valid.eq(out.o.valid), self.b.valid.eq(out.o.valid),
            out.o.ready.eq(self.a.ready),
        ]
        return m


def ws_walk(m, cfg, name, d, count, advance):
    """WS block walk of one chunk: tile ``j``, segment, block in segment,
    inner index 0..count-1. Returns the signals and ``done`` (last step)."""
    R, L = cfg.rows, cfg.lanes
    j = Signal(range(cfg.group + 1), name=f"{name}_j")
    seg_base = Signal(range(cfg.k_chunk + L + 1), name=f"{name}_seg")   # segment * L
    blk = Signal(range(cfg.blocks_per_seg + 1), name=f"{name}_blk")
    kbase = Signal(range(cfg.k_chunk + L + R + 1), name=f"{name}_kbase")  # seg * L + blk * R
    inner = Signal(range(max(count, 2) + 1) if isinstance(count, int) else range(cfg.block_rows + 1),
                   name=f"{name}_i")
    last_inner = inner == count - 1
    next_blk = (blk != cfg.blocks_per_seg - 1) & (kbase + R < d.k_len)
    next_seg = seg_base + L < d.k_len
    done = Signal(name=f"{name}_done")
    m.d.comb += done.eq(last_inner & ~next_blk & ~next_seg & (j == d.tiles - 1))
    with m.If(advance):
        m.d.sync += inner.eq(inner + 1)
        with m.If(last_inner):
            m.d.sync += inner.eq(0)
            with m.If(next_blk):
                m.d.sync += [blk.eq(blk + 1), kbase.eq(kbase + R)]
            with m.Elif(next_seg):
                m.d.sync += [blk.eq(0), seg_base.eq(seg_base + L), kbase.eq(seg_base + L)]
            with m.Else():
                m.d.sync += [blk.eq(0), seg_base.eq(0), kbase.eq(0), j.eq(j + 1)]
                with m.If(j == d.tiles - 1):
                    m.d.sync += j.eq(0)
    return j, seg_base, blk, kbase, inner, done


class WSActivationFeeder(wiring.Component):
    """Weight stationary activations: per weight block of a loaded chunk,
    rows 0..m_len-1 of A, ``rows`` lanes of the block's K range each (ports
    as :class:`OSFeeder`'s, one A buffer). In bf16 the lanes past K are +0
    (memory past a row's K elements may hold an infinity or a NaN, whose
    product with the zero padding weight would be NaN)."""

    def __init__(self, config, layout, array):
        self.config = config
        word = unsigned(config.mem_width)
        super().__init__(feeder_members(
            layout, {"a_rd": read_port(2 * config.segments * config.block_rows, word)},
            {"a": array.a.payload.shape()}))

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        w, R, L, SEG, Mt = cfg.width, cfg.rows, cfg.lanes, cfg.segments, cfg.block_rows
        BPS = cfg.blocks_per_seg
        d = self.chunk.payload
        act_layout = data.StructLayout({"x": unsigned(R * w), "last": 1})
        out, issue, space = operand_queue(m, "ws_acts", act_layout)
        ready_chunks = outstanding(m, "chunks_loaded", self.loaded, self.freed)
        go = self.chunk.valid & (ready_chunks != 0) & space
        j, seg_base, blk, kbase, row, done = ws_walk(m, cfg, "act", d, d.m_len, go)
        slot = Signal()
        row_ptr = Signal(range(Mt * SEG + 1))   # row * SEG
        with m.If(go):
            m.d.sync += row_ptr.eq(Mux(row == d.m_len - 1, 0, row_ptr + SEG))
        m.d.comb += self.a_rd.addr.eq(slot * (Mt * SEG) + row_ptr + (seg_base >> cfg.lane_bits))
        blk_q = Signal.like(blk)
        last_q = Signal()
        m.d.comb += issue.eq(go)
        m.d.sync += [blk_q.eq(blk), last_q.eq(row == d.m_len - 1)]
        if cfg.bf16:
            in_k = Signal(R)     # the block's lanes that are inside K
            m.d.sync += in_k.eq(Cat(*[kbase + i < d.k_len for i in range(R)]))
        with m.If(go & done):
            m.d.sync += slot.eq(~slot)
            m.d.comb += [self.chunk.ready.eq(1), self.freed.eq(1)]
        padded = Cat(delay(m, self.a_rd.data, 1, "a_data"), Const(0, (BPS * R - L) * w))
        act = Signal(act_layout)
        lanes = padded.word_select(delay(m, blk_q, 1, "blk"), R * w)
        if cfg.bf16:
            in_k = delay(m, in_k, 1, "in_k")
            lanes = Cat(*[Mux(in_k[i], lanes[i * w:(i + 1) * w], 0) for i in range(R)])
        m.d.comb += [act.x.eq(lanes), act.last.eq(delay(m, last_q, 1, "last")),
                     out.i.payload.eq(act)]
        head = out.o.payload
        m.d.comb += [self.a.payload.data.eq(head.x), self.a.payload.last.eq(head.last),
                     self.a.valid.eq(out.o.valid), out.o.ready.eq(self.a.ready)]
        return m


class WSWeightFeeder(wiring.Component):
    """Weight stationary weights: ``rows`` rows of B's tile per weight block,
    zero past the memory beat's segment or past K (in bf16 -0, whose
    products leave a partial sum unchanged: ``x + (-0) = x``, also for
    ``x = -0``)."""

    def __init__(self, config, layout, array):
        self.config = config
        super().__init__(feeder_members(
            layout, {"b_rd": read_port(2 * config.k_chunk, unsigned(config.mem_width))},
            {"b": array.b.payload.shape()}))

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        w, R, C, L, Kc = cfg.width, cfg.rows, cfg.cols, cfg.lanes, cfg.k_chunk
        d = self.chunk.payload
        out, issue, space = operand_queue(m, "ws_weights", C * w)
        ready_chunks = outstanding(m, "chunks_loaded", self.loaded, self.freed)
        go = self.chunk.valid & (ready_chunks != 0) & space
        j, seg_base, blk, kbase, i, done = ws_walk(m, cfg, "wgt", d, R, go)
        slot = Signal()
        m.d.comb += self.b_rd.addr.eq(slot * Kc + kbase + i)
        zero = Signal()
        col = Signal.like(j)
        m.d.comb += issue.eq(go)
        m.d.sync += [col.eq(j),
                     zero.eq((kbase + i >= d.k_len) | (kbase + i >= seg_base + L))]
        with m.If(go & done):
            m.d.sync += slot.eq(~slot)
            m.d.comb += [self.chunk.ready.eq(1), self.freed.eq(1)]
        pad = Cat(*[Const(BF16_NEG_ZERO, 16)] * C) if cfg.bf16 else 0
        b_data = delay(m, self.b_rd.data, 1, "b_data")
        zero, col = delay(m, zero, 1, "zero"), delay(m, col, 1, "col")
        m.d.comb += [out.i.payload.eq(Mux(zero, pad, b_data.word_select(col, C * w))),
                     self.b.payload.eq(out.o.payload), self.b.valid.eq(out.o.valid),
                     out.o.ready.eq(self.b.ready)]
        return m


def a_job(config):
    """The loader's A job (dense and sparse engines alike): ``m_len`` rows
    of ``k_len`` elements from ``a_base``, ``a_stride`` bytes apart, a
    memory beat per ``lanes`` elements."""
    return Job("a", when=lambda d: Const(1), base=lambda d: d.a_base,
               stride=lambda d: d.a_stride, rows=lambda d: d.m_len,
               beats=lambda d: (d.k_len + config.lanes - 1) >> config.lane_bits)


class GemmEngine(StagedEngine):
    """Runs queued GEMM commands on a :class:`SystolicArray` from external memory.

    Ports: ``cmd`` (in, :func:`~bertforge.rtl.tile_scheduler.command_layout`),
    ``done`` (out, one completion per command, in order), ``rd_req`` /
    ``rd_data`` (memory reads, data in request order, one request's beats in
    order, each beat the next ``mem_width // 8`` bytes), ``wr_req`` (memory
    writes). Memory may take any time and may stall any stream.

    Each command computes, per block of ``block_rows`` x ``panel`` outputs,
    ``acc = C_old (accumulate) or 0``, then for each K chunk
    ``acc = sat(acc + sat_matmul(A_chunk, B_chunk))`` (saturating to
    ``acc_width``), then writes ``sat32(acc + bias)`` (bias optional) as
    int32 or requantized to int8 with the command's (multiplier, shift) or
    one per output column; see :func:`bertforge.sim.gemm_golden.gemm_golden`.
    Edge blocks only read and write the valid part of each matrix; nothing
    needs padding.

    The stages are those of :mod:`bertforge.rtl.engine`: scheduler ->
    :class:`~bertforge.rtl.loader.Loader` (jobs: old C, bias, scales, A, B)
    -> feeders (:class:`OSFeeder`, or :class:`WSActivationFeeder` and
    :class:`WSWeightFeeder`) -> array ->
    :class:`~bertforge.rtl.accumulator.Accumulator` ->
    :class:`~bertforge.rtl.writer.Writer`. A, B and the block buffers are
    double-buffered, so the next chunk loads while this one computes, and
    the previous block is written while this one accumulates; commands
    follow each other with no gap.

    Throughput (compute bound): the array is busy ``max(k_len, rows)`` cycles
    per tile (OS) or ``max(m_len, rows)`` per weight block (WS), back to back
    across chunks, blocks and commands;
    :func:`bertforge.sim.gemm_cycles.gemm_cycles` gives the exact count.
    Loads of a chunk take ``A rows x ceil(k_len / L) + k_len`` read beats
    (plus old C rows, bias and scales at a block's first chunk);
    ``ceil(k_len / 2)`` beats of B with packed 4-bit weights
    (``weight_bits=4``).

    Parameters
    ----------
    config : GemmConfig
    max_dsp : int or None
        At most this many multipliers use DSP blocks: the requantizer's
        (:func:`requantizer_dsps`) first, then the PEs; the other PEs build
        the product from logic (see :class:`SystolicConfig`).
    done_always_ready : bool
        The consumer of ``done`` holds its ``ready`` at 1 (the encoder
        top): the writer has no completion queue, and a completion comes in
        the cycle its command's last write beat is taken,
        :data:`~bertforge.sim.gemm_cycles.DONE_QUEUE` cycles sooner
        (``gemm_cycles(..., done_always_ready=True)``). Default False: the
        consumer may stall ``done``.
    """

    def __init__(self, config, *, max_dsp=None, done_always_ready=False):
        check_instance("config", config, GemmConfig)
        if config.serial:
            raise ParameterError("GemmEngine needs serial=False (serial=True is the "
                                 "SerialGemmEngine; gemm_engine() picks the right one)")
        pe_dsp = None if max_dsp is None else max(0, max_dsp - requantizer_dsps(config))
        self.systolic = replace(config.systolic, max_dsp=pe_dsp)
        super().__init__(config, command_layout(config), completion_layout(config),
                         done_always_ready=done_always_ready)

    def schedule(self, m):
        return schedule(m, self.config, self.cmd)

    def array(self):
        # OS sums are one chunk (k_chunk products; a WS array bounds its
        # own, a column): exact and narrow; the accumulator adds chunks and saturates.
        return SystolicArray(self.systolic, sum_terms=self.config.k_chunk)

    def operand_jobs(self):
        cfg = self.config
        rows = (lambda d: (d.k_len + 1) >> 1) if cfg.weight_bits == 4 else lambda d: d.k_len
        if cfg.weight_group:
            rows = lambda d: Mux(d.w4, (d.k_len + 1) >> 1, d.k_len)    # noqa: E731
        jobs = [
            a_job(cfg),
            Job("b", when=lambda d: Const(1), base=lambda d: d.b_base, stride=lambda d: d.b_stride,
                rows=rows, beats=lambda d: Const(1)),
        ]
        if cfg.weight_group:    # the chunk's multiplier codes: one beat (panel / 2 bytes)
            jobs.append(Job("codes", when=lambda d: d.w4, base=lambda d: d.mult_base,
                            stride=lambda d: 0, rows=lambda d: 1, beats=lambda d: Const(1)))
        return jobs

    def feeder_fields(self):
        if self.config.dataflow == "ws":
            return {"act": ("m_len", "k_len", "tiles"), "wgt": ("k_len", "tiles")}
        return {"os": ("k_len", "tiles") + ("w4",) * bool(self.config.weight_group)}

    def operand_buffers(self, m, beat, first):
        cfg = self.config
        SEG, Kc, Mt = cfg.segments, cfg.k_chunk, cfg.block_rows
        word = unsigned(cfg.mem_width)
        a_job, b_job = first, first + 1
        if cfg.dataflow == "ws":
            a_mems = [Memory(shape=word, depth=2 * SEG * Mt, init=[])]
            addr = beat.slot * (Mt * SEG) + beat.index
        else:
            a_mems = [Memory(shape=word, depth=2 * SEG, init=[]) for _ in range(cfg.rows)]
            addr = beat.slot * SEG + beat.beat
        for i, mem in enumerate(a_mems):
            m.submodules[f"a_buf{i}"] = mem
            wp = mem.write_port()
            bank = (beat.row == i) if len(a_mems) > 1 else Const(1)
            m.d.comb += [wp.data.eq(beat.data), wp.addr.eq(addr),
                         wp.en.eq(beat.valid & (beat.job == a_job) & bank)]
        # Packed 4-bit B: a word holds two K rows, a slot Kc // 2 words.
        b_slot = Kc // 2 if cfg.weight_bits == 4 else Kc      # (weight_group: dense slots)
        b_mem = m.submodules.b_buf = Memory(shape=word, depth=2 * b_slot, init=[])
        bw = b_mem.write_port()
        m.d.comb += [bw.data.eq(beat.data), bw.addr.eq(beat.slot * b_slot + beat.row),
                     bw.en.eq(beat.valid & (beat.job == b_job))]
        return {"a": a_mems, "b": b_mem}

    def _read_b(self, m, port, mem, packed=None):
        if self.config.weight_bits == 4 or packed is not None:
            packed_read(m, "b", self.config, port, mem, packed)
        else:
            wiring.connect(m, port, mem.read_port())

    def feed(self, m, array, buffers, heads, loaded):
        cfg = self.config
        if cfg.dataflow == "ws":
            act = m.submodules.act_feeder = WSActivationFeeder(
                cfg, heads["feed_act"].payload.shape(), array)
            wgt = m.submodules.wgt_feeder = WSWeightFeeder(
                cfg, heads["feed_wgt"].payload.shape(), array)
            wiring.connect(m, heads["feed_act"], act.chunk)
            wiring.connect(m, heads["feed_wgt"], wgt.chunk)
            wiring.connect(m, act.a_rd, buffers["a"][0].read_port())
            self._read_b(m, wgt.b_rd, buffers["b"])
            wiring.connect(m, act.a, array.a)
            wiring.connect(m, wgt.b, array.b)
            feeders = [act, wgt]
        else:
            os = m.submodules.os_feeder = OSFeeder(cfg, heads["feed_os"].payload.shape(), array)
            wiring.connect(m, heads["feed_os"], os.chunk)
            for port, mem in zip(os.a_rd, buffers["a"]):
                wiring.connect(m, port, mem.read_port())
            self._read_b(m, os.b_rd, buffers["b"],
                         heads["feed_os"].payload.w4 if cfg.weight_group else None)
            wiring.connect(m, os.a, array.a)
            wiring.connect(m, os.b, array.b)
            feeders = [os]
        for feeder in feeders:
            m.d.comb += feeder.loaded.eq(loaded)
        return [feeder.freed for feeder in feeders]
