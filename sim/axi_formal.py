"""Formal properties of the AXI4 master (:class:`~bertforge.rtl.axi.AxiMaster`)
with the ``prove`` kit (:mod:`bertforge.sim.formal`), run by
``bertforge prove gemm`` (listed by :func:`~bertforge.sim.gemm_formal.gemm_proofs`).

The environment: an engine that obeys the stream rules on ``rd_req`` and
``wr_req`` and stalls ``rd_data`` at will; an AXI slave that stalls every
channel at will, holds ``rvalid`` / ``bvalid`` and their payloads until
taken, and answers only what was asked (an R beat only while a read burst
is open, its ``rlast`` on the burst's last beat; a B only for a write
burst whose address was taken), with any response code. Properties:

- ``{ar,aw,w}_valid_held``, ``{ar,aw,w}_payload_held``: AXI's handshake rules
  on the master's channels, and ``rd_data_valid_held`` /
  ``rd_data_payload_held`` on the engine's read data;
- ``ar_no_4k_crossing``, ``aw_no_4k_crossing``: an INCR burst never crosses a
  4 KB boundary;
- ``w_matches_aw``: the W beats come in bursts (``wlast`` ends each) that
  match the AW bursts one for one, in order: each has ``awlen + 1`` beats,
  whether its beats lead its AW or follow it (W never more than 7 bursts
  ahead or behind);
- ``reads_bounded``, ``writes_bounded``: never more bursts in flight than
  configured;
- ``no_beat_from_nothing``: read data reaches the engine only for beats it
  asked for; ``no_beat_lost`` (data conservation under any stalls of
  ``rd_data``): every word taken on R reaches the engine: the words taken
  exceed the beats delivered by at most one per unaligned request (its
  first word, realigned into its beats), never fewer; ``idle_means_answered``: ``idle`` only when every requested
  beat was delivered and every write burst answered (so the top, which
  waits for ``idle``, never ends a command with a request unanswered);
- ``reaches_answered``: a cover, an unaligned request answered in full
  through stalls (the assumptions leave something to prove);
  ``reaches_write_burst``: a cover, writes that become one 2-beat burst,
  answered.
"""

from amaranth.hdl import Array, Module, Mux, Signal, Value
from amaranth.lib import wiring

from bertforge.rtl.axi import AxiMaster, forward_ports

from .formal import Proof, Spec

__all__ = ["AxiMasterSpec", "axi_proofs", "AXI_FORMAL_ARGS"]

#: The master under proof: 32-bit data, 13-bit engine addresses (two 4 KB
#: pages), requests of up to 3 beats, bursts of at most 2, 2 in flight.
AXI_FORMAL_ARGS = dict(data_width=32, inner_addr_width=13, request_beats=3, max_burst=2,
                       max_reads=2, max_writes=2)

COUNT = 6   # bits of the shadow counters (no wrap within the bounded runs)
#: Proofs bounded below the default depth (16): ``w_matches_aw`` takes 10 s
#: at 10 cycles, 69 s at 12 and over 10 minutes at 16 (a 2-beat write burst
#: is written and answered within 6 cycles: ``reaches_write_burst``).
DEPTHS = {"w_matches_aw": 10}


class AxiMasterSpec(Spec):
    PROPERTIES = ("ar_valid_held", "ar_payload_held", "aw_valid_held", "aw_payload_held",
                  "w_valid_held", "w_payload_held", "rd_data_valid_held", "rd_data_payload_held",
                  "ar_no_4k_crossing", "aw_no_4k_crossing", "w_matches_aw", "reads_bounded",
                  "writes_bounded",
                  "no_beat_from_nothing", "no_beat_lost", "idle_means_answered",
                  "reaches_answered",
                  "reaches_write_burst")

    def __init__(self, make, *, max_reads, max_writes, only=None):
        super().__init__(only=only)
        self.make, self.max_reads, self.max_writes = make, max_reads, max_writes

    def held(self, m, name, valid, ready, payload):
        payload = Value.cast(payload)
        stalled = self.past(m, valid & ~ready, f"{name}_stalled")
        before = self.past(m, payload, f"{name}_payload")
        self.check(m, f"{name}_valid_held", ~stalled | valid)
        self.check(m, f"{name}_payload_held", ~stalled | (payload == before))

    def build(self, m, platform):
        dut = m.submodules.dut = self.make()
        MB = dut.data_width // 8
        self.assume_stream_in(m, dut.rd_req, "rd_req")
        self.assume_stream_in(m, dut.wr_req, "wr_req")
        m.d.comb += dut.rd_data.ready.eq(self.any_seq(m, 1, "rd_data_ready"))

        open_n, writes_open = axi_slave(self, m, dut)

        # Handshake rules.
        self.held(m, "ar", dut.m_axi_arvalid, dut.m_axi_arready,
                  Value.cast(dut.m_axi_araddr) | (dut.m_axi_arlen << 32))
        self.held(m, "aw", dut.m_axi_awvalid, dut.m_axi_awready,
                  Value.cast(dut.m_axi_awaddr) | (dut.m_axi_awlen << 32))
        self.held(m, "w", dut.m_axi_wvalid, dut.m_axi_wready,
                  Value.cast(dut.m_axi_wdata) | (dut.m_axi_wstrb << 32) | (dut.m_axi_wlast << 36))
        self.held(m, "rd_data", dut.rd_data.valid, dut.rd_data.ready, dut.rd_data.payload)

        # 4 KB.
        for ch in ("ar", "aw"):
            addr, length = getattr(dut, f"m_axi_{ch}addr"), getattr(dut, f"m_axi_{ch}len")
            self.check(m, f"{ch}_no_4k_crossing",
                       ~getattr(dut, f"m_axi_{ch}valid")
                       | ((addr[:12] + (length + 1) * MB) <= 4096))

        # W bursts against AW bursts: each side's lengths by burst number
        # (modulo 8), checked when the later of the two arrives.
        aw_lens = Array(Signal(9, name=f"aw_len_{i}") for i in range(8))
        w_lens = Array(Signal(9, name=f"w_len_{i}") for i in range(8))
        n_aw, n_w = Signal(COUNT), Signal(COUNT)
        w_beat = Signal(9)
        aw_take = dut.m_axi_awvalid & dut.m_axi_awready
        w_take = dut.m_axi_wvalid & dut.m_axi_wready
        w_last = w_take & dut.m_axi_wlast
        length = dut.m_axi_awlen + 1
        with m.If(aw_take):
            m.d.sync += [aw_lens[n_aw[:3]].eq(length), n_aw.eq(n_aw + 1)]
        with m.If(w_take):
            m.d.sync += w_beat.eq(w_beat + 1)
        with m.If(w_last):
            m.d.sync += [w_lens[n_w[:3]].eq(w_beat + 1), n_w.eq(n_w + 1), w_beat.eq(0)]
        self.check(m, "w_matches_aw",
                   (~aw_take | (n_aw >= n_w) | (length == w_lens[n_aw[:3]]))
                   & (~w_last | (n_w >= n_aw) | (w_beat + 1 == aw_lens[n_w[:3]]))
                   & (~w_take | w_last | (n_w >= n_aw) | (w_beat + 1 < aw_lens[n_w[:3]]))
                   & (~(aw_take & w_last & (n_aw == n_w)) | (length == w_beat + 1))
                   & (n_aw - n_w < 8) & (n_w - n_aw < 8))

        # Outstanding bounds.
        self.check(m, "reads_bounded", open_n <= self.max_reads)
        self.check(m, "writes_bounded", writes_open <= self.max_writes)

        # Beats asked for and delivered.
        asked = Signal(COUNT)
        given = Signal(COUNT)
        m.d.sync += [asked.eq(asked + ((dut.rd_req.valid & dut.rd_req.ready)
                                       * dut.rd_req.payload.beats)),
                     given.eq(given + (dut.rd_data.valid & dut.rd_data.ready))]
        self.check(m, "no_beat_from_nothing", ~dut.rd_data.valid | (asked != given))
        self.check(m, "idle_means_answered", ~dut.idle | ((asked == given) & (writes_open == 0)))
        # Conservation: R words taken = beats delivered + one word per
        # unaligned request (at most; its first word is held to realign).
        words, skewed = Signal(COUNT), Signal(COUNT)
        m.d.sync += [words.eq(words + (dut.m_axi_rvalid & dut.m_axi_rready)),
                     skewed.eq(skewed + (dut.rd_req.valid & dut.rd_req.ready
                                         & (dut.rd_req.payload.addr[:(MB - 1).bit_length()] != 0)))]
        self.check(m, "no_beat_lost", (words >= given) & (words - given <= skewed))
        unaligned = Signal()
        with m.If(dut.rd_req.valid & dut.rd_req.ready & (dut.rd_req.payload.addr[:2] != 0)
                  & (dut.rd_req.payload.beats == 3)):
            m.d.sync += unaligned.eq(1)
        self.cover(m, "reaches_answered", unaligned & dut.idle & (given == 3) & (asked == 3))
        burst_done = Signal()
        with m.If(w_last & (w_beat == 1)):
            m.d.sync += burst_done.eq(1)
        self.cover(m, "reaches_write_burst", burst_done & dut.idle & (n_aw == 1))


def axi_proofs(*, make=None, args=None, label=None, check_reads=None):
    """The proofs of the AXI master (block ``gemm``): bmc from reset, deep
    enough for two requests through stalls. ``make``: a stand-in (a broken
    copy in the tests); ``check_reads``: the read bound the spec checks
    (default the master's)."""
    args = {**AXI_FORMAL_ARGS, **(args or {})}
    make = make or (lambda: AxiMaster(**args))
    label = label or ("axi master " + " ".join(f"{k}={v}" for k, v in sorted(args.items())))
    reads = check_reads or args["max_reads"]
    depth = 16
    fast = ("ar_valid_held", "reads_bounded", "w_matches_aw", "reaches_answered",
            "reaches_write_burst")
    return [Proof(block="gemm", name=name, config=label,
                  spec=lambda only: AxiMasterSpec(make, max_reads=reads,
                                                  max_writes=args["max_writes"], only=only),
                  method="cover" if name.startswith("reaches") else "bmc",
                  depth=24 if name.startswith("reaches") else DEPTHS.get(name, depth),
                  slow=name not in fast, cone=True)
            for name in AxiMasterSpec.PROPERTIES]


def axi_slave(spec, m, dut, *, stall=None):
    """The AXI slave around ``dut``'s ``m_axi_*`` port in ``spec``: R beats
    only for open bursts (their lengths in a 2-entry shadow queue: at most 2
    open), ``rlast`` on a burst's last, B only for taken write addresses,
    R and B held with their payloads until taken, any response code; every
    ready free. ``stall``: at most that many cycles in a row with an AR or
    AW or W offered and not taken, or a burst or write open and no R or B
    offered (a slave that answers). Returns ``(open read bursts, write
    bursts awaiting B)``."""
    width = len(dut.m_axi_rdata)
    for name in ("arready", "awready", "wready"):
        m.d.comb += getattr(dut, f"m_axi_{name}").eq(spec.any_seq(m, 1, name))
    ar_take = dut.m_axi_arvalid & dut.m_axi_arready
    aw_take = dut.m_axi_awvalid & dut.m_axi_awready
    r_take = dut.m_axi_rvalid & dut.m_axi_rready
    b_take = dut.m_axi_bvalid & dut.m_axi_bready

    # The slave: R beats of the open bursts (lengths in a 2-entry shadow
    # queue, so max_reads <= 2), held until taken.
    lens = [Signal(9, name=f"burst_len_{i}") for i in range(2)]
    open_n = Signal(range(4))
    beat = Signal(9)
    rvalid, rlast = spec.any_seq(m, 1, "rvalid"), Signal()
    rdata, rresp = spec.any_seq(m, width, "rdata"), spec.any_seq(m, 2, "rresp")
    m.d.comb += [dut.m_axi_rvalid.eq(rvalid), dut.m_axi_rdata.eq(rdata),
                 dut.m_axi_rresp.eq(rresp), dut.m_axi_rlast.eq(rlast),
                 rlast.eq(beat == lens[0] - 1)]
    spec.assume(m, ~rvalid | (open_n != 0))
    r_stalled = spec.past(m, rvalid & ~dut.m_axi_rready, "r_stalled")
    r_before = spec.past(m, Value.cast(rdata) | (rresp << width), "r_payload")
    spec.assume(m, ~r_stalled | (rvalid & ((Value.cast(rdata) | (rresp << width)) == r_before)))
    popped = r_take & rlast
    with m.If(r_take):
        m.d.sync += beat.eq(beat + 1)
    with m.If(popped):
        m.d.sync += [beat.eq(0), lens[0].eq(lens[1])]
    m.d.sync += open_n.eq(open_n + ar_take - popped)
    with m.If(ar_take):
        with m.If((open_n == 0) | ((open_n == 1) & popped)):
            m.d.sync += lens[0].eq(dut.m_axi_arlen + 1)
        with m.Else():
            m.d.sync += lens[1].eq(dut.m_axi_arlen + 1)
    spec.assume(m, open_n <= 2)

    # B: only for taken write addresses, held until taken.
    writes_open = Signal(range(8))
    bvalid, bresp = spec.any_seq(m, 1, "bvalid"), spec.any_seq(m, 2, "bresp")
    m.d.comb += [dut.m_axi_bvalid.eq(bvalid), dut.m_axi_bresp.eq(bresp)]
    spec.assume(m, ~bvalid | (writes_open != 0))
    b_stalled = spec.past(m, bvalid & ~dut.m_axi_bready, "b_stalled")
    b_before = spec.past(m, bresp, "b_payload")
    spec.assume(m, ~b_stalled | (bvalid & (bresp == b_before)))
    m.d.sync += writes_open.eq(writes_open + aw_take - b_take)
    if stall is not None:
        for name, waiting in (("ar", dut.m_axi_arvalid & ~dut.m_axi_arready),
                              ("aw", dut.m_axi_awvalid & ~dut.m_axi_awready),
                              ("w", dut.m_axi_wvalid & ~dut.m_axi_wready),
                              ("r", (open_n != 0) & ~dut.m_axi_rvalid),
                              ("b", (writes_open != 0) & ~dut.m_axi_bvalid)):
            bounded_wait(spec, m, f"{name}_wait", waiting, stall)
    return open_n, writes_open


def bounded_wait(spec, m, name, waiting, limit):
    """Assume ``waiting`` holds at most ``limit`` cycles in a row."""
    count = Signal(range(limit + 2), name=name)
    m.d.sync += count.eq(Mux(waiting, count + 1, 0))
    spec.assume(m, ~waiting | (count < limit))


class BrokenAxiMaster(wiring.Component):
    """The master with one output changed by ``fault`` (for the tests that
    show each proof bites): ``"arvalid_drops"`` (valid withdrawn while
    stalled), ``"arlen_plus_one"`` (bursts one beat longer: 4 KB crossings),
    ``"idle_always"``, ``"extra_beat"`` (read data offered with nothing asked),
    ``"rready_always"`` (R taken whatever the engine's ready: a beat offered
    to a stalled engine is lost; mutant 19 of the AXI top's sample),
    ``"wdata_flips"`` (payload changes while stalled), ``"wlast_dropped"``
    (a W burst runs into the next)."""

    def __init__(self, fault, **args):
        self.inner = AxiMaster(**args)
        self.inner._MustUse__silence = True
        self.fault = fault
        self.data_width = self.inner.data_width
        super().__init__(dict(self.inner.signature.members))

    def elaborate(self, platform):
        m = Module()
        inner = m.submodules.inner = AxiMaster(**{k: getattr(self.inner, k) for k in (
            "data_width", "addr_width", "inner_addr_width", "request_beats", "id_width", "id",
            "max_burst", "max_reads", "max_writes")})
        names = [n for n in inner.signature.members if n.startswith("m_axi_")]
        changed = {"arvalid_drops": "m_axi_arvalid", "arlen_plus_one": "m_axi_arlen",
                   "wdata_flips": "m_axi_wdata", "idle_always": "idle",
                   "wlast_dropped": "m_axi_wlast", "rready_always": "m_axi_rready",
                   "extra_beat": None}[self.fault]
        forward_ports(m, self, inner, [n for n in names if n != changed]
                      + [n for n in ("error", "error_clear", "bytes_read", "bytes_written",
                                     "mem_wait", "idle") if n != changed])
        wiring.connect(m, wiring.flipped(self.rd_req), inner.rd_req)
        wiring.connect(m, wiring.flipped(self.wr_req), inner.wr_req)
        toggle = Signal()
        m.d.sync += toggle.eq(~toggle)
        if self.fault == "extra_beat":
            m.d.comb += [self.rd_data.payload.eq(inner.rd_data.payload),
                         self.rd_data.valid.eq(inner.rd_data.valid | toggle),
                         inner.rd_data.ready.eq(self.rd_data.ready)]
        else:
            wiring.connect(m, inner.rd_data, wiring.flipped(self.rd_data))
        if self.fault == "arvalid_drops":
            m.d.comb += self.m_axi_arvalid.eq(inner.m_axi_arvalid & ~toggle)
        elif self.fault == "arlen_plus_one":
            m.d.comb += self.m_axi_arlen.eq(inner.m_axi_arlen + 1)
        elif self.fault == "wdata_flips":
            m.d.comb += self.m_axi_wdata.eq(inner.m_axi_wdata ^ toggle)
        elif self.fault == "wlast_dropped":
            m.d.comb += self.m_axi_wlast.eq(inner.m_axi_wlast & ~toggle)
        elif self.fault == "idle_always":
            m.d.comb += self.idle.eq(1)
        elif self.fault == "rready_always":
            m.d.comb += self.m_axi_rready.eq(1)
        return m
