"""GEMM engine: tile scheduler + double-buffered on-chip buffers + systolic array."""

from dataclasses import dataclass, replace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .fixed import requantize
from .params import Config, check_choice, check_instance, check_int, check_operands, check_size
from .stream import Queue, clamp
from .systolic import SystolicArray, SystolicConfig
from .tile_scheduler import TileScheduler, chunk_layout, command_layout, completion_layout
from bertforge.rtl.errors import ParameterError

__all__ = ["GemmConfig", "GemmEngine", "read_request_layout", "write_request_layout"]

#: Depth of the small queues between the engine's stages.
STAGE_QUEUE = 4
#: Depth of the operand queues in front of the array.
FEED_QUEUE = 8


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
        Signed operand width (A and B elements are ``width // 8`` bytes).
    acc_width : int
        Accumulator width, ``2 * width`` to 32; sums saturate to it. C is
        written as int32 (sign-extended) or requantized int8.
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

    def __post_init__(self):
        check_size(self, 64)
        check_choice("dataflow", self.dataflow, ("os", "ws"))
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

    @property
    def name(self):
        return f"gemm_{self.rows}x{self.cols}_{self.dataflow}"

    @property
    def systolic(self):
        """The config of the engine's :class:`SystolicArray`."""
        return SystolicConfig(rows=self.rows, cols=self.cols, dataflow=self.dataflow,
                              width=self.width, acc_width=self.acc_width)

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
        """Array tiles side by side in one column panel (G = L // cols)."""
        return self.lanes // self.cols

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


def read_request_layout(config):
    """Read ``beats`` memory beats of consecutive bytes from byte ``addr`` on."""
    return data.StructLayout({"addr": unsigned(config.addr_width),
                              "beats": range(max(config.segments, 4) + 1)})


def write_request_layout(config):
    """Write the low ``bytes`` bytes of ``data`` at byte ``addr`` on."""
    return data.StructLayout({"addr": unsigned(config.addr_width),
                              "data": unsigned(config.mem_width),
                              "bytes": range(config.mem_bytes + 1)})


def _ahead(x, y, n):
    """``x - y <= n`` for wrapping 8-bit counters that are close together."""
    return (x - y)[:8] <= n


class GemmEngine(wiring.Component):
    """Runs queued GEMM commands on a :class:`SystolicArray` from external memory.

    Ports: ``cmd`` (in, :func:`~bertforge.rtl.tile_scheduler.command_layout`),
    ``done`` (out, one completion per command, in order), ``rd_req`` /
    ``rd_data`` (memory reads, data in request order, one request's beats in
    order, each beat the next ``mem_width // 8`` bytes), ``wr_req`` (memory
    writes). Memory may take any time and may stall any stream.

    Each command computes, per block of ``block_rows`` x ``panel`` outputs,
    ``acc = C_old (accumulate) or 0``, then for each K chunk
    ``acc = sat(acc + sat_matmul(A_chunk, B_chunk))`` (saturating to
    ``acc_width``), then writes ``acc`` as int32 or as
    ``requantize(acc, multiplier, shift)`` int8; see
    :func:`bertforge.sim.gemm_golden.gemm_golden`. Edge blocks only read and
    write the valid part of each matrix; nothing needs padding.

    Stages (each a small state machine, decoupled by queues and chunk
    counters): scheduler -> loader (read requests; read data into the A, B
    and accumulator buffers) -> feeders (buffers -> array) -> accumulator
    (array results added into the accumulator buffer) -> writer (write
    requests, completions). A, B and the accumulator are double-buffered, so
    the next chunk loads while this one computes, and the previous block is
    written while this one accumulates.

    Throughput (compute bound): the array is busy ``max(k_len, rows)`` cycles
    per tile (OS) or ``max(m_len, rows)`` per weight block (WS), back to back
    across chunks, blocks and commands;
    :func:`bertforge.sim.gemm_cycles.gemm_cycles` gives the exact count.
    Loads of a chunk take ``A rows x ceil(k_len / L) + k_len`` read beats
    (plus the old C rows when accumulating).

    Parameters
    ----------
    config : GemmConfig
    max_dsp : int or None
        At most this many PEs multiply with ``*`` (DSP blocks on an FPGA);
        the others build the product from logic (see :class:`SystolicConfig`).
    """

    def __init__(self, config, *, max_dsp=None):
        self.config = check_instance("config", config, GemmConfig)
        self.systolic = replace(config.systolic, max_dsp=max_dsp)
        super().__init__({
            "cmd": In(stream.Signature(command_layout(config))),
            "done": Out(stream.Signature(completion_layout(config))),
            "rd_req": Out(stream.Signature(read_request_layout(config))),
            "rd_data": In(stream.Signature(unsigned(config.mem_width))),
            "wr_req": Out(stream.Signature(write_request_layout(config))),
        })

    # -- helpers -----------------------------------------------------------

    @staticmethod
    def _queue(m, name, layout, depth=STAGE_QUEUE):
        """A :class:`Queue` of ``layout`` and its head (``o.payload``)."""
        queue = m.submodules[name] = Queue(shape=layout, depth=depth)
        return queue, queue.o.payload

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        R, P = cfg.rows, cfg.panel
        Mt, Kc, SEG = cfg.block_rows, cfg.k_chunk, cfg.segments
        ws = cfg.dataflow == "ws"

        sched = m.submodules.scheduler = TileScheduler(cfg)
        cmd_q, _ = self._queue(m, "cmd_queue", command_layout(cfg))
        wiring.connect(m, wiring.flipped(self.cmd), cmd_q.i)
        wiring.connect(m, cmd_q.o, sched.cmd)
        array = m.submodules.array = SystolicArray(self.systolic)

        # Fan the chunk descriptors out to every stage's queue.
        layout = chunk_layout(cfg)
        stages = ["issue", "receive", "feed_a", "accum", "write"] + (["feed_w"] if ws else [])
        queues = {name: self._queue(m, f"{name}_queue", layout) for name in stages}
        chunk = sched.chunk
        to_writer = chunk.payload.last | chunk.payload.error
        ready = Signal()
        m.d.comb += ready.eq(1)
        for name, (fifo, _) in queues.items():
            needed = to_writer if name == "write" else ~chunk.payload.error
            m.d.comb += fifo.i.payload.eq(chunk.payload)
            m.d.comb += fifo.i.valid.eq(chunk.valid & ready & needed)
            with m.If(needed & ~fifo.i.ready):
                m.d.comb += ready.eq(0)
        m.d.comb += chunk.ready.eq(ready)

        # Progress counters (wrapping, 8 bits): chunks and blocks per stage.
        def counter(name):
            return Signal(8, name=name)
        issued_chunks, issued_blocks = counter("issued_chunks"), counter("issued_blocks")
        loaded_chunks, loaded_blocks = counter("loaded_chunks"), counter("loaded_blocks")
        fed_a, fed_w = counter("fed_a_chunks"), counter("fed_w_chunks")
        acc_chunks, acc_blocks = counter("acc_chunks"), counter("acc_blocks")
        committed = counter("committed_blocks")  # blocks whose last sum is written
        read_blocks = counter("written_blocks")  # blocks read out of the accumulator

        # -- buffers ----------------------------------------------------------
        word = unsigned(cfg.mem_width)
        a_banks = R if not ws else 1
        a_depth = 2 * SEG * (1 if not ws else Mt)
        a_mems = [Memory(shape=word, depth=a_depth, init=[]) for _ in range(a_banks)]
        for i, mem in enumerate(a_mems):
            m.submodules[f"a_buf{i}"] = mem
        b_mem = m.submodules.b_buf = Memory(shape=word, depth=2 * Kc, init=[])
        acc_mem = m.submodules.acc_buf = Memory(
            shape=unsigned(P * cfg.acc_width), depth=2 * Mt, init=[])

        self._loader(m, a_mems, b_mem, acc_mem, queues, issued_chunks, issued_blocks,
                     loaded_chunks, loaded_blocks, fed_a, fed_w, read_blocks)
        acc_wp = acc_mem.write_port(granularity=cfg.acc_width)
        if ws:
            self._feed_ws(m, array, a_mems[0], b_mem, queues, loaded_chunks, fed_a, fed_w)
        else:
            self._feed_os(m, array, a_mems, b_mem, queues, loaded_chunks, fed_a)
        self._accumulate(m, array, acc_mem, acc_wp, queues, acc_chunks, acc_blocks, committed,
                         read_blocks)
        self._write(m, acc_mem, queues, committed, read_blocks)
        return m

    # -- loader -------------------------------------------------------------

    def _loader(self, m, a_mems, b_mem, acc_mem, queues, issued_chunks, issued_blocks,
                loaded_chunks, loaded_blocks, fed_a, fed_w, read_blocks):
        cfg = self.config
        ws = cfg.dataflow == "ws"
        L, MB, Mt, Kc, SEG, P = cfg.lanes, cfg.mem_bytes, cfg.block_rows, cfg.k_chunk, cfg.segments, cfg.panel
        Q = MB // 4
        mb_bits = MB.bit_length() - 1

        def beats_of(d):
            """Beats per request of each job: old C, A, B."""
            c_beats = (d.n_len * 4 + MB - 1) >> mb_bits
            a_beats = (d.k_len + L - 1) >> cfg.lane_bits
            return c_beats, a_beats

        # Issuer: old C rows (accumulate, first chunk), A rows, B rows.
        fifo, d = queues["issue"]
        job = Signal(2)      # 0: old C, 1: A, 2: B
        busy = Signal()
        row = Signal(range(max(Mt, Kc) + 1))
        addr = Signal(cfg.addr_width)
        c_beats, a_beats = beats_of(d)
        load_c = d.first & d.accumulate
        slot_free = _ahead(issued_chunks, fed_a, 1)
        if ws:
            slot_free &= _ahead(issued_chunks, fed_w, 1)
        acc_free = _ahead(issued_blocks, read_blocks, 1)
        req = self.rd_req
        rows_of_job = Mux(job == 2, d.k_len, d.m_len)
        stride = Mux(job == 0, d.c_stride, Mux(job == 1, d.a_stride, d.b_stride))
        m.d.comb += [req.payload.addr.eq(addr),
                     req.payload.beats.eq(Mux(job == 0, c_beats, Mux(job == 1, a_beats, 1)))]
        with m.If(~busy):
            with m.If(fifo.o.valid & slot_free & (~load_c | acc_free)):
                m.d.sync += [busy.eq(1), row.eq(0), job.eq(Mux(load_c, 0, 1)),
                             addr.eq(Mux(load_c, d.c_base, d.a_base))]
        with m.Else():
            m.d.comb += req.valid.eq(1)
            with m.If(req.ready):
                m.d.sync += [row.eq(row + 1), addr.eq(addr + stride)]
                with m.If(row == rows_of_job - 1):
                    m.d.sync += row.eq(0)
                    with m.If(job == 0):
                        m.d.sync += [job.eq(1), addr.eq(d.a_base)]
                    with m.Elif(job == 1):
                        m.d.sync += [job.eq(2), addr.eq(d.b_base)]
                    with m.Else():
                        m.d.sync += [busy.eq(0), issued_chunks.eq(issued_chunks + 1)]
                        m.d.comb += fifo.o.ready.eq(1)
                        with m.If(d.last):
                            m.d.sync += issued_blocks.eq(issued_blocks + 1)

        # Receiver: read data into the buffers, in request order.
        fifo, d = queues["receive"]
        c_beats, a_beats = beats_of(d)
        load_c = d.first & d.accumulate
        rjob = Signal(2)
        rstarted = Signal()
        rrow = Signal(range(max(Mt, Kc) + 1))
        beat = Signal(range(max(SEG, 4) + 1))
        ptr = Signal(range(max(Mt * SEG, 1) + 1))  # WS: A row * SEG + beat
        job_now = Mux(rstarted, rjob, Mux(load_c, 0, 1))
        rows_of_job = Mux(job_now == 2, d.k_len, d.m_len)
        beats_now = Mux(job_now == 0, c_beats, Mux(job_now == 1, a_beats, 1))
        ab_slot = loaded_chunks[0]
        acc_slot = loaded_blocks[0]
        rd = self.rd_data
        m.d.comb += rd.ready.eq(fifo.o.valid)
        take = rd.valid & fifo.o.valid
        row_now = Mux(rstarted, rrow, 0)
        beat_now = Mux(rstarted, beat, 0)
        ptr_now = Mux(rstarted, ptr, 0)

        # Old C beat -> accumulator lanes [beat * Q, beat * Q + Q).
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
            m.d.comb += wp.data.eq(rd.payload)
            if ws:
                m.d.comb += wp.addr.eq(ab_slot * (Mt * SEG) + ptr_now)
                m.d.comb += wp.en.eq(take & (job_now == 1))
            else:
                m.d.comb += wp.addr.eq(ab_slot * SEG + beat_now)
                m.d.comb += wp.en.eq(take & (job_now == 1) & (row_now == i))
        bw = b_mem.write_port()
        m.d.comb += [bw.data.eq(rd.payload), bw.addr.eq(ab_slot * Kc + row_now),
                     bw.en.eq(take & (job_now == 2))]

        with m.If(take):
            m.d.sync += [rstarted.eq(1), rjob.eq(job_now), rrow.eq(row_now),
                         beat.eq(beat_now + 1), ptr.eq(ptr_now + 1)]
            with m.If(beat_now == beats_now - 1):
                m.d.sync += [beat.eq(0), rrow.eq(row_now + 1),
                             ptr.eq(ptr_now + 1 + SEG - beats_now)]
                with m.If(row_now == rows_of_job - 1):
                    m.d.sync += [rrow.eq(0), ptr.eq(0), rjob.eq(job_now + 1)]
                    with m.If(job_now == 2):
                        m.d.sync += [rstarted.eq(0), loaded_chunks.eq(loaded_chunks + 1)]
                        m.d.comb += fifo.o.ready.eq(1)
                        with m.If(d.last):
                            m.d.sync += loaded_blocks.eq(loaded_blocks + 1)

    # -- feeders ------------------------------------------------------------

    def _feed_queue(self, m, name, shape):
        """Operand queue with a one-cycle read stage in front: ``space`` says a
        buffer read may be issued now."""
        fifo = m.submodules[name] = Queue(shape=shape, depth=FEED_QUEUE)
        pending = Signal(name=f"{name}_pending")
        space = Signal(name=f"{name}_space")
        m.d.comb += space.eq(fifo.level + pending < FEED_QUEUE - 2)
        return fifo, pending, space

    def _feed_os(self, m, array, a_mems, b_mem, queues, loaded_chunks, fed_a):
        cfg = self.config
        w, C, SEG, Kc = cfg.width, cfg.cols, cfg.segments, cfg.k_chunk
        fifo, d = queues["feed_a"]
        beat_layout = data.StructLayout({"a": unsigned(cfg.rows * w), "b": unsigned(C * w), "last": 1})
        out, pending, space = self._feed_queue(m, "os_operands", beat_layout)
        k = Signal(range(Kc + 1))
        j = Signal(range(cfg.group + 1))
        slot = fed_a[0]
        go = fifo.o.valid & (loaded_chunks != fed_a) & space
        a_ports = [mem.read_port() for mem in a_mems]
        b_port = b_mem.read_port()
        for port in a_ports:
            m.d.comb += port.addr.eq(slot * SEG + (k >> cfg.lane_bits))
        m.d.comb += b_port.addr.eq(slot * Kc + k)
        lane = Signal(cfg.lane_bits or 1)
        col = Signal(range(cfg.group + 1))
        last = Signal()
        m.d.sync += pending.eq(go)
        with m.If(go):
            m.d.sync += [lane.eq(k), col.eq(j), last.eq(k == d.k_len - 1), k.eq(k + 1)]
            with m.If(k == d.k_len - 1):
                m.d.sync += [k.eq(0), j.eq(j + 1)]
                with m.If(j == d.tiles - 1):
                    m.d.sync += [j.eq(0), fed_a.eq(fed_a + 1)]
                    m.d.comb += fifo.o.ready.eq(1)
        beat = Signal(beat_layout)
        m.d.comb += [
            beat.a.eq(Cat(*[p.data.word_select(lane, w) for p in a_ports])),
            beat.b.eq(b_port.data.word_select(col, C * w)),
            beat.last.eq(last),
            out.i.payload.eq(beat), out.i.valid.eq(pending),
        ]
        head = out.o.payload
        m.d.comb += [
            array.a.payload.data.eq(head.a), array.a.payload.last.eq(head.last),
            array.b.payload.eq(head.b),
            array.a.valid.eq(out.o.valid), array.b.valid.eq(out.o.valid),
            out.o.ready.eq(array.a.ready),
        ]

    def _ws_walk(self, m, name, d, count, advance):
        """WS block walk of one chunk: tile ``j``, segment, block in segment,
        inner index 0..count-1. Returns the signals and ``done`` (last step)."""
        cfg = self.config
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

    def _feed_ws(self, m, array, a_mem, b_mem, queues, loaded_chunks, fed_a, fed_w):
        cfg = self.config
        w, R, C, L, SEG, Kc, Mt = (cfg.width, cfg.rows, cfg.cols, cfg.lanes, cfg.segments,
                                   cfg.k_chunk, cfg.block_rows)
        BPS = cfg.blocks_per_seg

        # Activations: rows m of the block, R lanes of the current K block.
        fifo, d = queues["feed_a"]
        act_layout = data.StructLayout({"x": unsigned(R * w), "last": 1})
        out, pending, space = self._feed_queue(m, "ws_acts", act_layout)
        go = fifo.o.valid & (loaded_chunks != fed_a) & space
        j, seg_base, blk, kbase, row, done = self._ws_walk(m, "act", d, d.m_len, go)
        port = a_mem.read_port()
        row_ptr = Signal(range(Mt * SEG + 1))   # row * SEG
        with m.If(go):
            m.d.sync += row_ptr.eq(Mux(row == d.m_len - 1, 0, row_ptr + SEG))
        m.d.comb += port.addr.eq(fed_a[0] * (Mt * SEG) + row_ptr + (seg_base >> cfg.lane_bits))
        blk_q = Signal.like(blk)
        last_q = Signal()
        m.d.sync += [pending.eq(go), blk_q.eq(blk), last_q.eq(row == d.m_len - 1)]
        with m.If(go & done):
            m.d.sync += fed_a.eq(fed_a + 1)
            m.d.comb += fifo.o.ready.eq(1)
        padded = Cat(port.data, Const(0, (BPS * R - L) * w))
        act = Signal(act_layout)
        m.d.comb += [act.x.eq(padded.word_select(blk_q, R * w)), act.last.eq(last_q),
                     out.i.payload.eq(act), out.i.valid.eq(pending)]
        head = out.o.payload
        m.d.comb += [array.a.payload.data.eq(head.x), array.a.payload.last.eq(head.last),
                     array.a.valid.eq(out.o.valid), out.o.ready.eq(array.a.ready)]

        # Weights: R rows of B per block, zero past the segment or past K.
        fifo, d = queues["feed_w"]
        wout, wpending, wspace = self._feed_queue(m, "ws_weights", C * w)
        wgo = fifo.o.valid & (loaded_chunks != fed_w) & wspace
        j, seg_base, blk, kbase, i, wdone = self._ws_walk(m, "wgt", d, R, wgo)
        wport = b_mem.read_port()
        m.d.comb += wport.addr.eq(fed_w[0] * Kc + kbase + i)
        zero = Signal()
        col = Signal.like(j)
        m.d.sync += [wpending.eq(wgo), col.eq(j),
                     zero.eq((kbase + i >= d.k_len) | (kbase + i >= seg_base + L))]
        with m.If(wgo & wdone):
            m.d.sync += fed_w.eq(fed_w + 1)
            m.d.comb += fifo.o.ready.eq(1)
        m.d.comb += [wout.i.payload.eq(Mux(zero, 0, wport.data.word_select(col, C * w))),
                     wout.i.valid.eq(wpending),
                     array.b.payload.eq(wout.o.payload), array.b.valid.eq(wout.o.valid),
                     wout.o.ready.eq(array.b.ready)]

    # -- accumulator --------------------------------------------------------

    def _accumulate(self, m, array, acc_mem, wp, queues, acc_chunks, acc_blocks, committed,
                    read_blocks):
        cfg = self.config
        C, Mt, P = cfg.cols, cfg.block_rows, cfg.panel
        aw = cfg.acc_width
        fifo, d = queues["accum"]
        rp = acc_mem.read_port(transparent_for=(wp,))
        row = Signal(range(Mt + 1), name="acc_row")
        kb = Signal(range(cfg.max_kblocks + 1), name="acc_kb")
        j = Signal(range(cfg.group + 1), name="acc_j")
        c = array.c
        ok = fifo.o.valid & _ahead(acc_blocks, read_blocks, 1)
        m.d.comb += c.ready.eq(ok)
        take = c.valid & ok
        slot = acc_blocks[0]
        addr = Signal(range(2 * Mt))
        m.d.comb += [addr.eq(slot * Mt + row), rp.addr.eq(addr)]
        # Stage 1 (the cycle after the handshake): add and write.
        s_valid, s_init, s_addr, s_j, s_end = Signal(), Signal(), Signal.like(addr), Signal.like(j), Signal()
        s_row = Signal.like(c.payload.data)
        m.d.sync += [s_valid.eq(take), s_addr.eq(addr), s_j.eq(j), s_row.eq(c.payload.data),
                     s_init.eq(d.first & ~d.accumulate & (kb == 0))]
        last_of_chunk = c.payload.last & (kb == d.kblocks - 1) & (j == d.tiles - 1)
        m.d.sync += s_end.eq(take & last_of_chunk & d.last)
        with m.If(take):
            m.d.sync += row.eq(row + 1)
            with m.If(c.payload.last):
                m.d.sync += [row.eq(0), kb.eq(kb + 1)]
                with m.If(kb == d.kblocks - 1):
                    m.d.sync += [kb.eq(0), j.eq(j + 1)]
                    with m.If(j == d.tiles - 1):
                        m.d.sync += [j.eq(0), acc_chunks.eq(acc_chunks + 1)]
                        m.d.comb += fifo.o.ready.eq(1)
                        with m.If(d.last):
                            m.d.sync += acc_blocks.eq(acc_blocks + 1)
        old = rp.data.word_select(s_j, C * aw)
        sums = []
        for q in range(C):
            total = Signal(signed(aw + 1), name=f"acc_sum{q}")
            prior = Mux(s_init, 0, old[q * aw:(q + 1) * aw].as_signed())
            m.d.comb += total.eq(prior + s_row[q])
            sums.append(clamp(total, aw))
        m.d.comb += [wp.addr.eq(s_addr), wp.data.eq(Cat(*(sums * cfg.group)))]
        for p in range(P):
            m.d.comb += wp.en[p].eq(s_valid & (s_j == p // C))
        with m.If(s_end):
            m.d.sync += committed.eq(committed + 1)

    # -- writer -------------------------------------------------------------

    def _write(self, m, acc_mem, queues, committed, read_blocks):
        cfg = self.config
        aw, MB, Mt, P = cfg.acc_width, cfg.mem_bytes, cfg.block_rows, cfg.panel
        Q = MB // 4
        mb_bits = MB.bit_length() - 1
        fifo, d = queues["write"]
        entry_layout = data.StructLayout({
            "addr": unsigned(cfg.addr_width), "data": unsigned(cfg.mem_width),
            "bytes": range(MB + 1), "block_end": 1, "cmd_end": 1,
            "error": 1, "tag": unsigned(8)})
        out = m.submodules.write_beats = Queue(shape=entry_layout, depth=FEED_QUEUE)
        pending = Signal()
        space = out.level + pending < FEED_QUEUE - 2
        rp = acc_mem.read_port()
        row = Signal(range(Mt + 1))
        beat = Signal(range(5))
        row_addr = Signal(cfg.addr_width)
        started = Signal()
        total = Mux(d.int8, d.n_len, d.n_len << 2)        # bytes per row
        beats = Mux(d.int8, 1, (total + MB - 1) >> mb_bits)
        ready_block = committed != read_blocks
        go = fifo.o.valid & space & (d.error | ready_block)
        base = Mux(started, row_addr, d.c_base)
        m.d.comb += rp.addr.eq(read_blocks[0] * Mt + row)
        e = Signal(entry_layout)      # fields known at issue, registered
        s_beat = Signal.like(beat)
        s_int8 = Signal()
        s_mult = Signal(32)
        s_shift = Signal(6)
        m.d.sync += pending.eq(go)
        last_beat = beat == beats - 1
        last_row = row == d.m_len - 1
        with m.If(go):
            m.d.sync += [
                e.addr.eq(base + (beat << mb_bits)),
                e.bytes.eq(Mux(last_beat, total - (beat << mb_bits), MB)),
                e.block_end.eq(~d.error & last_beat & last_row),
                e.cmd_end.eq(d.error | (d.end & last_beat & last_row)),
                e.error.eq(d.error), e.tag.eq(d.tag),
                s_beat.eq(beat), s_int8.eq(d.int8), s_mult.eq(d.multiplier), s_shift.eq(d.shift),
                started.eq(1), row_addr.eq(base), beat.eq(beat + 1),
            ]
            with m.If(d.error):
                m.d.sync += [beat.eq(0), started.eq(0)]
                m.d.comb += fifo.o.ready.eq(1)
            with m.Elif(last_beat):
                m.d.sync += [beat.eq(0), row.eq(row + 1), row_addr.eq(base + d.c_stride)]
                with m.If(last_row):
                    m.d.sync += [row.eq(0), started.eq(0), read_blocks.eq(read_blocks + 1)]
                    m.d.comb += fifo.o.ready.eq(1)
        accs = [rp.data[p * aw:(p + 1) * aw].as_signed() for p in range(P)]
        as32 = Cat(*[Cat(a, a[-1].replicate(32 - aw)) if aw < 32 else a for a in accs],
                   Const(0, 32 * (-P % Q)))
        as8 = Cat(*[requantize(a, s_mult, s_shift, signed(8)) for a in accs])
        entry = Signal(entry_layout)
        m.d.comb += [
            entry.eq(e),
            entry.data.eq(Mux(s_int8, as8, as32.word_select(s_beat, 32 * Q))),
            out.i.payload.eq(entry), out.i.valid.eq(pending),
        ]

        # Output side: write beats to memory; completions after a command's last beat.
        head = out.o.payload
        done = m.submodules.done_queue = Queue(shape=completion_layout(cfg), depth=STAGE_QUEUE)
        hold = head.cmd_end & ~done.i.ready
        wr = self.wr_req
        m.d.comb += [
            wr.payload.addr.eq(head.addr), wr.payload.data.eq(head.data),
            wr.payload.bytes.eq(head.bytes),
            wr.valid.eq(out.o.valid & ~head.error & ~hold),
            done.i.payload.tag.eq(head.tag), done.i.payload.error.eq(head.error),
        ]
        consumed = out.o.valid & ~hold & (head.error | wr.ready)
        m.d.comb += [out.o.ready.eq(consumed), done.i.valid.eq(consumed & head.cmd_end)]
        wiring.connect(m, done.o, wiring.flipped(self.done))
