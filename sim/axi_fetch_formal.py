"""Formal properties of the AXI top's program fetcher
(:class:`~bertforge.rtl.axi_top.AxiGemmTop`) with the ``prove`` kit, run by
``bertforge prove gemm``.

The top under proof has a stand-in for the engine (:class:`FetchTop`), so
the solver sees the fetcher, the AXI master and the register file: the
stand-in takes a command at once while it has none (as every engine
does when idle; it may stall one that comes while it runs), then asks at
most one read (of at most one beat) and one write, takes its read data,
and completes
only once its data is all in, with or without an error (rejected), whatever
it asked before (a rejected command's reads and writes are drained like any
other's, so no assumption spares it memory); it stalls ``cmd.ready``,
``rd_data.ready`` and its completion at most :data:`STALL` cycles in a row.
The AXI slave (:func:`~bertforge.sim.axi_formal.axi_slave`) answers with
any response code (SLVERR and DECERR included) and stalls every channel at
most :data:`STALL` cycles in a row; the AXI-Lite inputs are free (any start,
abort, program base and length, at any time). Records hold any bytes: bad
opcodes, ``OP_END``, good ones. Properties:

- ``fetch_never_hangs``: while a program runs, the program counter moves or
  the program ends within :data:`RECORD_BOUND` cycles (bmc): no record, good,
  bad or answered with an error, holds the fetcher longer;
- ``fetch_waits_for_nothing``: the fetcher's read request is taken at
  once (the master is idle), and when its last beat is in, two cycles
  later (``DECODE``), the master is idle, so the top neither waits for it
  nor misses its error;
- ``ends_answered``: when a program ends, every AR has had all its beats,
  every AW its B, and the engine every read beat it asked for: nothing is
  left in flight for the next program;
- ``reaches_two_records`` (cover): a program runs two records and ends,
  ``reaches_bad_opcode_end`` (cover): one ends on a bad opcode,
  ``reaches_rejected_after_write`` (cover): one ends rejected by the engine
  after the command wrote (the assumptions leave something to prove).

Broken copies (:class:`FetchTop` with ``fault``) show that the first two
bite: ``"bad_opcode_waits"`` (a bad opcode leaves the fetcher waiting)
fails ``fetch_never_hangs``, ``"no_drain"`` (a command ends without
waiting for its writes' responses) and ``"reject_no_drain"`` (a rejected
command ends the program at once, the top before its drain) fail
``ends_answered``.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring

from bertforge.rtl.axi_top import ERR_REJECTED, OP_END, OP_RUN, AxiGemmTop
from bertforge.rtl.gemm import GemmConfig

from .axi_formal import axi_slave, bounded_wait
from .formal import Proof, Spec

__all__ = ["FetchTop", "FetchSpec", "fetch_proofs", "FETCH_CONFIG", "STALL", "RECORD_BOUND"]

#: The engine whose records are fetched: a 256-bit memory word, so a record
#: (32 bytes) is one beat.
FETCH_CONFIG = GemmConfig(rows=2, cols=2, mem_width=256, k_chunk=32, m_tile=2, addr_width=16)
#: Most cycles in a row the slave and the stand-in engine stall.
STALL = 1
#: Most cycles a record may take with those stalls: fetch, decode, the
#: command's one read and one write, its completion, the drain.
RECORD_BOUND = 40
COUNT = 6


class _StandIn(wiring.Component):
    """Ports only: the spec drives them."""

    def elaborate(self, platform):
        return Module()


class FetchTop(AxiGemmTop):
    """:class:`AxiGemmTop` of ``config`` with the stand-in engine
    (``stand_in``, driven by the spec); ``fault``: a broken copy (see the
    module doc)."""

    def __init__(self, config=FETCH_CONFIG, *, fault=None, **bus):
        super().__init__(config, max_reads=2, max_writes=2, **bus)
        from bertforge.rtl.serial_engine import gemm_engine
        engine = gemm_engine(config)
        engine._MustUse__silence = True
        self.stand_in = _StandIn(engine.signature)
        self.fault = fault

    def make_engine(self):
        return self.stand_in

    def decode(self, m, opcode, finish):
        if self.fault != "bad_opcode_waits":
            return super().decode(m, opcode, finish)
        with m.Elif(opcode == OP_END):
            finish(0)
        with m.Elif(opcode == OP_RUN):
            m.next = "ISSUE"

    def reject(self, m, rejected, finish):
        if self.fault == "reject_no_drain":
            return finish(ERR_REJECTED)
        return super().reject(m, rejected, finish)

    def drained(self, master):
        return 1 if self.fault == "no_drain" else master.idle


class FetchSpec(Spec):
    PROPERTIES = ("fetch_never_hangs", "fetch_waits_for_nothing", "ends_answered",
                  "reaches_two_records", "reaches_bad_opcode_end", "reaches_rejected_after_write")

    def __init__(self, make, *, only=None):
        super().__init__(only=only)
        self.make = make

    def build(self, m, platform):
        dut = m.submodules.dut = self.make()
        eng = dut.stand_in
        for name in dut.lite_names:
            if dut.signature.members[name].flow == wiring.In:
                m.d.comb += getattr(dut, name).eq(self.any_seq(m, len(getattr(dut, name)), name))
        open_n, writes_open = axi_slave(self, m, dut, stall=STALL)

        # The stand-in engine.
        pending = Signal()
        reads = Signal()
        writes = Signal()
        asked = Signal(COUNT)
        given = Signal(COUNT)
        cmd_take = eng.cmd.valid & eng.cmd.ready
        done_take = eng.done.valid & eng.done.ready
        m.d.comb += [eng.cmd.ready.eq(self.any_seq(m, 1, "cmd_ready")),
                     eng.rd_data.ready.eq(self.any_seq(m, 1, "rd_data_ready")),
                     eng.done.valid.eq(self.any_seq(m, 1, "done_valid")),
                     eng.done.payload.error.eq(self.any_seq(m, 1, "done_error"))]
        self.assume_stream_in(m, eng.rd_req, "rd_req")
        self.assume_stream_in(m, eng.wr_req, "wr_req")
        self.assume(m, eng.rd_req.payload.beats <= 1)
        self.assume(m, ~eng.rd_req.valid | (pending & ~reads))
        self.assume(m, ~eng.wr_req.valid | (pending & ~writes))
        can_finish = pending & (asked == given) & ~eng.rd_req.valid & ~eng.wr_req.valid
        self.assume(m, ~eng.done.valid | can_finish)
        self.assume(m, pending | eng.cmd.ready)
        bounded_wait(self, m, "cmd_wait", eng.cmd.valid & ~eng.cmd.ready, STALL)
        bounded_wait(self, m, "rd_data_wait", eng.rd_data.valid & ~eng.rd_data.ready, STALL)
        bounded_wait(self, m, "done_wait", can_finish & ~eng.done.valid, STALL)
        with m.If(cmd_take):
            m.d.sync += [pending.eq(1), reads.eq(0), writes.eq(0)]
        with m.If(done_take):
            m.d.sync += pending.eq(0)
        with m.If(eng.rd_req.valid & eng.rd_req.ready):
            m.d.sync += reads.eq(1)
        with m.If(eng.wr_req.valid & eng.wr_req.ready):
            m.d.sync += writes.eq(1)
        m.d.sync += [asked.eq(asked + ((eng.rd_req.valid & eng.rd_req.ready)
                                       * eng.rd_req.payload.beats)),
                     given.eq(given + (eng.rd_data.valid & eng.rd_data.ready))]

        # No hang: the program counter moves or the program ends in time.
        stuck = Signal(range(RECORD_BOUND + 2))
        moved = dut.pc != self.past(m, dut.pc, "pc")
        m.d.sync += stuck.eq(0)
        with m.If(dut.busy & ~moved & (stuck <= RECORD_BOUND)):
            m.d.sync += stuck.eq(stuck + 1)
        self.check(m, "fetch_never_hangs", stuck < RECORD_BOUND)

        # The fetcher's handshakes: its request taken at once, the master
        # idle when the record is in (``fetching`` falls into DECODE).
        master = dut._master
        fetched = self.past(m, dut.fetching, "fetching") & ~dut.fetching
        self.check(m, "fetch_waits_for_nothing",
                   (~(dut.fetching & master.rd_req.valid) | master.rd_req.ready)
                   & (~fetched | master.idle))

        # Every request answered when a program ends.
        ended = self.past(m, dut.busy, "busy") & ~dut.busy
        self.check(m, "ends_answered", ~ended | ((open_n == 0) & (writes_open == 0)
                                                 & (asked == given)))

        records = Signal(2)
        with m.If(moved & (records != 3)):
            m.d.sync += records.eq(records + 1)
        self.cover(m, "reaches_two_records", ended & (records == 2) & (dut.pc == 2))
        # A record's opcode: the low byte of an R beat the engine did not ask for.
        opcode = Signal(8)
        with m.If(dut.m_axi_rvalid & dut.m_axi_rready & ~pending):
            m.d.sync += opcode.eq(dut.m_axi_rdata[:8])
        self.cover(m, "reaches_bad_opcode_end",
                   ended & (dut.pc == 0) & (opcode != OP_RUN) & (opcode != OP_END)
                   & (opcode != 0))
        self.cover(m, "reaches_rejected_after_write", ended & (dut.code == ERR_REJECTED) & writes)

def fetch_proofs(*, make=None, label=None):
    """The fetcher's proofs (block ``gemm``), bmc from reset."""
    make = make or FetchTop
    label = label or "axi fetcher 2x2 256-bit records"
    depths = {"fetch_never_hangs": RECORD_BOUND + 16, "fetch_waits_for_nothing": 30,
              "ends_answered": 30}
    return [Proof(block="gemm", name=name, config=label,
                  spec=lambda only: FetchSpec(make, only=only),
                  method="cover" if name.startswith("reaches") else "bmc",
                  depth=depths.get(name, 42), slow=True, cone=True)
            for name in FetchSpec.PROPERTIES]
