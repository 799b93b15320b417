"""The formal properties of the boards' UART host link,
:class:`~bertforge.rtl.host_link.HostLink` (block ``host_link``; see
:mod:`bertforge.sim.formal`).

:class:`HostLinkSpec`: a frame with a bad CRC never writes memory or starts
a run (k-induction, with invariants tying the link's parser to the spec's
own), on top of the link's :class:`~bertforge.sim.formal_specs.StreamSpec`.
"""

import dataclasses

from amaranth.hdl import Fragment, Mux, Signal

from bertforge.rtl.host_link import BAD_CRC, READ_LATENCY, SYNC_HOST, WRITE, HostLink, crc8_step
from .formal_specs import StreamSpec, Timing, internal_signal, stream_proofs, took

__all__ = ["host_link_environment", "HostLinkSpec", "host_link_proofs"]


def _state_is(fsm, codes, names, number):
    """``number`` is the index in ``names`` of the state ``fsm`` is in."""
    test = 0
    for index, name in enumerate(names):
        test = test | ((fsm == codes[name]) & (number == index))
    return test


def host_link_environment(spec, m, link):
    """``mem_rdata`` as the link's memory bus promises it: any value, that
    changes only in the ``READ_LATENCY`` cycles after a ``mem_re`` (and is
    held from then until the next ``mem_re``)."""
    rdata = link.mem_rdata
    m.d.comb += rdata.eq(spec.any_seq(m, len(rdata), "mem_rdata"))
    since = Signal(range(READ_LATENCY + 1), init=READ_LATENCY)   # cycles since mem_re
    m.d.sync += since.eq(Mux(link.mem_re, 0, Mux(since == READ_LATENCY, since, since + 1)))
    started = spec.past(m, 1, "started")
    before = spec.past(m, rdata, "mem_rdata")
    spec.assume(m, ~started | (since < READ_LATENCY) | (rdata == before))
    return {"mem_rdata"}


class HostLinkSpec(StreamSpec):
    """:class:`StreamSpec` of a :class:`~bertforge.rtl.host_link.HostLink`
    (``mem_rdata`` from :func:`host_link_environment`), and a frame with a
    bad CRC never writes memory or starts a run.

    The spec parses the bytes the link takes on ``rx`` itself (sync byte,
    command, two length bytes, ``length`` payload bytes, CRC-8 of the
    command, length and payload) and keeps whether the last whole frame's
    CRC was right: ``bad_crc_never_writes`` (``mem_we`` only after a frame
    whose CRC was right), ``bad_crc_never_runs`` (``run_start`` only in the
    cycle the link takes a right CRC byte); the covers ``good_frame_writes``
    and ``bad_frame_rejected`` (a bad CRC is taken and answered ``BAD_CRC``)
    show both kinds of frame are reached.
    """

    PROPERTIES = ("crc_tracks", "bad_crc_never_writes", "bad_crc_never_runs",
                  "good_frame_writes", "bad_frame_rejected")

    def instantiate(self, m, platform):
        link = self.make()
        fragment = Fragment.get(link.elaborate(platform), platform)   # to reach its CRC
        link._MustUse__used = True             # elaborated here, by hand
        self.link = {name: internal_signal(fragment, name)
                     for name in ("crc", "length", "count", "command", "fsm_state")}
        fsm = self.link["fsm_state"]
        #: The code of each of the link's FSM states, by name.
        self.codes = {}
        for code in range(1 << len(fsm)):
            try:
                self.codes[fsm.decoder(code).split("/")[0]] = code
            except KeyError:
                pass
        m.submodules.dut = fragment
        return link

    def build(self, m, platform):
        super().build(m, platform)
        link = self.dut
        rx = link.rx
        took = rx.valid & rx.ready
        byte = rx.payload
        state = Signal(range(6))           # sync, command, len_lo, len_hi, payload, crc
        crc = Signal(8)
        length = Signal(16)
        count = Signal(16)
        good = Signal()                    # the last whole frame's CRC was right
        at_crc = took & (state == 5)
        with m.If(took):
            with m.Switch(state):
                with m.Case(0):
                    with m.If(byte == SYNC_HOST):
                        m.d.sync += [state.eq(1), crc.eq(0), count.eq(0)]
                with m.Case(1):
                    m.d.sync += [state.eq(2), crc.eq(crc8_step(crc, byte))]
                with m.Case(2):
                    m.d.sync += [state.eq(3), crc.eq(crc8_step(crc, byte)), length[:8].eq(byte)]
                with m.Case(3):
                    m.d.sync += [crc.eq(crc8_step(crc, byte)), length[8:].eq(byte),
                                 state.eq(Mux((byte == 0) & (length[:8] == 0), 5, 4))]
                with m.Case(4):
                    m.d.sync += [crc.eq(crc8_step(crc, byte)), count.eq(count + 1)]
                    with m.If(count + 1 == length):
                        m.d.sync += state.eq(5)
                with m.Case(5):
                    m.d.sync += [state.eq(0), good.eq(byte == crc)]
        # The invariants the other two need: the link's parser is where the
        # spec's is (its FSM state, CRC, length and count), and it writes
        # only after a good frame. (With them the checks are local instead
        # of the equivalence of two CRC networks over a whole frame.)
        inner, codes = self.link, self.codes
        fsm = inner["fsm_state"]
        parse = ("sync", "command", "len_lo", "len_hi", "payload", "crc")
        in_parse = 0
        for name in parse:
            in_parse = in_parse | (fsm == codes[name])
        self.check(m, "state_tracks", Mux(in_parse, _state_is(fsm, codes, parse, state),
                                          state == 0))
        self.check(m, "crc_tracks", (state == 0) | (inner["crc"] == crc))
        self.check(m, "length_tracks", ((state < 3) | (inner["length"][:8] == length[:8]))
                   & ((state < 4) | (inner["length"] == length))
                   & ((state != 4) | (inner["count"] == count))
                   & ((state == 0) | (state > 3) | ((inner["count"] == 0) & (count == 0))))
        self.check(m, "writes_after_good",
                   ~((fsm == codes["write_read"]) | (fsm == codes["write_mem"])) | good)
        self.check(m, "bad_crc_never_writes", ~link.mem_we | good)
        self.check(m, "bad_crc_never_runs", ~link.run_start | (at_crc & (byte == crc)))
        self.cover(m, "good_frame_writes", link.mem_we)
        self.cover(m, "bad_frame_rejected",
                   ~good & link.tx.valid & link.tx.ready & (link.tx.payload == BAD_CRC)
                   & (link.bad_frames == 1))


_HOST_INVARIANTS = ("crc_tracks", "state_tracks", "length_tracks", "writes_after_good")


def _host_link_start(spec, link):
    """A frame's CRC byte taken (the link's own parser at its ``crc``
    state), the frame not a WRITE (whose reply waits until its bytes are
    written, 2 cycles each)."""
    inner = spec.link
    return (took(link.rx) & (inner["fsm_state"] == spec.codes["crc"])
            & (inner["command"] != WRITE))


def _run_at_once(spec, m, link):
    """The design behind the link: a run ends in the cycle after it starts."""
    m.d.comb += [link.run_done.eq(1), link.run_error.eq(0)]
    return {"run_done", "run_error"}


def host_link_proofs(*, make=None, label="design_id=1"):
    """The proofs of the UART host link (``make``: a stand-in such as a
    broken copy): the stream rules on ``tx`` by k-induction; a bad CRC
    never writes or runs by k-induction (with the parser invariants); the
    covers within 12 cycles (a WRITE frame of one data byte is 9 bytes);
    ``tx_valid_before_ready``: with ``tx.ready`` always low, the reply's
    first byte is offered within 2 cycles of a frame's CRC byte (the
    cycle after it, after a RUN the cycle after ``run_done``; a WRITE
    frame excluded), frames whose CRC byte comes within 8 cycles of reset."""
    make = make or (lambda: HostLink(design_id=1))
    timing = Timing(start=_host_link_start, bound=2, lead=8, environment=_run_at_once)
    proofs = stream_proofs(
        "host_link", label, make, timing=timing, first_output=12, spec=HostLinkSpec,
        environment=host_link_environment, cone=False,      # its frame buffer is 8 kbit
        overrides={"bad_crc_never_writes": ("prove", 4), "bad_crc_never_runs": ("prove", 4),
                   "good_frame_writes": ("cover", 12), "bad_frame_rejected": ("cover", 12)},
        quick=("tx_valid_held", "bad_crc_never_runs", "tx_valid_before_ready"))
    return [dataclasses.replace(p, together=_HOST_INVARIANTS) if p.name.startswith("bad_crc")
            else p for p in proofs]
