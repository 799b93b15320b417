"""The staged GEMM engine: the scheduler, the loader, the feeders, the
array, the accumulator and the writer connected (see
:mod:`bertforge.rtl.engine`)."""

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory

from .accumulator import CODE_SLOTS, Accumulator, accumulator_fields
from .engine import engine_members, fan_out, project, vector_buffer
from .loader import Job, Loader
from .params import check_bool
from .stream import Queue, clamp, delay
from .writer import Writer, writer_fields

__all__ = ["StagedEngine"]


class StagedEngine(wiring.Component):
    """A GEMM engine built from the stages: scheduler, :class:`Loader`,
    feeders, array, :class:`Accumulator`, :class:`Writer`.

    A subclass provides the parts that differ: ``command_layout`` (the
    ``cmd`` stream), :meth:`schedule` (commands -> a stream of chunk
    descriptors), ``jobs`` (the loader's), :meth:`operand_buffers` (its
    memories and how tagged beats fill them) and :meth:`feed` (its feeders,
    connected to the buffers, the loader's tokens and the array).

    Ports: ``cmd``, ``done`` (one completion per command, in order),
    ``rd_req`` / ``rd_data`` (memory reads: data in request order, each beat
    the next ``mem_width // 8`` bytes), ``wr_req`` (memory writes). Memory may
    take any time and may stall any stream; ``done`` too, unless
    ``done_always_ready`` (its consumer holds ``ready`` at 1: the
    :class:`Writer` then has no completion queue).
    """

    def __init__(self, config, command_layout, completion_layout, *, done_always_ready=False):
        self.config = config
        self.done_always_ready = check_bool("done_always_ready", done_always_ready)
        super().__init__(engine_members(config, command_layout, completion_layout))

    def block_jobs(self):
        """Old C (the first chunk of an accumulating block), bias, scales."""
        MB = self.config.mem_bytes
        mb_bits = MB.bit_length() - 1

        def words(d):
            return (d.n_len * 4 + MB - 1) >> mb_bits

        return [
            Job("c_old", when=lambda d: d.first & d.accumulate, base=lambda d: d.c_base,
                stride=lambda d: d.c_stride, rows=lambda d: d.m_len, beats=words, block=True),
            Job("bias", when=lambda d: d.first & d.bias, base=lambda d: d.bias_base,
                stride=lambda d: 0, rows=lambda d: 1, beats=words, block=True),
            Job("scale", when=lambda d: d.first & d.per_channel, base=lambda d: d.scale_base,
                stride=lambda d: 0, rows=lambda d: 1, beats=words, block=True),
        ]

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        Mt, P, aw = cfg.block_rows, cfg.panel, cfg.acc_width
        Q = cfg.mem_bytes // 4
        chunk = self.schedule(m)
        layout = chunk.payload.shape()
        array = m.submodules.array = self.array()
        jobs = self.block_jobs() + self.operand_jobs()
        feeders = self.feeder_fields()

        # Stage queues, filled by the fan-out of the descriptors.
        loader_fields = sorted({name for name in layout.members} - {"error", "end", "tag",
                                                                   "multiplier", "shift", "int8", "int16",
                                                                   "tiles", "kblocks",
                                                                   "transpose_c"})
        grouped = getattr(cfg, "weight_group", 0)
        # With group multipliers the accumulator frees a chunk too (the
        # code buffer's slot), after the feeders.
        loader = m.submodules.loader = Loader(
            cfg, project(layout, loader_fields), jobs, feeders=len(feeders) + bool(grouped),
            limits=(1,) * len(feeders) + (CODE_SLOTS - 1,) if grouped else None)
        accumulator = m.submodules.accumulator = Accumulator(
            cfg, project(layout, accumulator_fields(cfg)), array.signature.members["c"].signature)
        writer = m.submodules.writer = Writer(cfg, project(layout, writer_fields(cfg)),
                                              self.done.payload.shape(),
                                              done_always_ready=self.done_always_ready)
        heads = {}
        targets = []
        for name, fields, needed in (
                [("loader", loader_fields, ~chunk.payload.error)]
                + [(f"feed_{n}", f, ~chunk.payload.error) for n, f in feeders.items()]
                + [("accumulator", accumulator_fields(cfg), ~chunk.payload.error),
                   ("writer", writer_fields(cfg), chunk.payload.last | chunk.payload.error)]):
            queue = m.submodules[f"{name}_queue"] = Queue(shape=project(layout, fields),
                                                          depth=cfg.stage_queue)
            targets.append((queue.i, needed))
            heads[name] = queue.o
        fan_out(m, chunk, targets)
        wiring.connect(m, heads["loader"], loader.chunk)
        wiring.connect(m, heads["accumulator"], accumulator.chunk)
        wiring.connect(m, heads["writer"], writer.chunk)

        # Memory.
        wiring.connect(m, wiring.flipped(self.rd_req), loader.rd_req)
        wiring.connect(m, wiring.flipped(self.rd_data), loader.rd_data)
        wiring.connect(m, writer.wr_req, wiring.flipped(self.wr_req))
        wiring.connect(m, writer.done, wiring.flipped(self.done))

        # Block buffers: accumulator, old C (compact: in the accumulator
        # buffer), bias, scales (two blocks each).
        beat = loader.beat
        acc_mem = m.submodules.acc_buf = Memory(shape=unsigned(P * aw), depth=2 * Mt, init=[])
        if not cfg.compact:
            old_mem = m.submodules.old_buf = Memory(shape=unsigned(P * aw), depth=2 * Mt, init=[])
        vector_depth, vector_width = vector_buffer(cfg)
        bias_mem = m.submodules.bias_buf = Memory(shape=unsigned(vector_width), depth=vector_depth,
                                                  init=[])
        scale_mem = m.submodules.scale_buf = Memory(shape=unsigned(vector_width),
                                                    depth=vector_depth, init=[])
        lanes32 = [beat.data[32 * q:32 * (q + 1)] for q in range(Q)]
        c_old = (acc_mem if cfg.compact else old_mem).write_port(granularity=aw)
        m.d.comb += [
            c_old.addr.eq(beat.block_slot * Mt + beat.row),
            c_old.data.eq(Cat(*[clamp(lanes32[p % Q].as_signed(), aw) for p in range(P)])),
        ]
        for number, mem in ((1, bias_mem), (2, scale_mem)):
            if cfg.compact:     # beat ``b`` of the row to address ``b`` of the slot
                port = mem.write_port()
                m.d.comb += [port.addr.eq(beat.block_slot * (vector_depth // 2) + beat.beat),
                             port.data.eq(beat.data),
                             port.en.eq(beat.valid & (beat.job == number))]
                continue
            port = mem.write_port(granularity=32)
            m.d.comb += [port.addr.eq(beat.block_slot),
                         port.data.eq(Cat(*[lanes32[p % Q] for p in range(P)]))]
            with m.If(beat.valid & (beat.job == number)):
                for p in range(P):
                    m.d.comb += port.en[p].eq(beat.beat == p // Q)
        with m.If(beat.valid & (beat.job == 0)):
            for p in range(P):
                m.d.comb += c_old.en[p].eq(beat.beat == p // Q)
        acc_wr = acc_mem.write_port(granularity=aw)
        if cfg.compact:
            # Flip-flops on a small FPGA: read combinationally, the readers
            # give the address a cycle later (as a read port's register
            # would) and register only the lanes they use. The accumulator
            # then sees a row written the cycle before, as the transparent
            # port does; nothing writes the writer's rows while it reads.
            for reader in (accumulator.rd, writer.acc_rd):
                port = acc_mem.read_port(domain="comb")
                m.d.comb += [port.addr.eq(reader.addr), reader.data.eq(port.data)]
        else:
            wiring.connect(m, accumulator.rd, acc_mem.read_port(transparent_for=(acc_wr,)))
        wiring.connect(m, accumulator.wr, acc_wr)
        if not cfg.compact:
            wiring.connect(m, accumulator.old, old_mem.read_port())
            wiring.connect(m, writer.acc_rd, acc_mem.read_port())
        wiring.connect(m, writer.bias_rd, bias_mem.read_port())
        wiring.connect(m, writer.scale_rd, scale_mem.read_port())

        # Operands: buffers, feeders, array.
        first_operand = len(self.block_jobs())
        buffers = self.operand_buffers(m, beat, first_operand)
        freed = self.feed(m, array, buffers, heads, loader.loaded)
        if grouped:     # the code buffer: chunk i's codes at i % CODE_SLOTS
            code_mem = m.submodules.code_buf = Memory(shape=unsigned(4 * P), depth=CODE_SLOTS,
                                                      init=[])
            code_job = [job.name for job in jobs].index("codes")
            code_slot = Signal(range(CODE_SLOTS), name="code_slot")
            with m.If(loader.loaded):
                m.d.sync += code_slot.eq(code_slot + 1)
            cw = code_mem.write_port()
            m.d.comb += [cw.addr.eq(code_slot), cw.data.eq(beat.data[:4 * P]),
                         cw.en.eq(beat.valid & (beat.job == code_job))]
            wiring.connect(m, accumulator.codes, code_mem.read_port())
            freed = freed + [accumulator.chunk_done]
        m.d.comb += loader.freed.eq(Cat(*freed))
        wiring.connect(m, array.c, accumulator.c)

        # Tokens between the accumulator, the writer and the loader
        # (``released`` through a register: it fans out to both).
        released = delay(m, writer.released, 1, "released", reset_less=False)
        m.d.comb += [writer.committed.eq(accumulator.committed),
                     accumulator.released.eq(released), loader.released.eq(released)]
        return m
