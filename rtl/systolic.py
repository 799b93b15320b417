"""Systolic GEMM array, output stationary (OS) or weight stationary (WS)."""

from dataclasses import dataclass
from functools import reduce

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .arith import MULTIPLIER_CELLS, Bf16Arith, SaturatingIntArith
from .params import Config, check_choice, check_instance, check_int, check_operands, check_size
from .stream import Queue, delay, row_layout, stage
from .systolic_pe import OutputStationaryPE, WeightStationaryPE
from bertforge.rtl.errors import ParameterError

__all__ = ["SystolicConfig", "SystolicArray", "QUEUE_LATENCY", "ARITHS", "pe_arith", "check_arith",
           "check_multiply"]

#: Cycles from a row entering the output queue to it being offered on ``c``.
QUEUE_LATENCY = 2
#: Number formats of ``SystolicConfig.arith`` (``"int"``: integers of ``width`` bits).
ARITHS = ("int", "int8", "int16", "bf16")


def check_arith(config):
    """Check ``config.arith`` (one of :data:`ARITHS`) and normalise a frozen
    ``config``: any format but ``"int"`` sets the width, and ``"int8"`` or
    ``"int16"`` become ``"int"``."""
    check_choice("arith", config.arith, ARITHS)
    if config.arith != "int":   # frozen: the format sets the width
        object.__setattr__(config, "width", 8 if config.arith == "int8" else 16)
    if config.arith in ("int8", "int16"):
        object.__setattr__(config, "arith", "int")


@dataclass(frozen=True, kw_only=True)
class SystolicConfig(Config):
    """Parameters of a :class:`SystolicArray`.

    Parameters
    ----------
    rows, cols : int
        Array size (any positive sizes).
    dataflow : "os" or "ws"
        Output stationary or weight stationary.
    width : 8 or 16
        Signed operand width (set by ``arith``).
    acc_width : int
        Signed accumulator width, ``2 * width`` to 48. Accumulation saturates.
        32 (binary32) for bf16.
    max_dsp : int or None
        At most this many PEs (in row-major order) multiply with ``*``, which
        synthesis maps to DSP blocks; the others build the product from logic.
        ``None``: all use ``*``. Set it to the FPGA's DSP count.
    multiply_stages : 1, 2 or 3
        Register stages of a PE's multiply, each one more cycle of latency.
        2 registers the operands too (the DSP blocks' input registers), 3
        adds a register after the multiplier, so that the routes into and
        out of each DSP block have a cycle each.
    multiplier_cell : "inferred" or "ecp5"
        ``"ecp5"`` instantiates ECP5 ``MULT18X18D`` blocks with their input and
        output registers (needs ``multiply_stages`` 2 or 3), for ECP5 boards:
        yosys does not pack fabric registers into them.
    arith : "int", "int8", "int16" or "bf16"
        The PE's number format. ``"int"`` (default): signed integers of
        ``width`` bits with saturating ``acc_width``-bit sums
        (:class:`~bertforge.rtl.arith.SaturatingIntArith`); ``"int8"`` and
        ``"int16"`` set ``width`` and are stored as ``"int"``, so one design
        has one config. ``"bf16"``: bfloat16 operands, exact products,
        binary32 sums rounded to nearest even at every add, subnormals
        flushed (:class:`~bertforge.rtl.arith.Bf16Arith`); ``width`` becomes
        16, ``acc_width`` must be 32. :attr:`number_format` names the
        format in full.
    """

    rows: int = 4
    cols: int = 4
    dataflow: str = "os"
    width: int = 8
    acc_width: int = 32
    max_dsp: int = None
    multiply_stages: int = 1
    multiplier_cell: str = "inferred"
    arith: str = "int"

    LATE_FIELDS = ("max_dsp", "multiply_stages", "multiplier_cell", "arith")

    def __post_init__(self):
        check_size(self, 256)
        check_choice("dataflow", self.dataflow, ("os", "ws"))
        check_arith(self)
        check_operands(self, 48)
        if self.arith == "bf16" and self.acc_width != 32:
            raise ParameterError(f"acc_width must be 32 with arith 'bf16' (sums are binary32), "
                                 f"not {self.acc_width!r}")
        if self.max_dsp is not None:
            check_int("max_dsp", self.max_dsp, minimum=0)
        check_multiply(self)

    @property
    def name(self):
        suffix = "_bf16" if self.arith == "bf16" else ""
        return f"systolic_{self.rows}x{self.cols}_{self.dataflow}{suffix}"

    @property
    def number_format(self):
        """``"int8"``, ``"int16"`` or ``"bf16"``."""
        return "bf16" if self.arith == "bf16" else f"int{self.width}"

    @property
    def operand_shape(self):
        """An operand element on ``a``/``b``: ``signed(width)``, or bf16 bits."""
        return unsigned(16) if self.arith == "bf16" else signed(self.width)

    @property
    def result_shape(self):
        """A result element on ``c``: ``signed(acc_width)``, or binary32 bits."""
        return unsigned(32) if self.arith == "bf16" else signed(self.acc_width)

    @property
    def queue_depth(self):
        """Rows of result the output queue holds (enough to never throttle a
        ready consumer)."""
        if self.dataflow == "os":
            return self.cols + 2 * self.rows + 8
        return self.rows + self.cols + 8


def check_multiply(config):
    """Validate ``config.multiply_stages`` (1, 2 or 3) and
    ``config.multiplier_cell`` (``"ecp5"`` needs 2 or 3 stages)."""
    check_choice("multiply_stages", config.multiply_stages, (1, 2, 3))
    check_choice("multiplier_cell", config.multiplier_cell, MULTIPLIER_CELLS)
    if config.multiplier_cell == "ecp5" and config.multiply_stages == 1:
        raise ParameterError("multiplier_cell 'ecp5' uses the MULT18X18D's input and output "
                             "registers: set multiply_stages to 2 or 3")


def pe_arith(config, *, logic=False, terms=None):
    """The PE arithmetic of ``config``: multiplies on DSP blocks (``*`` or
    the ``multiplier_cell``), or with ``logic`` from logic; integer sums of
    at most ``terms`` products (see :class:`SaturatingIntArith`)."""
    stages = config.multiply_stages
    if config.arith == "bf16":
        if logic:
            return Bf16Arith(logic_multiplier=True, multiply_stages=stages)
        return Bf16Arith(multiply_stages=stages, cell=config.multiplier_cell)
    if logic:
        return SaturatingIntArith(config.width, config.acc_width, logic_multiplier=True,
                                  multiply_stages=stages, terms=terms)
    return SaturatingIntArith(config.width, config.acc_width, multiply_stages=stages,
                              cell=config.multiplier_cell, terms=terms)


def output_queue(m, c, depth, rows):
    """The array's output queue on stream ``c``, with credits so that nothing
    in flight is ever dropped: ``(queue, credits, reserve)``; the caller
    drives ``reserve`` (rows a tile will push) when it takes a tile's last beat."""
    queue = m.submodules.queue = Queue(shape=c.payload.shape(), depth=depth)
    wiring.connect(m, queue.o, wiring.flipped(c))
    credits = Signal(range(depth + 1), init=depth)
    reserve = Signal(range(rows + 1))
    m.d.sync += credits.eq(credits - reserve + (c.valid & c.ready))
    return queue, credits, reserve


def os_readout(m, pes):
    """Read out an output-stationary grid: in each column at most one PE
    holds a fresh result per cycle (row i of a tile is ready one cycle after
    row i-1). Returns ``(push_valid, push_last, columns)``, each column as
    wide as the PEs' results."""
    rows, cols = len(pes), len(pes[0])
    columns = []
    for j in range(cols):
        picked = reduce(lambda x, y: x | y, [
            Mux(pes[i][j].result_valid, pes[i][j].result.as_unsigned(), 0)
            for i in range(rows)])
        col = Signal(pes[0][j].result.shape(), name=f"col{j}", reset_less=True)
        m.d.sync += col.eq(picked)
        columns.append(col)
    push_valid = Signal()
    push_last = Signal()
    m.d.sync += [
        push_valid.eq(reduce(lambda x, y: x | y,
                             [pes[i][cols - 1].result_valid for i in range(rows)])),
        push_last.eq(pes[rows - 1][cols - 1].result_valid),
    ]
    return push_valid, push_last, columns


def pass_right(m, pe, right, *more):
    """A PE's ``a``, ``valid``, ``last`` (and ``more``: names of further
    ``*_out`` / ``*_in`` pairs) to its right neighbour."""
    m.d.comb += [getattr(right, f"{name}_in").eq(getattr(pe, f"{name}_out"))
                 for name in ("a", "valid", "last", *more)]


def skew_rows(m, pes, port, data, **flags):
    """Feeds row i's first PE, ``i`` cycles late: ``data[i]`` on ``port``
    (registers ``skew_a<i>``) and each flag ``name=value`` on ``<name>_in``
    (registers ``skew_<initial><i>``, reset to 0)."""
    for i, row in enumerate(pes):
        m.d.comb += [getattr(row[0], port).eq(delay(m, data[i], i, f"skew_a{i}")), *(
            getattr(row[0], f"{name}_in").eq(delay(m, value, i, f"skew_{name[0]}{i}",
                                                   reset_less=False))
            for name, value in flags.items())]


def push_rows(m, queue, row_layout, push_valid, push_last, columns):
    """De-skew ``columns`` (column j is ``cols - 1 - j`` cycles early) into
    result rows and push them into the output queue."""
    cols = len(columns)
    row = Signal(row_layout)
    m.d.comb += row.last.eq(push_last)
    for j in range(cols):
        m.d.comb += row.data[j].eq(delay(m, columns[j], cols - 1 - j, f"deskew{j}"))
    m.d.comb += [queue.i.valid.eq(push_valid), queue.i.payload.eq(row)]


class SystolicArray(wiring.Component):
    """An R x C systolic array that computes GEMM tiles back to back.

    Output stationary (``dataflow="os"``): beat k carries column k of A on
    ``a`` (R elements) and row k of B on ``b`` (C elements); the beat with
    ``a.last`` ends the tile. The tile's R x C result ``A @ B`` leaves on ``c``
    one row per beat (row i = C accumulators), ``last`` on row R-1.

    Weight stationary (``dataflow="ws"``): ``b`` carries weight blocks W,
    R beats of C elements (row i of W), in order. ``a`` carries activation
    rows x (R elements); the beat with ``a.last`` is the last that uses the
    current block, the next beat uses the next block. Each activation row
    gives one result row ``x @ W`` (C accumulators) on ``c``, ``last`` on the
    result of the ``a.last`` beat. The next block loads while this one
    computes.

    Products are exact; sums saturate to ``signed(acc_width)``, accumulated in
    order (OS: k = 0 .. K-1, WS: i = 0 .. R-1). With ``arith="bf16"`` the
    elements of ``a`` and ``b`` are bf16 bit patterns and those of ``c``
    binary32 bit patterns; each sum, in the same order from +0, is rounded
    to binary32 at every add (:class:`~bertforge.rtl.arith.Bf16Arith`).

    Throughput and latency (ready consumer, operands always valid): a tile
    (OS) or weight block (WS) of K beats occupies ``max(K, R)`` cycles
    (``max(K, 2)`` for a 1-row WS array), so for K >= R tiles stream with no
    bubble. The last result row leaves ``R + C + S + 1 + QUEUE_LATENCY`` cycles
    (OS) or ``R + C + S + QUEUE_LATENCY`` cycles (WS) after the last beat of
    a tile is accepted; WS needs R weight beats before the first
    activation (``S``: ``multiply_stages``).
    :func:`bertforge.sim.systolic_cycles.systolic_cycles` is the exact model.

    Streams obey :mod:`amaranth.lib.stream` rules; ``ready`` may depend on
    ``valid``. A full output queue stops new input, never data in flight.

    Parameters
    ----------
    config : SystolicConfig
    sum_terms : int or None
        OS: the most products any one sum has, the most beats of a tile (a
        promise of the caller, as the serial GEMM engine's chunks of at
        most ``k_chunk`` are); ``None``: any number. WS needs no promise:
        a sum runs down a column from 0, ``rows`` products at most, and
        that bound is used whatever ``sum_terms`` says. Integer PEs whose
        sums of that many products fit in ``acc_width`` bits hold them in
        just the bits they need
        (:func:`~bertforge.rtl.arith.exact_sum_width`) and do not saturate,
        since they cannot overflow: the same results, sign-extended on
        ``c``, with fewer LUTs and flip-flops (with 32-bit sums: every int8 WS
        array; int16 ones of 2 rows or more reach ``2**31`` and saturate).
    """

    def __init__(self, config, *, sum_terms=None):
        self.config = check_instance("config", config, SystolicConfig)
        self.sum_terms = None if sum_terms is None else check_int("sum_terms", sum_terms)
        operand = config.operand_shape
        a_layout = row_layout(operand, config.rows)
        b_layout = data.ArrayLayout(operand, config.cols)
        c_layout = row_layout(config.result_shape, config.cols)
        super().__init__({
            "a": In(stream.Signature(a_layout)),
            "b": In(stream.Signature(b_layout)),
            "c": Out(stream.Signature(c_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        rows, cols = cfg.rows, cfg.cols
        # A WS sum: at most one product per row (the top PE adds to 0).
        terms = rows if cfg.dataflow == "ws" else self.sum_terms
        dsp, logic = pe_arith(cfg, terms=terms), pe_arith(cfg, logic=True, terms=terms)
        limit = rows * cols if cfg.max_dsp is None else cfg.max_dsp
        pe_class = OutputStationaryPE if cfg.dataflow == "os" else WeightStationaryPE
        pes = [[pe_class(dsp if i * cols + j < limit else logic, f"pe_{i}_{j}")
                for j in range(cols)] for i in range(rows)]
        for pe_row in pes:
            for pe in pe_row:
                pe.add_to(m)

        queue, credits, reserve = output_queue(m, self.c, cfg.queue_depth, rows)
        if cfg.dataflow == "os":
            push_valid, push_last, columns = self._elaborate_os(m, pes, credits, reserve)
        else:
            push_valid, push_last, columns = self._elaborate_ws(m, pes, credits, reserve)
        push_rows(m, queue, self.c.payload.shape(), push_valid, push_last, columns)
        return m

    def _elaborate_os(self, m, pes, credits, reserve):
        cfg = self.config
        rows, cols = cfg.rows, cfg.cols
        a, b = self.a, self.b

        # A tile's last beat may enter R cycles after the previous one, so
        # that its R result rows follow the previous tile's without overlap.
        since_last = Signal(range(rows + 1), init=rows)
        last_ok = (since_last == rows) & (credits >= rows)
        take = a.valid & b.valid & (~a.payload.last | last_ok)
        take_last = take & a.payload.last
        m.d.comb += [a.ready.eq(take), b.ready.eq(take), reserve.eq(Mux(take_last, rows, 0))]
        with m.If(take_last):
            m.d.sync += since_last.eq(1)
        with m.Elif(since_last != rows):
            m.d.sync += since_last.eq(since_last + 1)

        beat = stage(m, {"a": a.payload.data, "b": b.payload}, "in",
                     flags={"valid": take, "last": a.payload.last})

        skew_rows(m, pes, "a_in", beat["a"], valid=beat["valid"], last=beat["last"])
        for j in range(cols):
            m.d.comb += pes[0][j].b_in.eq(delay(m, beat["b"][j], j, f"skew_b{j}"))
        for i in range(rows):
            for j in range(cols):
                pe = pes[i][j]
                if j + 1 < cols:
                    pass_right(m, pe, pes[i][j + 1])
                if i + 1 < rows:
                    m.d.comb += pes[i + 1][j].b_in.eq(pe.b_out)

        return os_readout(m, pes)

    def _elaborate_ws(self, m, pes, credits, reserve):
        cfg = self.config
        rows, cols = cfg.rows, cfg.cols
        a, b = self.a, self.b

        # Weights: R beats fill the chain; the R-th commits it to the shadow
        # registers, once the previous block's swap has passed the last row.
        w_count = Signal(range(rows))
        shadow_full = Signal()
        since_swap = Signal(range(rows + 1), init=rows)
        commit_ok = ~shadow_full & (since_swap >= rows - 1)
        final_row = w_count == rows - 1
        b_take = b.valid & (~final_row | commit_ok)
        commit = b_take & final_row
        m.d.comb += b.ready.eq(b_take)
        with m.If(b_take):
            m.d.sync += w_count.eq(Mux(final_row, 0, w_count + 1))

        # Activations: the first beat of a block waits for a committed block.
        expect_first = Signal(init=1)
        a_take = a.valid & (credits != 0) & (~expect_first | shadow_full)
        swap = a_take & expect_first
        m.d.comb += [a.ready.eq(a_take), reserve.eq(a_take)]
        with m.If(a_take):
            m.d.sync += expect_first.eq(a.payload.last)
        with m.If(commit):
            m.d.sync += shadow_full.eq(1)
        with m.Elif(swap):
            m.d.sync += shadow_full.eq(0)
        with m.If(swap):
            m.d.sync += since_swap.eq(1)
        with m.Elif(since_swap != rows):
            m.d.sync += since_swap.eq(since_swap + 1)

        beat = stage(m, {"a": a.payload.data, "b": b.payload}, "in", flags={
            "valid": a_take, "last": a.payload.last, "swap": swap,
            "b_valid": b_take, "commit": commit})

        skew_rows(m, pes, "a_in", beat["a"], valid=beat["valid"], last=beat["last"],
                  swap=beat["swap"])
        for j in range(cols):
            w = delay(m, beat["b"][j], j, f"skew_b{j}")
            shift = delay(m, beat["b_valid"], j, f"skew_bv{j}", reset_less=False)
            commit_j = delay(m, beat["commit"], j, f"skew_c{j}", reset_less=False)
            m.d.comb += pes[rows - 1][j].w_in.eq(w)
            for i in range(rows):
                m.d.comb += [pes[i][j].w_shift.eq(shift), pes[i][j].w_commit.eq(commit_j)]
        for i in range(rows):
            for j in range(cols):
                pe = pes[i][j]
                if j + 1 < cols:
                    pass_right(m, pe, pes[i][j + 1], "swap")
                if i + 1 < rows:
                    below = pes[i + 1][j]
                    m.d.comb += [below.psum_in.eq(pe.psum_out), pe.w_in.eq(below.w_out)]

        corner = pes[rows - 1][cols - 1]
        push_valid = Signal()
        push_last = Signal()
        # The corner's sum is ready multiply_stages cycles after its flags.
        valid = delay(m, corner.valid_out, cfg.multiply_stages - 1, "corner_valid", reset_less=False)
        last = delay(m, corner.valid_out & corner.last_out, cfg.multiply_stages - 1,
                     "corner_last", reset_less=False)
        m.d.sync += [push_valid.eq(valid), push_last.eq(last)]
        return push_valid, push_last, [pes[rows - 1][j].psum_out for j in range(cols)]
