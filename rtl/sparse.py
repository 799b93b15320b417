"""N:M structured-sparse systolic array (output stationary).

Why output stationary: N:M sparsity shortens the reduction (K), and in an
OS array K is *time*: a tile of K dense beats becomes ``ceil(K/M) * N``
compressed beats, so the saving is a plain M/N in cycles for any N:M, with
the same array, skew and read-out as the dense OS array, and the pattern
can change from tile to tile with no reconfiguration. In a weight-stationary
array K is *space* (the R rows hold R weights of K): the activation rows
would have to widen to ``R * M / N`` elements, a width that changes with the
pattern, and the saving would only show as fewer, equally long weight
blocks. OS keeps one datapath for every pattern, which is what a run-time
N:M choice needs.

Each PE holds, instead of one activation, the *window* of its row's current
group (``m_max`` activations); it picks the activation its weight needs by
the weight's index (a ``m_max``:1 multiplexer), so a group of M activations
costs N MAC slots, not M. The window moves right with its flags, the
weight and its index move down, as ``a`` and ``b`` do in
:class:`~bertforge.rtl.systolic.SystolicArray`.
"""

from dataclasses import dataclass

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .params import Config, check_choice, check_instance, check_int, check_operands, check_size
from .stream import delay, stage
from .systolic import check_multiply, os_readout, output_queue, pe_arith, push_rows, skew_rows
from .systolic_pe import _PE

__all__ = ["SparseConfig", "SparseArray", "SparseOutputStationaryPE"]


@dataclass(frozen=True, kw_only=True)
class SparseConfig(Config):
    """Parameters of an :class:`SparseArray`.

    Parameters
    ----------
    rows, cols : int
        Array size (any positive sizes).
    m_max : 2, 4, 8 or 16
        Largest group size M; the activation window of each PE holds
        ``m_max`` values and weight indices are ``log2(m_max)`` bits.
    width : 8 or 16
        Signed operand width.
    acc_width : int
        Signed accumulator width, ``2 * width`` to 48. Accumulation saturates.
    max_dsp : int or None
        At most this many PEs (row-major) multiply with ``*`` (DSP blocks);
        the others build the product from logic. ``None``: all use ``*``.
    multiply_stages, multiplier_cell
        The PEs' multiply pipeline, as :class:`~bertforge.rtl.systolic.SystolicConfig`'s
        (with 2 or 3 stages a DSP PE registers the picked activation and the
        weight before the multiply, a logic PE the first level of its adder
        tree; ECP5 boards use ``"ecp5"`` and 3); each stage adds a cycle of
        latency.
    """

    rows: int = 4
    cols: int = 4
    m_max: int = 8
    width: int = 8
    acc_width: int = 32
    max_dsp: int = None
    multiply_stages: int = 1
    multiplier_cell: str = "inferred"

    LATE_FIELDS = ("max_dsp", "multiply_stages", "multiplier_cell")

    def __post_init__(self):
        check_size(self, 256)
        check_choice("m_max", self.m_max, (2, 4, 8, 16))
        check_operands(self, 48)
        if self.max_dsp is not None:
            check_int("max_dsp", self.max_dsp, minimum=0)
        check_multiply(self)

    @property
    def name(self):
        return f"sparse_{self.rows}x{self.cols}_m{self.m_max}"

    @property
    def arith(self):
        """``"int"``: the PEs' arithmetic (integer only; read by
        :func:`~bertforge.rtl.systolic.pe_arith`)."""
        return "int"

    @property
    def index_bits(self):
        return self.m_max.bit_length() - 1

    @property
    def queue_depth(self):
        """Rows of result the output queue holds (as the dense OS array)."""
        return self.cols + 2 * self.rows + 8


def a_layout(config):
    """``a`` beat: one group's window per row (``m_max`` activations each, the
    group's M values first) and ``last`` (this group ends the tile)."""
    operand = signed(config.width)
    return data.StructLayout({
        "data": data.ArrayLayout(data.ArrayLayout(operand, config.m_max), config.rows),
        "last": 1})


def b_layout(config):
    """``b`` beat: one compressed weight per column, its index in the group,
    and ``group_end`` (the last weight of the group)."""
    return data.StructLayout({
        "data": data.ArrayLayout(signed(config.width), config.cols),
        "index": data.ArrayLayout(unsigned(config.index_bits), config.cols),
        "group_end": 1})


def c_layout(config):
    return data.StructLayout({
        "data": data.ArrayLayout(signed(config.acc_width), config.cols), "last": 1})


class SparseOutputStationaryPE(_PE):
    """Sparse OS PE: ``acc += window[index] * w`` for each valid beat.

    The window (``m_max`` activations) and its flags move right, the weight
    and its index move down, one register each per PE. The product of the
    selected activation takes the arithmetic's ``multiply_stages`` registers
    (S), then is accumulated with saturation; a beat flagged ``last`` moves
    the sum to ``result`` (``result_valid`` pulses) and restarts ``acc`` at
    zero.

    Latency: ``result`` is valid ``S + 1`` cycles after the last beat is on
    the inputs, as in :class:`~bertforge.rtl.systolic_pe.OutputStationaryPE`.
    Like it, it is added to the array's module by ``add_to(m)``.
    """

    def __init__(self, arith, config, name):
        super().__init__(arith, name)
        op = arith.operand_shape
        window = data.ArrayLayout(op, config.m_max)
        index = unsigned(config.index_bits)
        sig = self._signal
        self.win_in, self.w_in, self.idx_in = sig("win_in", window), sig("w_in", op), sig("idx_in", index)
        self.valid_in, self.last_in = sig("valid_in"), sig("last_in")
        self.win_out, self.w_out, self.idx_out = sig("win", window), sig("w", op), sig("idx", index)
        self.valid_out, self.last_out = sig("valid", flag=True), sig("last", flag=True)
        self.result = sig("result", arith.acc_shape)
        self.result_valid = sig("result_valid", flag=True)

    def add_to(self, m):
        picked = self._signal("picked", self.arith.operand_shape)
        m.d.comb += picked.eq(self.win_in[self.idx_in])
        self._output_stationary(m, picked, self.w_in, [
            (self.win_out, self.win_in), (self.w_out, self.w_in), (self.idx_out, self.idx_in)])


class SparseArray(wiring.Component):
    """An R x C output-stationary array for N:M sparse weights.

    A tile computes ``A @ W`` (A: R x K activations, W: K x C weights, N:M
    sparse along K, any N:M with M <= ``m_max``, chosen per tile). Each group
    of M rows of K is one ``a`` beat (per row, the group's window of
    activations, padded to ``m_max``) and as many ``b`` beats as the group
    has compressed weights (N; each beat one weight per column plus its
    index in the group, ``group_end`` on the last). The ``a`` beat is held
    (stream rules) until the ``b`` beat with ``group_end`` is taken: a
    compressed beat is a handshake on ``b``; ``a`` completes once per group.
    ``a.last`` marks the tile's last group. Dense mode is N = M: M beats per
    group with indices 0..M-1. The R x C result leaves on ``c`` one row per
    beat (``last`` on row R-1), as from the dense OS array.

    Sums saturate to ``signed(acc_width)``, in beat order
    (:func:`bertforge.sim.sparse_golden.nm_tile_golden`).

    Throughput and latency (ready consumer, operands always valid): a tile
    of B compressed beats (``B = ceil(K/M) * N``) occupies ``max(B, R)``
    cycles, so N:M runs ``M/N`` times faster than dense once ``B >= R``; the
    last result row leaves ``R + C + S + 3`` cycles after the tile's last
    beat is accepted (S: ``multiply_stages``). :func:`bertforge.sim.sparse_cycles.sparse_cycles` is
    the exact model (the dense OS formula over compressed beats).

    Cost over the dense OS PE: the window register (``m_max * width`` bits
    instead of ``width``), the index register and a ``m_max``:1 multiplexer
    of ``width`` bits.

    Parameters
    ----------
    config : SparseConfig
    sum_terms : int or None
        The most compressed beats (products) any one tile has (a promise of
        the caller, as the sparse engine's chunks of at most ``k_chunk``
        are); ``None``: any number. Integer PEs whose sums of that many
        products fit in ``acc_width`` bits hold them in just the bits they
        need and do not saturate (as
        :class:`~bertforge.rtl.systolic.SystolicArray`'s ``sum_terms``).
    """

    def __init__(self, config, *, sum_terms=None):
        self.config = check_instance("config", config, SparseConfig, article="an")
        self.sum_terms = None if sum_terms is None else check_int("sum_terms", sum_terms)
        super().__init__({
            "a": In(stream.Signature(a_layout(config))),
            "b": In(stream.Signature(b_layout(config))),
            "c": Out(stream.Signature(c_layout(config))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        rows, cols = cfg.rows, cfg.cols
        terms = self.sum_terms
        dsp, logic = pe_arith(cfg, terms=terms), pe_arith(cfg, logic=True, terms=terms)
        limit = rows * cols if cfg.max_dsp is None else cfg.max_dsp
        pes = [[SparseOutputStationaryPE(dsp if i * cols + j < limit else logic, cfg, f"pe_{i}_{j}")
                for j in range(cols)] for i in range(rows)]
        for pe_row in pes:
            for pe in pe_row:
                pe.add_to(m)

        queue, credits, reserve = output_queue(m, self.c, cfg.queue_depth, rows)

        a, b = self.a, self.b
        # A tile's last beat may enter R cycles after the previous one's.
        since_last = Signal(range(rows + 1), init=rows)
        last_ok = (since_last == rows) & (credits >= rows)
        tile_last = a.payload.last & b.payload.group_end
        take = a.valid & b.valid & (~tile_last | last_ok)
        take_last = take & tile_last
        m.d.comb += [b.ready.eq(take), a.ready.eq(take & b.payload.group_end),
                     reserve.eq(Mux(take_last, rows, 0))]
        with m.If(take_last):
            m.d.sync += since_last.eq(1)
        with m.Elif(since_last != rows):
            m.d.sync += since_last.eq(since_last + 1)

        beat = stage(m, {"win": a.payload.data, "w": b.payload.data, "idx": b.payload.index},
                     "in", flags={"valid": take, "last": tile_last})
        in_win, in_w, in_idx = beat["win"], beat["w"], beat["idx"]
        in_valid, in_last = beat["valid"], beat["last"]

        skew_rows(m, pes, "win_in", in_win, valid=in_valid, last=in_last)
        for j in range(cols):
            m.d.comb += [pes[0][j].w_in.eq(delay(m, in_w[j], j, f"skew_b{j}")),
                         pes[0][j].idx_in.eq(delay(m, in_idx[j], j, f"skew_i{j}"))]
        for i in range(rows):
            for j in range(cols):
                pe = pes[i][j]
                if j + 1 < cols:
                    right = pes[i][j + 1]
                    m.d.comb += [right.win_in.eq(pe.win_out), right.valid_in.eq(pe.valid_out),
                                 right.last_in.eq(pe.last_out)]
                if i + 1 < rows:
                    below = pes[i + 1][j]
                    m.d.comb += [below.w_in.eq(pe.w_out), below.idx_in.eq(pe.idx_out)]

        push_valid, push_last, columns = os_readout(m, pes)
        push_rows(m, queue, self.c.payload.shape(), push_valid, push_last, columns)
        return m
