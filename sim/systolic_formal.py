"""The formal properties of the systolic array (see :mod:`bertforge.sim.formal`).

:class:`SystolicSpec`: the array's :class:`~bertforge.sim.formal_specs.StreamSpec`,
its output queue never refuses a row (the credits never let a row in
flight meet a full queue), and no result row is lost or made up under any
stalls of ``c`` (on the ports only: checked on a mutant's Verilog too).
"""

import dataclasses
import functools

from amaranth.hdl import Mux, Signal

from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from .formal import VerilogDesign
from .formal_specs import StreamSpec, Timing, job_end, last_out, stream_proofs

__all__ = ["SystolicSpec", "systolic_proofs"]


class SystolicSpec(StreamSpec):
    """:class:`StreamSpec` of a systolic array, and ``queue_never_refuses``:
    nothing pushed into the output queue is refused (the credits never let
    a row in flight meet a full queue); the cover ``reaches_full_queue``
    (the output queue fills, then a tile's last row leaves); and
    ``rows_conserved``, on the ports: OS, every tile leaves as exactly
    ``rows`` rows, ``last`` on its last, and no tile leaves before its
    last beat came in; WS, the n-th result row (any n) has ``last`` as
    the n-th activation row had, and no row leaves before its activation
    came in. ``config``: the array's config."""

    PROPERTIES = ("queue_never_refuses", "reaches_full_queue")
    #: Bits of the shadow counters (no wrap within the bounded runs).
    COUNT = 6

    def __init__(self, make, *, config, **kwargs):
        super().__init__(make, **kwargs)
        self.config = config

    def instantiate(self, m, platform):
        array = self.make()
        if isinstance(array, VerilogDesign):    # its queue is inside the Verilog: not reached
            m.submodules.dut, self.queue = array, None
            return array
        inner = array.elaborate(platform)      # to reach the output queue
        array._MustUse__used = True            # elaborated here, by hand
        m.submodules.dut = inner
        self.queue = inner.submodules.queue
        return array

    def build(self, m, platform):
        super().build(m, platform)
        array, queue = self.dut, self.queue
        self.check_rows(m, array)
        if queue is None:
            return
        self.check(m, "queue_never_refuses", ~queue.i.valid | queue.i.ready)
        was_full = Signal()
        m.d.sync += was_full.eq(was_full | (queue.level == queue.depth))
        self.cover(m, "reaches_full_queue",
                   was_full & array.c.valid & array.c.ready & array.c.payload.last)


    def check_rows(self, m, array):
        a, c, rows = array.a, array.c, self.config.rows
        a_took, c_took = a.valid & a.ready, c.valid & c.ready
        a_n, c_n = Signal(self.COUNT, name="a_beats"), Signal(self.COUNT, name="c_beats")
        a_tiles, c_tiles = Signal(self.COUNT, name="a_tiles"), Signal(self.COUNT, name="c_tiles")
        m.d.sync += [a_n.eq(a_n + a_took), c_n.eq(c_n + c_took),
                     a_tiles.eq(a_tiles + (a_took & a.payload.last)),
                     c_tiles.eq(c_tiles + (c_took & c.payload.last))]
        if self.config.dataflow == "os":
            row = Signal(range(rows + 1), name="c_row")
            with m.If(c_took):
                m.d.sync += row.eq(Mux(c.payload.last, 0, row + 1))
            self.check(m, "rows_conserved",
                       ~c_took | ((c.payload.last == (row == rows - 1))
                                  & (~c.payload.last | (c_tiles < a_tiles))))
        else:
            n = self.any_const(m, self.COUNT, "n")
            last_n = Signal(name="a_last_n")
            with m.If(a_took & (a_n == n)):
                m.d.sync += last_n.eq(a.payload.last)
            self.check(m, "rows_conserved",
                       ~c_took | ((c_n < a_n) & ((c_n != n) | (c.payload.last == last_n))))


def systolic_proofs(*, make=None, config=None, data=False):
    """The proofs of the systolic array, 2x3, both dataflows, 8-bit operands,
    16-bit accumulators: the stream rules on ``c`` by k-induction; the
    output queue never refusing a row by bmc over enough cycles to fill the
    queue (the cover shows a full queue within that depth); ``latency``: a
    tile's last row within :func:`~bertforge.sim.systolic_cycles.systolic_cycles`
    of one-beat tiles less 1 (OS; WS: less the ``rows`` cycles of its
    weight block too) of its last ``a`` beat, and ``c`` valid within as
    many with ``c.ready`` low; ``rows_conserved`` (no result row lost or
    made up) by bmc deeper by the queue's depth (a row lost at a full
    queue shows on ``c`` once the queue has drained: 2x3 OS with two
    credits too many fails it at step 38; 294 s on the loaded machine),
    only with ``data`` (not in the registry's list: the 2x3 OS run to 43
    cycles outlasts the 600 s timeout at load 12). ``config``: that one
    config only (the default: both above).
    ``queue_never_refuses`` and ``reaches_full_queue`` read the output
    queue inside the array (:attr:`~bertforge.sim.formal.Proof.internal`)."""
    from .systolic_cycles import systolic_cycles
    proofs = []
    for config in [config] if config is not None else [
            SystolicConfig(rows=2, cols=3, dataflow=d, acc_width=16) for d in ("os", "ws")]:
        build = make or SystolicArray
        depth = config.queue_depth + config.rows + config.cols + 8
        # a row lost at a full queue shows on c once the queue has drained
        rows_depth = depth + config.queue_depth
        ws = config.dataflow == "ws"
        bound = systolic_cycles(config, [1]) - 1 - ws * config.rows
        # OS: a tile's rows leave one a cycle, its first (rows - 1) before its last
        timing = Timing(start=job_end("a"), done=last_out("c"), lead=2 + ws * config.rows,
                        bound=bound, ports={"c": bound - (0 if ws else config.rows - 1)})
        proofs += stream_proofs(
            "systolic", f"{config.rows}x{config.cols} {config.dataflow}",
            lambda config=config, build=build: build(config), timing=timing,
            first_output=systolic_cycles(config, [1]) + 1,
            spec=functools.partial(SystolicSpec, config=config), induction=16,
            overrides={"queue_never_refuses": ("bmc", depth), "rows_conserved": ("bmc", rows_depth),
                       "reaches_full_queue": ("cover", depth)},
            quick=() if ws else ("c_valid_held",), skip=() if data else ("rows_conserved",))
    return [dataclasses.replace(p, internal=p.name in SystolicSpec.PROPERTIES) for p in proofs]
