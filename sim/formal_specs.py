"""The properties proved of each block (see :mod:`bertforge.sim.formal`).

- :class:`QueueSpec`: :class:`~bertforge.rtl.stream.Queue` with any input,
  any ``ready`` on ``o``: the stream rules on ``o``; conservation (a beat
  leaves only when one is held; ``level`` counts exactly the beats taken
  and not yet given); order (with a shadow counter: beat number ``n``,
  an arbitrary ``n`` with an arbitrary payload, leaves as beat number ``n``
  with that payload, so nothing is dropped, duplicated or reordered under
  any stalls).
- :class:`SystolicSpec`: :class:`~bertforge.rtl.systolic.SystolicArray`
  with ``a`` and ``b`` driven by an environment that obeys the stream
  rules and any ``ready`` on ``c``: the stream rules on ``c``; nothing
  pushed into the output queue is refused (the credits never let a row in
  flight meet a full queue).

- :class:`SchedulerSpec`: :class:`~bertforge.rtl.tile_scheduler.TileScheduler`
  with commands from an environment that obeys the stream rules and any
  ``ready`` on ``chunk``: the stream rules on ``chunk``; no chunk without a
  command; a descriptor's ``error`` is set exactly for a bad command (the
  spec's own check: a size 0, a matrix past the address space, accumulate
  with int8) and a bad command yields that one descriptor and nothing else;
  every chunk of a good command lies inside its A, B and C matrices
  (between the first and the last byte of each).

``queue_proofs()``, ``systolic_proofs()`` and ``scheduler_proofs()`` are the
registry's proof lists.
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Mux, Signal, Value

from bertforge.rtl.stream import Queue
from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from bertforge.rtl.tile_scheduler import TileScheduler, command_layout
from .formal import Proof, Spec

__all__ = ["QueueSpec", "SystolicSpec", "SchedulerSpec", "queue_proofs", "systolic_proofs",
           "scheduler_proofs"]

#: Bits of the shadow beat counters of :class:`QueueSpec` (no wrap within
#: a bounded run shorter than ``2 ** COUNTER_BITS`` cycles).
COUNTER_BITS = 6


class QueueSpec(Spec):
    """Properties of a queue (``make()`` builds it; a broken copy in the tests)."""

    PROPERTIES = ("o_valid_held", "o_payload_held", "no_beat_from_nothing", "level_counts",
                  "order", "reaches_full_stall")

    def __init__(self, make, *, only=None):
        super().__init__(only=only)
        self.make = make

    def build(self, m, platform):
        q = m.submodules.dut = self.make()
        payload_i, payload_o = Value.cast(q.i.payload), Value.cast(q.o.payload)
        width = len(payload_i)
        m.d.comb += [q.i.valid.eq(AnySeq(1)), payload_i.eq(AnySeq(width)),
                     q.o.ready.eq(AnySeq(1))]
        took, gave = q.i.valid & q.i.ready, q.o.valid & q.o.ready

        self.check_stream_out(m, q.o, "o")

        # Conservation: beats held = beats taken - beats given.
        held = Signal(range(q.depth + 2))
        m.d.sync += held.eq(held + took - gave)
        self.check(m, "no_beat_from_nothing", ~q.o.valid | (held != 0))
        self.check(m, "level_counts", q.level == held)

        # Order: the n-th beat taken (any n, any payload) is the n-th given.
        count_in, count_out = Signal(COUNTER_BITS), Signal(COUNTER_BITS)
        m.d.sync += [count_in.eq(count_in + took), count_out.eq(count_out + gave)]
        n, tagged = AnyConst(COUNTER_BITS), AnyConst(width)
        self.assume(m, ~(took & (count_in == n)) | (payload_i == tagged))
        self.check(m, "order", ~(gave & (count_out == n)) | (payload_o == tagged))
        # Not vacuous: a full queue, stalled, then gives the tagged beat.
        was_full = Signal()
        m.d.sync += was_full.eq(was_full | ((q.level == q.depth) & q.o.valid & ~q.o.ready))
        self.cover(m, "reaches_full_stall", was_full & gave & (count_out == n) & (n > 2))


class SystolicSpec(Spec):
    """Properties of a systolic array (``make()`` builds it)."""

    PROPERTIES = ("c_valid_held", "c_payload_held", "queue_never_refuses", "reaches_full_queue")

    def __init__(self, make, *, only=None):
        super().__init__(only=only)
        self.make = make

    def build(self, m, platform):
        array = self.make()
        inner = array.elaborate(platform)      # to reach the output queue
        array._MustUse__used = True            # elaborated here, by hand
        m.submodules.dut = inner
        queue = inner.submodules.queue
        self.assume_stream_in(m, array.a, "a")
        self.assume_stream_in(m, array.b, "b")
        m.d.comb += array.c.ready.eq(AnySeq(1))
        self.check_stream_out(m, array.c, "c")
        self.check(m, "queue_never_refuses", ~queue.i.valid | queue.i.ready)
        # Not vacuous: the output queue fills, then a tile's last row leaves.
        was_full = Signal()
        m.d.sync += was_full.eq(was_full | (queue.level == queue.depth))
        self.cover(m, "reaches_full_queue",
                   was_full & array.c.valid & array.c.ready & array.c.payload.last)


class SchedulerSpec(Spec):
    """Properties of a tile scheduler (``make()`` builds it)."""

    PROPERTIES = ("chunk_valid_held", "chunk_payload_held", "no_chunk_without_command",
                  "error_iff_bad", "bad_gives_one_descriptor", "a_in_bounds", "b_in_bounds",
                  "c_in_bounds", "reaches_second_command")

    def __init__(self, make, *, only=None):
        super().__init__(only=only)
        self.make = make

    def build(self, m, platform):
        sched = m.submodules.dut = self.make()
        cfg = sched.config
        self.assume_stream_in(m, sched.cmd, "cmd")
        m.d.comb += sched.chunk.ready.eq(AnySeq(1))
        self.check_stream_out(m, sched.chunk, "chunk")
        taken = sched.cmd.valid & sched.cmd.ready
        d, given = sched.chunk.payload, sched.chunk.valid & sched.chunk.ready

        # The command being worked on, and whether it has ended.
        cmd = Signal(command_layout(cfg))
        busy = Signal()
        since = Signal(2)            # descriptors given since the command (saturating)
        commands = Signal(2)         # commands taken (saturating)
        with m.If(taken):
            m.d.sync += [cmd.eq(sched.cmd.payload), busy.eq(1), since.eq(0),
                         commands.eq(commands + (commands != 3))]
        with m.Elif(given):
            m.d.sync += since.eq(since + (since != 3))
            with m.If(d.error | d.end):
                m.d.sync += busy.eq(0)
        self.check(m, "no_chunk_without_command", ~sched.chunk.valid | busy)

        # The spec's own check of a command: exact byte spans.
        esize, osize = cfg.width // 8, Mux(cmd.int8, 1, 4)
        wide = cfg.addr_width + 2 * cfg.dim_width + 4
        a_end, b_end, c_end = Signal(wide), Signal(wide), Signal(wide)
        m.d.comb += [a_end.eq(cmd.a_addr + (cmd.m - 1) * cmd.a_stride + cmd.k * esize),
                     b_end.eq(cmd.b_addr + (cmd.k - 1) * cmd.b_stride + cmd.n * esize),
                     c_end.eq(cmd.c_addr + (cmd.m - 1) * cmd.c_stride + cmd.n * osize)]
        limit = 1 << cfg.addr_width
        bad = ((cmd.m == 0) | (cmd.k == 0) | (cmd.n == 0) | (cmd.accumulate & cmd.int8)
               | (a_end > limit) | (b_end > limit) | (c_end > limit)
               | (cmd.bias & (cmd.bias_addr + cmd.n * 4 > limit))
               | (cmd.per_channel & (~cmd.int8 | (cmd.scale_addr + cmd.n * 4 > limit))))
        self.check(m, "error_iff_bad", ~sched.chunk.valid | (d.error == bad))
        self.check(m, "bad_gives_one_descriptor", ~(sched.chunk.valid & bad & (since != 0)))

        # Every chunk of a good command: its first and last byte inside the matrix.
        good = sched.chunk.valid & ~bad
        nonempty = (d.m_len != 0) & (d.k_len != 0) & (d.n_len != 0)
        spans = {
            "a": (d.a_base, cmd.a_addr, (d.m_len - 1) * cmd.a_stride + d.k_len * esize, a_end),
            "b": (d.b_base, cmd.b_addr, (d.k_len - 1) * cmd.b_stride + d.n_len * esize, b_end),
            "c": (d.c_base, cmd.c_addr, (d.m_len - 1) * cmd.c_stride + d.n_len * osize, c_end),
        }
        for name, (base, start, length, end) in spans.items():
            self.check(m, f"{name}_in_bounds",
                       ~good | (nonempty & (base >= start) & (base + length <= end)))
        self.cover(m, "reaches_second_command",
                   (commands == 2) & given & d.end & ~d.error)


def _queue(shape, depth):
    return lambda: Queue(shape=shape, depth=depth)


def queue_proofs(*, make=None, shape=4, depth=3, label=None):
    """The proofs of a queue of ``depth`` payloads of ``shape`` (``make``:
    a stand-in such as a broken copy). Stream rules and conservation by
    k-induction, order by bmc over enough cycles to fill and drain it twice."""
    make = make or _queue(shape, depth)
    label = label or f"shape={shape} depth={depth}"
    induction = depth + 4
    bmc = 2 * (depth + 2) + 6
    methods = {"o_valid_held": ("prove", induction), "o_payload_held": ("prove", induction),
               "no_beat_from_nothing": ("prove", induction), "level_counts": ("prove", induction),
               "order": ("bmc", bmc), "reaches_full_stall": ("cover", bmc)}
    together = {"no_beat_from_nothing": ("level_counts",)}
    return [Proof(block="queue", name=name, config=label,
                  spec=lambda only, make=make: QueueSpec(make, only=only),
                  method=method, depth=depth_, together=together.get(name, ()))
            for name, (method, depth_) in methods.items()]


def systolic_proofs(*, make=None, configs=None):
    """The proofs of the systolic array, 2x3, both dataflows, 8-bit operands,
    16-bit accumulators: the stream rules on ``c`` by k-induction; the
    output queue never refusing a row by bmc over enough cycles to fill the
    queue (the cover shows a full queue within that depth)."""
    proofs = []
    for config in configs or [SystolicConfig(rows=2, cols=3, dataflow=d, acc_width=16)
                              for d in ("os", "ws")]:
        build = make or SystolicArray
        depth = config.queue_depth + config.rows + config.cols + 8
        label = f"{config.rows}x{config.cols} {config.dataflow}"
        methods = {"c_valid_held": ("prove", 16), "c_payload_held": ("prove", 16),
                   "queue_never_refuses": ("bmc", depth), "reaches_full_queue": ("cover", depth)}
        for name in SystolicSpec.PROPERTIES:
            proofs.append(Proof(
                block="systolic", name=name, config=label,
                spec=lambda only, config=config, build=build:
                    SystolicSpec(lambda: build(config), only=only),
                method=methods[name][0], depth=methods[name][1]))
    return proofs


#: The scheduler's small config: 2x2 OS array, 4 lanes (panel of 4 columns),
#: K chunks of 4, 8-bit addresses, 4-bit sizes.
SCHEDULER_CONFIG = GemmConfig(rows=2, cols=2, mem_width=32, k_chunk=4, m_tile=4,
                              addr_width=8, dim_width=4, acc_width=16)


def scheduler_proofs(*, make=None, config=SCHEDULER_CONFIG, depth=None):
    """The proofs of the GEMM engine's tile scheduler (block ``gemm``): the
    stream rules on ``chunk`` by k-induction; the rest by bmc: 12 cycles
    for no chunk without a command, ``dim_width + 6`` (from reset: a command
    taken, its ``dim_width`` cycles of shift-and-add range check, the check
    and its first 3 chunks, with a multiply-heavy spec check) for the error
    rule and the address bounds."""
    make = make or TileScheduler
    label = (f"scheduler {config.dataflow} panel={config.panel} block_rows={config.block_rows} "
             f"k_chunk={config.k_chunk} addr={config.addr_width} dim={config.dim_width}")
    bmc = depth or config.dim_width + 6
    methods = {"chunk_valid_held": ("prove", 4), "chunk_payload_held": ("prove", 4),
               "no_chunk_without_command": ("bmc", 12), "error_iff_bad": ("bmc", bmc),
               "bad_gives_one_descriptor": ("bmc", bmc), "a_in_bounds": ("bmc", bmc),
               "b_in_bounds": ("bmc", bmc), "c_in_bounds": ("bmc", bmc),
               "reaches_second_command": ("cover", 2 * config.dim_width + 10)}
    return [Proof(block="gemm", name=name, config=label,
                  spec=lambda only: SchedulerSpec(lambda: make(config), only=only),
                  method=method, depth=depth_)
            for name, (method, depth_) in methods.items()]
