"""The formal properties of :class:`~bertforge.rtl.stream.Queue` (block
``queue``; see :mod:`bertforge.sim.formal`).

:class:`QueueSpec`: the queue with any input, any ``ready`` on ``o``: the
stream rules on ``o``; conservation (a beat leaves only when one is held;
``level`` counts exactly the beats taken and not yet given); order (with a
shadow counter: beat number ``n``, an arbitrary ``n`` with an arbitrary
payload, leaves as beat number ``n`` with that payload, so nothing is
dropped, duplicated or reordered under any stalls).
"""

from amaranth.hdl import Signal, Value

from bertforge.rtl.stream import Queue
from .formal import Proof, Spec

__all__ = ["QueueSpec", "queue_proofs"]


#: Bits of the shadow beat counters of :class:`QueueSpec` (no wrap within
#: a bounded run shorter than ``2 ** COUNTER_BITS`` cycles).
COUNTER_BITS = 6


class QueueSpec(Spec):
    """Properties of a queue (``make()`` builds it; a broken copy in the tests)."""

    PROPERTIES = ("o_valid_held", "o_payload_held", "no_beat_from_nothing", "level_counts",
                  "order", "reaches_full_stall")

    def build(self, m, platform):
        q = m.submodules.dut = self.make()
        payload_i, payload_o = Value.cast(q.i.payload), Value.cast(q.o.payload)
        width = len(payload_i)
        m.d.comb += [q.i.valid.eq(self.any_seq(m, 1, "i_valid")),
                     payload_i.eq(self.any_seq(m, width, "i_payload")),
                     q.o.ready.eq(self.any_seq(m, 1, "o_ready"))]
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
        n, tagged = self.any_const(m, COUNTER_BITS, "n"), self.any_const(m, width, "tagged")
        self.assume(m, ~(took & (count_in == n)) | (payload_i == tagged))
        self.check(m, "order", ~(gave & (count_out == n)) | (payload_o == tagged))
        # Not vacuous: a full queue, stalled, then gives the tagged beat.
        was_full = Signal()
        m.d.sync += was_full.eq(was_full | ((q.level == q.depth) & q.o.valid & ~q.o.ready))
        self.cover(m, "reaches_full_stall", was_full & gave & (count_out == n) & (n > 2))


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
                  method=method, depth=depth_, together=together.get(name, ()),
                  slow=name not in ("o_valid_held", "no_beat_from_nothing"))
            for name, (method, depth_) in methods.items()]
