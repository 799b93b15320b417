"""The reusable kit of the formal specs (see :mod:`bertforge.sim.formal`):
the stream rules on every stream port of a component, the bounded liveness
checks of a cycle model, and the small helpers the blocks' specs share.

- :class:`StreamSpec`: any component, its stream ports found via its
  signature: the stream rules on every output stream (valid and payload
  held until ``ready``), under an environment obeying them on every input
  stream; a cover of the first output within the cycle model's latency;
  and the bounded liveness checks of a :class:`Timing` (bmc, a fair
  environment, one job): every output's ``valid`` rises within the cycle
  model's cycles of the job with its ``ready`` held low (the block never
  waits for ``ready``), and ``latency`` (the job's output within the cycle
  model's cycles, every output ready). Used for every block with streams.
- :func:`stream_proofs`: a block's :class:`StreamSpec` proofs.
- :func:`internal_signal`, :func:`took`, :func:`row_bound`,
  :func:`job_end`, :func:`last_out`, :func:`one_command`,
  :func:`rows_of_at_most`: what the blocks' timing checks are made of.

Each block's own properties live with its name, ``sim/<block>_formal.py``
(``<block>_proofs()``: the registry's proof list): :mod:`~bertforge.sim.queue_formal`,
:mod:`~bertforge.sim.systolic_formal`, :mod:`~bertforge.sim.gemm_formal`
(the scheduler's and the engine's), :mod:`~bertforge.sim.sparse_formal`,
:mod:`~bertforge.sim.softmax_formal`, :mod:`~bertforge.sim.layernorm_formal`,
:mod:`~bertforge.sim.gelu_formal`, :mod:`~bertforge.sim.butterfly_formal`,
:mod:`~bertforge.sim.host_link_formal` and :mod:`~bertforge.sim.axi_regs_formal`.
"""

from dataclasses import dataclass, field
from typing import Callable

from amaranth.hdl import Mux, Signal, Value
from amaranth.lib import stream
from amaranth.lib.wiring import In, Out

from .formal import FormalError, Proof, Spec

__all__ = ["stream_ports", "Timing", "StreamSpec", "stream_proofs", "internal_signal", "took",
           "row_bound", "job_end", "last_out", "one_command", "rows_of_at_most"]


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
        super().__init__(make, only=only)
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


def took(port):
    return port.valid & port.ready


def row_bound(cycles, beats_max):
    """Cycles from a row's last input beat to its first output beat, the
    most over rows of 1 .. ``beats_max`` beats, from the cycle model
    ``cycles(beats)`` (first input to last output, both included, as many
    output beats as input beats): ``cycles(b) - 2 b + 1``."""
    return max(cycles(b) - 2 * b + 1 for b in range(1, beats_max + 1))


def job_end(name):
    """``start`` of a :class:`Timing`: the last beat of a job (``last``
    set) taken on input stream ``name``."""
    return lambda spec, dut: took(getattr(dut, name)) & getattr(dut, name).payload.last


def last_out(name):
    """``done`` of a :class:`Timing`: the last beat of a job taken on
    output stream ``name``."""
    return lambda dut: took(getattr(dut, name)) & getattr(dut, name).payload.last


def one_command(port, fields):
    """An environment of :class:`Timing`: one command, ``fields`` (the
    others 0), offered on stream ``port`` until it is taken."""
    def environment(spec, m, dut):
        cmd = getattr(dut, port)
        sent = Signal(name=f"{port}_sent")
        m.d.sync += sent.eq(sent | took(cmd))
        m.d.comb += cmd.valid.eq(~sent)
        m.d.comb += [getattr(cmd.payload, name).eq(value) for name, value in fields.items()]
        return {port}
    return environment


def rows_of_at_most(name, beats):
    """An environment of :class:`Timing`: the jobs on input stream ``name``
    (beats up to one with ``last`` set) are at most ``beats`` beats long
    (the block's contract, e.g. rows of at most ``l_max`` elements)."""
    def environment(spec, m, dut):
        port = getattr(dut, name)
        count = Signal(range(beats + 1), name=f"{name}_beats")
        with m.If(took(port)):
            m.d.sync += count.eq(Mux(port.payload.last, 0, count + 1))
        spec.assume(m, (count < beats - 1) | ~port.valid | port.payload.last)
        return set()
    return environment
