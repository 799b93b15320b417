"""The GEMM engine on standard buses: an AXI4 master for data, an AXI4-Lite
register file for control and status, one ``irq``; the engine runs a
program that it fetches from memory itself.

:class:`AxiGemmTop` holds a GEMM engine (its streams are the inner
interface), an :class:`~bertforge.rtl.axi.AxiMaster`, an
:class:`~bertforge.rtl.axi_regs.AxiLiteRegisters` (the map compiled from
``generators/regs/bertforge.rdl``) and the program fetcher.

The program is ``PROG_LEN`` records of :func:`record_bytes` bytes from
``PROG_BASE`` on, each a :func:`record_layout`: an 8-bit opcode
(:data:`OP_RUN`, :data:`OP_END`) and, for ``OP_RUN``, the engine's
command (:func:`~bertforge.rtl.tile_scheduler.command_layout`; the sparse
engine's :func:`~bertforge.rtl.sparse_engine.sparse_command_layout`), packed by
the payload codec (``bertforge.generators.program`` assembles them).

Writing ``CTRL.start`` (while not busy) clears the counters and runs the
program, one command at a time: fetch the record over the AXI master,
check its opcode, give the command to the engine (an idle engine takes it
at once; the low-bit encoder's GEMM fused with GELU waits for its unit),
wait for its completion
and for every write to be answered (so the next command reads what this
one wrote), then the next. The program ends after ``PROG_LEN`` records, at
an ``OP_END``, at the first error, or, after ``CTRL.abort``, when the
running command has finished. It ends with ``STATUS.done``, the error code
(:data:`ERROR_CODES`; 0 none) and ``IRQ_STATUS.done`` or ``.error``;
``irq`` is high while an enabled status bit is set. An error response on
the bus, a bad opcode or a rejected command never hangs it: the engine
finishes the command it has (with the bad data), every read and write it
asked for is answered (``DRAIN``, a rejected command's too), then the
program ends, and the next start runs a program from a clean state.
"""

from amaranth.hdl import Cat, Elaboratable, Module, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import Out

from .axi import AxiMaster, axi4_members, forward_ports
from .axi_regs import AxiLiteRegisters, axi_lite_members
from .encoder import OP_GELU, OP_GEMM, OP_LAYERNORM, OP_SOFTMAX
from .engine import read_request_layout
from .gemm import GemmConfig
from .errors import ParameterError
from .params import check_choice, check_instance
from .serial_engine import gemm_engine
from .tile_scheduler import command_layout

__all__ = ["AxiGemmTop", "with_bus", "engine_parts", "record_layout", "record_bytes", "OP_RUN", "OP_END", "ERROR_CODES",
           "ERR_BAD_OPCODE", "ERR_REJECTED", "ERR_ABORTED"]

#: The ``busy_*`` counters by the encoder's unit code (its commands' ``op``).
UNIT_CODES = {"gemm": OP_GEMM, "softmax": OP_SOFTMAX, "layernorm": OP_LAYERNORM, "gelu": OP_GELU}

OP_RUN = 0x01
OP_END = 0x0F
ERR_BAD_OPCODE = 5
ERR_REJECTED = 6
ERR_ABORTED = 7
#: STATUS.error_code values.
ERROR_CODES = {0: "none", 1: "read SLVERR", 2: "read DECERR", 3: "write SLVERR",
               4: "write DECERR", ERR_BAD_OPCODE: "bad opcode",
               ERR_REJECTED: "command rejected by the engine", ERR_ABORTED: "aborted"}


def engine_parts(config):
    """``(make_engine, command_layout)`` of ``config``: the N:M sparse
    engine for a :class:`~bertforge.rtl.sparse_engine.SparseEngineConfig`,
    else the GEMM engine (:func:`~bertforge.rtl.serial_engine.gemm_engine`)."""
    from .encoder import EncoderConfig, EncoderTop, encoder_command_layout
    from .sparse_engine import SparseEngine, SparseEngineConfig, sparse_command_layout
    if isinstance(config, EncoderConfig):
        return EncoderTop, encoder_command_layout(config)
    if isinstance(config, SparseEngineConfig):
        return SparseEngine, sparse_command_layout(config)
    return gemm_engine, command_layout(config)


def record_layout(config):
    """One program record: ``opcode`` (8 bits) then the engine's command."""
    return data.StructLayout({"opcode": 8, "cmd": engine_parts(config)[1]})


def gemm_config(config):
    """The GEMM engine's config of ``config`` (an EncoderConfig's ``gemm``)."""
    return getattr(config, "gemm", config)


def record_bytes(config):
    """Bytes of one record: a power of two, at least a memory beat."""
    need = (data.Layout.cast(record_layout(config)).size + 7) // 8
    size = gemm_config(config).mem_bytes
    while size < need:
        size *= 2
    return size


class AxiGemmTop(wiring.Component):
    """A GEMM engine with an AXI4 master (``m_axi_*``), an AXI4-Lite slave
    (``s_axi_*``) and ``irq`` (see the module doc).

    Parameters
    ----------
    config : GemmConfig
        The engine (its ``mem_width`` is the AXI data width); a
        :class:`~bertforge.rtl.sparse_engine.SparseEngineConfig` gives the
        N:M sparse engine (its commands in the records).
    addr_width : 32 or 64
        AXI address width (the engine's ``addr_width`` is zero-extended).
    id_width, max_burst, max_reads, max_writes
        As :class:`~bertforge.rtl.axi.AxiMaster`'s.
    """

    def __init__(self, config, *, addr_width=32, id_width=1, max_burst=16, max_reads=4,
                 max_writes=4):
        from .encoder import EncoderConfig
        if not isinstance(config, EncoderConfig):
            check_instance("config", config, GemmConfig)
        self.config = config
        config = gemm_config(config)
        self.master_args = dict(addr_width=addr_width, id_width=id_width, max_burst=max_burst,
                                max_reads=max_reads, max_writes=max_writes)
        self.record_bytes = record_bytes(self.config)
        beats = read_request_layout(config).members["beats"]
        self.engine_beats = beats.stop - 1
        self.record_beats = self.record_bytes // config.mem_bytes
        # Checks every bus parameter (and data width) before anything is built.
        master = self._master = AxiMaster(
            data_width=config.mem_width, inner_addr_width=config.addr_width,
            request_beats=max(self.engine_beats, self.record_beats), **self.master_args)
        master._MustUse__silence = True   # built here to check the parameters; elaborated below
        self.axi_names = master.axi_names
        self.lite_names = list(axi_lite_members("s_axi", addr_width=8))
        super().__init__({
            **axi4_members("m_axi", addr_width=addr_width, data_width=config.mem_width,
                           id_width=id_width),
            **axi_lite_members("s_axi", addr_width=8),
            "irq": Out(1),
        })
        #: A program runs; its program counter (records done); its error code.
        self.busy = Signal(name="busy")
        self.pc = Signal(16, name="pc")
        self.code = Signal(4, name="code")
        #: The fetcher owns the master's reads (it fetches a record).
        self.fetching = Signal(name="fetching")

    def elaborate(self, platform):
        m = Module()
        cfg = gemm_config(self.config)
        encoder = cfg is not self.config
        engine = m.submodules.engine = self.make_engine()
        master = m.submodules.master = self._master
        # The configuration registers read constants.
        idle_units = () if encoder else ("softmax", "layernorm", "gelu")
        # PROG_BASE keeps the engine's address bits only (the rest read 0).
        kept = {"prog_base_lo_addr": min(cfg.addr_width, 32),
                "prog_base_hi_addr": max(cfg.addr_width - 32, 0)}
        regs = m.submodules.regs = AxiLiteRegisters(values={
            **{f"busy_{name}_count": 0 for name in idle_units},
            "config0_rows": cfg.rows, "config0_cols": cfg.cols,
            "config0_dataflow": int(cfg.dataflow == "ws"), "config0_bf16": int(cfg.bf16),
            "config0_width": cfg.width, "config0_acc_width": cfg.acc_width,
            "config1_mem_width": cfg.mem_width, "config1_addr_width": cfg.addr_width,
            "config1_lanes": cfg.lanes, "config1_units": 0b1111 if encoder else 0b0001},
            kept=kept)
        forward_ports(m, self, master, self.axi_names)
        forward_ports(m, self, regs, self.lite_names)

        # Program state.
        busy = self.busy
        done = Signal()
        code = self.code
        pc = self.pc
        abort = Signal()
        fetching = self.fetching
        record = Signal(self.record_bytes * 8)
        got = Signal(range(self.record_beats + 1))
        base = Cat(*(getattr(regs, name) for name, bits in kept.items() if bits))
        end_ok = Signal()
        end_error = Signal()
        rejected = Signal()     # the engine rejected the running command
        m.d.comb += [regs.status_busy.eq(busy), regs.status_done.eq(done),
                     regs.status_error.eq(code != 0), regs.status_error_code.eq(code),
                     regs.pc_count.eq(pc),
                     regs.irq_status_done_set.eq(end_ok), regs.irq_status_error_set.eq(end_error),
                     self.irq.eq(regs.irq)]

        # Memory: the fetcher's reads while it fetches, else the engine's.
        layout = record_layout(self.config)
        rec = data.View(layout, record[:data.Layout.cast(layout).size])
        fetch_addr = Signal(cfg.addr_width)
        with m.If(fetching):
            m.d.comb += [master.rd_req.payload.addr.eq(fetch_addr),
                         master.rd_req.payload.beats.eq(self.record_beats),
                         master.rd_data.ready.eq(1)]
        with m.Else():
            m.d.comb += [master.rd_req.payload.addr.eq(engine.rd_req.payload.addr),
                         master.rd_req.payload.beats.eq(engine.rd_req.payload.beats),
                         master.rd_req.valid.eq(engine.rd_req.valid),
                         engine.rd_req.ready.eq(master.rd_req.ready),
                         engine.rd_data.payload.eq(master.rd_data.payload),
                         engine.rd_data.valid.eq(master.rd_data.valid),
                         master.rd_data.ready.eq(engine.rd_data.ready)]
        wiring.connect(m, engine.wr_req, master.wr_req)
        m.d.comb += [engine.cmd.payload.eq(rec.cmd)]

        with m.If(busy & regs.ctrl_abort):
            m.d.sync += abort.eq(1)
        m.d.sync += master.error_clear.eq(0)

        def finish(error):
            m.d.sync += [busy.eq(0), done.eq(1), code.eq(error)]
            m.d.comb += (end_error if not isinstance(error, int) or error else end_ok).eq(1)
            m.next = "IDLE"

        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(regs.ctrl_start):
                    m.d.sync += [busy.eq(1), done.eq(0), code.eq(0), pc.eq(0), abort.eq(0),
                                 rejected.eq(0), fetch_addr.eq(base), master.error_clear.eq(1)]
                    m.next = "NEXT"
            with m.State("NEXT"):
                with m.If(abort):
                    finish(ERR_ABORTED)
                with m.Elif(pc == regs.prog_len_count):
                    finish(0)
                with m.Else():
                    m.d.sync += [fetching.eq(1), got.eq(0)]
                    m.next = "FETCH"
            with m.State("FETCH"):
                # The master is idle (nothing ran, or the last command
                # drained), so it takes the request at once (the proof
                # ``fetch_waits_for_nothing``).
                m.d.comb += master.rd_req.valid.eq(1)
                m.next = "FETCH_DATA"
            with m.State("FETCH_DATA"):
                with m.If(master.rd_data.valid):
                    m.d.sync += [record.eq(Cat(record[cfg.mem_width:], master.rd_data.payload)
                                           if self.record_beats > 1 else master.rd_data.payload),
                                 got.eq(got + 1)]
                with m.If(got == self.record_beats):
                    m.d.sync += fetching.eq(0)
                    m.next = "DECODE"
            with m.State("DECODE"):
                # The record's last beat came two cycles ago: the master is
                # idle and shows its error (``fetch_waits_for_nothing``).
                with m.If(master.error != 0):
                    finish(master.error)
                self.decode(m, rec.opcode, finish)
            with m.State("ISSUE"):
                m.d.comb += engine.cmd.valid.eq(1)
                if encoder and self.config.lowbit:  # a GEMM fused with GELU waits for the unit
                    with m.If(engine.cmd.ready):
                        m.next = "RUN"
                else:           # an idle engine takes a command at once
                    m.next = "RUN"
            with m.State("RUN"):
                if encoder:     # one finish strobe per command
                    finished, failed = engine.finish, engine.finish_error
                else:
                    m.d.comb += engine.done.ready.eq(1)
                    finished, failed = engine.done.valid, engine.done.payload.error
                with m.If(finished):
                    with m.If(failed):
                        self.reject(m, rejected, finish)
                    with m.Else():
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                with m.If(self.drained(master)):
                    with m.If(master.error != 0):
                        finish(master.error)
                    with m.Elif(rejected):
                        finish(ERR_REJECTED)
                    with m.Else():
                        m.d.sync += [pc.eq(pc + 1), fetch_addr.eq(fetch_addr + self.record_bytes)]
                        m.next = "NEXT"

        # Busy cycles of the running command's unit class (the encoder's op
        # field; a GEMM engine's commands are all GEMMs, its other units'
        # counters read 0: ``idle_units``, no counter).
        running = Signal()
        m.d.comb += running.eq(fsm.ongoing("ISSUE") | fsm.ongoing("RUN") | fsm.ongoing("DRAIN"))
        if encoder:
            unit = Signal(2)
            with m.If(engine.cmd.valid & engine.cmd.ready):
                m.d.sync += unit.eq(rec.cmd.op)
            units = {f"busy_{name}": running & (unit == code) for name, code in UNIT_CODES.items()}
        else:
            units = {"busy_gemm": running}

        # Performance counters (cleared by start).
        steps = {
            "cycles": busy, **units,
            "bytes_read": master.bytes_read, "bytes_written": master.bytes_written,
            "mem_wait": busy & master.mem_wait,
        }
        counters = m.submodules.counters = PerfCounters(
            {name: len(Value.cast(step)) for name, step in steps.items()})
        m.d.comb += counters.clear.eq(regs.ctrl_start & ~busy)
        for name, step in steps.items():
            m.d.comb += [counters.step[name].eq(step),
                         getattr(regs, f"{name}_count").eq(counters.count[name])]
        return m

    def make_engine(self):
        """The engine (``engine_parts``); a stand-in in the formal proofs."""
        return engine_parts(self.config)[0](self.config)

    def decode(self, m, opcode, finish):
        """In the ``DECODE`` state, continuing its ``If`` chain: the record's
        ``opcode`` ends the program (``finish(code)``) or runs its command
        (``ISSUE``)."""
        with m.Elif(opcode == OP_END):
            finish(0)
        with m.Elif(opcode == OP_RUN):
            m.next = "ISSUE"
        with m.Else():
            finish(ERR_BAD_OPCODE)

    @staticmethod
    def reject(m, rejected, finish):
        """In the ``RUN`` state, when the engine rejects its command: drain
        its reads and writes (``DRAIN``), then end with ``ERR_REJECTED``
        (or the bus error that came first)."""
        m.d.sync += rejected.eq(1)
        m.next = "DRAIN"

    @staticmethod
    def drained(master):
        """A command's reads and writes are all answered (``DRAIN`` ends)."""
        return master.idle


class PerfCounters(Elaboratable):
    """32-bit counters (wrapping) that add their ``step``, a cycle later (a
    register: the step's logic stays off the adders' carry chains);
    ``clear`` zeroes them all.

    Parameters
    ----------
    steps : dict
        Counter name -> width of its step.
    """

    def __init__(self, steps):
        self.clear = Signal()
        self.step = {name: Signal(width, name=f"{name}_step") for name, width in steps.items()}
        self.count = {name: Signal(32, name=f"count_{name}") for name in steps}

    def elaborate(self, platform):
        m = Module()
        for name, step in self.step.items():
            count = self.count[name]
            last = Signal.like(step, name=f"{name}_last")
            m.d.sync += last.eq(step)
            with m.If(self.clear):
                m.d.sync += count.eq(0)
            with m.Else():
                m.d.sync += count.eq(count + last)
        return m


def with_bus(config, bus="stream", *, max_dsp=None, **bus_args):
    """The engine of ``config`` (:func:`~bertforge.rtl.serial_engine.gemm_engine`)
    with its memory streams (``bus="stream"``, the default), or, with
    ``bus="axi4"``, inside an :class:`AxiGemmTop` (AXI4 master, AXI4-Lite
    registers, ``irq``; ``bus_args`` are its AXI parameters)."""
    check_choice("bus", bus, ("stream", "axi4"))
    if bus == "axi4":
        if max_dsp is not None:
            raise ParameterError("max_dsp is not supported with bus='axi4'")
        return AxiGemmTop(config, **bus_args)
    if bus_args:
        raise ParameterError(f"{sorted(bus_args)[0]} needs bus='axi4'")
    return gemm_engine(config, max_dsp=max_dsp)
