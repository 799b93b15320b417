"""Butterfly engine: butterfly-factorized linear layers and radix-2 FFTs.

One engine runs both FABNet operations on the same datapath (Fan et al.,
MICRO 2022): a butterfly linear layer ``y = B_{m-1} ... B_0 x`` (``m = log2
n``, each factor ``n/2`` independent 2x2 blocks) and a complex fixed-point
FFT / inverse FFT, for any length ``n`` (a power of two, ``2 <= n <= n_max``)
chosen per command, without re-synthesis.

Dataflow: constant geometry (Pease). Every stage reads the pair of positions
``(i, i + n/2)`` and writes its two results to ``(2i, 2i + 1)``, so all stages
use the same addressing; in the original index space stage ``s`` pairs
``(j, j + n / 2**(s+1))`` (strides n/2, n/4, ..., 1: decimation in frequency).
The FFT output, bit-reversed in position, is read out in natural order.
"""

import math
from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .fixed import Q, requantize
from .params import Config, check_choice, check_instance, check_int
from .stream import Queue
from bertforge.rtl.errors import ParameterError

__all__ = ["ButterflyConfig", "ButterflyEngine", "MODES", "COMPUTE_LATENCY", "SLOTS",
           "twiddle_table", "fft_magnitude_bounds", "FFT_GUARD_BITS", "stage_period",
           "command_is_valid"]

#: Command modes (the ``mode`` field of a command).
MODES = {"linear": 0, "fft": 1, "ifft": 2, "weights": 3}

#: Cycles from a butterfly's issue until a read issued then sees its result.
COMPUTE_LATENCY = 4

#: Vector groups the engine holds at once (one loading, one computing, one
#: draining).
SLOTS = 3

#: Extra fraction bits the FFT carries inside (plus one extra integer bit).
FFT_GUARD_BITS = 3

#: Output queue depth (enough to never throttle a ready consumer).
OUT_DEPTH = 6


def _is_power_of_two(value):
    return value > 0 and value & (value - 1) == 0


def stage_period(n):
    """Cycles one stage of length ``n`` occupies: ``max(n/2, n/4 + 4)``
    (``n/2`` issues; the next stage's first read waits for the result of
    butterfly ``n/4``). ``n = 2`` (one stage, one butterfly) takes 4."""
    return max(n // 2, n // 4 + COMPUTE_LATENCY)


def command_is_valid(config, mode, n, groups):
    """True if the hardware accepts a command (else it raises ``error``)."""
    return (_is_power_of_two(n) and 2 <= n <= config.n_max
            and (mode == MODES["weights"] or groups >= 1))


@dataclass(frozen=True, kw_only=True)
class ButterflyConfig(Config):
    """Parameters of a :class:`ButterflyEngine`.

    Parameters
    ----------
    n_max : int
        Longest vector, a power of two from 4 to 1024.
    lanes : int
        Butterfly units working in parallel, a power of two up to ``n_max/2``.
        Lane ``l`` works on vector ``l`` of each group of ``lanes`` vectors,
        so any ``lanes`` runs any length ``n``, also ``n/2 < lanes``.
    width : 8 or 16
        Signed data width (FFT data is ``Q(1, width-1)``, real and imaginary).
    weight_width : 8 or 16
        Signed width of the linear mode's 2x2 block weights.
    """

    n_max: int = 64
    lanes: int = 2
    width: int = 16
    weight_width: int = 16

    def __post_init__(self):
        check_int("n_max", self.n_max, minimum=4, maximum=1024)
        if not _is_power_of_two(self.n_max):
            raise ParameterError(f"n_max must be a power of two, not {self.n_max!r}")
        check_int("lanes", self.lanes, maximum=self.n_max // 2)
        if not _is_power_of_two(self.lanes):
            raise ParameterError(f"lanes must be a power of two, not {self.lanes!r}")
        check_choice("width", self.width, (8, 16))
        check_choice("weight_width", self.weight_width, (8, 16))

    @property
    def name(self):
        return f"butterfly_n{self.n_max}_l{self.lanes}_d{self.width}_w{self.weight_width}"

    @property
    def log_n_max(self):
        return self.n_max.bit_length() - 1

    @property
    def twiddle_format(self):
        """Twiddles are ``Q(2, width)``: 1.0 is exactly ``2**width``."""
        return Q(2, self.width)


def twiddle_table(config):
    """ROM contents: ``W^k = exp(-2 pi i k / n_max)`` for ``k < n_max/2`` as raw
    ``(re, im)`` of :attr:`ButterflyConfig.twiddle_format` (round half up)."""
    frac = config.twiddle_format.frac_bits
    table = []
    for k in range(config.n_max // 2):
        angle = 2 * math.pi * k / config.n_max
        table.append((math.floor(math.cos(angle) * (1 << frac) + 0.5),
                      math.floor(-math.sin(angle) * (1 << frac) + 0.5)))
    return table


def fft_magnitude_bounds(config):
    """``(bounds, w_max)``: ``bounds[s]`` bounds the magnitude ``|v|`` (raw
    units, real and imaginary parts as one complex number) of every value
    after ``s`` FFT stages, ``s = 0 .. log2(n_max)``, for every input and
    every length; ``w_max`` is the largest rounded twiddle's ``|W|`` (at
    least 1). Inputs start at ``sqrt(2) * 2**(width - 1 + G)``; a stage's
    ``(a + b) / 2`` and ``(a - b) W / 2`` grow it at most by ``w_max``, plus
    the rounding of two components (``sqrt(2) / 2``)."""
    frac = config.twiddle_format.frac_bits
    w_max = max(1.0, max(math.hypot(re, im) for re, im in twiddle_table(config)) / (1 << frac))
    bound = math.sqrt(2) * (1 << (config.width - 1 + FFT_GUARD_BITS))
    bounds = [bound]
    for _ in range(config.log_n_max):
        bound = bound * w_max + math.sqrt(2) / 2
        bounds.append(bound)
    return bounds, w_max


def complex_layout(width):
    return data.StructLayout({"re": signed(width), "im": signed(width)})


class ButterflyEngine(wiring.Component):
    """Butterfly linear layers and (inverse) FFTs on ``lanes`` vectors at once.

    Streams
    -------
    ``cmd``: ``mode`` (0 linear, 1 fft, 2 ifft, 3 load weights), ``n``,
    ``groups`` (groups of ``lanes`` vectors that follow on ``x``), ``mult`` and
    ``shift`` (linear mode rescaling). A command with ``n`` not a power of two
    in ``[2, n_max]``, or with ``groups == 0`` in a compute mode, is consumed
    and rejected: ``error`` goes high until the next valid command.

    ``x``: beat ``k`` of a group carries element ``k`` (``k = 0 .. n-1``) of the
    group's ``lanes`` vectors, lane ``l`` = vector ``l`` (complex; linear mode
    uses ``re`` only).

    ``w`` (mode 3): ``(n/2) * log2(n)`` beats, stage ``s`` major, butterfly
    ``i`` minor, each ``[w00, w01, w10, w11]``. They stay until overwritten;
    a weight command waits until every earlier vector is computed.

    ``y``: the results in the same format, ``last`` on the final beat of a
    command.

    Arithmetic (bit-exact twin: :mod:`bertforge.sim.butterfly_golden`)
    ------------------------------------------------------------------
    Stage ``s`` butterfly ``i`` reads ``a = v[i]``, ``b = v[i + n/2]``.

    * linear: ``v'[2i] = rq(w00 a + w01 b)``, ``v'[2i+1] = rq(w10 a + w11 b)``
      with ``rq = requantize(., mult, shift)`` to ``signed(width)`` after every
      stage (the house rule, :func:`bertforge.rtl.fixed.requantize`).
    * fft: ``v'[2i] = rq(a + b, 1, 1)``, ``v'[2i+1] = rq((a - b) W, 1, F + 1)``
      with ``W = W_n^((i >> s) << s)`` from a ROM of ``n_max/2`` twiddles
      (``F = width`` fractional bits), conjugated for ifft. The 1/2 per stage
      keeps the sum from overflowing; the output is ``fft(x) / n`` or
      ``ifft(x)``, in natural order.

    Throughput and latency (ready consumer, inputs always valid)
    ------------------------------------------------------------
    A stage takes ``T = max(n/2, n/4 + 4)`` cycles, a group ``log2(n) * T``;
    loading and draining a group (``n`` beats each) overlap other groups'
    compute, so G groups take ``2n + G log2(n) T - (T - n/2) + 8`` cycles from
    the first ``x`` beat to the last ``y`` beat
    (:func:`bertforge.sim.butterfly_cycles.butterfly_cycles`). Lane
    utilization tends to 100% for ``n >= 16`` (``n = 2``: 1 of every 4
    cycles, ``n = 4``: 4 of 10, ``n = 8``: 12 of 18). Commands queue back to
    back: the loader takes the next command one cycle after the last beat of
    the previous one, so commands of one length cost the formula above with
    ``G`` their total groups; a weight load waits until compute is idle
    (:func:`bertforge.sim.butterfly_cycles.butterfly_timeline` follows any mix
    cycle by cycle).

    Parameters
    ----------
    config : ButterflyConfig
    """

    def __init__(self, config):
        self.config = check_instance("config", config, ButterflyConfig)
        vector = data.ArrayLayout(complex_layout(config.width), config.lanes)
        cmd_layout = data.StructLayout({
            "mode": 2, "n": 16, "groups": 16, "shift": 6, "mult": 16})
        w_layout = data.ArrayLayout(signed(config.weight_width), 4)
        y_layout = data.StructLayout({"data": vector, "last": 1})
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout)),
            "x": In(stream.Signature(vector)),
            "w": In(stream.Signature(w_layout)),
            "y": Out(stream.Signature(y_layout)),
            "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        lanes, width, ln = cfg.lanes, cfg.width, cfg.log_n_max
        inner = width + 1 + FFT_GUARD_BITS
        word = 2 * inner * lanes
        frac = cfg.twiddle_format.frac_bits

        # Data memories: two banks, a word is one element of all lanes.
        # Address = {slot, half, pos >> 1}; bank(pos) = pos[0] ^ pos[log n - 1]
        # (n = 2: bank(pos) = pos[0]).
        banks = []
        for b in range(2):
            mem = Memory(shape=unsigned(word), depth=SLOTS * cfg.n_max, init=[])
            m.submodules[f"bank{b}"] = mem
            banks.append({"load": mem.write_port(), "comp_w": mem.write_port(),
                          "comp_r": mem.read_port(), "drain": mem.read_port()})
        wmem = Memory(shape=unsigned(4 * cfg.weight_width), depth=ln * cfg.n_max // 2, init=[])
        m.submodules.weights = wmem
        w_wr, w_rd = wmem.write_port(), wmem.read_port()
        tw_shape = cfg.twiddle_format.shape
        rom = Memory(shape=data.StructLayout({"re": tw_shape, "im": tw_shape}),
                     depth=cfg.n_max // 2,
                     init=[{"re": re, "im": im} for re, im in twiddle_table(cfg)])
        m.submodules.twiddles = rom
        tw_rd = rom.read_port()

        def address(slot, half, pos):
            return Cat(Cat(pos, Const(0, ln))[1:ln], half, slot)

        def bank_of(pos, logn):
            top = pos.bit_select((logn - 1).as_unsigned(), 1)
            return pos[0] ^ Mux(logn == 1, 0, top)

        # Per-slot metadata.
        meta_layout = data.StructLayout({
            "n": range(cfg.n_max + 1), "logn": range(ln + 1), "mode": 2,
            "shift": 6, "mult": 16, "last": 1})
        meta = [Signal(meta_layout, name=f"meta{k}") for k in range(SLOTS)]

        def pick(index, signals):
            result = signals[0]
            for k in range(1, len(signals)):
                result = Mux(index == k, signals[k], result)
            return result

        def next_slot(index):
            return Mux(index == SLOTS - 1, 0, index + 1)

        occupied = Signal(range(SLOTS + 1))    # loaded, not yet drained
        ready_comp = Signal(range(SLOTS + 1))  # loaded, not yet taken by compute
        ready_drain = Signal(range(SLOTS + 1))  # computed, not yet taken by drain
        load_done = Signal()
        comp_take = Signal()
        comp_done = Signal()
        drain_take = Signal()
        drain_finish = Signal()
        m.d.sync += [
            occupied.eq(occupied + load_done - drain_finish),
            ready_comp.eq(ready_comp + load_done - comp_take),
            ready_drain.eq(ready_drain + comp_done - drain_take),
        ]

        # ---- Command decoder and loader ------------------------------------
        cmd = self.cmd.payload
        logn_in = Signal(range(ln + 1))
        for j in range(1, ln + 1):
            with m.If(cmd.n == (1 << j)):
                m.d.comb += logn_in.eq(j)
        is_weights = cmd.mode == MODES["weights"]
        cmd_ok = (logn_in != 0) & (is_weights | (cmd.groups != 0))

        cur = Signal(meta_layout)
        groups_left = Signal(16)
        beat = Signal(range(cfg.n_max))
        w_i = Signal(range(cfg.n_max // 2))
        w_s = Signal(range(ln))
        load_ptr = Signal(range(SLOTS))
        error = Signal()
        m.d.comb += self.error.eq(error)

        comp_busy = Signal()
        with m.FSM(name="loader"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    with m.If(cmd_ok):
                        m.d.sync += [
                            error.eq(0), cur.n.eq(cmd.n), cur.logn.eq(logn_in),
                            cur.mode.eq(cmd.mode), cur.shift.eq(cmd.shift),
                            cur.mult.eq(cmd.mult), groups_left.eq(cmd.groups),
                            beat.eq(0), w_i.eq(0), w_s.eq(0),
                        ]
                        with m.If(is_weights):
                            m.next = "WEIGHTS"
                        with m.Else():
                            m.next = "LOAD"
                    with m.Else():
                        m.d.sync += error.eq(1)
            with m.State("LOAD"):
                m.d.comb += self.x.ready.eq(occupied != SLOTS)
                bank = bank_of(beat, cur.logn)
                # FFT data enters with FFT_GUARD_BITS extra fraction bits.
                guard = Mux(cur.mode == MODES["linear"], 0, FFT_GUARD_BITS)
                loaded = Cat(*[(Cat(part, part[-1].replicate(inner - width)).as_signed()
                                << guard)[:inner]
                               for element in self.x.payload for part in (element.re, element.im)])
                for b in range(2):
                    port = banks[b]["load"]
                    m.d.comb += [
                        port.addr.eq(address(load_ptr, 0, beat)),
                        port.data.eq(loaded),
                        port.en.eq(self.x.valid & self.x.ready & (bank == b)),
                    ]
                with m.If(self.x.valid & self.x.ready):
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(beat == cur.n - 1):
                        m.d.comb += load_done.eq(1)
                        m.d.sync += [beat.eq(0), groups_left.eq(groups_left - 1),
                                     load_ptr.eq(next_slot(load_ptr))]
                        for k in range(SLOTS):
                            with m.If(load_ptr == k):
                                m.d.sync += [meta[k].eq(cur), meta[k].last.eq(groups_left == 1)]
                        with m.If(groups_left == 1):
                            m.next = "IDLE"
            with m.State("WEIGHTS"):
                idle = (ready_comp == 0) & ~comp_busy
                m.d.comb += [
                    self.w.ready.eq(idle),
                    w_wr.addr.eq(Cat(w_i[:ln - 1], w_s)),
                    w_wr.data.eq(self.w.payload.as_value()),
                    w_wr.en.eq(self.w.valid & idle),
                ]
                with m.If(self.w.valid & idle):
                    with m.If(w_i == (cur.n >> 1) - 1):
                        m.d.sync += [w_i.eq(0), w_s.eq(w_s + 1)]
                        with m.If(w_s == cur.logn - 1):
                            m.next = "IDLE"
                    with m.Else():
                        m.d.sync += w_i.eq(w_i + 1)

        # ---- Compute sequencer ----------------------------------------------
        comp_head = Signal(range(SLOTS))
        c = Signal(meta_layout)
        c_slot = Signal(range(SLOTS))
        c_period = Signal(range(max(cfg.n_max // 2, cfg.n_max // 4 + COMPUTE_LATENCY) + 1))
        s = Signal(range(ln))
        i = Signal(range(max(cfg.n_max // 2, cfg.n_max // 4 + COMPUTE_LATENCY)))
        finish = comp_busy & (s == c.logn - 1) & (i == c_period - 1)
        m.d.comb += comp_take.eq((~comp_busy | finish) & (ready_comp != 0))
        head_meta = data.View(meta_layout, pick(comp_head, meta))
        with m.If(comp_take):
            half_n, quarter_n = head_meta.n >> 1, head_meta.n >> 2
            m.d.sync += [
                c.eq(head_meta), c_slot.eq(comp_head), comp_head.eq(next_slot(comp_head)),
                c_period.eq(Mux(half_n >= quarter_n + COMPUTE_LATENCY, half_n,
                                quarter_n + COMPUTE_LATENCY)),
                s.eq(0), i.eq(0), comp_busy.eq(1),
            ]
        with m.Elif(finish):
            m.d.sync += comp_busy.eq(0)
        with m.Elif(comp_busy):
            with m.If(i == c_period - 1):
                m.d.sync += [i.eq(0), s.eq(s + 1)]
            with m.Else():
                m.d.sync += i.eq(i + 1)

        issue = comp_busy & (i < (c.n >> 1))
        read_half = s[0]
        a_addr = address(c_slot, read_half, i)
        b_addr = address(c_slot, read_half, i + (c.n >> 1))
        for b in range(2):
            port = banks[b]["comp_r"]
            # a = v[i] is in bank i[0], b = v[i + n/2] in the other one.
            m.d.comb += port.addr.eq(Mux(i[0] == b, a_addr, b_addr))
        twiddle_index = Signal(range(cfg.n_max // 2))
        # ((i >> s) << s) << (log2 n_max - log2 n), cut to the index's bits,
        # as a right shift of the reversed bits (a left shift by a run-time
        # amount is as wide as the largest amount allows).
        index_bits = max(ln - 1, 1)
        reversed_index = Signal(index_bits)
        m.d.comb += [
            reversed_index.eq((i >> s)[:index_bits][::-1] >> (s + (ln - c.logn).as_unsigned())),
            twiddle_index.eq(reversed_index[::-1]),
            tw_rd.addr.eq(twiddle_index),
            w_rd.addr.eq(Cat(i[:ln - 1], s)),
        ]

        # Pipeline control: p1 (memory data), p2 (products), o (results).
        ctrl_layout = data.StructLayout({
            "valid": 1, "done": 1, "abank": 1, "topbank": 1, "i": range(cfg.n_max // 2),
            "whalf": 1, "slot": range(SLOTS), "mode": 2, "shift": 6, "mult": 16})
        p1 = Signal(ctrl_layout)
        p2 = Signal(ctrl_layout)
        o = Signal(ctrl_layout)
        m.d.sync += [
            p1.valid.eq(issue),
            p1.done.eq(issue & (s == c.logn - 1) & (i == (c.n >> 1) - 1)),
            p1.abank.eq(i[0]),
            p1.topbank.eq(Mux(c.logn == 1, 0, i.bit_select((c.logn - 2).as_unsigned(), 1))),
            p1.i.eq(i), p1.whalf.eq(~s[0]), p1.slot.eq(c_slot),
            p1.mode.eq(c.mode), p1.shift.eq(c.shift), p1.mult.eq(c.mult),
            p2.eq(p1), o.eq(p2),
        ]

        a_word = Mux(p1.abank, banks[1]["comp_r"].data, banks[0]["comp_r"].data)
        b_word = Mux(p1.abank, banks[0]["comp_r"].data, banks[1]["comp_r"].data)
        ww = cfg.weight_width
        weights = [w_rd.data[k * ww:(k + 1) * ww].as_signed() for k in range(4)]
        tw = tw_rd.data
        tw_re = tw.re
        tw_im = Signal(signed(frac + 3))
        m.d.comb += tw_im.eq(Mux(p1.mode == MODES["ifft"], -tw.im, tw.im))
        linear1 = p1.mode == MODES["linear"]
        bounds, w_max = fft_magnitude_bounds(cfg)
        m_in = bounds[-2]       # a stage's input: after at most log2(n_max) - 1 stages
        linear2 = p2.mode == MODES["linear"]

        top_word, bot_word = [], []
        for lane in range(lanes):
            def part(value, k):
                base = lane * 2 * inner + k * inner
                return value[base:base + inner].as_signed()
            ar, ai, br, bi = part(a_word, 0), part(a_word, 1), part(b_word, 0), part(b_word, 1)
            dr = Signal(signed(inner + 1), name=f"l{lane}_dr")
            di = Signal(signed(inner + 1), name=f"l{lane}_di")
            m.d.comb += [dr.eq(ar - br), di.eq(ai - bi)]
            pairs = [(Mux(linear1, weights[0], tw_re), Mux(linear1, ar, dr)),
                     (Mux(linear1, weights[1], tw_im), Mux(linear1, br, di)),
                     (Mux(linear1, weights[2], tw_im), Mux(linear1, ar, dr)),
                     (Mux(linear1, weights[3], tw_re), Mux(linear1, br, di))]
            prods = []
            for k, (x, y) in enumerate(pairs):
                prod = Signal(signed(max(ww, frac + 3) + inner + 1), name=f"l{lane}_p{k}")
                m.d.sync += prod.eq(x * y)
                prods.append(prod)
            sum_re = Signal(signed(inner + 1), name=f"l{lane}_sr")
            sum_im = Signal(signed(inner + 1), name=f"l{lane}_si")
            m.d.sync += [sum_re.eq(ar + br), sum_im.eq(ai + bi)]

            # p2: sums of products and requantization (registered into o).
            lin_top = Signal(signed(len(prods[0]) + 1), name=f"l{lane}_lt")
            lin_bot = Signal(signed(len(prods[0]) + 1), name=f"l{lane}_lb")
            fft_bre = Signal(signed(len(prods[0]) + 1), name=f"l{lane}_fr")
            m.d.comb += [lin_top.eq(prods[0] + prods[1]), lin_bot.eq(prods[2] + prods[3]),
                         fft_bre.eq(prods[0] - prods[1])]
            narrow, wide = signed(width), signed(inner)
            # Stage inputs have |a|, |b| <= m_in (fft_magnitude_bounds), so
            # a component of a + b is within 2 m_in and one of (a - b) W
            # within 2 m_in |W|: their requantizations need no clamp while
            # the bound fits `wide` (requantize decides).
            sum_range = (-math.ceil(2 * m_in), math.ceil(2 * m_in))
            rot = math.ceil(2 * m_in * w_max * (1 << frac))
            # Linear mode: a and b are `width`-bit values (loaded, or a
            # stage's narrow result), so w0 a + w1 b is within 2**(width +
            # weight_width - 1): width + weight_width + 1 bits.
            lin_bits = width + ww + 1
            top_lin = requantize(lin_top[:lin_bits].as_signed(), p2.mult, p2.shift, narrow)
            bot_lin = requantize(lin_bot[:lin_bits].as_signed(), p2.mult, p2.shift, narrow)
            top_re_fft = requantize(sum_re, 1, 1, wide, value_range=sum_range)
            top_im_fft = requantize(sum_im, 1, 1, wide, value_range=sum_range)
            bot_re_fft = requantize(fft_bre, 1, frac + 1, wide, value_range=(-rot, rot))
            bot_im_fft = requantize(lin_bot, 1, frac + 1, wide, value_range=(-rot, rot))
            top_re = Signal(wide, name=f"l{lane}_top_re")
            top_im = Signal(wide, name=f"l{lane}_top_im")
            bot_re = Signal(wide, name=f"l{lane}_bot_re")
            bot_im = Signal(wide, name=f"l{lane}_bot_im")
            m.d.sync += [
                top_re.eq(Mux(linear2, top_lin.as_signed(), top_re_fft)),
                bot_re.eq(Mux(linear2, bot_lin.as_signed(), bot_re_fft)),
                top_im.eq(Mux(linear2, 0, top_im_fft)),
                bot_im.eq(Mux(linear2, 0, bot_im_fft)),
            ]
            top_word += [top_re, top_im]
            bot_word += [bot_re, bot_im]

        # o: write v'[2i] to bank i[log n - 2] (n = 2: bank 0), v'[2i+1] to the other one.
        for b in range(2):
            port = banks[b]["comp_w"]
            m.d.comb += [
                port.addr.eq(Cat(o.i[:ln - 1], o.whalf, o.slot)),
                port.data.eq(Mux(o.topbank == b, Cat(*top_word), Cat(*bot_word))),
                port.en.eq(o.valid),
            ]
        m.d.comb += comp_done.eq(o.valid & o.done)

        # ---- Drain ----------------------------------------------------------
        d = Signal(meta_layout)
        d_slot = Signal(range(SLOTS))
        d_head = Signal(range(SLOTS))
        d_busy = Signal()
        k = Signal(range(cfg.n_max))
        queue = m.submodules.queue = Queue(shape=self.y.payload.shape(), depth=OUT_DEPTH)
        credits = Signal(range(OUT_DEPTH + 1), init=OUT_DEPTH)
        d_issue = d_busy & (credits != 0)
        m.d.comb += drain_finish.eq(d_issue & (k == d.n - 1))
        m.d.comb += drain_take.eq((~d_busy | drain_finish) & (ready_drain != 0))
        m.d.sync += credits.eq(credits - d_issue + (self.y.valid & self.y.ready))
        with m.If(drain_take):
            m.d.sync += [d.eq(pick(d_head, meta)), d_slot.eq(d_head),
                         d_head.eq(next_slot(d_head)), k.eq(0), d_busy.eq(1)]
        with m.Elif(drain_finish):
            m.d.sync += d_busy.eq(0)
        with m.Elif(d_issue):
            m.d.sync += k.eq(k + 1)

        reversed_k = Signal(range(cfg.n_max))
        m.d.comb += reversed_k.eq(k[::-1] >> (ln - d.logn).as_unsigned())
        pos = Signal(range(cfg.n_max))
        m.d.comb += pos.eq(Mux(d.mode == MODES["linear"], k, reversed_k))
        for b in range(2):
            m.d.comb += banks[b]["drain"].addr.eq(address(d_slot, d.logn[0], pos))
        q_valid = Signal()
        q_bank = Signal()
        q_last = Signal()
        q_linear = Signal()
        m.d.sync += [q_valid.eq(d_issue), q_bank.eq(bank_of(pos, d.logn)),
                     q_last.eq(d.last & (k == d.n - 1)), q_linear.eq(d.mode == MODES["linear"])]
        q_word = Mux(q_bank, banks[1]["drain"].data, banks[0]["drain"].data)
        # FFT results drop the guard bits: requantize(v, 1, G) to signed(width).
        results = []
        for index in range(2 * lanes):
            value = q_word[index * inner:(index + 1) * inner].as_signed()
            results.append(Mux(q_linear, value[:width],
                               requantize(value, 1, FFT_GUARD_BITS, signed(width))))
        m.d.comb += [queue.i.valid.eq(q_valid), queue.i.payload.eq(Cat(*results, q_last))]
        wiring.connect(m, queue.o, wiring.flipped(self.y))
        return m
