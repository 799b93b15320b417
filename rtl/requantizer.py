"""The writer's requantizer: pipelined ``clamp((x * mult + 2**(shift-1)) >>
shift)`` lanes (see :mod:`bertforge.rtl.engine`)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .arith import MULTIPLIER_CELLS, mult18x18d
from .params import check_bool, check_choice, check_int
from .stream import clamp, delay, register

__all__ = ["Requantizer"]


class Requantizer(wiring.Component):
    """``lanes`` pipelined requantizers: ``y = clamp((x * mult + 2**(shift-1))
    >> shift)`` to int8, or to int16 with ``wide``
    (:func:`bertforge.rtl.fixed.requantize`; ``x`` signed 32-bit, ``mult``
    unsigned 32-bit, ``shift`` 0..63; ``wide`` for all lanes),
    :data:`LATENCY` cycles after the inputs.

    No combinational 32 x 32 multiply: the operands are registered, then
    the product is four registered 16 x 16 unsigned products (one DSP
    block each on iCE40 and ECP5: :data:`DSPS_PER_LANE`; ``cell="ecp5"``
    instantiates ``MULT18X18D`` blocks whose own input and output registers
    are those two stages), registered again in the fabric, summed in two
    registered steps; then the rounding add, the shift by whole bytes, the
    shift by the rest of ``shift``, and the saturation, each registered. A pure
    pipeline: it takes inputs every cycle and has no valid or ready (the
    caller delays its own flags by ``LATENCY``).

    ``compact=True`` (for small FPGAs): the same product, then no 67-bit
    rounding add (``(p + 2**(s-1)) >> s = (p >> s) + p[s-1]``) and no
    67-bit shifters: the shift by whole bytes keeps a 33-bit window and
    whether the rest is sign (beyond it, every output saturates), the
    shift by the rest adds the rounding bit; ``y`` is 32 bits, and with
    ``full`` (for all lanes) it is the 32-bit result unclamped (the caller
    passes int32 values with ``mult = 1``, ``shift = 0``). Same
    ``LATENCY``."""

    #: Cycles from the inputs to ``y``.
    LATENCY = 9
    #: 16 x 16 multipliers per lane.
    DSPS_PER_LANE = 4

    def __init__(self, lanes, *, compact=False, cell="inferred"):
        self.lanes = check_int("lanes", lanes)
        self.compact = check_bool("compact", compact)
        self.cell = check_choice("cell", cell, MULTIPLIER_CELLS)
        full = {"full": In(1)} if compact else {}
        super().__init__({
            "x": In(signed(32)).array(lanes),
            "mult": In(32).array(lanes),
            "shift": In(6).array(lanes),
            "wide": In(1),
            **full,
            "y": Out(signed(32 if compact else 16)).array(lanes),
        })

    def elaborate(self, platform):
        m = Module()
        # The saturation stage's flags (the compact one saturates a stage earlier).
        wide = delay(m, self.wide, self.LATENCY - 1 - self.compact, "q_wide")
        if self.compact:
            full = delay(m, self.full, self.LATENCY - 2, "q_full")
        for lane in range(self.lanes):
            ports = (self.x[lane], self.mult[lane], self.shift[lane])
            if self.compact:
                self._compact_lane(m, *ports, wide, full, self.y[lane], f"q{lane}")
            else:
                self._lane(m, *ports, wide, self.y[lane], f"q{lane}")
        return m

    def _product(self, m, x, mult, shift, name):
        """Stages 1-5: the signed 66-bit ``x * mult`` and ``shift``, registered."""
        reg = _lane_register(name)
        # x * mult = xu * mult - 2**32 * mult (x < 0), xu = x as unsigned.
        xu = x.as_unsigned()
        halves = {"ll": (xu[:16], mult[:16]), "lh": (xu[:16], mult[16:]),
                  "hl": (xu[16:], mult[:16]), "hh": (xu[16:], mult[16:])}
        p = {}
        for key, (a, b) in halves.items():
            if self.cell == "ecp5":     # the block's input and output registers
                p[key] = Signal(32, name=f"{name}_p{key}")
                mult18x18d(m, a, b, p[key], f"{name}_{key}")
                continue
            a_reg, b_reg = reg(16, f"{key}_a"), reg(16, f"{key}_b")
            p[key] = reg(32, f"p{key}")
            m.d.sync += [a_reg.eq(a), b_reg.eq(b), p[key].eq(a_reg * b_reg)]
        # Each product is registered once more in the fabric: the route out
        # of a multiplier placed far away (every DSP block in use at 16 x 16)
        # ends at a flip-flop, not in the adders below.
        p = {key: delay(m, product, 1, f"{name}_p{key}_d") for key, product in p.items()}
        neg = delay(m, Mux(x[31], mult, 0), 3, f"{name}_neg")
        s1 = delay(m, shift, 3, f"{name}_s1")
        low = reg(50, "low")            # the products below bit 32
        high = reg(signed(34), "high")  # and from bit 32 up
        s2 = reg(6, "s2")
        m.d.sync += [low.eq(p["ll"] + ((p["lh"] + p["hl"]) << 16)),
                     high.eq(p["hh"] - neg), s2.eq(s1)]
        product = reg(signed(66), "product")
        s3 = reg(6, "s3")
        m.d.sync += [product.eq(low + (high << 32)), s3.eq(s2)]
        return product, s3

    def _lane(self, m, x, mult, shift, wide, y, name):
        reg = _lane_register(name)
        product, s3 = self._product(m, x, mult, shift, name)
        half = Signal(64, name=f"{name}_half")       # 2**(shift-1), 0 for shift 0
        m.d.comb += half.eq((Const(1, 64) << s3)[1:65])
        rounded = reg(signed(67), "rounded")
        s4 = reg(6, "s4")
        m.d.sync += [rounded.eq(product + half), s4.eq(s3)]
        coarse = reg(signed(67), "coarse")    # shifted by the multiple of 8
        s5 = reg(3, "s5")
        m.d.sync += [coarse.eq(rounded >> Cat(Const(0, 3), s4[3:])), s5.eq(s4[:3])]
        fine = reg(signed(67), "fine")        # shifted by the rest
        m.d.sync += fine.eq(coarse >> s5)
        m.d.sync += y.eq(Mux(wide, clamp(fine, 16), clamp(fine, 8)))

    def _compact_lane(self, m, x, mult, shift, wide, full, y, name):
        reg = _lane_register(name)
        product, s3 = self._product(m, x, mult, shift, name)
        # Stage 6: p >> (8 * bytes) in a 33-bit window, whether it fits
        # there (the bits above are all sign), and the rounding bit p[s-1].
        window = reg(signed(33), "window")
        fits, sign, round_bit = reg(1, "fits"), reg(1, "sign"), reg(1, "round")
        s4 = reg(3, "s4")
        fits_at = Cat(*[(product[8 * k + 32:].all() | ~product[8 * k + 32:].any())
                        if 8 * k + 32 < len(product) else Const(1) for k in range(8)])
        m.d.sync += [window.eq((product >> Cat(Const(0, 3), s3[3:]))[:33]),
                     fits.eq(fits_at.bit_select(s3[3:], 1)), sign.eq(product[-1]),
                     round_bit.eq(Cat(Const(0, 1), product).bit_select(s3, 1)), s4.eq(s3[:3])]
        # Stage 7: shifted by the rest, rounded; a value past the window
        # becomes the 34-bit bound of its sign (which saturates either width).
        fine = reg(signed(34), "fine")
        m.d.sync += fine.eq(Mux(fits, (window >> s4) + round_bit,
                                Mux(sign, -(1 << 33), (1 << 33) - 1)))
        # Stage 8: saturated.
        clamped = reg(signed(32), "clamped")
        m.d.sync += clamped.eq(Mux(full, fine[:32].as_signed(),
                                   Mux(wide, clamp(fine, 16), clamp(fine, 8))))
        # Stage 9: the output register.
        m.d.sync += y.eq(clamped)


def _lane_register(name):
    """``reg(shape, what)``: a pipeline register ``{name}_{what}`` of a requantizer lane."""
    return lambda shape, what: register(shape, f"{name}_{what}")
