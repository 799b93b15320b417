"""The stages of the GEMM engines, the way Gemmini splits Load / Execute / Store.

A command runs through these stages, each a component::

    commands -> scheduler --chunks--> Loader --beats--> operand buffers -> feeders -> array
                                        |                                              |
                              memory reads                                   result rows
                                                                                       v
            memory writes <-- Writer <-- accumulator buffer <-------------- Accumulator

- The scheduler (:class:`~bertforge.rtl.tile_scheduler.TileScheduler`) cuts
  commands into chunk descriptors; :func:`fan_out` hands each stage the
  fields it uses, through its own :class:`~bertforge.rtl.stream.Queue`.
- :class:`~bertforge.rtl.loader.Loader` reads a chunk's rows from memory,
  one :class:`~bertforge.rtl.loader.Job` after another (dense: old C, bias,
  scales, A, B; sparse: old C, bias, scales, A, values, indices), and tags
  each beat with its job, row and buffer slot.
- Feeders (per engine: output stationary, weight stationary, sparse) read
  the operand buffers into the array.
- :class:`~bertforge.rtl.accumulator.Accumulator` adds the array's result
  rows into the accumulator buffer; :class:`~bertforge.rtl.writer.Writer`
  adds the bias, requantizes
  (:class:`~bertforge.rtl.requantizer.Requantizer`) and writes C.

Operand buffers hold two chunks and the accumulator, old C, bias and scale
buffers two blocks (double buffering). Stages tell each other about slots
with one-cycle *token* pulses: ``loaded`` (a chunk is in its slot; loader ->
feeders), ``freed`` (a feeder is done with a chunk slot; -> loader),
``committed`` (a block's last sum is in the accumulator buffer; ->
writer), ``released`` (the writer has read a block out; -> loader,
accumulator). Each stage counts the tokens it receives with
:func:`outstanding`.

One module per stage: :mod:`~bertforge.rtl.loader`,
:mod:`~bertforge.rtl.accumulator`, :mod:`~bertforge.rtl.requantizer`,
:mod:`~bertforge.rtl.writer`, and :mod:`~bertforge.rtl.staged_engine`
(:class:`~bertforge.rtl.staged_engine.StagedEngine`, which connects them).
This module holds what they share: the memory request layouts, the
engines' ports, :func:`fan_out`, :func:`outstanding`, the feeders' ports
and operand queues, and the vector buffers' shape.
"""

from amaranth.hdl import Signal, unsigned
from amaranth.lib import data, stream
from amaranth.lib.memory import ReadPort
from amaranth.lib.wiring import In, Out

from .stream import Queue, delay

__all__ = ["STAGE_QUEUE", "FEED_QUEUE", "read_request_layout", "write_request_layout",
           "engine_members", "project", "fan_out", "outstanding", "read_port", "feeder_members",
           "operand_queue", "vector_buffer"]

#: Default depth of the descriptor queues in front of the stages
#: (``GemmConfig.stage_queue``) and of the command queue (``command_queue``).
STAGE_QUEUE = 4
#: Depth of the operand queues in front of the array.
FEED_QUEUE = 8


def read_request_layout(config):
    """Read ``beats`` memory beats of consecutive bytes from byte ``addr`` on."""
    return data.StructLayout({"addr": unsigned(config.addr_width),
                              "beats": range(max(config.segments, 4) + 1)})


def write_request_layout(config):
    """Write the low ``bytes`` bytes of ``data`` at byte ``addr`` on."""
    return data.StructLayout({"addr": unsigned(config.addr_width),
                              "data": unsigned(config.mem_width),
                              "bytes": range(config.mem_bytes + 1)})


def engine_members(config, command_layout, completion_layout):
    """The ports of a GEMM engine: ``cmd``, ``done``, ``rd_req`` /
    ``rd_data`` (memory reads) and ``wr_req`` (memory writes)."""
    return {
        "cmd": In(stream.Signature(command_layout)),
        "done": Out(stream.Signature(completion_layout)),
        "rd_req": Out(stream.Signature(read_request_layout(config))),
        "rd_data": In(stream.Signature(unsigned(config.mem_width))),
        "wr_req": Out(stream.Signature(write_request_layout(config))),
    }


def project(layout, names):
    """The ``StructLayout`` of the fields ``names`` of ``layout``."""
    return data.StructLayout({name: layout.members[name] for name in names})


def fan_out(m, source, targets):
    """Offer each payload of stream ``source`` to every target that needs it,
    and take it once all of those have. ``targets`` is a list of
    ``(stream, needed)``: an input stream whose payload has a subset of the
    source's fields (copied by name) and a 1-bit expression of the source
    payload saying whether this target gets the payload.

    Each target takes the payload as soon as it can (a register per target
    remembers that it has), so no target's ``valid`` waits on another's
    ``ready``: the stage queues' fill levels reach only ``source.ready``,
    not each other's enables."""
    ready = Signal()
    m.d.comb += ready.eq(1)
    for n, (sink, needed) in enumerate(targets):
        taken = Signal(name=f"fan_out_taken{n}")
        for name in sink.payload.shape().members:
            m.d.comb += getattr(sink.payload, name).eq(getattr(source.payload, name))
        m.d.comb += sink.valid.eq(source.valid & needed & ~taken)
        with m.If(needed & ~taken & ~sink.ready):
            m.d.comb += ready.eq(0)
        with m.If(source.valid & ready):
            m.d.sync += taken.eq(0)
        with m.Elif(sink.valid & sink.ready):
            m.d.sync += taken.eq(1)
    m.d.comb += source.ready.eq(ready)


def outstanding(m, name, up, down, width=2):
    """A counter of ``up`` pulses not yet matched by ``down`` pulses (``up``
    and ``down`` are 1-bit; the count is updated the next cycle). Two bits
    by default: every token counts the slots of a double buffer (at most 2
    outstanding), and a narrow count is a short carry chain."""
    count = Signal(width, name=name)
    m.d.sync += count.eq(count + up - down)
    return count


def read_port(depth, shape):
    """The port a stage uses to read a buffer of ``depth`` words of ``shape``
    (connect it to the memory's ``read_port()``)."""
    return In(ReadPort.Signature(addr_width=(depth - 1).bit_length(), shape=shape))


def feeder_members(layout, reads, outputs):
    """The ports of a feeder: ``chunk`` (descriptors of ``layout``), the
    ``loaded`` token in and the ``freed`` token out (a pulse when the last
    read of a chunk is issued), buffer ports ``reads`` (name -> member) and
    streams to the array ``outputs`` (name -> payload shape)."""
    return {"chunk": In(stream.Signature(layout)), "loaded": In(1), "freed": Out(1), **reads,
            **{name: Out(stream.Signature(shape)) for name, shape in outputs.items()}}


def operand_queue(m, name, shape):
    """Operand queue with a two-cycle buffer read in front: the buffer's
    read, then a register of its data (an ECP5 block RAM takes 5.8 ns from
    its clock to its data, so no logic sits between them). Returns the
    queue, ``issue`` (drive it with "a read is issued now") and ``space``
    (a read may be issued now; a register, so no path from the queue's
    level into the caller's ``go``). The queue takes a payload two cycles
    after ``issue``: the caller computes it from the read data and what it
    registered with the read, each delayed a cycle more
    (:func:`~bertforge.rtl.stream.delay`)."""
    fifo = m.submodules[name] = Queue(shape=shape, depth=FEED_QUEUE)
    issue = Signal(name=f"{name}_issue")
    pending = delay(m, issue, 1, f"{name}_pending", reset_less=False)
    arriving = delay(m, pending, 1, f"{name}_arriving", reset_less=False)
    space = Signal(name=f"{name}_space")
    # Next cycle's reads in flight and beats queued, less nothing for this
    # cycle's pop: never fewer than there will be.
    m.d.sync += space.eq(fifo.level + pending + arriving + issue < FEED_QUEUE - 2)
    m.d.comb += fifo.i.valid.eq(arriving)
    return fifo, issue, space


def vector_buffer(config):
    """``(depth, width)`` of the bias and scale buffers, two blocks of
    ``panel`` 32-bit values each: a block per address (``panel * 32``
    bits), or with ``config.compact`` a memory beat per address (``Q =
    mem_width // 32`` values; narrow and deep, block RAM on iCE40)."""
    P, Q = config.panel, config.mem_bytes // 4
    if config.compact:
        return 2 * -(-P // Q), Q * 32
    return 2, P * 32
