"""Sparse GEMM engine: the GEMM engine's tile scheduler, double-buffered
buffers, accumulator and writer around an N:M sparse array."""

from dataclasses import dataclass

from amaranth.hdl import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory

from .engine import STAGE_QUEUE, operand_queue, outstanding, read_port
from .loader import Job
from .staged_engine import StagedEngine
from .gemm import GemmConfig, OSFeeder, a_job
from .sparse import SparseArray, SparseConfig
from .params import check_choice, check_instance
from .payload import pack
from .stream import Queue, delay
from .tile_scheduler import TileScheduler, chunk_layout, command_layout, completion_layout
from bertforge.rtl.errors import ParameterError

__all__ = ["SparseEngineConfig", "SparseEngine", "SparseFeeder", "sparse_command_layout",
           "pack_sparse_command"]


@dataclass(frozen=True, kw_only=True)
class SparseEngineConfig(GemmConfig):
    """Parameters of a :class:`SparseEngine`: those of
    :class:`~bertforge.rtl.gemm.GemmConfig` (output stationary only)
    and ``m_max`` (2, 4, 8 or 16; the largest group size M, a divisor of
    ``mem_width // width``)."""

    m_max: int = 8

    def __post_init__(self):
        super().__post_init__()
        if self.dataflow != "os":
            raise ParameterError(f"dataflow must be 'os' for the sparse engine, not {self.dataflow!r}")
        if self.bf16:
            raise ParameterError("arith must be 'int' for the sparse engine (integer PEs), not 'bf16'")
        if self.command_queue != STAGE_QUEUE:
            raise ParameterError(f"command_queue must be {STAGE_QUEUE} for the sparse engine (it "
                                 f"keeps its own command queue), not {self.command_queue}")
        if self.serial:
            raise ParameterError("serial must be False for the sparse engine (the serial engine "
                                 "is dense)")
        if self.weight_bits != 8:
            raise ParameterError(f"weight_bits must be 8 for the sparse engine, not "
                                 f"{self.weight_bits}")
        if self.transpose_c:
            raise ParameterError("transpose_c must be false for the sparse engine")
        check_choice("m_max", self.m_max, (2, 4, 8, 16))
        if self.lanes % self.m_max:
            raise ParameterError(f"m_max must divide mem_width // width = {self.lanes}, not {self.m_max}")

    @property
    def name(self):
        return f"sparse_engine_{self.rows}x{self.cols}_m{self.m_max}"

    @property
    def sparse(self):
        """The config of the engine's :class:`SparseArray`."""
        return SparseConfig(rows=self.rows, cols=self.cols, m_max=self.m_max, width=self.width,
                            acc_width=self.acc_width, multiply_stages=self.multiply_stages,
                            multiplier_cell=self.multiplier_cell)

    @property
    def pattern_bits(self):
        """Width of the command's N and M fields (they reach ``m_max``)."""
        return self.m_max.bit_length()


def sparse_command_layout(config):
    """A GEMM command (:func:`~bertforge.rtl.tile_scheduler.command_layout`)
    plus the pattern ``pat_n``:``pat_m`` and the compressed indices' byte
    address and row stride. ``k`` is the dense reduction length (A's
    columns); B (``b_addr``, ``b_stride``) holds ``ceil(k / pat_m) * pat_n``
    rows of compressed values, the indices the same number of rows of
    one byte per element."""
    addr = unsigned(config.addr_width)
    bits = unsigned(config.pattern_bits)
    return data.StructLayout({**command_layout(config).members, "pat_n": bits, "pat_m": bits,
                              "idx_addr": addr, "idx_stride": addr})


def pack_sparse_command(config, cmd):
    """A sparse command dict -> the integer of its payload (missing fields 0;
    see :func:`bertforge.rtl.payload.pack`)."""
    return pack(sparse_command_layout(config), cmd)


def _sparse_chunk_layout(config):
    addr = unsigned(config.addr_width)
    return data.StructLayout({
        **chunk_layout(config).members,
        "pat_n": unsigned(config.pattern_bits), "pat_m": unsigned(config.pattern_bits),
        "m_shift": range(config.m_max.bit_length()), "kc_len": range(config.k_chunk + 1),
        "idx_base": addr, "idx_stride": addr})


class SparseFeeder(OSFeeder):
    """Sparse feeder: per tile of a loaded chunk, per group, one ``a`` beat
    (each row's window of M activations) and N ``b`` beats (values,
    indices, ``group_end``); one ``b`` beat per cycle. Ports as
    :class:`~bertforge.rtl.gemm.OSFeeder`'s, plus ``i_rd`` (the indices)."""

    @staticmethod
    def buffer_ports(config):
        return {**OSFeeder.buffer_ports(config),
                "i_rd": read_port(2 * config.k_chunk, unsigned(config.mem_width))}

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        w, C, SEG, Kc, L, mm = cfg.width, cfg.cols, cfg.segments, cfg.k_chunk, cfg.lanes, cfg.m_max
        bits = cfg.sparse.index_bits
        d = self.chunk.payload
        a_out, a_issue, a_space = operand_queue(m, "sparse_acts", self.a.payload.shape())
        b_out, b_issue, b_space = operand_queue(m, "sparse_weights", self.b.payload.shape())
        kpos = Signal(range(Kc + L + 1))       # first element of the group
        s = Signal(range(mm + 1))              # slot in the group
        r = Signal(range(Kc + 1))              # compressed row
        j = Signal(range(cfg.group + 1))
        slot = Signal()
        ready_chunks = outstanding(m, "chunks_loaded", self.loaded, self.freed)
        go = self.chunk.valid & (ready_chunks != 0) & a_space & b_space
        for port in self.a_rd:
            m.d.comb += port.addr.eq(slot * SEG + (kpos >> cfg.lane_bits))
        m.d.comb += [self.b_rd.addr.eq(slot * Kc + r), self.i_rd.addr.eq(slot * Kc + r)]
        last_slot = s == d.pat_n - 1
        last_group = kpos + d.pat_m >= d.k_len
        off = Signal(cfg.lane_bits or 1)
        col = Signal(range(cfg.group + 1))
        end_q, last_q = Signal(), Signal()
        pat_m_q = Signal.like(d.pat_m)
        m.d.comb += [a_issue.eq(go & (s == 0)), b_issue.eq(go)]
        with m.If(go):
            m.d.sync += [off.eq(kpos), col.eq(j), end_q.eq(last_slot),
                         last_q.eq(last_group), pat_m_q.eq(d.pat_m), s.eq(s + 1), r.eq(r + 1)]
            with m.If(last_slot):
                m.d.sync += [s.eq(0), kpos.eq(kpos + d.pat_m)]
                with m.If(last_group):
                    m.d.sync += [kpos.eq(0), r.eq(0), j.eq(j + 1)]
                    with m.If(j == d.tiles - 1):
                        m.d.sync += [j.eq(0), slot.eq(~slot)]
                        m.d.comb += [self.chunk.ready.eq(1), self.freed.eq(1)]

        # The reads' data and what was registered with them, a cycle later
        # (see operand_queue).
        off, col = delay(m, off, 1, "off"), delay(m, col, 1, "col")
        pat_m_q, last_q, end_q = (delay(m, pat_m_q, 1, "pat_m"), delay(m, last_q, 1, "last"),
                                  delay(m, end_q, 1, "end"))
        act = Signal(self.a.payload.shape())
        for i, port in enumerate(self.a_rd):
            window = (delay(m, port.data, 1, f"a_data{i}") >> (off * w))[:mm * w]
            for e in range(mm):
                m.d.comb += act.data[i][e].eq(Mux(e < pat_m_q, window[e * w:(e + 1) * w], 0))
        m.d.comb += [act.last.eq(last_q), a_out.i.payload.eq(act)]
        wgt = Signal(self.b.payload.shape())
        values = delay(m, self.b_rd.data, 1, "b_data").word_select(col, C * w)
        indices = delay(m, self.i_rd.data, 1, "i_data").word_select(col, C * 8)
        for c in range(C):
            m.d.comb += wgt.index[c].eq(indices[8 * c:8 * c + bits])
        m.d.comb += [wgt.data.eq(values), wgt.group_end.eq(end_q), b_out.i.payload.eq(wgt)]
        wiring.connect(m, a_out.o, wiring.flipped(self.a))
        wiring.connect(m, b_out.o, wiring.flipped(self.b))
        return m


class SparseEngine(StagedEngine):
    """Runs queued N:M sparse GEMM commands on an :class:`SparseArray`.

    Ports as :class:`~bertforge.rtl.gemm.GemmEngine`, with commands of
    :func:`sparse_command_layout`. A command computes ``C = A @ W`` where W
    (K x N) is given compressed: its values (as B) and indices, both
    ``ceil(K / M) * N`` rows (:func:`bertforge.sim.sparse_golden.compress_nm`),
    for a pattern N:M chosen per command (M a power of two up to ``m_max``,
    ``1 <= N <= M``; N = M is dense mode). K is cut into chunks of
    ``k_chunk`` (whole groups, since M divides it); the last group may be
    partial. Bad commands (those of the dense engine, a bad pattern, or
    values or indices leaving the address space) complete with the error
    flag. Results are those of the dense engine on the decompressed W,
    bias and scales included.

    The stages are the dense engine's (:mod:`bertforge.rtl.engine`) with a
    pattern check in front of the scheduler, the loader's jobs old C, bias,
    scales, A, values, indices (values and indices continue from chunk to
    chunk) and a :class:`SparseFeeder`.

    Throughput (compute bound): a tile of a chunk occupies the array
    ``max(ceil(k_len / M) * N, rows)`` cycles, back to back; loads of a chunk
    take ``A rows x ceil(k_len / L) + 2 * ceil(k_len / M) * N`` read beats
    (values and indices). :func:`bertforge.sim.sparse_engine_cycles.sparse_engine_cycles`
    is the model.

    Parameters
    ----------
    config : SparseEngineConfig
    """

    def __init__(self, config):
        check_instance("config", config, SparseEngineConfig)
        super().__init__(config, sparse_command_layout(config), completion_layout(config))

    def schedule(self, m):
        """Commands: queue -> pattern and range check -> the dense scheduler.
        The scheduler does not walk B's rows (``b_rows=False``), so its B
        base is the panel's first column; the loader walks compressed rows
        itself, at the ``b_stride`` the descriptors carry."""
        cfg = self.config
        aw = cfg.addr_width
        esize = cfg.width // 8
        sched = m.submodules.scheduler = TileScheduler(cfg, b_rows=False)
        cmd_q = m.submodules.cmd_queue = Queue(shape=sparse_command_layout(cfg), depth=STAGE_QUEUE)
        head = cmd_q.o.payload
        wiring.connect(m, wiring.flipped(self.cmd), cmd_q.i)
        held = Signal(sparse_command_layout(cfg))
        bad = Signal()
        # The check in registered steps, each within the array's clock: M's
        # log2 (held with the command), K's groups of M, the compressed rows
        # of the whole command, the products of rows and strides, the end
        # addresses of values and indices, the verdict.
        # log2(M), M = 1 << shift up to m_max.
        shift = Signal(range(cfg.m_max.bit_length()))
        power = Signal()
        cmd_groups = Signal(cfg.dim_width)
        rows_c_less = Signal(signed(cfg.dim_width + 2))    # compressed rows, less 1
        bad_pattern = Signal()
        # With a good pattern (N <= M, K < 2**dw, M dividing 2**dw) there are
        # at most ceil(K / M) * M <= 2**dw compressed rows, so a span is below
        # 2**(aw + dw) and an end below 2**(aw + dw + 1); with a bad one the
        # values may wrap, but the command is refused anyway.
        b_span = Signal(signed(aw + cfg.dim_width + 1))
        i_span = Signal(signed(aw + cfg.dim_width + 1))
        b_end = Signal(aw + cfg.dim_width + 1)
        i_end = Signal(aw + cfg.dim_width + 1)
        # Extras of the command the scheduler is cutting now.
        cur = Signal(sparse_command_layout(cfg))
        cur_shift = Signal.like(shift)
        with m.FSM(name="precheck"):
            with m.State("IDLE"):
                m.d.comb += cmd_q.o.ready.eq(1)
                with m.If(cmd_q.o.valid):
                    m.d.sync += [held.eq(head), power.eq(0)]
                    for s in range(cfg.m_max.bit_length()):
                        with m.If(head.pat_m == 1 << s):
                            m.d.sync += [shift.eq(s), power.eq(1)]
                    m.next = "GROUPS"
            with m.State("GROUPS"):
                m.d.sync += [
                    cmd_groups.eq((held.k + held.pat_m - 1) >> shift),
                    bad_pattern.eq(~power | (held.pat_n == 0) | (held.pat_n > held.pat_m)
                                   | (held.k == 0)),
                ]
                m.next = "ROWS"
            with m.State("ROWS"):
                m.d.sync += rows_c_less.eq((cmd_groups * held.pat_n)[:cfg.dim_width + 1] - 1)
                m.next = "SPANS"
            with m.State("SPANS"):
                m.d.sync += [b_span.eq(rows_c_less * held.b_stride),
                             i_span.eq(rows_c_less * held.idx_stride)]
                m.next = "ENDS"
            with m.State("ENDS"):
                m.d.sync += [b_end.eq(held.b_addr + b_span + held.n * esize),
                             i_end.eq(held.idx_addr + i_span + held.n)]
                m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += bad.eq(bad_pattern | (b_end > (1 << aw)) | (i_end > (1 << aw)))
                m.next = "OFFER"
            with m.State("OFFER"):
                for name in command_layout(cfg).members:
                    m.d.comb += getattr(sched.cmd.payload, name).eq(getattr(held, name))
                m.d.comb += [sched.cmd.payload.m.eq(Mux(bad, 0, held.m)),
                             sched.cmd.valid.eq(1)]
                with m.If(sched.cmd.ready):
                    m.d.sync += [cur.eq(held), cur_shift.eq(shift)]
                    m.next = "IDLE"

        # The chunk descriptors with the command's extras, through a
        # register: K's groups of M are counted before it, multiplied by N
        # after it (no add, shift and multiply in one cycle). It takes a
        # descriptor only when empty (ready from a register: no path from
        # the stage queues' levels through to the scheduler), so at most one
        # every other cycle.
        held_chunk = Signal(_sparse_chunk_layout(cfg))
        chunk_groups = Signal(range(cfg.k_chunk + 1))
        chunk = stream.Signature(_sparse_chunk_layout(cfg)).create()
        load = ~chunk.valid
        with m.If(chunk.ready):
            m.d.sync += chunk.valid.eq(0)
        with m.If(load):
            m.d.sync += chunk.valid.eq(sched.chunk.valid)
            for name in chunk_layout(cfg).members:
                m.d.sync += getattr(held_chunk, name).eq(getattr(sched.chunk.payload, name))
            m.d.sync += [
                held_chunk.pat_n.eq(cur.pat_n),
                held_chunk.pat_m.eq(cur.pat_m), held_chunk.m_shift.eq(cur_shift),
                held_chunk.idx_base.eq(
                    cur.idx_addr + ((sched.chunk.payload.b_base - cur.b_addr) >> (esize - 1))),
                held_chunk.idx_stride.eq(cur.idx_stride),
                chunk_groups.eq((sched.chunk.payload.k_len + cur.pat_m - 1) >> cur_shift),
            ]
        m.d.comb += [chunk.payload.eq(held_chunk),
                     chunk.payload.kc_len.eq(chunk_groups * held_chunk.pat_n),
                     sched.chunk.ready.eq(load)]
        return chunk

    def array(self):
        # A tile has at most k_chunk compressed beats: ceil(k_len / M) * N
        # with M dividing k_chunk and N <= M.
        return SparseArray(self.config.sparse, sum_terms=self.config.k_chunk)

    def operand_jobs(self):
        cfg = self.config
        return [
            a_job(cfg),
            Job("values", when=lambda d: Const(1), base=lambda d: d.b_base,
                stride=lambda d: d.b_stride, rows=lambda d: d.kc_len, beats=lambda d: Const(1),
                resume=True),
            Job("indices", when=lambda d: Const(1), base=lambda d: d.idx_base,
                stride=lambda d: d.idx_stride, rows=lambda d: d.kc_len, beats=lambda d: Const(1),
                resume=True),
        ]

    def feeder_fields(self):
        return {"sparse": ("k_len", "tiles", "pat_n", "pat_m")}

    def operand_buffers(self, m, beat, first):
        cfg = self.config
        SEG, Kc = cfg.segments, cfg.k_chunk
        word = unsigned(cfg.mem_width)
        a_mems = [Memory(shape=word, depth=2 * SEG, init=[]) for _ in range(cfg.rows)]
        for i, mem in enumerate(a_mems):
            m.submodules[f"a_buf{i}"] = mem
            wp = mem.write_port()
            m.d.comb += [wp.data.eq(beat.data), wp.addr.eq(beat.slot * SEG + beat.beat),
                         wp.en.eq(beat.valid & (beat.job == first) & (beat.row == i))]
        buffers = {"a": a_mems}
        for offset, name in ((1, "b"), (2, "idx")):
            mem = m.submodules[f"{name}_buf"] = Memory(shape=word, depth=2 * Kc, init=[])
            wp = mem.write_port()
            m.d.comb += [wp.data.eq(beat.data), wp.addr.eq(beat.slot * Kc + beat.row),
                         wp.en.eq(beat.valid & (beat.job == first + offset))]
            buffers[name] = mem
        return buffers

    def feed(self, m, array, buffers, heads, loaded):
        cfg = self.config
        feeder = m.submodules.sparse_feeder = SparseFeeder(
            cfg, heads["feed_sparse"].payload.shape(), array)
        wiring.connect(m, heads["feed_sparse"], feeder.chunk)
        for port, mem in zip(feeder.a_rd, buffers["a"]):
            wiring.connect(m, port, mem.read_port())
        wiring.connect(m, feeder.b_rd, buffers["b"].read_port())
        wiring.connect(m, feeder.i_rd, buffers["idx"].read_port())
        wiring.connect(m, feeder.a, array.a)
        wiring.connect(m, feeder.b, array.b)
        m.d.comb += feeder.loaded.eq(loaded)
        return [feeder.freed]
