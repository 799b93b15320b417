"""AXI4 master in front of an engine's private memory streams.

An engine talks to memory through three streams (see
:func:`~bertforge.rtl.engine.engine_members`): ``rd_req`` (read ``beats``
beats of consecutive bytes from byte ``addr`` on, any alignment),
``rd_data`` (the beats, in request order) and ``wr_req`` (write the low
``bytes`` bytes of ``data`` at byte ``addr``, any alignment).
:class:`AxiMaster` serves them on one AXI4 master port, named as
Xilinx/ARM IP name it (``m_axi_awaddr``, ..., ``m_axi_rready``), so a block
design or a LiteX SoC connects it by name.

Reads. A request becomes the aligned words that cover it (``beats`` words,
one more when ``addr`` is not aligned), issued as INCR bursts of at most
``max_burst`` beats that never cross a 4 KB boundary, at most
``max_reads`` bursts in flight. Every burst has the same ID, so the slave
answers in order; the returned words are realigned (a byte shifter over
two words) into the beats the engine asked for. ``rready`` is the engine's
``rd_data.ready`` (full backpressure; the first word of an unaligned
request is taken at once).

Writes. A request becomes one or two aligned words (beats) with ``WSTRB``
marking its bytes (its data rotated into their byte lanes; the lanes
outside ``WSTRB`` carry don't-care bytes); a two-word request is taken
with its second beat, a cycle after its first. Consecutive beats become INCR bursts: a beat to the
word of the beat before it merges into that beat, a beat to the next word
continues the burst; a burst ends at ``max_burst`` beats, at a 4 KB
boundary, at a beat elsewhere, or after two cycles without a beat (so an
engine writing a row a word or two a cycle writes it in bursts). At most
``max_writes`` bursts wait for their response. Addresses and beats wait in
two queues of 4 whose heads drive AW and W independently (W does not wait
for AW's handshake, nor AW for W's; a burst's first beats are offered
before its AW, which AXI allows): one write a cycle when the slave keeps
up (two-word writes take two). A slave that takes no W beat before its
burst's AW still gets every burst, shorter (the open burst closes when
the full W queue has stopped the beats for two cycles).

Every channel follows AXI's handshake rules: ``*valid`` comes from a
register or a queue's head, held with a stable payload until ``*ready``,
and never waits for ``*ready``. ``bready`` is always high.

Errors. A read or write response other than OKAY sets :attr:`error` to a
code (the first error is kept until ``error_clear``); the data of a failed
read still reaches the engine and the failed write is still counted, so the
engine finishes its command and nothing hangs. Codes: :data:`ERR_READ_SLVERR`,
:data:`ERR_READ_DECERR`, :data:`ERR_WRITE_SLVERR`, :data:`ERR_WRITE_DECERR`.

The data width equals the engine's ``mem_width`` (no width conversion).
Addresses are the engine's (``inner_addr_width`` bits), zero-extended on
the bus: the master keeps only those bits, so a request that runs past the
top of the engine's address space continues at its bottom (as the top's
program fetcher's address does).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .params import check_choice, check_int
from .stream import Queue

__all__ = ["AxiMaster", "axi4_members", "AXI_DATA_WIDTHS", "AXI_ADDR_WIDTHS", "ERR_READ_SLVERR",
           "ERR_READ_DECERR", "ERR_WRITE_SLVERR", "ERR_WRITE_DECERR", "forward_ports",
           "MAX_WRITE_BURST"]

#: Supported AXI data widths (bits).
AXI_DATA_WIDTHS = (32, 64, 128, 256, 512)
#: Supported AXI address widths (bits).
AXI_ADDR_WIDTHS = (32, 64)

ERR_READ_SLVERR = 1
ERR_READ_DECERR = 2
ERR_WRITE_SLVERR = 3
ERR_WRITE_DECERR = 4

#: Most beats of a write burst (with ``max_burst``) and the W queue's depth:
#: a burst waits whole in the W queue for its AW while the next one fills.
MAX_WRITE_BURST = 8
W_QUEUE = 2 * MAX_WRITE_BURST

_BURST_INCR = 1
_CACHE = 0b0011      # normal, non-cacheable, bufferable (the Xilinx default)


def axi4_members(prefix, *, addr_width, data_width, id_width):
    """The flat ports of an AXI4 master named ``{prefix}_awaddr`` and so on
    (a master's view: ``Out`` for what it drives)."""
    p = prefix
    members = {}
    for ch in ("aw", "ar"):
        members.update({
            f"{p}_{ch}id": Out(id_width), f"{p}_{ch}addr": Out(addr_width), f"{p}_{ch}len": Out(8),
            f"{p}_{ch}size": Out(3), f"{p}_{ch}burst": Out(2), f"{p}_{ch}lock": Out(1),
            f"{p}_{ch}cache": Out(4), f"{p}_{ch}prot": Out(3), f"{p}_{ch}qos": Out(4),
            f"{p}_{ch}valid": Out(1), f"{p}_{ch}ready": In(1)})
    members.update({
        f"{p}_wdata": Out(data_width), f"{p}_wstrb": Out(data_width // 8), f"{p}_wlast": Out(1),
        f"{p}_wvalid": Out(1), f"{p}_wready": In(1),
        f"{p}_bid": In(id_width), f"{p}_bresp": In(2), f"{p}_bvalid": In(1), f"{p}_bready": Out(1),
        f"{p}_rid": In(id_width), f"{p}_rdata": In(data_width), f"{p}_rresp": In(2),
        f"{p}_rlast": In(1), f"{p}_rvalid": In(1), f"{p}_rready": Out(1)})
    return members


def forward_ports(m, outer, inner, names):
    """Connect the flat ports ``names`` of the component ``inner`` to the
    same-named ports of ``outer`` (which contains it), by direction."""
    for name in names:
        member = inner.signature.members[name]
        a, b = getattr(outer, name), getattr(inner, name)
        m.d.comb += (a.eq(b) if member.flow == Out else b.eq(a))


class AxiMaster(wiring.Component):
    """Serves an engine's ``rd_req`` / ``rd_data`` / ``wr_req`` streams on an
    AXI4 master port (see the module doc).

    Latency and throughput: a read request's first AR is offered 2 cycles
    after the request is taken (latched, then armed), one AR every 2
    cycles; read data reaches ``rd_data`` in the cycle it arrives on R (an
    unaligned request's first word is held a cycle). A write's beat is
    offered on W 3 cycles after the builder takes it (held a cycle, then
    the queue; a two-word request's first beat is taken a cycle before the
    request), its burst's AW 2 cycles after the burst closes; one write a
    cycle (a two-word write: two, taken in the second).

    Parameters
    ----------
    data_width : int
        AXI data width: 32, 64, 128, 256 or 512 bits; the engine's
        ``mem_width``.
    addr_width : int
        AXI address width: 32 or 64.
    inner_addr_width : int
        The engine's byte address width (at most ``addr_width``; zero-extended).
    request_beats : int
        Most beats of one ``rd_req``.
    id_width : int
        Width of ``m_axi_awid`` / ``arid`` / ``bid`` / ``rid`` (1 to 16);
        every transaction uses ``id``.
    id : int
        The ID of every transaction.
    max_burst : int
        Most beats of one burst (1 to 256).
    max_reads, max_writes : int
        Most read bursts in flight, write bursts awaiting their response
        (1 to 255).

    Attributes
    ----------
    rd_req, rd_data, wr_req
        The engine's streams (flipped: this component serves them).
    m_axi_*
        The AXI4 master port.
    error : Out(3)
        The first error's code (0: none), held until ``error_clear``.
    error_clear : In(1)
    idle : Out(1)
        Nothing in flight (every request answered).
    bytes_read, bytes_written : Out(range(data_width // 8 + 1))
        Bytes read (a beat taken on R) and written (a request taken) this
        cycle, for the performance counters.
    mem_wait : Out(1)
        The engine waits on memory this cycle (read data it can take is
        not there, or a write it offers is not taken).
    """

    def __init__(self, *, data_width, addr_width=32, inner_addr_width=32, request_beats=4,
                 id_width=1, id=0, max_burst=16, max_reads=4, max_writes=4):
        self.data_width = check_choice("data_width", data_width, AXI_DATA_WIDTHS)
        self.addr_width = check_choice("addr_width", addr_width, AXI_ADDR_WIDTHS)
        self.inner_addr_width = check_int("inner_addr_width", inner_addr_width, maximum=addr_width)
        self.request_beats = check_int("request_beats", request_beats, maximum=255)
        self.id_width = check_int("id_width", id_width, maximum=16)
        self.id = check_int("id", id, minimum=0, maximum=(1 << id_width) - 1)
        self.max_burst = check_int("max_burst", max_burst, maximum=256)
        self.max_reads = check_int("max_reads", max_reads, maximum=255)
        self.max_writes = check_int("max_writes", max_writes, maximum=255)
        MB = data_width // 8
        self.read_layout = data.StructLayout({"addr": unsigned(inner_addr_width),
                                              "beats": range(request_beats + 1)})
        self.write_layout = data.StructLayout({"addr": unsigned(inner_addr_width),
                                               "data": unsigned(data_width),
                                               "bytes": range(MB + 1)})
        self.axi_names = list(axi4_members("m_axi", addr_width=addr_width, data_width=data_width,
                                           id_width=id_width))
        super().__init__({
            "rd_req": In(stream.Signature(self.read_layout)),
            "rd_data": Out(stream.Signature(unsigned(data_width))),
            "wr_req": In(stream.Signature(self.write_layout)),
            **axi4_members("m_axi", addr_width=addr_width, data_width=data_width, id_width=id_width),
            "error": Out(3), "error_clear": In(1), "idle": Out(1),
            "bytes_read": Out(range(MB + 1)), "bytes_written": Out(range(MB + 1)),
            "mem_wait": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W, MB = self.data_width, self.data_width // 8
        mbb = MB.bit_length() - 1
        page = 4096 // MB                      # words per 4 KB page
        # Word address bits: the engine's addresses, zero-extended on the
        # bus (the bits above them are constant 0, so not stored).
        wa = max(self.inner_addr_width - mbb, 1)
        size = Const(mbb, 3)
        for ch in ("aw", "ar"):
            m.d.comb += [getattr(self, f"m_axi_{ch}id").eq(self.id),
                         getattr(self, f"m_axi_{ch}size").eq(size),
                         getattr(self, f"m_axi_{ch}burst").eq(_BURST_INCR),
                         getattr(self, f"m_axi_{ch}cache").eq(_CACHE)]

        error = Signal(3)
        with m.If(self.error_clear):
            m.d.sync += error.eq(0)
        m.d.comb += self.error.eq(error)

        def fail(code):
            with m.If(error == 0):
                m.d.sync += error.eq(code)

        def burst_of(to_page, left):
            """Beats of the next burst with ``to_page`` words to the 4 KB page's
            end and ``left`` words to go."""
            # (no limit where ``left``'s width keeps it within max_burst)
            limit = (Mux(left > self.max_burst, self.max_burst, left)
                     if (1 << len(left)) - 1 > self.max_burst else left)
            # ``to_page`` is taken only below ``limit``: its low bits suffice
            return Mux(limit > to_page, to_page[:len(limit)], limit)

        # ---- reads: requests -> bursts ------------------------------------------
        meta_layout = data.StructLayout({"off": range(MB), "beats": range(self.request_beats + 1)})
        meta = m.submodules.read_meta = Queue(shape=meta_layout, depth=self.max_reads + 1)
        cur = Signal(wa)
        left = Signal(range(self.request_beats + 2))
        ar_valid = Signal()
        ar_word = Signal(wa)
        ar_len = Signal(8)
        r_out = Signal(range(self.max_reads + 1))      # bursts armed and not finished
        req = self.rd_req.payload
        off = req.addr[:mbb] if mbb else Const(0, 1)
        take_req = Signal()
        # ``left == 0``, registered: keeps the burst arithmetic off the
        # engine's ``rd_req.ready`` (a 100 MHz critical path on ECP5).
        left_zero = Signal(init=1)
        m.d.comb += [
            take_req.eq(left_zero & meta.i.ready),
            self.rd_req.ready.eq(take_req),
            meta.i.payload.off.eq(off), meta.i.payload.beats.eq(req.beats),
            meta.i.valid.eq(self.rd_req.valid & take_req & (req.beats != 0)),
        ]
        # Words from ``cur`` to the end of its 4 KB page, kept beside ``cur``
        # (not computed from it: a subtraction off the 100 MHz path).
        pb = page.bit_length() - 1
        to_page = Signal(range(page + 1))
        with m.If(self.rd_req.valid & take_req):
            m.d.sync += [cur.eq(req.addr >> mbb),
                         to_page.eq(page - (req.addr >> mbb)[:pb] if pb else 1),
                         left.eq(Mux(req.beats == 0, 0, req.beats + (off != 0))),
                         left_zero.eq(req.beats == 0)]
        arm_r = (left != 0) & ~ar_valid & (r_out < self.max_reads)
        burst = burst_of(to_page, left)
        with m.If(arm_r):
            m.d.sync += [ar_valid.eq(1), ar_word.eq(cur), ar_len.eq(burst - 1),
                         cur.eq(cur + burst), left.eq(left - burst), left_zero.eq(left == burst),
                         to_page.eq(Mux(to_page == burst, page, to_page - burst))]
        with m.Elif(self.m_axi_arready):
            m.d.sync += ar_valid.eq(0)
        m.d.comb += [self.m_axi_arvalid.eq(ar_valid), self.m_axi_araddr.eq(ar_word << mbb),
                     self.m_axi_arlen.eq(ar_len)]
        r_take = self.m_axi_rvalid & self.m_axi_rready
        r_done = r_take & self.m_axi_rlast
        m.d.sync += r_out.eq(r_out + arm_r - r_done)
        with m.If(r_take & self.m_axi_rresp[1]):
            fail(Mux(self.m_axi_rresp[0], ERR_READ_DECERR, ERR_READ_SLVERR))

        # ---- reads: words -> the engine's beats (realigned) -----------------------
        head = meta.o.payload
        prev = Signal(W)
        have_prev = Signal()
        count = Signal(range(self.request_beats + 1))
        out = self.rd_data
        rdata = self.m_axi_rdata
        aligned = head.off == 0
        m.d.comb += out.payload.eq(Mux(aligned, rdata, (Cat(prev, rdata) >> (head.off * 8))[:W]))
        with m.If(meta.o.valid):
            with m.If(~aligned & ~have_prev):
                m.d.comb += self.m_axi_rready.eq(1)
                with m.If(self.m_axi_rvalid):
                    m.d.sync += [prev.eq(rdata), have_prev.eq(1)]
            with m.Else():
                m.d.comb += [out.valid.eq(self.m_axi_rvalid), self.m_axi_rready.eq(out.ready)]
                with m.If(out.valid & out.ready):
                    m.d.sync += [prev.eq(rdata), count.eq(count + 1)]
                    with m.If(count == head.beats - 1):
                        m.d.sync += [count.eq(0), have_prev.eq(0)]
                        m.d.comb += meta.o.ready.eq(1)
        m.d.comb += self.bytes_read.eq(Mux(r_take, MB, 0))

        # ---- writes: requests -> beats ---------------------------------------------
        wr = self.wr_req.payload
        w_off = wr.addr[:mbb] if mbb else Const(0, 1)
        # The request's bytes rotated into their byte lanes: its first word's
        # beat has the low strobes, the second word's (bytes past the first
        # word's end) the high ones; lanes outside WSTRB carry don't-cares.
        # A lane's strobe compares it with the request's first and end lanes
        # (no shifted constant); the second word's top lane is never written
        # (a request of at most a word starts in the first).
        rotated = Signal(W)
        strobes = Signal(2 * MB - 1)
        w_end = Signal(range(2 * MB))
        w_word = Signal(wa)
        m.d.comb += [rotated.eq((Cat(wr.data, wr.data) << (w_off * 8))[W:]),
                     w_end.eq(w_off + wr.bytes),
                     strobes.eq(Cat((w_off <= lane) & (w_end > lane)
                                    for lane in range(2 * MB - 1))),
                     w_word.eq(wr.addr[mbb:])]
        two = w_end > MB     # the bytes run into the next word
        hold_word = Signal(wa)      # the burst builder's held beat's word (below)
        # the word after it (wrapping at the top of the engine's addresses,
        # where the held word ends a 4 KB page, so no burst goes on past it)
        next_word = Signal(wa)
        m.d.comb += next_word.eq(hold_word + 1)
        # A request is one beat (its word) or two: the second word's beat
        # follows in the next cycle from the request, still offered
        # (``second``: taken with its last beat), to the held word's next.
        second = Signal()
        beat_ready = Signal()       # the burst builder takes a beat this cycle
        take_wr = beat_ready & (second | ~two)
        beat_valid = self.wr_req.valid & (wr.bytes != 0) & beat_ready
        beat_word = Signal(wa)
        beat_data = rotated
        beat_strb = Signal(MB)
        m.d.comb += [beat_word.eq(Mux(second, next_word, w_word)),
                     beat_strb.eq(Mux(second, strobes[MB:], strobes[:MB])),
                     self.wr_req.ready.eq(take_wr)]
        with m.If(beat_valid):
            m.d.sync += second.eq(two & ~second)

        # ---- writes: beats -> INCR bursts -------------------------------------------
        # The newest beat waits in ``hold`` until the next one shows whether
        # the burst goes on: a beat to the same word merges into it (under
        # its WSTRB), a beat to the next word continues the burst (unless it
        # holds ``max_burst`` beats or the held word ends a 4 KB page), any
        # other beat closes it; so does a full burst, a page end, or two
        # cycles without a beat. A burst's address and length enter the AW
        # queue when it ends; its beats enter the W queue as it goes on (W
        # may lead AW), its last (WLAST) when it ends or, if the W queue is
        # full then, later (``sealed``: the AW never waits for W room, so a
        # slave that takes W only after AW cannot deadlock it). The queues'
        # heads drive AW and W independently.
        longest = min(self.max_burst, MAX_WRITE_BURST)
        awq = m.submodules.aw_queue = Queue(       # awlen < longest: its bits only
            shape=data.StructLayout({"word": wa, "len": range(longest)}), depth=4)
        wq = m.submodules.w_queue = Queue(
            shape=data.StructLayout({"data": W, "strb": MB, "last": 1}), depth=W_QUEUE)
        hold = Signal()
        sealed = Signal()       # the held beat ends a burst whose AW is queued
        hold_data = Signal(W)
        hold_strb = Signal(MB)
        start_word = Signal(wa)
        beats = Signal(range(longest))          # beats of the open burst before the held one
        quiet = Signal()                        # no beat came last cycle
        full = beats == longest - 1
        page_end = hold_word[:page.bit_length() - 1].all() if page > 1 else Const(1)
        merge = beat_valid & (beat_word == hold_word)
        extend = beat_valid & ~sealed & (beat_word == next_word) & ~full & ~page_end
        ends = hold & ~sealed & Mux(beat_valid, ~merge & ~extend, full | page_end | quiet)
        push_aw = ends & awq.i.ready
        m.d.comb += [
            beat_ready.eq(~hold | (wq.i.ready & awq.i.ready)),
            wq.i.valid.eq(hold & wq.i.ready & Mux(beat_valid, ~merge, sealed | push_aw)),
            wq.i.payload.data.eq(hold_data), wq.i.payload.strb.eq(hold_strb),
            wq.i.payload.last.eq(~extend),
            awq.i.valid.eq(push_aw),
            awq.i.payload.word.eq(start_word), awq.i.payload.len.eq(beats),
        ]
        m.d.sync += quiet.eq(~beat_valid)
        mask = Cat(bit.replicate(8) for bit in beat_strb)
        with m.If(beat_valid):
            with m.If(hold & merge):
                m.d.sync += [hold_data.eq((hold_data & ~mask) | (beat_data & mask)),
                             hold_strb.eq(hold_strb | beat_strb)]
            with m.Else():
                m.d.sync += [hold.eq(1), sealed.eq(0), hold_word.eq(beat_word),
                             hold_data.eq(beat_data), hold_strb.eq(beat_strb)]
                with m.If(hold & extend):
                    m.d.sync += beats.eq(beats + 1)
                with m.Else():
                    m.d.sync += [start_word.eq(beat_word), beats.eq(0)]
        with m.Elif(wq.i.valid):
            m.d.sync += [hold.eq(0), sealed.eq(0)]
        with m.Elif(push_aw):
            m.d.sync += sealed.eq(1)
        # W offers a burst's beats once its AW is queued (``ended`` counts the
        # bursts whose AW is queued and whose last beat has not left on W),
        # so AW comes first on the wire, never after its burst's beats.
        ended = Signal(range(W_QUEUE + 2))
        released = ended != 0
        w_done = self.m_axi_wvalid & self.m_axi_wready & self.m_axi_wlast
        m.d.sync += ended.eq(ended + push_aw - w_done)
        # At most max_writes bursts awaiting their response: AW waits (its
        # valid, once high, stays: the count only falls until it is taken).
        b_out = Signal(range(self.max_writes + 1))
        room = b_out < self.max_writes
        m.d.comb += [self.m_axi_awvalid.eq(awq.o.valid & room),
                     self.m_axi_awaddr.eq(awq.o.payload.word << mbb),
                     self.m_axi_awlen.eq(awq.o.payload.len),
                     awq.o.ready.eq(self.m_axi_awready & room),
                     self.m_axi_wvalid.eq(wq.o.valid & released),
                     self.m_axi_wdata.eq(wq.o.payload.data),
                     self.m_axi_wstrb.eq(wq.o.payload.strb), self.m_axi_wlast.eq(wq.o.payload.last),
                     wq.o.ready.eq(self.m_axi_wready & released)]
        m.d.comb += self.m_axi_bready.eq(1)
        aw_take = self.m_axi_awvalid & self.m_axi_awready
        b_take = self.m_axi_bvalid
        m.d.sync += b_out.eq(b_out + aw_take - b_take)
        with m.If(b_take & self.m_axi_bresp[1]):
            fail(Mux(self.m_axi_bresp[0], ERR_WRITE_DECERR, ERR_WRITE_SLVERR))
        m.d.comb += self.bytes_written.eq(Mux(self.wr_req.valid & take_wr, wr.bytes, 0))
        writes_idle = (~second & ~hold & (ended == 0) & (awq.level == 0) & (wq.level == 0) & ~awq.i.valid
                       & ~wq.i.valid & (b_out == 0))

        m.d.comb += [
            self.idle.eq((left == 0) & ~ar_valid & (r_out == 0) & (meta.level == 0) & ~meta.i.valid
                         & writes_idle),
            self.mem_wait.eq((out.ready & ~out.valid & meta.o.valid)
                             | (self.wr_req.valid & ~take_wr)),
        ]
        return m
