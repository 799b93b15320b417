"""LayerNorm unit: exact integer statistics, integer rsqrt, fused residual
add, per-channel gamma/beta, int8 output, vectors back to back."""

import math
from dataclasses import dataclass

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .fixed import requantize
from .params import Config, check_bool, check_choice, check_instance, check_int, check_scale
from .rsqrt import RSQRT_FRAC, RSQRT_REL_ERROR, RSQRT_STAGES, RsqrtPipeline
from .stream import Queue, delay, register, row_layout, tree
from bertforge.rtl.errors import ParameterError

__all__ = ["LayerNormConfig", "LayerNorm", "LN_Z_FRAC", "LN_Z_WIDTH", "LN_STATS_LATENCY",
           "LN_OUT_LATENCY", "LN_MULT2_BITS", "LN_SHIFT2_BITS", "ln_z_bound", "ln_acc_range"]

#: Fraction bits of the normalized value ``z = (v - mean) / std``.
LN_Z_FRAC = 14
#: Width of ``z`` (signed): ``|z| <= sqrt(H - 1) < 64`` fits with margin.
LN_Z_WIDTH = LN_Z_FRAC + 8
#: Cycles from the handshake of a vector's last beat to the first cycle its
#: normalize pass may read it: 3 (sum, square, lane sum) + 1 (accumulate) +
#: 2 (H*S2, S1*S1; D) + RSQRT_STAGES + 2 (statistics queue).
LN_STATS_LATENCY = 3 + 1 + 2 + RSQRT_STAGES + 2
#: Register stages of the normalize pass, read to output register.
LN_OUT_LATENCY = 6
#: Bits of the second output's run-time multiplier and shift
#: (``second_output``; :func:`~bertforge.sim.fixed_golden.ratio_to_mult_shift`'s
#: default range).
LN_MULT2_BITS, LN_SHIFT2_BITS = 16, 6


def ln_z_bound(h_max):
    """The largest ``|z|`` (Q.14) vectors of at most ``h_max`` elements
    give: ``|v - mean| <= sqrt(H - 1) std`` (Samuelson's inequality) and R
    is ``1/sqrt(D)`` to :data:`~bertforge.rtl.rsqrt.RSQRT_REL_ERROR`, so
    ``|z| <= sqrt(H - 1) (1 + RSQRT_REL_ERROR) 2**14 + 1/2`` (+1 for the
    float's rounding): 1,048,451 for ``h_max = 4096``, inside
    :data:`LN_Z_WIDTH` (``2**21 - 1``), so ``z`` has no clamp."""
    return math.floor(math.sqrt(h_max - 1) * (1 + RSQRT_REL_ERROR) * 2 ** LN_Z_FRAC + 0.5) + 1


def ln_acc_range(config):
    """The range of ``acc = z * gamma + (beta << beta_shift)``: ``|z| <=
    ln_z_bound(h_max)`` and gamma, beta of ``param_width`` bits. The
    output's clamp is emitted only where this range, scaled by
    ``out_mult`` and shifted by ``out_shift``, leaves ``out_width``: with
    int16 gamma and beta (Q3.12) and ``out_shift`` 19 (``tiny16.toml``)
    ``|out| <= 9,152``, so an int16 output has no clamp there."""
    z_max, half = ln_z_bound(config.h_max), 1 << (config.param_width - 1)
    return (-z_max * half - (half << config.beta_shift),
            z_max * half + ((half - 1) << config.beta_shift))


@dataclass(frozen=True, kw_only=True)
class LayerNormConfig(Config):
    """Parameters of a :class:`LayerNorm`.

    Parameters
    ----------
    lanes : int
        Elements per beat (1 to 64).
    h_max : int
        Longest vector (a multiple of ``lanes``, at most 4096). The vector
        length ``H`` is set at run time by ``last``; it must be a multiple
        of ``lanes`` and at most ``h_max``.
    in_width : 8, 16 or 32
        Signed input width (``x`` and the residual ``r``): 8 for int8
        activations (the int8 encoder top), whose statistics then need no
        wider arms than int8 values reach.
    add_residual : bool
        Add a second input stream ``r`` (LayerNorm(x + r)).
    param_width : 8 or 16
        Signed width of gamma and beta.
    gamma_frac, beta_frac : int
        Fraction bits of gamma and beta (real gamma = ``gamma * 2**-gamma_frac``;
        ``beta_frac <= 14 + gamma_frac``).
    out_width : 8 or 16
        Signed output width (``out`` saturates to it).
    out_mult, out_shift : int
        Output scale: ``out = requantize(acc, out_mult, out_shift)`` with
        ``acc = z * gamma + (beta << (14 + gamma_frac - beta_frac))`` in units
        of ``2**-(14 + gamma_frac)``; one output LSB is
        ``2**(out_shift - 14 - gamma_frac) / out_mult`` in real units.
    second_output : bool
        A second, int8 output of the same normalized ``z`` with its own
        gamma and beta (``gamma2``, ``beta2``) and a run-time scale
        (``mult2``, ``shift2``, given with the parameters): ``out2 =
        requantize(z * gamma2 + (beta2 << beta_shift), mult2, shift2)``
        saturated to int8. A low-bit encoder's layernorm writes the int16
        residual and, beside it, the next GEMM's int8 (smoothed) operand.

    The defaults (int8 gamma Q2.6, beta Q4.4, output LSB 1/16) suit BERT.
    """

    lanes: int = 1
    h_max: int = 768
    in_width: int = 16
    add_residual: bool = True
    param_width: int = 8
    gamma_frac: int = 6
    beta_frac: int = 4
    out_width: int = 8
    out_mult: int = 1
    out_shift: int = 16
    second_output: bool = False

    LATE_FIELDS = ("second_output",)

    def __post_init__(self):
        check_int("lanes", self.lanes, maximum=64)
        check_int("h_max", self.h_max, maximum=4096)
        if self.h_max % self.lanes:
            raise ParameterError(f"h_max must be a multiple of lanes ({self.lanes}), not {self.h_max}")
        check_choice("in_width", self.in_width, (8, 16, 32))
        check_bool("add_residual", self.add_residual)
        check_choice("param_width", self.param_width, (8, 16))
        check_int("gamma_frac", self.gamma_frac, minimum=0, maximum=self.param_width - 1)
        check_int("beta_frac", self.beta_frac, minimum=0, maximum=LN_Z_FRAC + self.gamma_frac)
        check_choice("out_width", self.out_width, (8, 16))
        check_scale("out", self.out_mult, self.out_shift)
        check_bool("second_output", self.second_output)

    @property
    def name(self):
        return (f"layernorm_l{self.lanes}_h{self.h_max}_i{self.in_width}_p{self.param_width}"
                + ("_res" if self.add_residual else "")
                + ("" if self.out_width == 8 else f"_o{self.out_width}")
                + ("_two" if self.second_output else ""))

    @property
    def beats_max(self):
        return self.h_max // self.lanes

    @property
    def value_width(self):
        """Width of ``v = x + r`` (signed)."""
        return self.in_width + int(self.add_residual)

    @property
    def beta_shift(self):
        return LN_Z_FRAC + self.gamma_frac - self.beta_frac

    @property
    def out_scale(self):
        """Real value of one output LSB."""
        return 2.0 ** (self.out_shift - LN_Z_FRAC - self.gamma_frac) / self.out_mult

    @property
    def gamma_scale(self):
        return 2.0 ** -self.gamma_frac

    @property
    def beta_scale(self):
        return 2.0 ** -self.beta_frac

    @property
    def stats_depth(self):
        """Vectors in flight between ingest and normalize (statistics queue)."""
        return LN_STATS_LATENCY + 8

    @property
    def buffer_depth(self):
        """Beats the vector buffer holds: two longest vectors plus the
        statistics latency, so that ingest never waits on a ready consumer."""
        return 2 * self.beats_max + LN_STATS_LATENCY + 8


class LayerNorm(wiring.Component):
    """LayerNorm over vectors of run-time length ``H``, ``lanes`` elements
    per beat, with exact integer statistics.

    For a vector ``v = x + r`` (``r = 0`` without ``add_residual``) the unit
    computes ``S1 = sum v``, ``S2 = sum v**2`` and ``D = H*S2 - S1**2``
    (``H**2`` times the variance) exactly, ``(R, e) = rsqrt(D)``
    (:mod:`bertforge.rtl.rsqrt`, ``1/sqrt(D) ~ R * 2**-(20 + e)``), then per
    element ``z = requantize((H*v - S1) * R, 1, 20 + e - 14)`` (Q.14, equal
    to ``(v - mean) / std`` to 2e-6 relative), ``acc = z * gamma[i] +
    (beta[i] << beta_shift)`` and ``out = requantize(acc, out_mult,
    out_shift)`` (int8, or int16 with ``out_width = 16``). No epsilon: a
    constant vector (``D = 0``) gives ``z = 0``, so the output is beta. The input scale does not enter (the
    result does not depend on it).

    Ports: ``x`` (``data``: lanes x int, ``last`` on the vector's final
    beat), ``r`` (lanes x int, taken with ``x``, only with ``add_residual``),
    ``params`` (``gamma``, ``beta``: lanes each, ``last``: loads channels
    0, 1, ... of gamma and beta in order; load before the vectors that use
    them), ``y`` (``data``: lanes x int8 or int16, ``last``). With
    ``second_output``: ``params`` also carries ``gamma2``, ``beta2`` (lanes
    each, stored beside the first pair) and ``mult2``, ``shift2`` (the
    second output's scale, latched on every ``params`` beat), and ``y``
    also carries ``data2`` (lanes x int8) in the same beat; the timing is
    unchanged.

    Two passes per vector overlap across vectors: while vector k is
    normalized from the vector buffer (a FIFO of ``buffer_depth`` beats),
    vector k+1 streams in and its statistics are computed. With a ready
    consumer and back-to-back input, vector k (``n_k = H_k / lanes`` beats)
    starts leaving at ``max(a_k + LN_STATS_LATENCY, f_{k-1} + 1) +
    LN_OUT_LATENCY`` where ``a_k`` is the cycle its last beat is taken and
    ``f_{k-1}`` the cycle the previous vector's last beat was read; one beat
    per cycle after that. So throughput is one beat per cycle for any mix of
    lengths, and the latency of a vector is ``LN_STATS_LATENCY +
    LN_OUT_LATENCY`` (22) cycles after its last beat.
    :func:`bertforge.sim.layernorm_cycles.layernorm_cycles` is the exact model.

    Parameters
    ----------
    config : LayerNormConfig
    """

    def __init__(self, config):
        self.config = check_instance("config", config, LayerNormConfig)
        lanes = config.lanes
        value = signed(config.in_width)
        param = signed(config.param_width)
        params = {"gamma": data.ArrayLayout(param, lanes), "beta": data.ArrayLayout(param, lanes),
                  "last": 1}
        y = row_layout(signed(config.out_width), lanes)
        if config.second_output:
            params.update(gamma2=data.ArrayLayout(param, lanes), beta2=data.ArrayLayout(param, lanes),
                          mult2=unsigned(LN_MULT2_BITS), shift2=unsigned(LN_SHIFT2_BITS))
            y = data.StructLayout({"data": data.ArrayLayout(signed(config.out_width), lanes),
                                   "data2": data.ArrayLayout(signed(8), lanes), "last": 1})
        ports = {
            "x": In(stream.Signature(row_layout(value, lanes))),
            "params": In(stream.Signature(data.StructLayout(params))),
            "y": Out(stream.Signature(y)),
        }
        if config.add_residual:
            ports["r"] = In(stream.Signature(data.ArrayLayout(value, lanes)))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        lanes = cfg.lanes
        vw = cfg.value_width
        hbits = cfg.h_max.bit_length()
        # The widths of the statistics from their ranges: v**2 <= sq_max
        # (v = -2**(vw - 1)), so S2 <= h_max sq_max, |S1| <= h_max 2**(vw - 1),
        # and both H*S2 and S1**2 are at most h_max**2 sq_max.
        sq_max = 1 << (2 * (vw - 1))
        s1_shape = signed(((cfg.h_max << (vw - 1)) - 1).bit_length() + 1)
        s2_shape = unsigned((cfg.h_max * sq_max).bit_length())
        d_width = (cfg.h_max ** 2 * sq_max).bit_length()
        # D = H**2 var <= h_max**2 ((v_max - v_min) / 2)**2 (Popoviciu), below
        # the width of H*S2: the rsqrt normalizes D at its own width.
        d_bits = max((cfg.h_max ** 2 * ((1 << vw) - 1) ** 2 // 4).bit_length(), 1)
        rsqrt = RsqrtPipeline(d_bits)

        # ---- gamma / beta memory -------------------------------------------
        pw = cfg.param_width
        pairs = 2 if cfg.second_output else 1      # (gamma, beta) pairs per channel
        m.submodules.params_mem = params_mem = Memory(
            shape=unsigned(2 * pw * lanes * pairs), depth=cfg.beats_max, init=[])
        write = params_mem.write_port()
        read = params_mem.read_port(domain="sync")
        load_addr = Signal(range(cfg.beats_max), name="load_addr")
        m.d.comb += [
            self.params.ready.eq(1),
            write.addr.eq(load_addr),
            write.en.eq(self.params.valid),
        ]
        for lane in range(lanes):
            m.d.comb += write.data[2 * pw * lane:2 * pw * (lane + 1)].eq(
                Cat(self.params.payload.gamma[lane], self.params.payload.beta[lane]))
        if cfg.second_output:       # the second pair above the first; the scale latched
            top = 2 * pw * lanes
            for lane in range(lanes):
                m.d.comb += write.data[top + 2 * pw * lane:top + 2 * pw * (lane + 1)].eq(
                    Cat(self.params.payload.gamma2[lane], self.params.payload.beta2[lane]))
            mult2 = Signal(LN_MULT2_BITS, name="mult2")
            shift2 = Signal(LN_SHIFT2_BITS, name="shift2")
            with m.If(self.params.valid):
                m.d.sync += [mult2.eq(self.params.payload.mult2),
                             shift2.eq(self.params.payload.shift2)]
        with m.If(self.params.valid):
            with m.If(self.params.payload.last | (load_addr == cfg.beats_max - 1)):
                m.d.sync += load_addr.eq(0)
            with m.Else():
                m.d.sync += load_addr.eq(load_addr + 1)

        # ---- queues ----------------------------------------------------------
        beat_layout = data.StructLayout({"v": data.ArrayLayout(signed(vw), lanes), "last": 1})
        stats_layout = data.StructLayout({
            "s1": s1_shape, "h": unsigned(hbits), "r": unsigned(len(rsqrt.r)),
            "e": unsigned(len(rsqrt.e))})
        m.submodules.buffer = buffer = Queue(shape=beat_layout, depth=cfg.buffer_depth)
        m.submodules.stats = stats = Queue(shape=stats_layout, depth=cfg.stats_depth)

        # ---- ingest: sum, buffer, statistics ---------------------------------
        pending = Signal(range(cfg.stats_depth + 1), name="pending")
        pop = Signal(name="pop_stats")
        take = Signal(name="take")
        inputs_valid = self.x.valid & (self.r.valid if cfg.add_residual else 1)
        last_ok = ~self.x.payload.last | (pending < cfg.stats_depth)
        m.d.comb += [take.eq(inputs_valid & buffer.i.ready & last_ok), self.x.ready.eq(take)]
        if cfg.add_residual:
            m.d.comb += self.r.ready.eq(take)
        m.d.sync += pending.eq(pending + (take & self.x.payload.last) - pop)

        beat_in = Signal(beat_layout, name="beat_in")
        for lane in range(lanes):
            total = self.x.payload.data[lane]
            if cfg.add_residual:
                total = total + self.r.payload[lane]
            m.d.comb += beat_in.v[lane].eq(total)
        m.d.comb += [beat_in.last.eq(self.x.payload.last), buffer.i.payload.eq(beat_in),
                     buffer.i.valid.eq(take)]

        valid3 = delay(m, take, 3, "valid", reset_less=False)
        last3 = delay(m, take & self.x.payload.last, 3, "last", reset_less=False)
        v1 = [register(signed(vw), f"v1_{lane}") for lane in range(lanes)]
        v2 = [register(signed(vw), f"v2_{lane}") for lane in range(lanes)]
        sq2 = [register(unsigned(sq_max.bit_length()), f"sq2_{lane}") for lane in range(lanes)]
        for lane in range(lanes):
            m.d.sync += [v1[lane].eq(beat_in.v[lane]), v2[lane].eq(v1[lane]),
                         sq2[lane].eq(v1[lane] * v1[lane])]
        lane_sum = register(s1_shape, "lane_sum")
        lane_sq = register(unsigned((lanes * sq_max).bit_length()), "lane_sq")
        m.d.sync += [lane_sum.eq(tree(v2)), lane_sq.eq(tree(sq2))]

        acc1 = Signal(s1_shape, name="acc_s1")
        # the sums before a vector's last beat: at most h_max - lanes squares
        acc2 = Signal(unsigned(max((cfg.h_max - lanes) * sq_max, 1).bit_length()), name="acc_s2")
        count = Signal(range(cfg.beats_max + 1), name="acc_beats")
        sum1 = Signal(s1_shape, name="sum_s1")
        sum2 = Signal(s2_shape, name="sum_s2")
        m.d.comb += [sum1.eq(acc1 + lane_sum), sum2.eq(acc2 + lane_sq)]
        with m.If(valid3):
            with m.If(last3):
                m.d.sync += [acc1.eq(0), acc2.eq(0), count.eq(0)]
            with m.Else():
                m.d.sync += [acc1.eq(sum1), acc2.eq(sum2), count.eq(count + 1)]
        s1_4, s2_4 = register(s1_shape, "s1_4"), register(s2_shape, "s2_4")
        h_4 = register(unsigned(hbits), "h_4")
        valid4 = Signal(name="valid4")
        m.d.sync += [s1_4.eq(sum1), s2_4.eq(sum2), h_4.eq((count + 1) * lanes),
                     valid4.eq(valid3 & last3)]

        # D = H*S2 - S1**2, then rsqrt; S1 and H ride along.
        hs2, s1sq = register(unsigned(d_width), "hs2"), register(unsigned(d_width), "s1sq")
        s1_5, h_5 = register(s1_shape, "s1_5"), register(unsigned(hbits), "h_5")
        d6 = register(unsigned(d_bits), "d6")
        s1_6, h_6 = register(s1_shape, "s1_6"), register(unsigned(hbits), "h_6")
        valid5, valid6 = Signal(name="valid5"), Signal(name="valid6")
        m.d.sync += [hs2.eq(h_4 * s2_4), s1sq.eq((s1_4 * s1_4).as_unsigned()), s1_5.eq(s1_4),
                     h_5.eq(h_4), valid5.eq(valid4),
                     d6.eq((hs2 - s1sq)[:d_bits]), s1_6.eq(s1_5), h_6.eq(h_5), valid6.eq(valid5)]
        rsqrt.add_to(m)
        m.d.comb += rsqrt.d.eq(d6)
        s1_c = delay(m, s1_6, RSQRT_STAGES, "s1_r")
        h_c = delay(m, h_6, RSQRT_STAGES, "h_r")
        valid_c = delay(m, valid6, RSQRT_STAGES, "valid_r", reset_less=False)
        stats_in = Signal(stats_layout, name="stats_in")
        m.d.comb += [stats_in.s1.eq(s1_c), stats_in.h.eq(h_c), stats_in.r.eq(rsqrt.r),
                     stats_in.e.eq(rsqrt.e), stats.i.payload.eq(stats_in), stats.i.valid.eq(valid_c)]

        # ---- normalize: stall-all pipeline of LN_OUT_LATENCY stages -----------
        head = stats.o.payload
        beat = buffer.o.payload
        valid = [Signal(name=f"out_valid{k}") for k in range(1, LN_OUT_LATENCY + 1)]
        last = [Signal(name=f"out_last{k}") for k in range(1, LN_OUT_LATENCY + 1)]
        advance = Signal(name="advance")
        go = Signal(name="go")
        m.d.comb += [
            advance.eq(~valid[-1] | self.y.ready),
            go.eq(advance & stats.o.valid & buffer.o.valid),
            buffer.o.ready.eq(go),
            pop.eq(go & beat.last),
            stats.o.ready.eq(pop),
            self.y.valid.eq(valid[-1]),
            self.y.payload.last.eq(last[-1]),
        ]
        read_addr = Signal(range(cfg.beats_max), name="read_addr")
        m.d.comb += [read.addr.eq(read_addr), read.en.eq(advance)]
        with m.If(go):
            m.d.sync += read_addr.eq(Mux(beat.last | (read_addr == cfg.beats_max - 1), 0, read_addr + 1))
        with m.If(advance):
            m.d.sync += [valid[0].eq(go), last[0].eq(beat.last)]
            for k in range(1, LN_OUT_LATENCY):
                m.d.sync += [valid[k].eq(valid[k - 1]), last[k].eq(last[k - 1])]

        r1 = register(unsigned(len(rsqrt.r)), "n_r1")
        sh_max = ((d_bits - 1) >> 1) + RSQRT_FRAC - LN_Z_FRAC     # e <= (d_bits - 1) // 2
        sh1 = register(unsigned(sh_max.bit_length()), "n_sh1")
        sh2 = register(unsigned(sh_max.bit_length()), "n_sh2")
        with m.If(advance):
            m.d.sync += [r1.eq(head.r), sh1.eq(head.e + (RSQRT_FRAC - LN_Z_FRAC)), sh2.eq(sh1)]
        num_width = hbits + 1 + vw + 1
        acc_width = max(LN_Z_WIDTH + pw, pw + cfg.beta_shift) + 2
        z_max = ln_z_bound(cfg.h_max)
        acc_lo, acc_hi = ln_acc_range(cfg)
        for lane in range(lanes):
            num = register(signed(num_width), f"l{lane}_num")
            product = register(signed(num_width + len(rsqrt.r) + 1), f"l{lane}_product")
            z = register(signed(LN_Z_WIDTH), f"l{lane}_z")
            gamma = [register(signed(pw), f"l{lane}_gamma{k}") for k in (2, 3)]
            beta = [register(signed(pw), f"l{lane}_beta{k}") for k in (2, 3)]
            acc = register(signed(acc_width), f"l{lane}_acc")
            out_product = register(signed(acc_width + cfg.out_mult.bit_length() + 1),
                                   f"l{lane}_out_product")
            out = register(signed(cfg.out_width), f"l{lane}_out")
            gamma1 = read.data[2 * pw * lane:2 * pw * lane + pw].as_signed()
            beta1 = read.data[2 * pw * lane + pw:2 * pw * (lane + 1)].as_signed()
            with m.If(advance):
                m.d.sync += [
                    num.eq(head.h * beat.v[lane] - head.s1),
                    product.eq(num * r1),
                    gamma[0].eq(gamma1), beta[0].eq(beta1),
                    z.eq(requantize(product, 1, sh2, signed(LN_Z_WIDTH),
                                    result_range=(-z_max, z_max))),
                    gamma[1].eq(gamma[0]), beta[1].eq(beta[0]),
                    acc.eq(z * gamma[1] + (beta[1] << cfg.beta_shift)),
                    out_product.eq(acc * cfg.out_mult),
                    out.eq(requantize(out_product, 1, cfg.out_shift, signed(cfg.out_width),
                                      value_range=(acc_lo * cfg.out_mult, acc_hi * cfg.out_mult))),
                ]
            m.d.comb += self.y.payload.data[lane].eq(out)
            if cfg.second_output:       # the same z, the second pair, the run-time scale
                top = 2 * pw * lanes
                gamma2 = [register(signed(pw), f"l{lane}_gamma2_{k}") for k in (2, 3)]
                beta2 = [register(signed(pw), f"l{lane}_beta2_{k}") for k in (2, 3)]
                acc2 = register(signed(acc_width), f"l{lane}_acc2")
                out_product2 = register(signed(acc_width + LN_MULT2_BITS + 1),
                                        f"l{lane}_out_product2")
                out2 = register(signed(8), f"l{lane}_out2")
                with m.If(advance):
                    m.d.sync += [
                        gamma2[0].eq(read.data[top + 2 * pw * lane:top + 2 * pw * lane + pw]
                                     .as_signed()),
                        beta2[0].eq(read.data[top + 2 * pw * lane + pw:top + 2 * pw * (lane + 1)]
                                    .as_signed()),
                        gamma2[1].eq(gamma2[0]), beta2[1].eq(beta2[0]),
                        acc2.eq(z * gamma2[1] + (beta2[1] << cfg.beta_shift)),
                        out_product2.eq(acc2 * mult2),
                        out2.eq(requantize(out_product2, 1, shift2, signed(8))),
                    ]
                m.d.comb += self.y.payload.data2[lane].eq(out2)
        return m

