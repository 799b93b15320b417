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
  with int8 or int16 output, both int8 and int16, per-channel scales
  without int8 or int16; a bf16 engine: int8, int16, or accumulate with
  bf16 output) and a bad command yields that one descriptor and nothing else;
  every chunk of a good command lies inside its A, B and C matrices
  (between the first and the last byte of each).

- :class:`StreamSpec`: any component, its stream ports found via its
  signature: the stream rules on every output stream (valid and payload
  held until ``ready``; ``valid`` raised before any ``ready``: a cover),
  under an environment obeying them on every input stream; a cover of the
  first output within the cycle model's latency, and, where it finishes,
  the bounded liveness check ``latency`` (fair environment: the first
  job's output within the cycle model's cycles of its last input).
  Used for the sparse array, softmax, layernorm, GELU, the butterfly
  engine, the GEMM engine (:class:`EngineSpec` adds ``done_per_command``)
  and the host link.
- :class:`HostLinkSpec`: :class:`~bertforge.rtl.host_link.HostLink`: a
  frame with a bad CRC never writes memory or starts a run (k-induction,
  with invariants tying the link's parser to the spec's own).

``queue_proofs()``, ``systolic_proofs()``, ``gemm_proofs()`` (the
scheduler's and the engine's), ``sparse_proofs()``, ``softmax_proofs()``,
``layernorm_proofs()``, ``gelu_proofs()``, ``butterfly_proofs()`` and
``host_link_proofs()`` are the registry's proof lists.
"""

import dataclasses

from amaranth.hdl import Fragment, Mux, Signal, Value
from amaranth.lib import stream
from amaranth.lib.wiring import In, Out

from bertforge.rtl.butterfly import ButterflyConfig, ButterflyEngine
from bertforge.rtl.gelu import Gelu, GeluConfig
from bertforge.rtl.gemm import GemmConfig, GemmEngine
from bertforge.rtl.host_link import BAD_CRC, READ_LATENCY, SYNC_HOST, HostLink, crc8_step
from bertforge.rtl.layernorm import LayerNorm, LayerNormConfig
from bertforge.rtl.softmax import Softmax, SoftmaxConfig
from bertforge.rtl.sparse import SparseArray, SparseConfig
from bertforge.rtl.stream import Queue
from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from bertforge.rtl.tile_scheduler import TileScheduler, command_layout
from .formal import FormalError, Proof, Spec

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
        m.d.comb += array.c.ready.eq(self.any_seq(m, 1, "c_ready"))
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
        m.d.comb += sched.chunk.ready.eq(self.any_seq(m, 1, "chunk_ready"))
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

        # The spec's own check of a command: exact byte spans. C's elements
        # are int32, int16 or int8 (a bf16 engine: float32, or bf16 with
        # ``bf16_out``, 2 bytes).
        bf16 = cfg.bf16
        two_bytes = (cmd.int16 | cmd.bf16_out) if bf16 else cmd.int16
        narrow = cmd.int8 | cmd.int16
        esize, osize = cfg.width // 8, Mux(cmd.int8, 1, Mux(two_bytes, 2, 4))
        wide = cfg.addr_width + 2 * cfg.dim_width + 4
        a_end, b_end, c_end = Signal(wide), Signal(wide), Signal(wide)
        m.d.comb += [a_end.eq(cmd.a_addr + (cmd.m - 1) * cmd.a_stride + cmd.k * esize),
                     b_end.eq(cmd.b_addr + (cmd.k - 1) * cmd.b_stride + cmd.n * esize),
                     c_end.eq(cmd.c_addr + (cmd.m - 1) * cmd.c_stride + cmd.n * osize)]
        limit = 1 << cfg.addr_width
        bad = ((cmd.m == 0) | (cmd.k == 0) | (cmd.n == 0) | (cmd.accumulate & narrow)
               | (cmd.int8 & cmd.int16)
               | (a_end > limit) | (b_end > limit) | (c_end > limit)
               | (cmd.bias & (cmd.bias_addr + cmd.n * 4 > limit))
               | (cmd.per_channel & (~narrow | (cmd.scale_addr + cmd.n * 4 > limit))))
        if bf16:         # no requantization in a bf16 engine; old C is float32
            bad = bad | narrow | (cmd.accumulate & cmd.bf16_out)
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
                  method=method, depth=depth_, together=together.get(name, ()),
                  slow=name == "order")
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
        slow = {"reaches_full_queue"} | ({"queue_never_refuses"} if config.dataflow == "ws" else set())
        for name in SystolicSpec.PROPERTIES:
            proofs.append(Proof(
                block="systolic", name=name, config=label,
                spec=lambda only, config=config, build=build:
                    SystolicSpec(lambda: build(config), only=only),
                method=methods[name][0], depth=methods[name][1], slow=name in slow))
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
    # 20-240 s each (the spec's byte spans multiply strides by sizes)
    slow = {"error_iff_bad", "bad_gives_one_descriptor", "a_in_bounds", "b_in_bounds",
            "c_in_bounds"}
    return [Proof(block="gemm", name=name, config=label,
                  spec=lambda only: SchedulerSpec(lambda: make(config), only=only),
                  method=method, depth=depth_, slow=name in slow)
            for name, (method, depth_) in methods.items()]


# --- the stream rules on every stream port of a component ---------------------

def stream_ports(component):
    """``(inputs, outputs)``: the names of ``component``'s stream ports (its
    signature's members whose signature is an :class:`amaranth.lib.stream.Signature`),
    in signature order."""
    inputs, outputs = [], []
    for name, member in component.signature.members.items():
        if member.is_signature and isinstance(member.signature, stream.Signature):
            (outputs if member.flow == Out else inputs).append(name)
    return inputs, outputs


class StreamSpec(Spec):
    """The stream rules on every output stream port of ``make()``, found via
    its signature, under an environment that obeys them on every input
    stream port and drives every other input port with any value each cycle
    (``environment(spec, m, dut)`` may drive some itself and returns their
    names, e.g. a memory's read data held between reads).

    Properties, for each output stream port ``p``:

    - ``p_valid_held``, ``p_payload_held``: a beat offered without ``ready``
      is offered again, unchanged, in the next cycle;
    - ``p_valid_before_ready`` (a cover): ``p.valid`` rises while ``p.ready``
      has never been high (the block does not wait for ``ready`` before
      ``valid``; with this property under proof, ``p.ready`` stays low
      until ``p.valid`` has been high).

    And for the block, ``first_output`` (a cover): with every input stream
    fair, the first beat of ``output`` (the main output port) is taken
    within the proof's depth, the latency the block's cycle model gives.
    """

    def __init__(self, make, *, only=None, environment=None, output=None, latency=None):
        super().__init__(only=only)
        self.make = make
        self.environment = environment
        self.output = output
        self.latency = latency

    def instantiate(self, m, platform):
        """Add the design to ``m`` (as submodule ``dut``) and return it."""
        dut = m.submodules.dut = self.make()
        return dut

    def build(self, m, platform):
        dut = self.dut = self.instantiate(m, platform)
        inputs, outputs = stream_ports(dut)
        driven = set(self.environment(self, m, dut) if self.environment else ())
        fair = self.only is not None and "latency" in self.only
        for name in inputs:
            if name not in driven:
                self.assume_stream_in(m, getattr(dut, name), name)
                if fair:
                    self.assume(m, getattr(dut, name).valid)
        for name, member in dut.signature.members.items():
            if member.is_port and member.flow == In and name not in driven:
                value = Value.cast(getattr(dut, name))
                m.d.comb += value.eq(self.any_seq(m, len(value), name))
        for name in outputs:
            port = getattr(dut, name)
            ready = self.any_seq(m, 1, f"{name}_ready")
            if self.only is not None and f"{name}_valid_before_ready" in self.only:
                seen = Signal(name=f"{name}_seen_valid")
                m.d.sync += seen.eq(seen | port.valid)
                ready = ready & seen
                self.cover(m, f"{name}_valid_before_ready", port.valid & ~seen)
            else:
                self.checked.append(f"{name}_valid_before_ready")
            m.d.comb += port.ready.eq(1 if fair else ready)
            self.check_stream_out(m, port, name)
        out = getattr(dut, self.output or outputs[0])
        self.cover(m, "first_output", out.valid & out.ready)
        if self.latency:
            self.check_latency(m, dut, *self.latency)

    def check_latency(self, m, dut, job_end, out_event, bound):
        """``latency``: once the first job's last input beat is taken
        (``job_end(dut)``), ``out_event(dut)`` (its output: a handshake) comes
        within ``bound`` cycles (0: the same cycle), under a fair environment
        (with this property under proof: every input stream always valid,
        every output stream always ready)."""
        end, event = job_end(dut), out_event(dut)
        armed, seen = Signal(name="latency_armed"), Signal(name="latency_seen")
        age = Signal(range(bound + 2), name="latency_age")   # cycles since the job's end
        m.d.sync += [armed.eq(armed | end), seen.eq(seen | ((armed | end) & event))]
        with m.If(end & ~armed):
            m.d.sync += age.eq(1)
        with m.Elif(armed & (age <= bound)):
            m.d.sync += age.eq(age + 1)
        due = Mux(armed, age, 0) == bound
        self.check(m, "latency", ~((armed | end) & due) | seen | event)


def stream_proofs(block, label, make, *, environment=None, output=None, induction=4,
                  bmc=None, first_output, latency=None, quick=(), overrides=None, skip=()):
    """The :class:`StreamSpec` proofs of ``make()`` (a small config named
    ``label``): for each output stream port, ``valid_held`` and
    ``payload_held`` by k-induction of ``induction`` steps (by bmc of
    ``bmc`` cycles instead when given: where the induction does not
    close), ``valid_before_ready`` as a cover within ``first_output``
    cycles; the block's ``first_output`` cover within ``first_output``
    cycles (its cycle model's latency); with ``latency`` =
    ``(job_end, out_event, bound, depth)``, the bounded liveness check
    ``latency`` (see :meth:`StreamSpec.check_latency`) by bmc of ``depth``
    cycles. ``overrides``: ``{name: (method, depth)}`` for single
    properties; ``skip``: names left out.

    :attr:`Proof.slow` is set on all but the quick set the default test run
    keeps: ``valid_held`` of the main output port (``output``, else the
    first) and the names in ``quick``."""
    probe = make()
    probe._MustUse__silence = True         # only its signature is read
    _, outputs = stream_ports(probe)
    main = output or outputs[0]
    quick = {f"{main}_valid_held", *quick}
    methods = {}
    for name in outputs:
        held = ("bmc", bmc) if bmc else ("prove", induction)
        methods[f"{name}_valid_held"] = held
        methods[f"{name}_payload_held"] = held
        methods[f"{name}_valid_before_ready"] = ("cover", first_output)
    methods["first_output"] = ("cover", first_output)
    if latency:
        methods["latency"] = ("bmc", latency[3])
    methods.update(overrides or {})
    for name in skip:
        del methods[name]

    def spec(only):
        return StreamSpec(make, only=only, environment=environment, output=output,
                          latency=latency and latency[:3])
    return [Proof(block=block, name=name, config=label, spec=spec, method=method, depth=depth,
                  slow=name not in quick)
            for name, (method, depth) in methods.items()]


def internal_signal(fragment, name):
    """The one signal called ``name`` that ``fragment`` (not its
    subfragments) assigns: a register inside a component, for an invariant."""
    found = []
    for statements in fragment.statements.values():
        for statement in statements:
            found += [signal for signal in statement._lhs_signals()
                      if signal.name == name and not any(signal is s for s in found)]
    if len(found) != 1:
        raise FormalError(f"expected one signal {name!r} in the design, found {len(found)}")
    return found[0]


def _state_is(fsm, codes, names, number):
    """``number`` is the index in ``names`` of the state ``fsm`` is in."""
    test = 0
    for index, name in enumerate(names):
        test = test | ((fsm == codes[name]) & (number == index))
    return test


# --- the host link -------------------------------------------------------------

def host_link_environment(spec, m, link):
    """``mem_rdata`` as the link's memory bus promises it: any value, that
    changes only in the ``READ_LATENCY`` cycles after a ``mem_re`` (and is
    held from then until the next ``mem_re``)."""
    rdata = link.mem_rdata
    m.d.comb += rdata.eq(spec.any_seq(m, len(rdata), "mem_rdata"))
    since = Signal(range(READ_LATENCY + 1), init=READ_LATENCY)   # cycles since mem_re
    m.d.sync += since.eq(Mux(link.mem_re, 0, Mux(since == READ_LATENCY, since, since + 1)))
    started = spec.past(m, 1, "started")
    before = spec.past(m, rdata, "mem_rdata")
    spec.assume(m, ~started | (since < READ_LATENCY) | (rdata == before))
    return {"mem_rdata"}


class HostLinkSpec(StreamSpec):
    """:class:`StreamSpec` of a :class:`~bertforge.rtl.host_link.HostLink`
    (``mem_rdata`` from :func:`host_link_environment`), and a frame with a
    bad CRC never writes memory or starts a run.

    The spec parses the bytes the link takes on ``rx`` itself (sync byte,
    command, two length bytes, ``length`` payload bytes, CRC-8 of the
    command, length and payload) and keeps whether the last whole frame's
    CRC was right: ``bad_crc_never_writes`` (``mem_we`` only after a frame
    whose CRC was right), ``bad_crc_never_runs`` (``run_start`` only in the
    cycle the link takes a right CRC byte); the covers ``good_frame_writes``
    and ``bad_frame_rejected`` (a bad CRC is taken and answered ``BAD_CRC``)
    show both kinds of frame are reached.
    """

    PROPERTIES = ("crc_tracks", "bad_crc_never_writes", "bad_crc_never_runs",
                  "good_frame_writes", "bad_frame_rejected")

    def __init__(self, make, *, only=None):
        super().__init__(make, only=only, environment=host_link_environment)

    def instantiate(self, m, platform):
        link = self.make()
        fragment = Fragment.get(link.elaborate(platform), platform)   # to reach its CRC
        link._MustUse__used = True             # elaborated here, by hand
        self.link = {name: internal_signal(fragment, name)
                     for name in ("crc", "length", "count", "fsm_state")}
        m.submodules.dut = fragment
        return link

    def build(self, m, platform):
        super().build(m, platform)
        link = self.dut
        rx = link.rx
        took = rx.valid & rx.ready
        byte = rx.payload
        state = Signal(range(6))           # sync, command, len_lo, len_hi, payload, crc
        crc = Signal(8)
        length = Signal(16)
        count = Signal(16)
        good = Signal()                    # the last whole frame's CRC was right
        at_crc = took & (state == 5)
        with m.If(took):
            with m.Switch(state):
                with m.Case(0):
                    with m.If(byte == SYNC_HOST):
                        m.d.sync += [state.eq(1), crc.eq(0), count.eq(0)]
                with m.Case(1):
                    m.d.sync += [state.eq(2), crc.eq(crc8_step(crc, byte))]
                with m.Case(2):
                    m.d.sync += [state.eq(3), crc.eq(crc8_step(crc, byte)), length[:8].eq(byte)]
                with m.Case(3):
                    m.d.sync += [crc.eq(crc8_step(crc, byte)), length[8:].eq(byte),
                                 state.eq(Mux((byte == 0) & (length[:8] == 0), 5, 4))]
                with m.Case(4):
                    m.d.sync += [crc.eq(crc8_step(crc, byte)), count.eq(count + 1)]
                    with m.If(count + 1 == length):
                        m.d.sync += state.eq(5)
                with m.Case(5):
                    m.d.sync += [state.eq(0), good.eq(byte == crc)]
        # The invariants the other two need: the link's parser is where the
        # spec's is (its FSM state, CRC, length and count), and it writes
        # only after a good frame. (With them the checks are local instead
        # of the equivalence of two CRC networks over a whole frame.)
        inner = self.link
        fsm = inner["fsm_state"]
        codes = {}
        for code in range(1 << len(fsm)):
            try:
                codes[fsm.decoder(code).split("/")[0]] = code
            except KeyError:
                pass
        parse = ("sync", "command", "len_lo", "len_hi", "payload", "crc")
        in_parse = 0
        for name in parse:
            in_parse = in_parse | (fsm == codes[name])
        self.check(m, "state_tracks", Mux(in_parse, _state_is(fsm, codes, parse, state),
                                          state == 0))
        self.check(m, "crc_tracks", (state == 0) | (inner["crc"] == crc))
        self.check(m, "length_tracks", ((state < 3) | (inner["length"][:8] == length[:8]))
                   & ((state < 4) | (inner["length"] == length))
                   & ((state != 4) | (inner["count"] == count))
                   & ((state == 0) | (state > 3) | ((inner["count"] == 0) & (count == 0))))
        self.check(m, "writes_after_good",
                   ~((fsm == codes["write_read"]) | (fsm == codes["write_mem"])) | good)
        self.check(m, "bad_crc_never_writes", ~link.mem_we | good)
        self.check(m, "bad_crc_never_runs", ~link.run_start | (at_crc & (byte == crc)))
        self.cover(m, "good_frame_writes", link.mem_we)
        self.cover(m, "bad_frame_rejected",
                   ~good & link.tx.valid & link.tx.ready & (link.tx.payload == BAD_CRC)
                   & (link.bad_frames == 1))


_HOST_INVARIANTS = ("crc_tracks", "state_tracks", "length_tracks", "writes_after_good")


def host_link_proofs(*, make=None, label="design_id=1"):
    """The proofs of the UART host link (``make``: a stand-in such as a
    broken copy): the stream rules on ``tx`` by k-induction; a bad CRC
    never writes or runs by k-induction (with the parser invariants); the
    covers within 12 cycles (a WRITE frame of one data byte is 9 bytes)."""
    make = make or (lambda: HostLink(design_id=1))

    def spec(only):
        return HostLinkSpec(make, only=only)
    methods = {"tx_valid_held": ("prove", 4, ()), "tx_payload_held": ("prove", 4, ()),
               "tx_valid_before_ready": ("cover", 12, ()), "first_output": ("cover", 12, ()),
               "bad_crc_never_writes": ("prove", 4, _HOST_INVARIANTS),
               "bad_crc_never_runs": ("prove", 4, _HOST_INVARIANTS),
               "good_frame_writes": ("cover", 12, ()), "bad_frame_rejected": ("cover", 12, ())}
    quick = {"tx_valid_held", "tx_payload_held", "bad_crc_never_writes", "bad_crc_never_runs"}
    return [Proof(block="host_link", name=name, config=label, spec=spec, method=method,
                  depth=depth, together=together, slow=name not in quick)
            for name, (method, depth, together) in methods.items()]


def _took(port):
    return port.valid & port.ready


def _row_bound(cycles, beats_max):
    """Cycles from a row's last input beat to its first output beat, the
    most over rows of 1 .. ``beats_max`` beats, from the cycle model
    ``cycles(beats)`` (first input to last output, both included, as many
    output beats as input beats): ``cycles(b) - 2 b + 1``."""
    return max(cycles(b) - 2 * b + 1 for b in range(1, beats_max + 1))


# --- the small configs of the blocks ---------------------------------------------

#: The small configs the stream proofs use.
SPARSE_CONFIG = SparseConfig(rows=2, cols=2, m_max=4, acc_width=16)
SOFTMAX_CONFIG = SoftmaxConfig(lanes=2, l_max=8)
LAYERNORM_CONFIG = LayerNormConfig(lanes=2, h_max=8)
GELU_CONFIG = GeluConfig(lanes=2)
BUTTERFLY_CONFIG = ButterflyConfig(n_max=8)


def sparse_proofs(*, make=None, config=SPARSE_CONFIG):
    """The sparse array's stream proofs; ``first_output``: a one-beat tile's
    first result row within :func:`~bertforge.sim.sparse_cycles.sparse_cycles`
    of it."""
    from .sparse_cycles import sparse_cycles
    build = make or SparseArray
    bound = sparse_cycles(config, [1]) - 1      # from a tile's last beat to its last row
    return stream_proofs("sparse", f"{config.rows}x{config.cols} m_max={config.m_max}",
                         lambda: build(config), first_output=sparse_cycles(config, [1]) + 1,
                         latency=(lambda d: _took(d.a) & d.a.payload.last,
                                  lambda d: _took(d.c) & d.c.payload.last, bound, bound + 4),
                         quick=("latency", "c_payload_held"))


class EngineSpec(StreamSpec):
    """:class:`StreamSpec` of a GEMM engine, and ``done_per_command``: the
    completions given never outnumber the commands taken (one ``done`` per
    command: the Icarus run of issue 18 saw two). Every register without an
    initial value and every memory starts anywhere (the solver's choice,
    as X in a four-state simulator), so a control decision that read an
    empty queue's head would show here."""

    PROPERTIES = ("done_per_command",)

    def build(self, m, platform):
        super().build(m, platform)
        engine = self.dut
        commands, completions = Signal(6), Signal(6)
        m.d.sync += [commands.eq(commands + _took(engine.cmd)),
                     completions.eq(completions + _took(engine.done))]
        self.check(m, "done_per_command", completions <= commands)


def engine_proofs(*, make=None, config=SCHEDULER_CONFIG):
    """The GEMM engine's stream proofs (``done``, ``rd_req``, ``wr_req``);
    ``first_output``: a completion within the cycle model's start
    (:func:`~bertforge.sim.gemm_cycles.start_cycles`: a command
    taken, checked and rejected, then the writer's ``END``: 35 cycles);
    no ``wr_req_valid_before_ready`` cover (a write needs a whole good
    command, 50 cycles: the cover search passes 32 steps only after 8
    minutes); ``rd_req``'s payload rule by bmc of 24 cycles (its k-induction does not
    close: the step starts in unreachable states, the loader busy on an
    empty queue whose head changes); ``done_per_command`` by bmc of 24
    cycles (slow: 30 s)."""
    from .gemm_cycles import END, start_cycles
    build = make or GemmEngine
    label = f"engine {config.rows}x{config.cols} {config.dataflow}"
    rejected = start_cycles(config) + END
    proofs = stream_proofs("gemm", label, lambda: build(config), output="done",
                           first_output=rejected, overrides={"rd_req_payload_held": ("bmc", 24)},
                           skip=("wr_req_valid_before_ready",))

    def spec(only):
        return EngineSpec(lambda: build(config), only=only, output="done")
    return [dataclasses.replace(p, spec=spec) for p in proofs] + [
        Proof(block="gemm", name="done_per_command", config=label, spec=spec, method="bmc",
              depth=24, slow=True)]


def gemm_proofs():
    """The GEMM block: its tile scheduler's proofs and the engine's."""
    return scheduler_proofs() + engine_proofs()


def softmax_proofs(*, make=None, config=SOFTMAX_CONFIG):
    """Softmax, 2 lanes; ``first_output`` within the latency of a one-beat
    row (:func:`~bertforge.sim.softmax_cycles.softmax_latency`). No bounded
    ``latency`` check: bmc to the 34 cycles it needs (rows of up to 4 beats
    and the exp pipeline's arithmetic) does not finish in 10 minutes."""
    from .softmax_cycles import softmax_latency
    build = make or Softmax
    return stream_proofs("softmax", f"lanes={config.lanes} l_max={config.l_max}",
                         lambda: build(config), first_output=softmax_latency(config, 1) + 1)


def layernorm_proofs(*, make=None, config=LAYERNORM_CONFIG):
    """LayerNorm, 2 lanes; ``first_output`` within the cycles of a one-beat
    vector (:func:`~bertforge.sim.layernorm_cycles.layernorm_cycles`)."""
    from .layernorm_cycles import layernorm_cycles
    build = make or LayerNorm
    beats = config.h_max // config.lanes
    bound = _row_bound(lambda b: layernorm_cycles(config, [b * config.lanes]), beats)
    return stream_proofs("layernorm", f"lanes={config.lanes} h_max={config.h_max}",
                         lambda: build(config),
                         first_output=layernorm_cycles(config, [config.lanes]) + 1,
                         latency=(lambda d: _took(d.x) & d.x.payload.last, lambda d: _took(d.y),
                                  bound, bound + beats + 2))


def gelu_proofs(*, make=None, config=GELU_CONFIG):
    """GELU, 2 lanes; ``first_output`` within ``gelu_cycles(config, 1)``."""
    from .gelu_cycles import gelu_cycles
    build = make or Gelu
    bound = gelu_cycles(config, 1) - 1
    return stream_proofs("gelu", f"lanes={config.lanes}", lambda: build(config),
                         first_output=gelu_cycles(config, 1) + 1,
                         latency=(lambda d: _took(d.x), lambda d: _took(d.y), bound, bound + 4),
                         quick=("latency", "first_output"))


def butterfly_proofs(*, make=None, config=BUTTERFLY_CONFIG):
    """The butterfly engine, ``n_max`` 8; ``first_output`` within the cycles
    of one group of length-2 vectors (``butterfly_cycles(config, 2, 1)``)
    after its command."""
    from .butterfly_cycles import butterfly_cycles
    build = make or ButterflyEngine
    return stream_proofs("butterfly", f"n_max={config.n_max} lanes={config.lanes}",
                         lambda: build(config), first_output=butterfly_cycles(config, 2, 1) + 2)
