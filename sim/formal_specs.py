"""The properties proved of each block (see :mod:`bertforge.sim.formal`).

- :class:`QueueSpec`: :class:`~bertforge.rtl.stream.Queue` with any input,
  any ``ready`` on ``o``: the stream rules on ``o``; conservation (a beat
  leaves only when one is held; ``level`` counts exactly the beats taken
  and not yet given); order (with a shadow counter: beat number ``n``,
  an arbitrary ``n`` with an arbitrary payload, leaves as beat number ``n``
  with that payload, so nothing is dropped, duplicated or reordered under
  any stalls).
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
  held until ``ready``), under an environment obeying them on every input
  stream; a cover of the first output within the cycle model's latency;
  and the bounded liveness checks of a :class:`Timing` (bmc, a fair
  environment, one job): every output's ``valid`` rises within the cycle
  model's cycles of the job with its ``ready`` held low (the block never
  waits for ``ready``), and ``latency`` (the job's output within the cycle
  model's cycles, every output ready). Used for every block with streams:
  :class:`SystolicSpec` adds that the array's output queue never refuses a
  row (the credits never let a row in flight meet a full queue),
  :class:`EngineSpec` (the GEMM engine) ``done_per_command``.
- :class:`HostLinkSpec`: :class:`~bertforge.rtl.host_link.HostLink`: a
  frame with a bad CRC never writes memory or starts a run (k-induction,
  with invariants tying the link's parser to the spec's own).

``queue_proofs()``, ``systolic_proofs()``, ``gemm_proofs()`` (the
scheduler's and the engine's), ``sparse_proofs()``, ``softmax_proofs()``,
``layernorm_proofs()``, ``gelu_proofs()``, ``butterfly_proofs()`` and
``host_link_proofs()`` are the registry's proof lists.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from amaranth.hdl import Fragment, Mux, Signal, Value
from amaranth.lib import stream
from amaranth.lib.wiring import In, Out

from bertforge.rtl.butterfly import MODES, ButterflyConfig, ButterflyEngine
from bertforge.rtl.gelu import Gelu, GeluConfig
from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.host_link import BAD_CRC, READ_LATENCY, SYNC_HOST, WRITE, HostLink, crc8_step
from bertforge.rtl.layernorm import LayerNorm, LayerNormConfig
from bertforge.rtl.serial_engine import gemm_engine
from bertforge.rtl.softmax import Softmax, SoftmaxConfig
from bertforge.rtl.sparse import SparseArray, SparseConfig
from bertforge.rtl.stream import Queue, delay
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
                  slow=name not in ("o_valid_held", "no_beat_from_nothing"))
            for name, (method, depth_) in methods.items()]


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
    # the error and bounds proofs take 20-240 s each (the spec's byte spans
    # multiply strides by sizes)
    return [Proof(block="gemm", name=name, config=label,
                  spec=lambda only: SchedulerSpec(lambda: make(config), only=only),
                  method=method, depth=depth_, slow=name != "no_chunk_without_command")
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


@dataclass(frozen=True)
class Timing:
    """A block's bounded liveness checks, from its cycle model (bmc; see
    :meth:`StreamSpec.check_within`).

    ``start(spec, dut)``: the event that starts the clock (a job's last
    input beat taken, a command taken); ``bound``: the cycle model's
    cycles from it to the output; ``done(dut)``: the output event of the
    ``latency`` check (a handshake; ``None``: no ``latency`` check);
    ``ports``: per output stream port, the cycles from ``start`` until its
    ``valid`` rises (``bound`` when not given); ``lead``: the most cycles
    from reset to ``start`` the checks look at (their bmc depth is ``lead``
    + the bound + 2); ``environment(spec, m, dut)``: drives inputs for
    these checks only (the job, e.g. one fixed command; a memory) and
    returns their names."""

    start: Callable
    bound: int
    lead: int
    done: Callable | None = None
    ports: dict = field(default_factory=dict)
    environment: Callable | None = None

    def depth(self, port=None):
        return self.lead + self.ports.get(port, self.bound) + 2


class StreamSpec(Spec):
    """The stream rules on every output stream port of ``make()``, found via
    its signature, under an environment that obeys them on every input
    stream port and drives every other input port with any value each cycle
    (``environment(spec, m, dut)`` may drive some itself and returns their
    names, e.g. a memory's read data held between reads).

    Properties, for each output stream port ``p``:

    - ``p_valid_held``, ``p_payload_held``: a beat offered without ``ready``
      is offered again, unchanged, in the next cycle;
    - ``p_valid_before_ready``: the block does not wait for ``ready`` before
      ``valid``: with ``p.ready`` low in every cycle (every other output
      always ready, every input always valid), ``p.valid`` rises within
      the cycle model's cycles of the job's start (``timing``, a
      :class:`Timing`).

    And for the block, ``first_output`` (a cover): the first beat of
    ``output`` (the main output port) is taken within the proof's depth,
    the latency the block's cycle model gives; with ``timing.done``,
    ``latency``: with every input always valid and every output always
    ready, the output event comes within ``timing.bound`` cycles of the
    start.
    """

    def __init__(self, make, *, only=None, environment=None, output=None, timing=None):
        super().__init__(only=only)
        self.make = make
        self.environment = environment
        self.output = output
        self.timing = timing

    def instantiate(self, m, platform):
        """Add the design to ``m`` (as submodule ``dut``) and return it."""
        dut = m.submodules.dut = self.make()
        return dut

    def build(self, m, platform):
        dut = self.dut = self.instantiate(m, platform)
        inputs, outputs = stream_ports(dut)
        # The timing checks under proof (at most one): a fair environment.
        timed = [name for name in ("latency", *(f"{p}_valid_before_ready" for p in outputs))
                 if self.timing is not None and name in (self.only or ())]
        driven = set(self.environment(self, m, dut) if self.environment else ())
        if timed and self.timing.environment:
            driven |= set(self.timing.environment(self, m, dut))
        for name in inputs:
            if name not in driven:
                self.assume_stream_in(m, getattr(dut, name), name)
                if timed:
                    self.assume(m, getattr(dut, name).valid)
        for name, member in dut.signature.members.items():
            if member.is_port and member.flow == In and name not in driven:
                value = Value.cast(getattr(dut, name))
                m.d.comb += value.eq(self.any_seq(m, len(value), name))
        for name in outputs:
            port = getattr(dut, name)
            if timed:
                m.d.comb += port.ready.eq(f"{name}_valid_before_ready" not in timed)
            else:
                m.d.comb += port.ready.eq(self.any_seq(m, 1, f"{name}_ready"))
            self.check_stream_out(m, port, name)
        out = getattr(dut, self.output or outputs[0])
        self.cover(m, "first_output", out.valid & out.ready)
        for name in timed:
            timing = self.timing
            start = timing.start(self, dut)
            if name == "latency":
                self.check_within(m, name, start, timing.done(dut), timing.bound)
            else:
                port = name[:-len("_valid_before_ready")]
                self.check_within(m, name, start, getattr(dut, port).valid,
                                  timing.ports.get(port, timing.bound))

    def check_within(self, m, name, start, event, bound):
        """Property ``name``: once ``start`` has happened (its first time),
        ``event`` happens within ``bound`` cycles (0: the same cycle)."""
        armed, seen = Signal(name=f"{name}_armed"), Signal(name=f"{name}_seen")
        age = Signal(range(bound + 2), name=f"{name}_age")   # cycles since the start
        m.d.sync += [armed.eq(armed | start), seen.eq(seen | ((armed | start) & event))]
        with m.If(start & ~armed):
            m.d.sync += age.eq(1)
        with m.Elif(armed & (age <= bound)):
            m.d.sync += age.eq(age + 1)
        due = Mux(armed, age, 0) == bound
        self.check(m, name, ~((armed | start) & due) | seen | event)


def stream_proofs(block, label, make, *, timing, first_output, spec=StreamSpec,
                  environment=None, output=None, induction=4, bmc=None, quick=(),
                  overrides=None, skip=(), cone=True):
    """The :class:`StreamSpec` (or ``spec``, a subclass) proofs of ``make()``
    (a small config named ``label``): for each output stream port,
    ``valid_held`` and ``payload_held`` by k-induction of ``induction``
    steps (by bmc of ``bmc`` cycles instead when given: where the
    induction does not close), ``valid_before_ready`` by bmc (``timing``,
    a :class:`Timing`: the start, the bounds, the depth); the block's
    ``first_output`` cover within ``first_output`` cycles (its cycle
    model's latency); with ``timing.done``, ``latency`` by bmc.
    ``overrides``: ``{name: (method, depth)}`` for single properties (or
    more of a subclass); ``skip``: names left out. ``cone``: the bmc and
    cover runs work on their cone of influence (:attr:`Proof.cone`: the
    data path gone from a control property, 5-50 times faster here; the
    k-induction runs keep the memories whole, where they are faster).

    :attr:`Proof.slow` is set on all but the quick set the default test run
    keeps: the names in ``quick``."""
    probe = make()
    probe._MustUse__silence = True         # only its signature is read
    _, outputs = stream_ports(probe)
    methods = {}
    for name in outputs:
        held = ("bmc", bmc) if bmc else ("prove", induction)
        methods[f"{name}_valid_held"] = held
        methods[f"{name}_payload_held"] = held
        methods[f"{name}_valid_before_ready"] = ("bmc", timing.depth(name))
    methods["first_output"] = ("cover", first_output)
    if timing.done:
        methods["latency"] = ("bmc", timing.depth())
    methods.update(overrides or {})
    for name in skip:
        del methods[name]

    def build(only):
        return spec(make, only=only, environment=environment, output=output, timing=timing)
    return [Proof(block=block, name=name, config=label, spec=build, method=method, depth=depth,
                  slow=name not in quick, cone=cone and method != "prove")
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

    def instantiate(self, m, platform):
        link = self.make()
        fragment = Fragment.get(link.elaborate(platform), platform)   # to reach its CRC
        link._MustUse__used = True             # elaborated here, by hand
        self.link = {name: internal_signal(fragment, name)
                     for name in ("crc", "length", "count", "command", "fsm_state")}
        fsm = self.link["fsm_state"]
        #: The code of each of the link's FSM states, by name.
        self.codes = {}
        for code in range(1 << len(fsm)):
            try:
                self.codes[fsm.decoder(code).split("/")[0]] = code
            except KeyError:
                pass
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
        inner, codes = self.link, self.codes
        fsm = inner["fsm_state"]
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


def _host_link_start(spec, link):
    """A frame's CRC byte taken (the link's own parser at its ``crc``
    state), the frame not a WRITE (whose reply waits until its bytes are
    written, 2 cycles each)."""
    inner = spec.link
    return (_took(link.rx) & (inner["fsm_state"] == spec.codes["crc"])
            & (inner["command"] != WRITE))


def _run_at_once(spec, m, link):
    """The design behind the link: a run ends in the cycle after it starts."""
    m.d.comb += [link.run_done.eq(1), link.run_error.eq(0)]
    return {"run_done", "run_error"}


def host_link_proofs(*, make=None, label="design_id=1"):
    """The proofs of the UART host link (``make``: a stand-in such as a
    broken copy): the stream rules on ``tx`` by k-induction; a bad CRC
    never writes or runs by k-induction (with the parser invariants); the
    covers within 12 cycles (a WRITE frame of one data byte is 9 bytes);
    ``tx_valid_before_ready``: with ``tx.ready`` always low, the reply's
    first byte is offered within 2 cycles of a frame's CRC byte (the
    cycle after it, after a RUN the cycle after ``run_done``; a WRITE
    frame excluded), frames whose CRC byte comes within 8 cycles of reset."""
    make = make or (lambda: HostLink(design_id=1))
    timing = Timing(start=_host_link_start, bound=2, lead=8, environment=_run_at_once)
    proofs = stream_proofs(
        "host_link", label, make, timing=timing, first_output=12, spec=HostLinkSpec,
        environment=host_link_environment, cone=False,      # its frame buffer is 8 kbit
        overrides={"bad_crc_never_writes": ("prove", 4), "bad_crc_never_runs": ("prove", 4),
                   "good_frame_writes": ("cover", 12), "bad_frame_rejected": ("cover", 12)},
        quick=("tx_valid_held", "bad_crc_never_runs", "tx_valid_before_ready"))
    return [dataclasses.replace(p, together=_HOST_INVARIANTS) if p.name.startswith("bad_crc")
            else p for p in proofs]


def _took(port):
    return port.valid & port.ready


def _row_bound(cycles, beats_max):
    """Cycles from a row's last input beat to its first output beat, the
    most over rows of 1 .. ``beats_max`` beats, from the cycle model
    ``cycles(beats)`` (first input to last output, both included, as many
    output beats as input beats): ``cycles(b) - 2 b + 1``."""
    return max(cycles(b) - 2 * b + 1 for b in range(1, beats_max + 1))


def _job_end(name):
    """``start`` of a :class:`Timing`: the last beat of a job (``last``
    set) taken on input stream ``name``."""
    return lambda spec, dut: _took(getattr(dut, name)) & getattr(dut, name).payload.last


def _last_out(name):
    """``done`` of a :class:`Timing`: the last beat of a job taken on
    output stream ``name``."""
    return lambda dut: _took(getattr(dut, name)) & getattr(dut, name).payload.last


def _one_command(port, fields):
    """An environment of :class:`Timing`: one command, ``fields`` (the
    others 0), offered on stream ``port`` until it is taken."""
    def environment(spec, m, dut):
        cmd = getattr(dut, port)
        sent = Signal(name=f"{port}_sent")
        m.d.sync += sent.eq(sent | _took(cmd))
        m.d.comb += cmd.valid.eq(~sent)
        m.d.comb += [getattr(cmd.payload, name).eq(value) for name, value in fields.items()]
        return {port}
    return environment


def _rows_of_at_most(name, beats):
    """An environment of :class:`Timing`: the jobs on input stream ``name``
    (beats up to one with ``last`` set) are at most ``beats`` beats long
    (the block's contract, e.g. rows of at most ``l_max`` elements)."""
    def environment(spec, m, dut):
        port = getattr(dut, name)
        count = Signal(range(beats + 1), name=f"{name}_beats")
        with m.If(_took(port)):
            m.d.sync += count.eq(Mux(port.payload.last, 0, count + 1))
        spec.assume(m, (count < beats - 1) | ~port.valid | port.payload.last)
        return set()
    return environment


# --- the small configs of the blocks ---------------------------------------------

#: The small configs the stream proofs use.
SPARSE_CONFIG = SparseConfig(rows=2, cols=2, m_max=4, acc_width=16)
SOFTMAX_CONFIG = SoftmaxConfig(lanes=2, l_max=8)
LAYERNORM_CONFIG = LayerNormConfig(lanes=2, h_max=8)
GELU_CONFIG = GeluConfig(lanes=2)
BUTTERFLY_CONFIG = ButterflyConfig(n_max=8)


class SystolicSpec(StreamSpec):
    """:class:`StreamSpec` of a systolic array, and ``queue_never_refuses``:
    nothing pushed into the output queue is refused (the credits never let
    a row in flight meet a full queue); the cover ``reaches_full_queue``
    (the output queue fills, then a tile's last row leaves)."""

    PROPERTIES = ("queue_never_refuses", "reaches_full_queue")

    def instantiate(self, m, platform):
        array = self.make()
        inner = array.elaborate(platform)      # to reach the output queue
        array._MustUse__used = True            # elaborated here, by hand
        m.submodules.dut = inner
        self.queue = inner.submodules.queue
        return array

    def build(self, m, platform):
        super().build(m, platform)
        array, queue = self.dut, self.queue
        self.check(m, "queue_never_refuses", ~queue.i.valid | queue.i.ready)
        was_full = Signal()
        m.d.sync += was_full.eq(was_full | (queue.level == queue.depth))
        self.cover(m, "reaches_full_queue",
                   was_full & array.c.valid & array.c.ready & array.c.payload.last)


def systolic_proofs(*, make=None, configs=None):
    """The proofs of the systolic array, 2x3, both dataflows, 8-bit operands,
    16-bit accumulators: the stream rules on ``c`` by k-induction; the
    output queue never refusing a row by bmc over enough cycles to fill the
    queue (the cover shows a full queue within that depth); ``latency``: a
    tile's last row within :func:`~bertforge.sim.systolic_cycles.systolic_cycles`
    of one-beat tiles less 1 (OS; WS: less the ``rows`` cycles of its
    weight block too) of its last ``a`` beat, and ``c`` valid within as
    many with ``c.ready`` low."""
    from .systolic_cycles import systolic_cycles
    proofs = []
    for config in configs or [SystolicConfig(rows=2, cols=3, dataflow=d, acc_width=16)
                              for d in ("os", "ws")]:
        build = make or SystolicArray
        depth = config.queue_depth + config.rows + config.cols + 8
        ws = config.dataflow == "ws"
        bound = systolic_cycles(config, [1]) - 1 - ws * config.rows
        # OS: a tile's rows leave one a cycle, its first (rows - 1) before its last
        timing = Timing(start=_job_end("a"), done=_last_out("c"), lead=2 + ws * config.rows,
                        bound=bound, ports={"c": bound - (0 if ws else config.rows - 1)})
        proofs += stream_proofs(
            "systolic", f"{config.rows}x{config.cols} {config.dataflow}",
            lambda config=config, build=build: build(config), timing=timing,
            first_output=systolic_cycles(config, [1]) + 1, spec=SystolicSpec, induction=16,
            overrides={"queue_never_refuses": ("bmc", depth),
                       "reaches_full_queue": ("cover", depth)},
            quick=() if ws else ("c_valid_held",))
    return proofs


def sparse_proofs(*, make=None, config=SPARSE_CONFIG):
    """The sparse array's stream proofs; ``first_output``: a one-beat tile's
    first result row within :func:`~bertforge.sim.sparse_cycles.sparse_cycles`
    of it; ``latency``: a tile's last row within ``sparse_cycles`` of a
    one-beat tile less 1 of its last beat."""
    from .sparse_cycles import sparse_cycles
    build = make or SparseArray
    bound = sparse_cycles(config, [1]) - 1
    timing = Timing(start=_job_end("a"), done=_last_out("c"), lead=2, bound=bound,
                    ports={"c": bound - (config.rows - 1)})     # a tile's first row
    return stream_proofs("sparse", f"{config.rows}x{config.cols} m_max={config.m_max}",
                         lambda: build(config), timing=timing,
                         first_output=sparse_cycles(config, [1]) + 1)


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


#: The command of the engine's timing checks: C (1x1, int32) = A (1x1) B (1x1).
ENGINE_COMMAND = {"m": 1, "k": 1, "n": 1, "a_addr": 0, "b_addr": 16, "c_addr": 32,
                  "a_stride": 4, "b_stride": 4, "c_stride": 4}
#: Cycles from a read request's handshake to its first beat in the test
#: harness's memory at ``lat_min`` 1 (:func:`~bertforge.sim.gemm_harness.add_sim_memory`:
#: its request queue 2 cycles, the read 1, its read-data queue 2).
ENGINE_READ_LATENCY = 5


def _engine_memory(spec, m, engine):
    """An environment of :class:`Timing`: the engine's memory, which gives
    each read request's beats on ``rd_data``, in order, one a cycle, from
    :data:`ENGINE_READ_LATENCY` cycles after the request (any data)."""
    req, beats = engine.rd_req, engine.rd_data
    arriving = delay(m, Mux(_took(req), req.payload.beats, 0), ENGINE_READ_LATENCY - 1,
                     "mem_beats", reset_less=False)
    owed = Signal(8, name="mem_owed")          # beats arrived and not yet taken
    m.d.sync += owed.eq(owed + arriving - _took(beats))
    m.d.comb += [beats.valid.eq(owed != 0),
                 beats.payload.eq(spec.any_seq(m, len(beats.payload), "rd_data_payload"))]
    return {"rd_data"}


#: The serial engine of the proofs: the scheduler's config, serial, with no
#: command queue (as the iCEBreaker's).
SERIAL_ENGINE_CONFIG = dataclasses.replace(SCHEDULER_CONFIG, serial=True, command_queue=0)


def engine_proofs(*, make=None, config=SCHEDULER_CONFIG):
    """The GEMM engine's stream proofs (``done``, ``rd_req``, ``wr_req``;
    the engine of :func:`~bertforge.rtl.serial_engine.gemm_engine`, or
    ``make``'s);
    ``first_output``: a completion within the cycle model's start
    (:func:`~bertforge.sim.gemm_cycles.start_cycles`: a command taken,
    checked and rejected, then the writer's ``END``: 38 cycles; the serial
    engine's model of a rejected command);
    ``rd_req``'s payload rule by bmc of 24 cycles (its k-induction does not
    close: the step starts in unreachable states, the loader busy on an
    empty queue whose head changes); ``done_per_command`` by bmc of 24
    cycles; in the serial engine also ``rd_req``'s valid rule and the
    payload rules of ``wr_req`` and ``done`` by bmc of a command's cycles
    and 7 more (the step starts in a state that works on a descriptor the
    scheduler no longer offers). The timing checks run one command,
    :data:`ENGINE_COMMAND`, with the memory of :func:`_engine_memory`: ``latency``, its completion
    within :func:`~bertforge.sim.gemm_cycles.gemm_cycles` less 1 of its
    handshake; each port valid with its ``ready`` low: ``rd_req`` within
    ``start_cycles``, ``wr_req`` within the cycles to the first write
    beat (``gemm_cycles`` less ``END`` and the writer's cycles), ``done``
    within ``latency``'s bound. The serial engine's bounds are exact: its
    first read request ``dim_width + 6`` cycles after the command (the
    range check, the hand-over, A's first row), its write ``rows * cols``
    cycles before the completion (a cycle per PE of the block's walk)."""
    from .gemm_cycles import END, chunks, gemm_cycles, start_cycles, write_cycles
    from .gemm_golden import command_rejected
    assert not command_rejected(config, ENGINE_COMMAND)
    build = make or gemm_engine
    label = f"engine {config.rows}x{config.cols} {config.dataflow}" + " serial" * config.serial
    cycles = gemm_cycles(config, [ENGINE_COMMAND], lat=1)["cycles"]
    job = _one_command("cmd", ENGINE_COMMAND)

    def environment(spec, m, engine):
        return job(spec, m, engine) | _engine_memory(spec, m, engine)
    if config.serial:
        first_read = config.dim_width + 6
        first_write = cycles - 1 - config.rows * config.cols
        first_output = gemm_cycles(config, [dict(ENGINE_COMMAND, m=0)])["cycles"]
    else:
        # the last write beat comes before the completion, the first as
        # many before it as the writer takes
        first_read = start_cycles(config)
        first_write = cycles - 1 - write_cycles(config, chunks(config, ENGINE_COMMAND)[-1])
        first_output = start_cycles(config) + END
    timing = Timing(start=lambda spec, engine: _took(engine.cmd), done=lambda e: _took(e.done),
                    bound=cycles - 1, lead=2, environment=environment,
                    ports={"rd_req": first_read, "wr_req": first_write})
    overrides = {"rd_req_payload_held": ("bmc", 24), "done_per_command": ("bmc", 24)}
    if config.serial:   # the sequencer's states hold the descriptor; no invariant says so
        overrides.update({name: ("bmc", cycles + 7) for name in (
            "rd_req_valid_held", "rd_req_payload_held", "wr_req_payload_held",
            "done_payload_held")})
    return stream_proofs("gemm", label, lambda: build(config), timing=timing, output="done",
                         first_output=first_output, spec=EngineSpec, overrides=overrides)


def gemm_proofs():
    """The GEMM block: its tile scheduler's proofs, the engine's, the
    serial engine's, its AXI master's (:mod:`bertforge.sim.axi_formal`) and
    the AXI top's program fetcher's (:mod:`bertforge.sim.axi_fetch_formal`)."""
    from .axi_fetch_formal import fetch_proofs
    from .axi_formal import axi_proofs
    return (scheduler_proofs() + engine_proofs() + engine_proofs(config=SERIAL_ENGINE_CONFIG)
            + axi_proofs() + fetch_proofs())


def softmax_proofs(*, make=None, config=SOFTMAX_CONFIG):
    """Softmax, 2 lanes; ``first_output`` within the latency of a one-beat
    row (:func:`~bertforge.sim.softmax_cycles.softmax_latency`);
    ``latency``: a row's first output within the cycle model's cycles of
    its last beat (rows of 1 to ``beats_max`` beats)."""
    from .softmax_cycles import softmax_cycles, softmax_latency
    build = make or Softmax
    beats = config.beats_max
    timing = Timing(start=_job_end("x"), done=lambda d: _took(d.y), lead=beats,
                    bound=_row_bound(lambda b: softmax_cycles(config, [b * config.lanes]), beats),
                    environment=_rows_of_at_most("x", beats))
    return stream_proofs("softmax", f"lanes={config.lanes} l_max={config.l_max}",
                         lambda: build(config), timing=timing,
                         first_output=softmax_latency(config, 1) + 1)


def layernorm_proofs(*, make=None, config=LAYERNORM_CONFIG):
    """LayerNorm, 2 lanes; ``first_output`` within the cycles of a one-beat
    vector (:func:`~bertforge.sim.layernorm_cycles.layernorm_cycles`);
    ``latency``: a vector's first output within the cycle model's cycles
    of its last beat."""
    from .layernorm_cycles import layernorm_cycles
    build = make or LayerNorm
    beats = config.h_max // config.lanes
    timing = Timing(start=_job_end("x"), done=lambda d: _took(d.y), lead=beats,
                    bound=_row_bound(lambda b: layernorm_cycles(config, [b * config.lanes]),
                                     beats))
    return stream_proofs("layernorm", f"lanes={config.lanes} h_max={config.h_max}",
                         lambda: build(config), timing=timing,
                         first_output=layernorm_cycles(config, [config.lanes]) + 1)


def gelu_proofs(*, make=None, config=GELU_CONFIG):
    """GELU, 2 lanes; ``first_output`` within ``gelu_cycles(config, 1)``;
    ``latency``: a beat's result within ``gelu_cycles(config, 1)`` less 1."""
    from .gelu_cycles import gelu_cycles
    build = make or Gelu
    timing = Timing(start=lambda spec, d: _took(d.x), done=lambda d: _took(d.y), lead=2,
                    bound=gelu_cycles(config, 1) - 1)
    return stream_proofs("gelu", f"lanes={config.lanes}", lambda: build(config), timing=timing,
                         first_output=gelu_cycles(config, 1) + 1,
                         quick=("y_valid_held", "latency", "y_valid_before_ready"))


#: The command of the butterfly engine's timing checks: an FFT of one group
#: of length-2 vectors.
BUTTERFLY_COMMAND = {"mode": MODES["fft"], "n": 2, "groups": 1}


def butterfly_proofs(*, make=None, config=BUTTERFLY_CONFIG):
    """The butterfly engine, ``n_max`` 8; ``first_output`` within the cycles
    of one group of length-2 vectors (``butterfly_cycles(config, 2, 1)``)
    after its command; the timing checks run that command,
    :data:`BUTTERFLY_COMMAND`: ``latency``, its last ``y`` beat within
    ``butterfly_cycles`` of the command's handshake (the loader takes
    ``x`` from the next cycle), and ``y`` valid within as many with
    ``y.ready`` low."""
    from .butterfly_cycles import butterfly_cycles
    build = make or ButterflyEngine
    n, groups = BUTTERFLY_COMMAND["n"], BUTTERFLY_COMMAND["groups"]
    bound = butterfly_cycles(config, n, groups * config.lanes)
    timing = Timing(start=lambda spec, d: _took(d.cmd), done=_last_out("y"), lead=2,
                    bound=bound, ports={"y": bound - (n - 1)},   # the first of n beats
                    environment=_one_command("cmd", BUTTERFLY_COMMAND))
    return stream_proofs("butterfly", f"n_max={config.n_max} lanes={config.lanes}",
                         lambda: build(config), timing=timing,
                         first_output=butterfly_cycles(config, 2, 1) + 2)
