"""Sparse GEMM engine: the GEMM engine's tile scheduler, double-buffered
buffers, accumulator and writer around an N:M sparse array."""

from dataclasses import dataclass

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .gemm import GemmConfig, GemmEngine, _ahead, read_request_layout, write_request_layout
from .stream import clamp
from .sparse import SparseArray, SparseConfig
from .params import check_choice, check_instance
from .payload import pack
from .tile_scheduler import TileScheduler, chunk_layout, command_layout, completion_layout
from bertforge.rtl.errors import ParameterError

__all__ = ["SparseEngineConfig", "SparseEngine", "sparse_command_layout", "pack_sparse_command"]


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
                              acc_width=self.acc_width)

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
        "m_shift": range(5), "kc_len": range(config.k_chunk + 1),
        "idx_base": addr, "idx_stride": addr})


class SparseEngine(GemmEngine):
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
    flag. Results are those of the dense engine on the decompressed W.

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
        self.config = check_instance("config", config, SparseEngineConfig)
        wiring.Component.__init__(self, {
            "cmd": In(stream.Signature(sparse_command_layout(config))),
            "done": Out(stream.Signature(completion_layout(config))),
            "rd_req": Out(stream.Signature(read_request_layout(config))),
            "rd_data": In(stream.Signature(unsigned(config.mem_width))),
            "wr_req": Out(stream.Signature(write_request_layout(config))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        Mt, Kc, SEG, P = cfg.block_rows, cfg.k_chunk, cfg.segments, cfg.panel
        aw = cfg.addr_width
        esize = cfg.width // 8

        # Commands: queue -> pattern and range check -> the dense scheduler.
        # The scheduler gets B with row stride 0, so its B base is the
        # panel's first column; the loader walks compressed rows itself.
        sched = m.submodules.scheduler = TileScheduler(cfg)
        cmd_q, head = self._queue(m, "cmd_queue", sparse_command_layout(cfg))
        m.d.comb += [cmd_q.i.payload.eq(self.cmd.payload), cmd_q.i.valid.eq(self.cmd.valid),
                     self.cmd.ready.eq(cmd_q.i.ready)]
        held = Signal(sparse_command_layout(cfg))
        bad = Signal()
        shift = Signal(range(5))
        rows_c = Signal(cfg.dim_width + 1)      # compressed rows of the whole command
        b_end = Signal(aw + cfg.dim_width + 3)
        i_end = Signal(aw + cfg.dim_width + 3)
        power = Signal()
        for s in range(cfg.m_max.bit_length()):
            with m.If(held.pat_m == 1 << s):
                m.d.comb += [shift.eq(s), power.eq(1)]
        m.d.comb += [
            rows_c.eq(((held.k + held.pat_m - 1) >> shift) * held.pat_n),
            b_end.eq(held.b_addr + (rows_c - 1) * held.b_stride + held.n * esize),
            i_end.eq(held.idx_addr + (rows_c - 1) * held.idx_stride + held.n),
        ]
        check = (~power | (held.pat_n == 0) | (held.pat_n > held.pat_m) | (held.k == 0)
                 | (b_end > (1 << aw)) | (i_end > (1 << aw)))
        # Extras of the command the scheduler is cutting now.
        cur = Signal(sparse_command_layout(cfg))
        cur_shift = Signal(range(5))
        with m.FSM(name="precheck"):
            with m.State("IDLE"):
                m.d.comb += cmd_q.o.ready.eq(1)
                with m.If(cmd_q.o.valid):
                    m.d.sync += held.eq(head)
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += bad.eq(check)
                m.next = "OFFER"
            with m.State("OFFER"):
                for name in command_layout(cfg).members:
                    m.d.comb += getattr(sched.cmd.payload, name).eq(getattr(held, name))
                m.d.comb += [sched.cmd.payload.b_stride.eq(0),
                             sched.cmd.payload.m.eq(Mux(bad, 0, held.m)),
                             sched.cmd.valid.eq(1)]
                with m.If(sched.cmd.ready):
                    m.d.sync += [cur.eq(held), cur_shift.eq(shift)]
                    m.next = "IDLE"

        array = m.submodules.array = SparseArray(cfg.sparse)

        # Fan the chunk descriptors (with the command's extras) out to every stage.
        layout = _sparse_chunk_layout(cfg)
        stages = ["issue", "receive", "feed_a", "accum", "write"]
        queues = {name: self._queue(m, f"{name}_queue", layout) for name in stages}
        chunk = sched.chunk
        full = Signal(layout)
        for name in chunk_layout(cfg).members:
            m.d.comb += getattr(full, name).eq(getattr(chunk.payload, name))
        m.d.comb += [
            full.b_stride.eq(cur.b_stride), full.pat_n.eq(cur.pat_n), full.pat_m.eq(cur.pat_m),
            full.m_shift.eq(cur_shift),
            full.kc_len.eq(((chunk.payload.k_len + cur.pat_m - 1) >> cur_shift) * cur.pat_n),
            full.idx_base.eq(cur.idx_addr + ((chunk.payload.b_base - cur.b_addr) >> (esize - 1))),
            full.idx_stride.eq(cur.idx_stride),
        ]
        to_writer = chunk.payload.last | chunk.payload.error
        ready = Signal()
        m.d.comb += ready.eq(1)
        for name, (fifo, _) in queues.items():
            needed = to_writer if name == "write" else ~chunk.payload.error
            m.d.comb += [fifo.i.payload.eq(full), fifo.i.valid.eq(chunk.valid & ready & needed)]
            with m.If(needed & ~fifo.i.ready):
                m.d.comb += ready.eq(0)
        m.d.comb += chunk.ready.eq(ready)

        def counter(name):
            return Signal(8, name=name)
        issued_chunks, issued_blocks = counter("issued_chunks"), counter("issued_blocks")
        loaded_chunks, loaded_blocks = counter("loaded_chunks"), counter("loaded_blocks")
        fed_a = counter("fed_a_chunks")
        acc_chunks, acc_blocks = counter("acc_chunks"), counter("acc_blocks")
        committed = counter("committed_blocks")
        read_blocks = counter("written_blocks")

        word = unsigned(cfg.mem_width)
        a_mems = [Memory(shape=word, depth=2 * SEG, init=[]) for _ in range(cfg.rows)]
        for i, mem in enumerate(a_mems):
            m.submodules[f"a_buf{i}"] = mem
        b_mem = m.submodules.b_buf = Memory(shape=word, depth=2 * Kc, init=[])
        i_mem = m.submodules.idx_buf = Memory(shape=word, depth=2 * Kc, init=[])
        acc_mem = m.submodules.acc_buf = Memory(
            shape=unsigned(P * cfg.acc_width), depth=2 * Mt, init=[])

        self._sparse_loader(m, a_mems, b_mem, i_mem, acc_mem, queues, issued_chunks,
                            issued_blocks, loaded_chunks, loaded_blocks, fed_a, read_blocks)
        acc_wp = acc_mem.write_port(granularity=cfg.acc_width)
        self._sparse_feed(m, array, a_mems, b_mem, i_mem, queues, loaded_chunks, fed_a)
        self._accumulate(m, array, acc_mem, acc_wp, queues, acc_chunks, acc_blocks, committed,
                         read_blocks)
        self._write(m, acc_mem, queues, committed, read_blocks)
        return m

    # -- loader -------------------------------------------------------------

    def _sparse_loader(self, m, a_mems, b_mem, i_mem, acc_mem, queues, issued_chunks,
                       issued_blocks, loaded_chunks, loaded_blocks, fed_a, read_blocks):
        """Read requests and read data, as the dense loader's, with four jobs:
        old C (accumulate, first chunk), A rows, compressed value rows, index
        rows. A block's chunks continue the value and index rows where the
        previous chunk stopped."""
        cfg = self.config
        L, MB, Mt, Kc, SEG, P = cfg.lanes, cfg.mem_bytes, cfg.block_rows, cfg.k_chunk, cfg.segments, cfg.panel
        Q = MB // 4
        mb_bits = MB.bit_length() - 1

        def beats_of(d):
            c_beats = (d.n_len * 4 + MB - 1) >> mb_bits
            a_beats = (d.k_len + L - 1) >> cfg.lane_bits
            return c_beats, a_beats

        def job_rows(job, d):
            return Mux(job >= 2, d.kc_len, d.m_len)

        def job_beats(job, d):
            c_beats, a_beats = beats_of(d)
            return Mux(job == 0, c_beats, Mux(job == 1, a_beats, 1))

        # Issuer.
        fifo, d = queues["issue"]
        job = Signal(2)
        busy = Signal()
        row = Signal(range(max(Mt, Kc) + 1))
        addr = Signal(cfg.addr_width)
        v_next = Signal(cfg.addr_width)
        i_next = Signal(cfg.addr_width)
        load_c = d.first & d.accumulate
        slot_free = _ahead(issued_chunks, fed_a, 1)
        acc_free = _ahead(issued_blocks, read_blocks, 1)
        req = self.rd_req
        stride = Mux(job == 0, d.c_stride, Mux(job == 1, d.a_stride,
                                                Mux(job == 2, d.b_stride, d.idx_stride)))
        m.d.comb += [req.payload.addr.eq(addr), req.payload.beats.eq(job_beats(job, d))]
        with m.If(~busy):
            with m.If(fifo.o.valid & slot_free & (~load_c | acc_free)):
                m.d.sync += [busy.eq(1), row.eq(0), job.eq(Mux(load_c, 0, 1)),
                             addr.eq(Mux(load_c, d.c_base, d.a_base))]
        with m.Else():
            m.d.comb += req.valid.eq(1)
            with m.If(req.ready):
                m.d.sync += [row.eq(row + 1), addr.eq(addr + stride)]
                with m.If(row == job_rows(job, d) - 1):
                    m.d.sync += row.eq(0)
                    with m.If(job == 0):
                        m.d.sync += [job.eq(1), addr.eq(d.a_base)]
                    with m.Elif(job == 1):
                        m.d.sync += [job.eq(2), addr.eq(Mux(d.first, d.b_base, v_next))]
                    with m.Elif(job == 2):
                        m.d.sync += [job.eq(3), addr.eq(Mux(d.first, d.idx_base, i_next)),
                                     v_next.eq(addr + stride)]
                    with m.Else():
                        m.d.sync += [busy.eq(0), issued_chunks.eq(issued_chunks + 1),
                                     i_next.eq(addr + stride)]
                        m.d.comb += fifo.o.ready.eq(1)
                        with m.If(d.last):
                            m.d.sync += issued_blocks.eq(issued_blocks + 1)

        # Receiver.
        fifo, d = queues["receive"]
        load_c = d.first & d.accumulate
        rjob = Signal(2)
        rstarted = Signal()
        rrow = Signal(range(max(Mt, Kc) + 1))
        beat = Signal(range(max(SEG, 4) + 1))
        job_now = Mux(rstarted, rjob, Mux(load_c, 0, 1))
        rows_now = job_rows(job_now, d)
        beats_now = job_beats(job_now, d)
        ab_slot = loaded_chunks[0]
        acc_slot = loaded_blocks[0]
        rd = self.rd_data
        m.d.comb += rd.ready.eq(fifo.o.valid)
        take = rd.valid & fifo.o.valid
        row_now = Mux(rstarted, rrow, 0)
        beat_now = Mux(rstarted, beat, 0)

        cw = acc_mem.write_port(granularity=cfg.acc_width)
        lanes32 = [rd.payload[32 * q:32 * (q + 1)].as_signed() for q in range(Q)]
        m.d.comb += [
            cw.addr.eq(acc_slot * Mt + row_now),
            cw.data.eq(Cat(*[clamp(lanes32[p % Q], cfg.acc_width) for p in range(P)])),
        ]
        with m.If(take & (job_now == 0)):
            for p in range(P):
                m.d.comb += cw.en[p].eq(beat_now == p // Q)
        for i, mem in enumerate(a_mems):
            wp = mem.write_port()
            m.d.comb += [wp.data.eq(rd.payload), wp.addr.eq(ab_slot * SEG + beat_now),
                         wp.en.eq(take & (job_now == 1) & (row_now == i))]
        for mem, number in ((b_mem, 2), (i_mem, 3)):
            wp = mem.write_port()
            m.d.comb += [wp.data.eq(rd.payload), wp.addr.eq(ab_slot * Kc + row_now),
                         wp.en.eq(take & (job_now == number))]

        with m.If(take):
            m.d.sync += [rstarted.eq(1), rjob.eq(job_now), rrow.eq(row_now), beat.eq(beat_now + 1)]
            with m.If(beat_now == beats_now - 1):
                m.d.sync += [beat.eq(0), rrow.eq(row_now + 1)]
                with m.If(row_now == rows_now - 1):
                    m.d.sync += [rrow.eq(0), rjob.eq(job_now + 1)]
                    with m.If(job_now == 3):
                        m.d.sync += [rstarted.eq(0), loaded_chunks.eq(loaded_chunks + 1)]
                        m.d.comb += fifo.o.ready.eq(1)
                        with m.If(d.last):
                            m.d.sync += loaded_blocks.eq(loaded_blocks + 1)

    # -- feeder -------------------------------------------------------------

    def _sparse_feed(self, m, array, a_mems, b_mem, i_mem, queues, loaded_chunks, fed_a):
        """Buffers -> array: per tile of the chunk, per group, one ``a`` beat
        (each row's window of M activations) and N ``b`` beats (values,
        indices, ``group_end``); one ``b`` beat per cycle."""
        cfg = self.config
        w, C, SEG, Kc, L, mm = cfg.width, cfg.cols, cfg.segments, cfg.k_chunk, cfg.lanes, cfg.m_max
        bits = cfg.sparse.index_bits
        fifo, d = queues["feed_a"]
        a_out, a_pending, a_space = self._feed_queue(m, "sparse_acts", array.a.payload.shape().size)
        b_out, b_pending, b_space = self._feed_queue(m, "sparse_weights", array.b.payload.shape().size)
        kpos = Signal(range(Kc + L + 1))       # first element of the group
        s = Signal(range(mm + 1))              # slot in the group
        r = Signal(range(Kc + 1))              # compressed row
        j = Signal(range(cfg.group + 1))
        slot = fed_a[0]
        go = fifo.o.valid & (loaded_chunks != fed_a) & a_space & b_space
        a_ports = [mem.read_port() for mem in a_mems]
        b_port, i_port = b_mem.read_port(), i_mem.read_port()
        for port in a_ports:
            m.d.comb += port.addr.eq(slot * SEG + (kpos >> cfg.lane_bits))
        m.d.comb += [b_port.addr.eq(slot * Kc + r), i_port.addr.eq(slot * Kc + r)]
        last_slot = s == d.pat_n - 1
        last_group = kpos + d.pat_m >= d.k_len
        off = Signal(cfg.lane_bits or 1)
        col = Signal(range(cfg.group + 1))
        first_q, end_q, last_q = Signal(), Signal(), Signal()
        pat_m_q = Signal.like(d.pat_m)
        m.d.sync += [a_pending.eq(go & (s == 0)), b_pending.eq(go)]
        with m.If(go):
            m.d.sync += [off.eq(kpos), col.eq(j), first_q.eq(s == 0), end_q.eq(last_slot),
                         last_q.eq(last_group), pat_m_q.eq(d.pat_m), s.eq(s + 1), r.eq(r + 1)]
            with m.If(last_slot):
                m.d.sync += [s.eq(0), kpos.eq(kpos + d.pat_m)]
                with m.If(last_group):
                    m.d.sync += [kpos.eq(0), r.eq(0), j.eq(j + 1)]
                    with m.If(j == d.tiles - 1):
                        m.d.sync += [j.eq(0), fed_a.eq(fed_a + 1)]
                        m.d.comb += fifo.o.ready.eq(1)

        act = Signal(array.a.payload.shape())
        for i, port in enumerate(a_ports):
            window = (port.data >> (off * w))[:mm * w]
            for e in range(mm):
                m.d.comb += act.data[i][e].eq(Mux(e < pat_m_q, window[e * w:(e + 1) * w], 0))
        m.d.comb += [act.last.eq(last_q), a_out.i.payload.eq(act), a_out.i.valid.eq(a_pending)]
        wgt = Signal(array.b.payload.shape())
        values = b_port.data.word_select(col, C * w)
        indices = i_port.data.word_select(col, C * 8)
        for c in range(C):
            m.d.comb += wgt.index[c].eq(indices[8 * c:8 * c + bits])
        m.d.comb += [wgt.data.eq(values), wgt.group_end.eq(end_q),
                     b_out.i.payload.eq(wgt), b_out.i.valid.eq(b_pending)]
        m.d.comb += [
            array.a.payload.eq(a_out.o.payload), array.a.valid.eq(a_out.o.valid),
            a_out.o.ready.eq(array.a.ready),
            array.b.payload.eq(b_out.o.payload), array.b.valid.eq(b_out.o.valid),
            b_out.o.ready.eq(array.b.ready),
        ]
