"""One board top-level for every streaming unit (:class:`~bertforge.rtl.softmax.Softmax`,
:class:`~bertforge.rtl.layernorm.LayerNorm`, :class:`~bertforge.rtl.gelu.Gelu`):
UART host link, block RAM holding the unit's input beats, block RAM taking
its output beats, a sequencer, LEDs.

The unit's input streams are grouped into *phases* that run one after the
other: a ``params`` stream (LayerNorm's gamma/beta) first, then all other
input streams together (``x``, and LayerNorm's residual ``r``, which the
unit takes in the same cycle as ``x``). Each phase has one memory whose
word ``k`` is beat ``k`` of its streams: the raw payload bits of each
stream, concatenated in port order (see :meth:`NormTopConfig.word_layout`).

Host memories (protocol WRITE/READ ``mem``; byte address = word *
``stride`` + byte, ``stride`` the word's bytes rounded up to a power of
two, so that addresses split into word and byte with wires; bytes past the
word are dropped on write):

- ``0 .. P-1``: the phase memories (write only, read as 0).
- ``P``: the output memory, word ``k`` = beat ``k`` of ``y`` (read only).

``RUN`` takes one 2-byte beat count per phase (a count may be 0 to skip a
phase, e.g. keep LayerNorm's gamma/beta; the last phase needs at least one
beat); a count above its memory's depth gives ``BAD_ARGUMENT``. The run
streams each phase's beats into the unit at full speed (one beat per cycle
when the unit is ready), writes every output beat and replies when as many
output beats as last-phase beats have arrived (true of the three units),
with the cycles from start to then. LEDs: 0 busy, 1 done at least once,
2 a bad frame seen.
"""

import importlib
from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from bertforge.rtl.params import check_int
from bertforge.rtl.stream import Queue
from bertforge.rtl.uart import UartConfig
from .systolic_top import MAX_BYTES, BoardTop, check_addressable, pow2_bytes, status_leds
from bertforge.rtl.errors import ParameterError, ParameterTypeError

__all__ = ["NormTopConfig", "NormBoardTop", "MAX_BYTES"]


def _dotted(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def _resolve(dotted):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True, kw_only=True)
class NormTopConfig:
    """The unit's config and its component class (config -> unit), the PING
    reply's design byte, the UART divisor (clock / baud) and ``depth``, the
    beats the input (non-``params``) and output memories hold."""

    unit: object
    component: type
    design_id: int
    divisor: int = 104
    depth: int = 1024

    def __post_init__(self):
        if not (isinstance(self.component, type) and issubclass(self.component, wiring.Component)):
            raise ParameterTypeError(f"component must be a Component class, not {self.component!r}")
        check_int("design_id", self.design_id, minimum=0, maximum=255)
        UartConfig(divisor=self.divisor)
        check_int("depth", self.depth, maximum=MAX_BYTES)
        beats_max = getattr(self.unit, "beats_max", None)
        if beats_max is not None and self.depth < beats_max:
            raise ParameterError(f"depth must be at least the unit's longest row or vector "
                             f"({beats_max} beats), not {self.depth}")
        for index, (layout, depth) in enumerate(self.memories()):
            check_addressable("depth", depth, index, pow2_bytes(layout.size), "unit")

    @property
    def design(self):
        """The unit's block name (its ``rtl`` module: softmax, layernorm, gelu)."""
        return self.component.__module__.rpartition(".")[2]

    @property
    def name(self):
        return f"board_{self.unit.name}"

    def to_dict(self):
        return {"design": self.design, "unit": self.unit.to_dict(),
                "divisor": self.divisor, "depth": self.depth, "design_id": self.design_id,
                "unit_config": _dotted(type(self.unit)), "component": _dotted(self.component)}

    @classmethod
    def from_dict(cls, raw):
        return cls(unit=_resolve(raw["unit_config"])(**raw["unit"]),
                   component=_resolve(raw["component"]), design_id=raw["design_id"],
                   divisor=raw["divisor"], depth=raw["depth"])

    def make_unit(self):
        return self.component(self.unit)

    def ports(self):
        """``(inputs, output)``: input port name -> payload layout, and the
        output's payload layout."""
        unit = self.make_unit()
        unit._MustUse__silence = True   # built only for its signature, never elaborated
        members = unit.signature.members
        inputs = {name: member.signature.members["payload"].shape
                  for name, member in members.items() if member.flow == In}
        output, = [member.signature.members["payload"].shape
                   for member in members.values() if member.flow == Out]
        return inputs, output

    def phases(self):
        """Input port names per phase: ``params`` first (if any), then the rest."""
        inputs, _ = self.ports()
        first = tuple(name for name in inputs if name == "params")
        rest = tuple(name for name in inputs if name != "params")
        return tuple(phase for phase in (first, rest) if phase)

    def word_layout(self, phase):
        """The memory word of phase ``phase``: each port's payload, in order."""
        inputs, _ = self.ports()
        return data.StructLayout({name: inputs[name] for name in self.phases()[phase]})

    def memories(self):
        """``(word layout, depth)`` per host memory: the phases, then the output."""
        mems = []
        for index, phase in enumerate(self.phases()):
            depth = self.unit.beats_max if phase == ("params",) else self.depth
            mems.append((self.word_layout(index), depth))
        mems.append((data.StructLayout({"y": self.ports()[1]}), self.depth))
        return mems

    def strides(self):
        """Host address bytes per word of each memory (a power of two)."""
        return [pow2_bytes(layout.size) for layout, _ in self.memories()]

    @property
    def output_mem(self):
        return len(self.phases())


class _WordReader:
    """Streams words ``0 .. count-1`` of a memory read port, one per cycle
    while ``ready``, through a small queue whose output is a register (so no
    block RAM read path reaches the unit); ``idle`` once every word has been
    taken."""

    DEPTH = 4

    def __init__(self, m, port, count, start, name):
        pointer = Signal(len(port.addr) + 1, name=f"{name}_ptr")
        remaining = Signal(17, name=f"{name}_remaining")
        pending = Signal(name=f"{name}_pending")     # port.data holds a word to queue
        queue = m.submodules[f"{name}_queue"] = Queue(shape=len(port.data), depth=self.DEPTH)
        issue = (remaining != 0) & (queue.level + pending < self.DEPTH)
        m.d.comb += [port.addr.eq(pointer), port.en.eq(issue),
                     queue.i.valid.eq(pending), queue.i.payload.eq(port.data)]
        m.d.sync += pending.eq(issue & ~start)
        with m.If(start):
            m.d.sync += [pointer.eq(0), remaining.eq(count)]
        with m.Elif(issue):
            m.d.sync += [pointer.eq(pointer + 1), remaining.eq(remaining - 1)]
        self.valid = queue.o.valid
        self.ready = queue.o.ready
        self.data = queue.o.payload
        self.idle = (remaining == 0) & ~pending & (queue.level == 0)


class NormBoardTop(BoardTop):
    """Host link + phase memories + output memory + sequencer around one
    streaming unit (see the module docstring)."""

    Config = NormTopConfig

    def build(self, m, link, cfg):
        m.submodules.unit = unit = cfg.make_unit()

        phases = cfg.phases()
        layouts = cfg.memories()
        strides = cfg.strides()
        mems = []
        for index, (layout, depth) in enumerate(layouts):
            nbytes = (layout.size + 7) // 8
            mem = Memory(shape=8 * nbytes, depth=depth, init=[])
            m.submodules[f"mem_{index}"] = mem
            mems.append((mem, nbytes))
        out_index = cfg.output_mem

        # Host writes into the phase memories, byte lanes of a word.
        for index in range(len(phases)):
            mem, nbytes = mems[index]
            stride = strides[index]
            port = mem.write_port(granularity=8)
            lane = link.mem_addr[:stride.bit_length() - 1]
            word_addr = link.mem_addr >> (stride.bit_length() - 1)
            m.d.comb += [port.addr.eq(word_addr), port.data.eq(link.mem_wdata.replicate(nbytes))]
            # Bytes past the word or past the memory are dropped (no wrap-around).
            with m.If(link.mem_we & (link.mem_sel == index) & (word_addr < layouts[index][1])):
                m.d.comb += port.en.eq((Const(1, stride) << lane)[:nbytes])

        # Host reads from the output memory (others read as 0), READ_LATENCY = 2.
        out_mem, out_bytes = mems[out_index]
        out_shift = strides[out_index].bit_length() - 1
        host_read = out_mem.read_port()
        lane = Signal(max(out_shift, 1))
        readable = Signal()
        host_lane = link.mem_addr[:out_shift]
        m.d.comb += [host_read.addr.eq(link.mem_addr >> out_shift), host_read.en.eq(link.mem_re)]
        with m.If(link.mem_re):
            m.d.sync += [lane.eq(host_lane),
                         readable.eq((link.mem_sel == out_index) & (host_lane < out_bytes))]
        rdata = Signal(8)
        padded = Cat(host_read.data, Const(0, 8 * strides[out_index] - len(host_read.data)))
        m.d.sync += rdata.eq(padded.word_select(lane, 8) & readable.replicate(8))
        m.d.comb += link.mem_rdata.eq(rdata)

        # Sequencer: phases one after the other, then wait for the output.
        counts = [link.run_args[16 * i:16 * i + 16] for i in range(len(phases))]
        bad = counts[-1] == 0
        for count, (_, depth) in zip(counts, layouts):
            bad |= count > depth
        busy = Signal()
        cycles = Signal(32)
        out_left = Signal(17)
        out_ptr = Signal(range(max(cfg.depth, 2)))
        start = Signal()
        m.d.comb += start.eq(link.run_start & ~busy & ~bad)
        m.d.sync += link.run_error.eq(link.run_start & bad)
        latched = [Signal(16, name=f"count_{i}") for i in range(len(phases))]
        starts = [Signal(name=f"start_{i}") for i in range(len(phases))]
        readers = []
        for index, phase in enumerate(phases):
            mem, _ = mems[index]
            reader = _WordReader(m, mem.read_port(), latched[index], starts[index], f"rd{index}")
            readers.append(reader)
            layout = cfg.word_layout(index)
            word = data.View(layout, reader.data[:layout.size])
            ready = 1
            for name in phase:
                port = getattr(unit, name)
                m.d.comb += [port.valid.eq(reader.valid),
                             Value.cast(port.payload).eq(Value.cast(word[name]))]
                ready = ready & port.ready
            m.d.comb += reader.ready.eq(ready)

        with m.If(busy):
            m.d.sync += cycles.eq(cycles + 1)
        with m.FSM():
            with m.State("idle"):
                with m.If(start):
                    m.d.sync += [busy.eq(1), cycles.eq(0), out_ptr.eq(0),
                                 out_left.eq(counts[-1])]
                    m.d.sync += [latched[i].eq(counts[i]) for i in range(len(phases))]
                    m.next = "load_0"
            for index in range(len(phases)):
                with m.State(f"load_{index}"):
                    m.d.comb += starts[index].eq(1)
                    m.next = f"run_{index}"
                with m.State(f"run_{index}"):
                    with m.If(readers[index].idle):
                        m.next = f"load_{index + 1}" if index + 1 < len(phases) else "drain"
            with m.State("drain"):
                with m.If(out_left == 0):
                    m.d.sync += busy.eq(0)
                    m.d.comb += link.run_done.eq(1)
                    m.next = "idle"
        m.d.comb += link.run_cycles.eq(cycles)

        out_write = out_mem.write_port()
        m.d.comb += [unit.y.ready.eq(1), out_write.addr.eq(out_ptr),
                     out_write.data.eq(unit.y.payload.as_value())]
        with m.If(unit.y.valid & busy):
            m.d.comb += out_write.en.eq(1)
            m.d.sync += [out_ptr.eq(out_ptr + 1), out_left.eq(out_left - 1)]

        return status_leds(m, link, busy)
