"""Processing elements of the systolic array, one class per dataflow.

Both PEs register the product before accumulating, so the critical path is
a multiply or an add (saturating, or a rounded binary32 add for bf16), never
both. The multiply takes
``arith.multiply_stages`` cycles (:meth:`SaturatingIntArith.registered_product`);
``S`` below is that number.

A PE is not an ``Elaboratable``: ``add_to(m)`` adds its logic to the array's
module, so a whole array is one Verilog module (one module per PE made
emission of a 32 x 32 array three times slower). Its signals are named
``<name>_<signal>``, e.g. ``pe_2_3_acc``.
"""

from amaranth.hdl import Mux, Signal

__all__ = ["OutputStationaryPE", "WeightStationaryPE"]


class _PE:
    def __init__(self, arith, name):
        self.arith = arith
        self.name = name

    def _signal(self, suffix, shape=1, *, flag=False):
        """A data register (no reset) or, with ``flag``, one that resets to 0."""
        return Signal(shape, name=f"{self.name}_{suffix}", reset_less=not flag)

    def _staged_product(self, m, a, b, valid, last):
        """``a * b`` (:meth:`registered_product`) and ``valid`` and ``last``
        delayed with it: ``(product, product_valid, product_last)``,
        ``multiply_stages`` cycles later."""
        arith = self.arith
        product = arith.registered_product(m, a, b, self.name)
        for stage in range(arith.multiply_stages):
            suffix = "" if stage == arith.multiply_stages - 1 else f"_s{stage}"
            valid_reg = self._signal("product_valid" + suffix, flag=True)
            last_reg = self._signal("product_last" + suffix, flag=True)
            m.d.sync += [valid_reg.eq(valid), last_reg.eq(last)]
            valid, last = valid_reg, last_reg
        return product, valid, last

    def _output_stationary(self, m, a, b, moving):
        """The output-stationary PEs' logic: ``a * b`` for each valid beat
        (:meth:`_staged_product`); ``total = arith.accumulate(acc, product)``
        (a saturating add, or a rounded binary32 add); a valid product is
        added to ``acc``, and a ``last`` one moves the sum to ``result``
        (``result_valid`` pulses) and restarts ``acc`` at zero. The
        ``moving`` ``(out, in)`` pairs and the valid and last flags are
        registered one cycle on."""
        arith = self.arith
        product, valid, last = self._staged_product(
            m, a, b, self.valid_in, self.valid_in & self.last_in)
        acc = self._signal("acc", arith.acc_shape, flag=True)
        total = self._signal("total", arith.acc_shape)
        m.d.sync += [*(out.eq(value) for out, value in moving),
                     self.valid_out.eq(self.valid_in),
                     self.last_out.eq(self.last_in),
                     self.result_valid.eq(last)]
        m.d.comb += total.eq(arith.accumulate(m, acc, product))
        with m.If(valid):
            m.d.sync += acc.eq(Mux(last, 0, total))
        with m.If(last):
            m.d.sync += self.result.eq(total)


class OutputStationaryPE(_PE):
    """Output-stationary PE: ``acc += a * b`` for each valid beat.

    ``a`` and its flags move right, ``b`` moves down, one register per PE.
    When a beat flagged ``last`` has been accumulated the sum moves to
    ``result`` (``result_valid`` pulses for one cycle) and ``acc`` restarts at
    zero, so the next tile accumulates while this one is read out.

    Latency: ``result`` is valid ``S + 1`` cycles after the last beat is on
    ``a_in``.
    """

    def __init__(self, arith, name):
        super().__init__(arith, name)
        op = arith.operand_shape
        self.a_in = self._signal("a_in", op)
        self.b_in = self._signal("b_in", op)
        self.valid_in = self._signal("valid_in")
        self.last_in = self._signal("last_in")
        self.a_out = self._signal("a", op)
        self.b_out = self._signal("b", op)
        self.valid_out = self._signal("valid", flag=True)
        self.last_out = self._signal("last", flag=True)
        self.result = self._signal("result", arith.acc_shape)
        self.result_valid = self._signal("result_valid", flag=True)

    def add_to(self, m):
        self._output_stationary(m, self.a_in, self.b_in,
                                [(self.a_out, self.a_in), (self.b_out, self.b_in)])


class WeightStationaryPE(_PE):
    """Weight-stationary PE: ``psum_out = psum_in + a * w`` with a held weight.

    ``a`` and its flags move right; partial sums move down. Weights have three
    registers: ``chain`` (a shift register up the column that receives the
    next block while this one computes), ``shadow`` (the whole next block,
    loaded from the chain in one cycle by ``w_commit``) and ``active``. A beat
    flagged ``swap`` (the first of a block) copies ``shadow`` to ``active`` as
    it passes and already uses the new weight.

    Latency: ``psum_out`` holds this PE's sum ``S + 1`` cycles after ``a_in``
    (the PE below gets its ``a_in`` one cycle later, so the sums line up for
    any ``S``).
    """

    def __init__(self, arith, name):
        super().__init__(arith, name)
        op = arith.operand_shape
        self.a_in = self._signal("a_in", op)
        self.valid_in = self._signal("valid_in")
        self.last_in = self._signal("last_in")
        self.swap_in = self._signal("swap_in")
        self.a_out = self._signal("a", op)
        self.valid_out = self._signal("valid", flag=True)
        self.last_out = self._signal("last", flag=True)
        self.swap_out = self._signal("swap", flag=True)
        self.psum_in = self._signal("psum_in", arith.acc_shape)
        self.psum_out = self._signal("psum", arith.acc_shape)
        self.w_in = self._signal("w_in", op)
        self.w_shift = self._signal("w_shift")
        self.w_commit = self._signal("w_commit")
        self.w_out = self._signal("chain", op)

    def add_to(self, m):
        arith = self.arith
        shadow = self._signal("shadow", arith.operand_shape)
        active = self._signal("active", arith.operand_shape)
        weight = self._signal("weight", arith.operand_shape)
        m.d.comb += weight.eq(Mux(self.swap_in, shadow, active))
        product = arith.registered_product(m, self.a_in, weight, self.name)
        m.d.sync += [
            self.a_out.eq(self.a_in),
            self.valid_out.eq(self.valid_in),
            self.last_out.eq(self.last_in),
            self.swap_out.eq(self.swap_in),
            active.eq(weight),
            self.psum_out.eq(arith.accumulate(m, self.psum_in, product)),
        ]
        with m.If(self.w_shift):
            m.d.sync += self.w_out.eq(self.w_in)
        with m.If(self.w_commit):
            m.d.sync += shadow.eq(self.w_in)
