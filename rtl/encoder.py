"""Encoder top-level: the GEMM engine, the softmax, layernorm and GELU units,
a command sequencer and stream adapters on one external-memory interface.

A command stream (fed by the host or a testbench; there is no instruction
memory) drives everything. Each command names a unit (``op``):

- ``OP_GEMM``: ``gemm`` is a :func:`~bertforge.rtl.tile_scheduler.command_layout`
  command, passed to :class:`~bertforge.rtl.gemm.GemmEngine` as is.
- ``OP_SOFTMAX``: ``rows`` rows of ``length`` int32 scores at ``src`` (row
  stride ``src_stride`` bytes), row scale ``multiplier``/``shift``
  (:func:`~bertforge.rtl.softmax.softmax_scale`); the probabilities are
  written at ``dst`` (stride ``dst_stride``) as the next GEMM's signed
  operands: int8 activations: the uint8 ``p`` as int8 ``min((p + 1) >> 1,
  127)`` (scale 1/128); int16 activations: the unit's int16 Q1.15 ``p``
  (scale 2**-15, at most 32767) as it is.
  ``valid`` (if not 0, and the softmax unit has ``mask``) masks the elements
  at column ``valid`` and beyond in every row (BERT's padding mask: the keys
  of padding tokens); their probabilities are 0.
- ``OP_LAYERNORM``: first gamma (``length`` elements at ``params``) and
  beta (``length`` elements right after) go to the unit, then ``rows``
  vectors ``x`` (at ``src``) with the residual ``r`` (at ``src2``, stride
  ``src2_stride``) added in the unit; out at ``dst``.
- ``OP_GELU``: ``rows`` x ``length`` elements at ``src`` -> ``dst``.

Activations are int8 or int16, as the GEMM engine's operand ``width`` is
(:class:`EncoderConfig`): with a width-16 engine every activation the
units read or write (x, the residual, gamma and beta, GELU in and out,
layernorm out, the probabilities) is int16, two bytes an element.

The low-bit (W8A8) top (:attr:`EncoderConfig.lowbit`, a width-8 engine):
every GEMM operand is int8, the residual stream int16. ``OP_LAYERNORM``
reads int16 ``x``, ``r`` and parameters: at ``params`` the beats of
``gamma|gamma2`` (``lanes`` elements of gamma, then ``lanes`` of the second
output's gamma, int16), then ``length * 4`` bytes later those of
``beta|beta2``; it writes the int16 output at ``dst`` and the int8 second
output at ``dst2`` (stride ``dst2_stride``, command fields of the low-bit
top only) with the scale ``multiplier``/``shift``, two writes an output
beat. ``OP_GELU`` first reads ``length`` 32-bit scale words at ``params``
(one per channel), then int16 rows, and writes int8. An ``OP_GEMM`` with
``gelu`` (a low-bit field) puts GELU on the engine's writer: the GELU
adapter first reads the ``length`` (= N) scale words at ``params``, then
the GEMM runs and its int16 results go through GELU instead of to memory:
element ``(i, j)`` is written as int8 at ``dst + i * dst_stride + j``
(``rows`` = M; N a multiple of the engine's ``panel``); the GEMM's C is
never written (``c_addr``/``c_stride`` are only range-checked). It starts
only when everything before it has completed, nothing starts until its
last GELU write, and it completes then (a rejected GEMM at once).

Sequencing: a command starts when everything before it has completed, with
one exception: a GEMM command without ``barrier`` that follows a GEMM goes
straight into the engine's command queue, so the commands of one operation
(the heads of attention, independent projections) run back to back.
Completions leave in order as one-cycle strobes (``finish``, with
``finish_error`` from the engine's error flag); ``start`` strobes when a
command's unit takes its first input (GEMM: the command handshake;
softmax, layernorm, GELU: the first ``x`` beat), so per-unit busy time can
be measured.

Stream adapters (one per elementwise unit): a reader issues one-beat read
requests for the command's rows (two interleaved sources for layernorm:
``x`` and ``r``, or gamma and beta), queues the words per source, an
unpacker cuts each word into the unit's beats (``lanes`` elements; int8 or
int16 is sign-extended to the unit's input width) and the unit's output
beats are written straight back (``lanes`` elements per write request). Rows must be
whole memory words (``length * element bytes`` a multiple of ``mem_width //
8``, so ``length`` is a multiple of the unit's lanes), the rows read word
aligned (``src``, ``src2``, ``params`` and their strides); the reader keeps
its addresses in words. The top refuses (decodes and drops) an elementwise
command that breaks this, has no rows or no elements, or a row longer than
its unit takes (softmax ``l_max``, layernorm ``h_max``), and the low-bit
top's GEMM with ``gelu`` whose ``params`` or ``length * 4`` is off the
word grid: it completes at once, ``start`` and ``finish`` with
``finish_error`` in one cycle, and touches no memory (as the engine's
rejected GEMM does).
With a memory that answers one beat per cycle the units are fed at their
full rate (one beat per cycle) after a fill of a few cycles plus the read
latency: :mod:`bertforge.sim.encoder_cycles` is the cycle model.
"""

from contextlib import nullcontext
from dataclasses import dataclass, replace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .gelu import Gelu, GeluConfig
from .engine import read_request_layout, write_request_layout
from .gemm import GemmConfig, GemmEngine
from .layernorm import LayerNorm, LayerNormConfig
from .params import check_instance
from .softmax import MULT_BITS, SHIFT_BITS, Softmax, SoftmaxConfig
from .stream import Queue, register
from .tile_scheduler import command_layout
from bertforge.rtl.errors import ParameterError

__all__ = ["EncoderConfig", "EncoderTop", "encoder_command_layout",
           "OP_GEMM", "OP_SOFTMAX", "OP_LAYERNORM", "OP_GELU", "WORD_QUEUE"]

OP_GEMM, OP_SOFTMAX, OP_LAYERNORM, OP_GELU = 0, 1, 2, 3
#: Words each adapter source queue holds.
WORD_QUEUE = 4


@dataclass(frozen=True, kw_only=True)
class EncoderConfig:
    """The units of an :class:`EncoderTop`.

    Parameters
    ----------
    gemm : GemmConfig
        ``width`` 8 (int8 activations) or 16 (int16 activations); its
        ``mem_width`` and ``addr_width`` are the top's memory interface.
        The top's engine stores transposed (``transpose_c`` is set: the k
        projection writes ``K^T`` directly).
    softmax : SoftmaxConfig
        int32 input; output ``out_width`` = 8 with int8 activations, 16 with
        int16; ``lanes * 4`` must divide ``mem_width // 8``.
    layernorm : LayerNormConfig
        with ``add_residual``; ``in_width``, ``out_width`` and
        ``param_width`` the activations' width (``in_width`` 8 with int8
        activations: ``x + r`` of int8 values, no wider statistics);
        ``lanes`` times the element bytes must divide ``mem_width // 8``.
    gelu : GeluConfig
        ``in_width`` and ``out_width`` the activations' width; ``lanes``
        times the element bytes must divide ``mem_width // 8``.
    """

    gemm: GemmConfig
    softmax: SoftmaxConfig
    layernorm: LayerNormConfig
    gelu: GeluConfig

    def __post_init__(self):
        for name, cls in (("gemm", GemmConfig), ("softmax", SoftmaxConfig),
                          ("layernorm", LayerNormConfig), ("gelu", GeluConfig)):
            check_instance(name, getattr(self, name), cls)
        if self.gemm.serial:
            raise ParameterError("the encoder top drives the staged GEMM engine: set [gemm] "
                                 "serial to false")
        if self.gemm.bf16:
            raise ParameterError("the encoder top runs integer activations: set [gemm] arith "
                                 "to int8 or int16, not bf16")
        if not self.gemm.transpose_c:     # the program's k projection stores K^T
            object.__setattr__(self, "gemm", replace(self.gemm, transpose_c=True))
        mb = self.gemm.mem_bytes
        w, ln = self.gemm.width, self.layernorm     # every width below must be w
        need = {"softmax out_width": self.softmax.out_width,
                "layernorm in_width": ln.in_width,
                "layernorm out_width": ln.out_width, "layernorm param_width": ln.param_width,
                "gelu in_width": self.gelu.in_width, "gelu out_width": self.gelu.out_width}
        if self.softmax.in_width != 32:
            raise ParameterError("the encoder top needs softmax in_width 32 (int32 scores)")
        if self.lowbit:     # int8 GEMM operands, int16 residual stream and GELU input
            need = {"gemm width": (w, 8), "softmax out_width": (self.softmax.out_width, 8),
                    "layernorm in_width": (ln.in_width, 16),
                    "layernorm param_width": (ln.param_width, 16),
                    "layernorm out_width": (ln.out_width, 16),
                    "gelu in_width": (self.gelu.in_width, 16),
                    "gelu out_width": (self.gelu.out_width, 8),
                    "gelu channel_scales": (self.gelu.channel_scales, True)}
            for what, (got, want) in need.items():
                if got != want:
                    raise ParameterError(f"the low-bit encoder top (layernorm second_output) "
                                         f"needs {what} {want}, not {got}")
            if mb % (4 * ln.lanes) or mb % (4 * self.gelu.lanes):
                raise ParameterError(f"the low-bit encoder top loads 4 bytes per channel and "
                                     f"lane (layernorm's two gamma/beta pairs, GELU's scale "
                                     f"words): 4 x lanes must divide the {mb}-byte memory word")
            need = {}
        elif self.gelu.channel_scales:
            raise ParameterError("gelu channel_scales is for the low-bit encoder top: set "
                                 "[layernorm] second_output too")
        for what, got in need.items():
            if got != w:
                raise ParameterError(f"the encoder top with gemm width {w} (int{w} activations) "
                                     f"needs {what} {w}, not {got}")
        if not self.layernorm.add_residual:
            raise ParameterError("the encoder top needs layernorm add_residual = true")
        eb = self.element_bytes
        ub = self.unit_bytes
        for name, beat in (("softmax", self.softmax.lanes * 4), ("layernorm", self.layernorm.lanes * ub),
                           ("gelu", self.gelu.lanes * ub)):
            if mb % beat:
                raise ParameterError(f"{name} beats of {beat} bytes must divide the {mb}-byte memory "
                                     f"word; change [{name}] lanes or [gemm] mem_width")

    @property
    def lowbit(self):
        """The low-bit (W8A8) top: int8 GEMM operands, an int16 residual
        stream (layernorm in and out, gamma and beta) and GELU input; the
        layernorm also writes its int8 second output, GELU writes int8 with
        per-channel scales (set by ``layernorm.second_output``)."""
        return self.layernorm.second_output

    @property
    def element_bytes(self):
        """Bytes of one GEMM operand activation (and, but for the low-bit
        top, of every activation, gamma and beta): 1 (int8) or 2 (int16)."""
        return self.gemm.width // 8

    @property
    def unit_bytes(self):
        """Bytes of one layernorm input, output, gamma or beta and one GELU
        input: 2 in the low-bit top, else :attr:`element_bytes`."""
        return 2 if self.lowbit else self.element_bytes

    @property
    def name(self):
        g = self.gemm
        return (f"encoder_{g.rows}x{g.cols}_{g.dataflow}_m{g.mem_width}_s{self.softmax.lanes}"
                f"_l{self.layernorm.lanes}_g{self.gelu.lanes}" + ("_i16" if g.width == 16 else "")
                + (("_w4a8" if g.weight_group else "_w8a8") if self.lowbit else ""))

    def to_dict(self):
        return {name: getattr(self, name).to_dict() for name in ("gemm", "softmax", "layernorm", "gelu")}


def encoder_command_layout(config):
    """One sequencer command (see the module docstring)."""
    addr = unsigned(config.gemm.addr_width)
    second = {"dst2": addr, "dst2_stride": addr, "gelu": 1} if config.lowbit else {}
    return data.StructLayout({
        "op": unsigned(2), "barrier": 1, "gemm": command_layout(config.gemm),
        "src": addr, "src2": addr, "dst": addr, "params": addr,
        "src_stride": addr, "src2_stride": addr, "dst_stride": addr,
        "rows": unsigned(16), "length": unsigned(16), "valid": unsigned(16),
        "multiplier": unsigned(MULT_BITS), "shift": unsigned(SHIFT_BITS), **second,
    })


class EncoderTop(wiring.Component):
    """GEMM engine + softmax + layernorm + GELU + sequencer (module docstring).

    Ports: ``cmd`` (in, :func:`encoder_command_layout`), ``rd_req``,
    ``rd_data``, ``wr_req`` (the engine's memory interface, shared),
    ``start``, ``finish``, ``finish_error`` (strobes).

    Parameters
    ----------
    config : EncoderConfig
    """

    def __init__(self, config):
        self.config = check_instance("config", config, EncoderConfig, article="an")
        g = config.gemm
        super().__init__({
            "cmd": In(stream.Signature(encoder_command_layout(config))),
            "rd_req": Out(stream.Signature(read_request_layout(g))),
            "rd_data": In(stream.Signature(unsigned(g.mem_width))),
            "wr_req": Out(stream.Signature(write_request_layout(g))),
            "start": Out(1), "finish": Out(1), "finish_error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        # The engine's done is always taken (ready tied to 1 below): its
        # writer has no completion queue.
        engine = m.submodules.engine = GemmEngine(cfg.gemm, done_always_ready=True)
        softmax = m.submodules.softmax = Softmax(cfg.softmax)
        layernorm = m.submodules.layernorm = LayerNorm(cfg.layernorm)
        lowbit = cfg.lowbit
        gelu = m.submodules.gelu = Gelu(cfg.gelu, seek=lowbit)

        cmd = self.cmd
        op = cmd.payload.op
        outstanding = Signal(range(64))
        unit = Signal(2)
        idle = outstanding == 0
        refuse = self._refused(m, cmd.payload)
        # The low-bit top's GEMM with ``gelu`` (GELU on the engine's writer):
        # it starts the GELU adapter (its scale words) while it waits at the
        # head of the stream, then goes to the engine; nothing else runs
        # meanwhile. ``fusing``: from its start to its last GELU write.
        if lowbit:
            fused = (op == OP_GEMM) & cmd.payload.gelu
            fusing, issued, loaded = Signal(), Signal(), Signal()
            queued = (op == OP_GEMM) & ~fused
            can = cmd.valid & ~fusing & (idle | (queued & (unit == OP_GEMM)
                                                 & ~cmd.payload.barrier))
            issue = cmd.valid & fusing & loaded & ~issued
            fuse_at = cmd.valid & fused & idle & ~fusing
            m.d.comb += [engine.cmd.payload.eq(cmd.payload.gemm),
                         engine.cmd.valid.eq((can & queued) | issue),
                         cmd.ready.eq((can & ~fused & ((op != OP_GEMM) | engine.cmd.ready))
                                      | (issue & engine.cmd.ready) | (fuse_at & refuse)),
                         engine.done.ready.eq(1)]
            taken = cmd.valid & cmd.ready
            fuse_go = fuse_at & ~refuse
            reject = taken & ~fusing & refuse
            with m.If(taken & ~fusing):
                m.d.sync += unit.eq(op)
            with m.If(fuse_go):
                m.d.sync += [unit.eq(OP_GELU), fusing.eq(1)]
            with m.If(issue & engine.cmd.ready):
                m.d.sync += issued.eq(1)
        else:
            can = cmd.valid & (idle | ((op == OP_GEMM) & (unit == OP_GEMM) & ~cmd.payload.barrier))
            m.d.comb += [engine.cmd.payload.eq(cmd.payload.gemm),
                         engine.cmd.valid.eq(can & (op == OP_GEMM)),
                         cmd.ready.eq(can & ((op != OP_GEMM) | engine.cmd.ready)),
                         engine.done.ready.eq(1)]
            taken = cmd.valid & cmd.ready
            reject = taken & refuse
            with m.If(taken):
                m.d.sync += unit.eq(op)

        eb, ub = cfg.element_bytes, cfg.unit_bytes
        run = taken & ~refuse
        adapters = {
            OP_SOFTMAX: self._adapter(m, "sm", softmax, cmd, run & (op == OP_SOFTMAX), sources=1,
                                      ebytes=4, obytes=cfg.softmax.out_width // 8,
                                      lanes=cfg.softmax.lanes),
            OP_LAYERNORM: self._adapter(m, "ln", layernorm, cmd, run & (op == OP_LAYERNORM),
                                        sources=2, ebytes=ub, obytes=ub, lanes=cfg.layernorm.lanes),
            OP_GELU: self._adapter(m, "ge", gelu, cmd, (run & (op == OP_GELU)) | fuse_go
                                   if lowbit else run & (op == OP_GELU),
                                   sources=1, ebytes=ub, obytes=eb, lanes=cfg.gelu.lanes,
                                   fuse=(fuse_go, fusing) if lowbit else None),
        }
        gemm_done = engine.done.valid
        ge = adapters[OP_GELU]
        finish = Signal()
        if lowbit:
            error = gemm_done & engine.done.payload.error
        m.d.comb += finish.eq((gemm_done & (~fusing | error) if lowbit else gemm_done)
                              | adapters[OP_SOFTMAX]["finish"]
                              | adapters[OP_LAYERNORM]["finish"] | ge["finish"] | reject)
        if lowbit:
            m.d.comb += loaded.eq(ge["loaded"])
            with m.If(fusing & (ge["finish"] | error)):
                m.d.sync += [fusing.eq(0), issued.eq(0)]
        m.d.sync += outstanding.eq(outstanding + taken - finish)
        m.d.comb += [
            self.finish.eq(finish),
            self.finish_error.eq((gemm_done & engine.done.payload.error) | reject),
            self.start.eq((taken & (op == OP_GEMM)) | reject | adapters[OP_SOFTMAX]["start"]
                          | adapters[OP_LAYERNORM]["start"] | ge["start"]),
        ]

        # Memory interface: the unit of the running command owns it; a
        # GEMM with ``gelu`` (after the scale words): the engine reads, its
        # writes go to the GELU adapter, which writes.
        def reads(src):
            return [self.rd_req.payload.eq(src.rd_req.payload),
                    self.rd_req.valid.eq(src.rd_req.valid),
                    src.rd_req.ready.eq(self.rd_req.ready),
                    src.rd_data.payload.eq(self.rd_data.payload),
                    src.rd_data.valid.eq(self.rd_data.valid),
                    self.rd_data.ready.eq(src.rd_data.ready)]

        def writes(src, dst):
            return [dst.payload.eq(src.wr_req.payload), dst.valid.eq(src.wr_req.valid),
                    src.wr_req.ready.eq(dst.ready)]
        sources = {OP_GEMM: engine, **{k: a["mem"] for k, a in adapters.items()}}
        with m.Switch(unit):
            for key, src in sources.items():
                with m.Case(key):
                    if key == OP_GELU and lowbit:
                        with m.If(fusing & loaded):
                            m.d.comb += reads(engine) + writes(engine, ge["feed"])
                            m.d.comb += writes(src, self.wr_req)
                        with m.Else():
                            m.d.comb += reads(src) + writes(src, self.wr_req)
                    else:
                        m.d.comb += reads(src) + writes(src, self.wr_req)
        return m

    def _refused(self, m, p):
        """1 while the command ``p`` is one the top refuses (module
        docstring): an elementwise command with no rows or no elements, a
        softmax row longer than ``l_max``, a layernorm row longer than
        ``h_max``, or whose reads are off the memory's word grid (``src``,
        ``src2``, ``params``, their strides or a row's bytes not a multiple
        of the word); the low-bit top's GEMM with ``gelu`` whose scale words
        are."""
        cfg = self.config
        wb = cfg.gemm.mem_bytes.bit_length() - 1
        ub = cfg.unit_bytes

        def off(*values):       # not a whole number of memory words
            return Cat(*(v[:wb] for v in values)).any()
        empty = (p.rows == 0) | (p.length == 0)
        params = [p.params] if cfg.lowbit else []
        bad = {OP_SOFTMAX: off(p.src, p.src_stride, p.length * 4) | (p.length > cfg.softmax.l_max),
               OP_LAYERNORM: off(p.src, p.src_stride, p.src2, p.src2_stride, p.params,
                                 p.length * ub) | (p.length > cfg.layernorm.h_max),
               OP_GELU: off(p.src, p.src_stride, p.length * ub, *params)}
        refuse = Signal()
        with m.Switch(p.op):
            for op, value in bad.items():
                with m.Case(op):
                    m.d.comb += refuse.eq(value | empty)
            if cfg.lowbit:
                with m.Case(OP_GEMM):
                    m.d.comb += refuse.eq(p.gelu & off(p.params, p.length * 4))
        return refuse

    def _adapter(self, m, name, unit, cmd, go, *, sources, ebytes, obytes, lanes, fuse=None):
        """Reader, word queues, unpacker and writer in front of ``unit``.
        Returns ``{"mem": interface, "start": strobe, "finish": strobe}``.

        ``fuse`` (the low-bit GELU): ``(fused, fusing)``, a GEMM with
        ``gelu`` starts the adapter (``go`` with ``fused``) and runs
        (``fusing``): the adapter loads its scale words, then (``loaded``,
        returned) takes the engine's int16 write beats (``feed``, returned)
        instead of memory words, a block of ``panel`` columns and up to
        ``block_rows`` rows at a time in the engine's order
        (:mod:`~bertforge.rtl.tile_scheduler`), and writes GELU's int8
        results at ``dst`` (row stride ``dst_stride``) of a ``rows`` x
        ``length`` matrix (the GEMM's M and N)."""
        g = self.config.gemm
        MB = g.mem_bytes
        aw = g.addr_width
        wb = MB.bit_length() - 1    # a read address's bits below the word: 0 (refused else)
        waw = aw - wb
        is_ln = sources == 2
        is_sm = isinstance(unit, Softmax)
        lowbit = self.config.lowbit
        # the longest row the unit takes (longer ones are refused): its
        # length and element counts have these bits
        lbits = (self.config.softmax.l_max if is_sm else self.config.layernorm.h_max if is_ln
                 else 0xFFFF).bit_length()
        # A parameter phase before the vectors: layernorm's gamma and beta;
        # the low-bit GELU's scale words. Low-bit parameter beats are 4 bytes
        # a lane (gamma|gamma2 and beta|beta2 pairs, or one scale word).
        has_params = is_ln or (lowbit and isinstance(unit, Gelu))
        pel = 4 if lowbit and has_params else ebytes     # parameter bytes per lane
        mem = wiring.Signature({
            "rd_req": Out(stream.Signature(read_request_layout(g))),
            "rd_data": In(stream.Signature(unsigned(g.mem_width))),
            "wr_req": Out(stream.Signature(write_request_layout(g))),
        }).create(path=(name,))

        # The command's fields this adapter reads after ``go`` (registers), by
        # unit: the second source (layernorm's residual: ``src2``, its
        # stride, its row base ``base1``), ``src`` (read after the parameter
        # phase), the mask's ``valid``, the scale (softmax; the low-bit
        # layernorm's second output). The reader's addresses and strides are
        # kept in memory words (their low ``wb`` bits are 0).
        used = ["src_stride", "dst_stride", "rows", "length", "base0"]
        used += ["src"] if has_params else []
        used += ["src2", "src2_stride", "base1"] if is_ln else []
        used += ["valid"] if is_sm and self.config.softmax.mask else []
        used += ["mult", "shift"] if is_sm or (is_ln and lowbit) else []
        widths = {"src": waw, "src2": waw, "src_stride": waw, "src2_stride": waw, "dst_stride": aw,
                  "rows": 16, "length": lbits, "valid": 16, "mult": MULT_BITS, "shift": SHIFT_BITS,
                  "base0": waw, "base1": waw}
        regs = {field: register(widths[field], f"{name}_{field}", reset_less=False)
                for field in used}
        p = cmd.payload
        fields = {"src": p.src[wb:], "src2": p.src2[wb:], "src_stride": p.src_stride[wb:],
                  "src2_stride": p.src2_stride[wb:], "dst_stride": p.dst_stride, "rows": p.rows,
                  "length": p.length, "valid": p.valid, "mult": p.multiplier, "shift": p.shift}
        src, src2 = regs.get("src"), regs.get("src2")
        s_stride, s2_stride, d_stride = regs["src_stride"], regs.get("src2_stride"), regs["dst_stride"]
        rows, length, valid_len = regs["rows"], regs["length"], regs.get("valid")
        mult, shift = regs.get("mult"), regs.get("shift")
        # a row's words: the 16-bit length times 1, 2 or 4 bytes, in words
        def words(nbytes):
            return max(lbits + (nbytes - 1).bit_length() - wb, 1)
        row_words = Signal(words(ebytes), name=f"{name}_row_words")
        with m.If(go):
            m.d.sync += [regs[f].eq(fields[f]) for f in used if f in fields]
            m.d.sync += row_words.eq((p.length * ebytes)[wb:])
        prow_words = row_words
        if pel != ebytes:       # the parameter phase's rows are wider
            prow_words = Signal(words(pel), name=f"{name}_prow_words")
            with m.If(go):
                m.d.sync += prow_words.eq((p.length * pel)[wb:])

        # Reader: one-beat requests, row by row (layernorm: its two sources
        # interleaved per word; units with parameters: their phase first).
        r_busy = Signal(name=f"{name}_r_busy")
        r_phase = Signal(name=f"{name}_r_phase") if has_params else Const(1)  # 0 = parameters
        r_src = Signal(name=f"{name}_r_src") if is_ln else Const(0)    # layernorm: 1 = r, beta
        r_off = Signal(len(prow_words), name=f"{name}_r_off")      # words into the row
        r_row = Signal(16, name=f"{name}_r_row")
        base0, base1 = regs["base0"], regs.get("base1")
        with m.If(go):
            m.d.sync += [r_busy.eq(1), r_off.eq(0), r_row.eq(0)]
            if is_ln:
                m.d.sync += [r_phase.eq(0), r_src.eq(0), base0.eq(p.params[wb:]),
                             base1.eq(p.params[wb:] + (p.length * pel)[wb:])]
            elif has_params:
                m.d.sync += [r_phase.eq(0), base0.eq(p.params[wb:])]
            else:
                m.d.sync += base0.eq(p.src[wb:])
        req = mem.rd_req
        m.d.comb += [req.valid.eq(r_busy), req.payload.beats.eq(1),
                     req.payload.addr.eq(Cat(Const(0, wb), ((Mux(r_src, base1, base0) if is_ln
                                                             else base0) + r_off)[:waw]))]
        r_rows = Mux(r_phase, rows, 1) if has_params else rows
        with m.If(req.valid & req.ready):
            if is_ln:
                m.d.sync += r_src.eq(~r_src)
            with m.If(r_src) if is_ln else nullcontext():     # layernorm: after r's word
                m.d.sync += r_off.eq(r_off + 1)
                with m.If(r_off + 1 == (row_words if prow_words is row_words
                                        else Mux(r_phase, row_words, prow_words))):
                    m.d.sync += [r_off.eq(0), r_row.eq(r_row + 1), base0.eq(base0 + s_stride)]
                    if is_ln:
                        m.d.sync += base1.eq(base1 + s2_stride)
                    with m.If(r_row == r_rows - 1):
                        m.d.sync += r_row.eq(0)
                        if fuse:
                            with m.If(~r_phase & fuse[1]):
                                m.d.sync += r_busy.eq(0)        # the engine feeds the rows
                            with m.Elif(~r_phase):
                                m.d.sync += [r_phase.eq(1), base0.eq(src)]
                            with m.Else():
                                m.d.sync += r_busy.eq(0)
                        elif has_params:
                            with m.If(~r_phase):
                                m.d.sync += [r_phase.eq(1), base0.eq(src)]
                                if is_ln:
                                    m.d.sync += base1.eq(src2)
                            with m.Else():
                                m.d.sync += r_busy.eq(0)
                        else:
                            m.d.sync += r_busy.eq(0)

        # Word queues, one per source; read data alternates between them.
        queues = []
        for i in range(sources):
            q = m.submodules[f"{name}_words{i}"] = Queue(shape=g.mem_width, depth=WORD_QUEUE)
            queues.append(q)
        which = Signal(name=f"{name}_which")
        rd = mem.rd_data
        u_phase = Signal(name=f"{name}_u_phase") if has_params else Const(1)   # 0 = parameters
        feed = None
        if fuse:        # the engine's write beats after the scale words
            feed = stream.Signature(write_request_layout(g)).flip().create(path=(name, "feed"))
            feeding = fuse[1] & u_phase
            q = queues[0].i
            m.d.comb += [q.payload.eq(Mux(feeding, feed.payload.data, rd.payload)),
                         q.valid.eq(Mux(feeding, feed.valid, rd.valid)),
                         rd.ready.eq(q.ready & ~feeding), feed.ready.eq(q.ready & feeding)]
        elif sources == 1:
            wiring.connect(m, wiring.flipped(rd), queues[0].i)
        else:
            for i, q in enumerate(queues):
                m.d.comb += [q.i.payload.eq(rd.payload), q.i.valid.eq(rd.valid & (which == i))]
            m.d.comb += rd.ready.eq(Mux(which, queues[1].i.ready, queues[0].i.ready))
            with m.If(rd.valid & rd.ready):
                m.d.sync += which.eq(~which)

        # Unpacker: word -> beats of ``lanes`` elements.
        per_word = MB // (lanes * ebytes)
        bits = lanes * ebytes * 8
        per_pword = MB // (lanes * pel)     # parameter beats a word
        whole = per_word == per_pword == 1  # a beat is a whole word: no position in it
        sub = Const(0) if whole else Signal(range(max(per_word, per_pword, 2)), name=f"{name}_sub")
        u_elem = Signal(lbits, name=f"{name}_u_elem")
        u_started = Signal(name=f"{name}_u_started")
        with m.If(go):
            m.d.sync += [u_elem.eq(0), u_started.eq(0)]
            if not whole:
                m.d.sync += sub.eq(0)
            if has_params:
                m.d.sync += u_phase.eq(0)
        valid = queues[0].o.valid
        for q in queues[1:]:
            valid = valid & q.o.valid
        pieces = [q.o.payload.word_select(sub, bits) if per_word > 1 else q.o.payload[:bits]
                  for q in queues]
        panel = self.config.gemm.panel
        last = u_elem + lanes == length
        if fuse:        # a block's row of the engine's results: panel columns
            last = u_elem + lanes == Mux(fuse[1] & u_phase, panel, length)
        x_ready = unit.x.ready
        w = 8 * ebytes      # bits of one input element (int8, int16 or int32)
        words_end = per_word - 1
        if pel != ebytes:   # parameter beats of 4 bytes a lane
            ppieces = [q.o.payload.word_select(sub, 8 * lanes * pel) if per_pword > 1
                       else q.o.payload[:8 * lanes * pel] for q in queues]
            words_end = Mux(u_phase, per_word - 1, per_pword - 1)

        def element(piece, lane):
            return piece[w * lane:w * lane + w].as_signed()
        if is_ln and lowbit:    # gamma|gamma2, beta|beta2; the second output's scale
            m.d.comb += [unit.params.valid.eq(valid & ~u_phase),
                         unit.params.payload.last.eq(last),
                         unit.params.payload.mult2.eq(mult), unit.params.payload.shift2.eq(shift)]
            for lane in range(lanes):
                m.d.comb += [unit.params.payload.gamma[lane].eq(element(ppieces[0], lane)),
                             unit.params.payload.gamma2[lane].eq(element(ppieces[0], lanes + lane)),
                             unit.params.payload.beta[lane].eq(element(ppieces[1], lane)),
                             unit.params.payload.beta2[lane].eq(element(ppieces[1], lanes + lane))]
            m.d.comb += [unit.x.valid.eq(valid & u_phase), unit.r.valid.eq(valid & u_phase)]
            for lane in range(lanes):
                m.d.comb += [unit.x.payload.data[lane].eq(element(pieces[0], lane)),
                             unit.r.payload[lane].eq(element(pieces[1], lane))]
            step = Mux(u_phase, x_ready, unit.params.ready) & valid
        elif has_params and not is_ln:      # the low-bit GELU: scale words, then rows
            m.d.comb += [unit.scales.valid.eq(valid & ~u_phase), unit.scales.payload.last.eq(last),
                         unit.x.valid.eq(valid & u_phase)]
            if fuse:    # the engine's order: the channels of the block's columns
                at = self._block_walk(m, f"{name}_u", go, length,
                                      step=x_ready & valid & u_phase & fuse[1], row_end=last)
                shift_bits = lanes.bit_length() - 1
                m.d.comb += [unit.seek.eq(fuse[1]),
                             unit.seek_channel.eq((at["n0"] + u_elem) >> shift_bits)]
            for lane in range(lanes):
                m.d.comb += [unit.scales.payload.words[lane].eq(ppieces[0][32 * lane:32 * lane + 32]),
                             unit.x.payload.data[lane].eq(element(pieces[0], lane))]
            step = Mux(u_phase, x_ready, unit.scales.ready) & valid
        elif is_ln:
            m.d.comb += [unit.params.valid.eq(valid & ~u_phase),
                         unit.params.payload.last.eq(last)]
            for lane in range(lanes):
                m.d.comb += [unit.params.payload.gamma[lane].eq(element(pieces[0], lane)),
                             unit.params.payload.beta[lane].eq(element(pieces[1], lane))]
            m.d.comb += [unit.x.valid.eq(valid & u_phase), unit.r.valid.eq(valid & u_phase)]
            for lane in range(lanes):
                m.d.comb += [unit.x.payload.data[lane].eq(element(pieces[0], lane)),
                             unit.r.payload[lane].eq(element(pieces[1], lane))]
            step = Mux(u_phase, x_ready, unit.params.ready) & valid
        else:
            m.d.comb += unit.x.valid.eq(valid)
            for lane in range(lanes):
                m.d.comb += unit.x.payload.data[lane].eq(element(pieces[0], lane))
            if is_sm:
                m.d.comb += [unit.x.payload.multiplier.eq(mult), unit.x.payload.shift.eq(shift)]
                if self.config.softmax.mask:   # padding: columns >= valid (0: none)
                    masked = [(valid_len != 0) & (u_elem + lane >= valid_len) for lane in range(lanes)]
                    m.d.comb += unit.x.payload.mask.eq(Cat(*masked))
            step = x_ready & valid
        m.d.comb += unit.x.payload.last.eq(last)
        with m.If(step):
            m.d.sync += u_elem.eq(u_elem + lanes)
            if whole:
                m.d.comb += [q.o.ready.eq(1) for q in queues]
            else:
                m.d.sync += sub.eq(sub + 1)
                with m.If(sub == words_end):
                    m.d.sync += sub.eq(0)
                    m.d.comb += [q.o.ready.eq(1) for q in queues]
            with m.If(last):
                m.d.sync += u_elem.eq(0)
                if not whole:
                    m.d.sync += sub.eq(0)
                if has_params:
                    m.d.sync += u_phase.eq(1)
        start = Signal(name=f"{name}_start")
        m.d.comb += start.eq(step & u_phase & ~u_started & ~fuse[1] if fuse
                             else step & u_phase & ~u_started)
        with m.If(start):
            m.d.sync += u_started.eq(1)

        # Writer: each output beat is one write of ``lanes * obytes`` bytes.
        w_row = Signal(16, name=f"{name}_w_row")
        w_addr = register(aw, f"{name}_w_addr", reset_less=False)
        w_off = Signal(lbits, name=f"{name}_w_off")
        with m.If(go):
            m.d.sync += [w_row.eq(0), w_addr.eq(p.dst), w_off.eq(0)]
        y = unit.y
        wr = mem.wr_req
        out_elements = []
        for lane in range(lanes):
            v = y.payload.data[lane]
            if is_sm and obytes == 1:   # uint8 p -> int8 min((p + 1) >> 1, 127)
                half = (v + 1) >> 1
                v = Mux(half > 127, 127, half)[:8]
            out_elements.append(v[:8 * obytes])   # int16 p (Q1.15) is at most 32767: as is
        offset = w_off if obytes == 1 else Cat(Const(0, obytes.bit_length() - 1), w_off)
        second = is_ln and lowbit   # two writes a beat: int16 out at dst, int8 out2 at dst2
        if second:
            w_addr2 = register(aw, f"{name}_w_addr2", reset_less=False)
            d2_stride = register(aw, f"{name}_dst2_stride", reset_less=False)
            w_half = Signal(name=f"{name}_w_half")
            with m.If(go):
                m.d.sync += [w_addr2.eq(p.dst2), d2_stride.eq(p.dst2_stride), w_half.eq(0)]
            with m.If(wr.valid & wr.ready):
                m.d.sync += w_half.eq(~w_half)
            narrow = Cat(*[y.payload.data2[lane] for lane in range(lanes)])
            m.d.comb += [wr.payload.addr.eq(Mux(w_half, w_addr2 + w_off, w_addr + offset)),
                         wr.payload.data.eq(Mux(w_half, narrow, Cat(*out_elements))),
                         wr.payload.bytes.eq(Mux(w_half, lanes, lanes * obytes)),
                         wr.valid.eq(y.valid), y.ready.eq(wr.ready & w_half)]
        else:
            m.d.comb += [wr.payload.addr.eq(w_addr + offset), wr.payload.data.eq(Cat(*out_elements)),
                         wr.payload.bytes.eq(lanes * obytes), wr.valid.eq(y.valid),
                         y.ready.eq(wr.ready)]
        finish = Signal(name=f"{name}_finish")
        if fuse:
            row_end = w_off + lanes == Mux(fuse[1], panel, length)
            to = self._block_walk(m, f"{name}_w", go, length, step=y.valid & y.ready & fuse[1],
                                  row_end=row_end, base=(p.dst, d_stride))
            m.d.comb += wr.payload.addr.eq(Mux(fuse[1], to["addr"], w_addr) + offset)
        with m.If(y.valid & y.ready):
            m.d.sync += w_off.eq(w_off + lanes)
            with m.If(row_end if fuse else w_off + lanes == length):
                m.d.sync += [w_off.eq(0), w_row.eq(w_row + 1), w_addr.eq(w_addr + d_stride)]
                if second:
                    m.d.sync += w_addr2.eq(w_addr2 + d2_stride)
                if fuse:
                    with m.If(fuse[1]):
                        m.d.comb += finish.eq(to["done"])
                    with m.Elif(w_row == rows - 1):
                        m.d.comb += finish.eq(1)
                else:
                    with m.If(w_row == rows - 1):
                        m.d.comb += finish.eq(1)
        out = {"mem": mem, "start": start, "finish": finish}
        if fuse:
            loaded = Signal(name=f"{name}_loaded")
            m.d.comb += loaded.eq(u_phase)
            out.update(feed=feed, loaded=loaded)
        return out

    def _block_walk(self, m, name, go, length, *, step, row_end, base=None):
        """The engine's order of a command's results (``rows`` x ``length``,
        the command's M and N; blocks of ``block_rows`` rows by ``panel``
        columns, the columns' blocks inner; ``length`` is N after ``go``) one
        ``step`` at a time, a block's row ending at ``row_end``. Returns
        ``n0`` (the block's first column), ``done`` (this step ends the
        matrix) and, with ``base``
        (``(address, row stride)`` at ``go``), ``addr``: the step's row's
        address of the block's first column."""
        g = self.config.gemm
        P, R = g.panel, g.block_rows
        p = self.cmd.payload
        r = Signal(range(R), name=f"{name}_r")
        n0 = Signal(16, name=f"{name}_n0")
        m_left = Signal(16, name=f"{name}_m_left")    # rows from the block's first on
        block_end = row_end & ((r == R - 1) | (r == m_left - 1))
        n_end = block_end & (n0 + P == length)
        done = n_end & (m_left <= R)
        with m.If(go):
            m.d.sync += [r.eq(0), n0.eq(0), m_left.eq(p.rows)]
        with m.If(step & row_end):
            m.d.sync += r.eq(r + 1)
            with m.If(block_end):
                m.d.sync += [r.eq(0), n0.eq(n0 + P)]
                with m.If(n_end):
                    m.d.sync += [n0.eq(0), m_left.eq(m_left - R)]
        out = {"n0": n0, "done": done}
        if base is not None:
            aw = g.addr_width
            addr, block, first = (Signal(aw, name=f"{name}_{what}")
                                  for what in ("addr", "block", "first"))
            start, stride = base
            with m.If(go):
                m.d.sync += [addr.eq(start), block.eq(start), first.eq(start)]
            with m.If(step & row_end):
                m.d.sync += addr.eq(addr + stride)
                with m.If(block_end):
                    m.d.sync += [addr.eq(block + P), block.eq(block + P)]
                    with m.If(n_end):
                        down = first + stride * R
                        m.d.sync += [addr.eq(down), block.eq(down), first.eq(down)]
            out["addr"] = addr
        return out

