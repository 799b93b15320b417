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

``queue_proofs()`` and ``systolic_proofs()`` are the registry's proof lists.
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Signal, Value

from bertforge.rtl.stream import Queue
from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from .formal import Proof, Spec

__all__ = ["QueueSpec", "SystolicSpec", "queue_proofs", "systolic_proofs"]

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
