"""Formal properties of the AXI4-Lite register file
(:class:`~bertforge.rtl.axi_regs.AxiLiteRegisters`, bertforge's map) with
the ``prove`` kit (:mod:`bertforge.sim.formal`), run by ``bertforge prove
axi_regs``.

The environment: an AXI4-Lite master that holds ``awvalid``, ``wvalid``
and ``arvalid`` with their payloads until taken (any address, data,
strobes, at any time) and drives ``bready`` / ``rready`` at will; the
hardware's inputs (``r`` fields, the ``_set`` of ``w1c`` fields) are free.
Properties, each proved by k-induction:

- ``b_valid_held``, ``b_payload_held``, ``r_valid_held``,
  ``r_payload_held``: AXI's handshake rules on the slave's B and R channels
  (valid held until ready, BRESP / RDATA and RRESP stable while waiting);
- ``writes_answered``, ``reads_answered``: one response per request: B is
  offered exactly while a taken AW and its W (taken together) are
  unanswered (at most one), R exactly while a taken AR is unanswered (at
  most one);
- ``requests_taken``: with no response pending, an AR is taken at once, and
  an AW with its W (the slave never leaves a request waiting for nothing);
- ``bresp_decoded``, ``rresp_decoded``: a response is OKAY exactly when
  its request named a register (a read) or a register with a
  software-writable field (a write), else SLVERR (never DECERR);
- ``read_data``: a read returns the register at its address when the AR was
  taken, assembled by the spec from the map's fields (constants, the
  hardware's ``r`` inputs, the stored ``rw`` and ``w1c`` values, 0 for
  ``pulse`` fields), and 0 at an unmapped address;
- ``rw_follows_writes``: every ``rw`` field changes only by a write to its
  register, to its old bits under ``~WSTRB`` and the new bits under it
  (so unmapped writes change nothing); ``pulse_follows_writes``: a
  ``pulse`` field is high exactly the cycle after a write of 1 to it;
- ``irq_status_w1c``: each ``IRQ_STATUS`` bit becomes (old and not written
  1) or set by the hardware (a set wins);
- ``irq_matches``: ``irq`` = OR of (``IRQ_ENABLE`` and ``IRQ_STATUS``);
- ``reaches_irq_cleared`` (cover): an enabled status bit raises ``irq``
  and a write of 1 clears it (the assumptions leave something to prove).

Broken copies (:class:`BrokenRegisters`) show that each proof bites.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring

from bertforge.rtl.axi import forward_ports
from bertforge.rtl.axi_regs import (RESP_OKAY, RESP_SLVERR, AxiLiteRegisters, field_port,
                                    is_writable)

from .formal import Proof, Spec

__all__ = ["AxiRegsSpec", "BrokenRegisters", "axi_regs_proofs", "FAULTS"]


class AxiRegsSpec(Spec):
    PROPERTIES = ("b_valid_held", "b_payload_held", "r_valid_held", "r_payload_held",
                  "writes_answered", "reads_answered", "requests_taken", "bresp_decoded",
                  "rresp_decoded", "read_data", "rw_follows_writes", "pulse_follows_writes",
                  "irq_status_w1c", "irq_matches", "reaches_irq_cleared")

    def held(self, m, name, valid, ready, payload):
        stalled = self.past(m, valid & ~ready, f"{name}_stalled")
        before = self.past(m, payload, f"{name}_payload")
        self.check(m, f"{name}_valid_held", ~stalled | valid)
        self.check(m, f"{name}_payload_held", ~stalled | (payload == before))

    def hold_in(self, m, valid, ready, payload, name):
        """``valid`` and ``payload`` (inputs) free, held until ``ready``."""
        payload = Value.cast(payload)
        m.d.comb += [valid.eq(self.any_seq(m, 1, f"{name}valid")),
                     payload.eq(self.any_seq(m, len(payload), f"{name}_payload"))]
        stalled = self.past(m, valid & ~ready, f"{name}_stalled")
        before = self.past(m, payload, f"{name}_before")
        self.assume(m, ~stalled | (valid & (payload == before)))

    def build(self, m, platform):
        dut = m.submodules.dut = (self.make or AxiLiteRegisters)()
        regs = dut.registers
        p = "s_axi_"

        def port(name):
            return getattr(dut, p + name)

        # The master.
        self.hold_in(m, port("awvalid"), port("awready"), Cat(port("awaddr"), port("awprot")), "aw")
        self.hold_in(m, port("wvalid"), port("wready"), Cat(port("wdata"), port("wstrb")), "w")
        self.hold_in(m, port("arvalid"), port("arready"), Cat(port("araddr"), port("arprot")), "ar")
        for name in ("bready", "rready"):
            m.d.comb += port(name).eq(self.any_seq(m, 1, name))
        # The hardware's inputs.
        for reg in regs:
            for f in reg["fields"]:
                name = field_port(reg, f)
                if f["kind"] == "r":
                    m.d.comb += getattr(dut, name).eq(self.any_seq(m, f["width"], name))
                elif f["kind"] == "w1c":
                    m.d.comb += getattr(dut, name + "_set").eq(
                        self.any_seq(m, f["width"], name + "_set"))

        aw_take = port("awvalid") & port("awready")
        w_take = port("wvalid") & port("wready")
        ar_take = port("arvalid") & port("arready")
        b_take = port("bvalid") & port("bready")
        r_take = port("rvalid") & port("rready")

        # Handshake rules on B and R.
        self.held(m, "b", port("bvalid"), port("bready"), port("bresp"))
        self.held(m, "r", port("rvalid"), port("rready"), Cat(port("rdata"), port("rresp")))

        # One response per request.
        aw_open, w_open, ar_open = (Signal(range(4), name=f"{ch}_open") for ch in ("aw", "w", "ar"))
        m.d.sync += [aw_open.eq(aw_open + aw_take - b_take), w_open.eq(w_open + w_take - b_take),
                     ar_open.eq(ar_open + ar_take - r_take)]
        self.check(m, "writes_answered", (aw_open <= 1) & (aw_open == w_open)
                   & (port("bvalid") == (aw_open != 0)))
        self.check(m, "reads_answered", (ar_open <= 1) & (port("rvalid") == (ar_open != 0)))
        self.check(m, "requests_taken",
                   (~(port("arvalid") & ~port("rvalid")) | port("arready"))
                   & (~(port("awvalid") & port("wvalid") & ~port("bvalid"))
                      | (port("awready") & port("wready"))))
        def resp(hit):
            return Mux(hit, RESP_OKAY, RESP_SLVERR)
        words = port("awaddr")[2:], port("araddr")[2:]
        b_expected, r_expected = Signal(2, name="b_expected"), Signal(2, name="r_expected")
        with m.If(aw_take):
            m.d.sync += b_expected.eq(resp(Cat(words[0] == reg["offset"] >> 2
                                               for reg in regs if is_writable(reg)).any()))
        with m.If(ar_take):
            m.d.sync += r_expected.eq(resp(Cat(words[1] == reg["offset"] >> 2
                                               for reg in regs).any()))
        self.check(m, "bresp_decoded", ~port("bvalid") | (port("bresp") == b_expected))
        self.check(m, "rresp_decoded", ~port("rvalid") | (port("rresp") == r_expected))

        # Read data: the register at the AR's address when it was taken.
        word = port("araddr")[2:]
        value = Const(0, 32)
        for reg in regs:
            bits = Const(0, 32)
            for f in reg["fields"]:
                if f["kind"] == "const":
                    field = Const(f["reset"], f["width"])
                elif f["kind"] == "pulse":
                    field = Const(0, f["width"])
                else:
                    field = getattr(dut, field_port(reg, f))
                bits = bits | (field.as_unsigned() << f["lsb"])[:32]
            value = (word == reg["offset"] >> 2).replicate(32) & bits | value
        expected = Signal(32)
        with m.If(ar_take):
            m.d.sync += expected.eq(value)
        self.check(m, "read_data", ~port("rvalid") | (port("rdata") == expected))

        # Writes: rw fields, pulses, W1C status.
        mask = Cat(bit.replicate(8) for bit in port("wstrb"))
        write = aw_take & w_take
        rw_ok = pulse_ok = w1c_ok = Const(1)
        for reg in regs:
            hit = self.past(m, write & (port("awaddr")[2:] == reg["offset"] >> 2),
                            f"hit_{reg['name']}")
            strobe = self.past(m, mask, f"mask_{reg['name']}")
            data = self.past(m, port("wdata"), f"wdata_{reg['name']}")
            for f in reg["fields"]:
                name = field_port(reg, f)
                lo, hi = f["lsb"], f["lsb"] + f["width"]
                now = getattr(dut, name, None)
                if f["kind"] == "rw":
                    old = self.past(m, now, name)
                    new = (old & ~strobe[lo:hi]) | (data[lo:hi] & strobe[lo:hi])
                    rw_ok = rw_ok & (now == (hit.replicate(f["width"]) & new
                                             | ~hit.replicate(f["width"]) & old))
                elif f["kind"] == "pulse":
                    pulse_ok = pulse_ok & (now == (hit.replicate(f["width"])
                                                   & data[lo:hi] & strobe[lo:hi]))
                elif f["kind"] == "w1c":
                    old = self.past(m, now, name)
                    setter = self.past(m, getattr(dut, name + "_set"), name + "_set")
                    cleared = hit.replicate(f["width"]) & data[lo:hi] & strobe[lo:hi]
                    w1c_ok = w1c_ok & (now == ((old & ~cleared) | setter))
        self.check(m, "rw_follows_writes", rw_ok)
        self.check(m, "pulse_follows_writes", pulse_ok)
        self.check(m, "irq_status_w1c", w1c_ok)

        by_name = {reg["name"]: reg for reg in regs}
        pending = Cat(getattr(dut, field_port(by_name["IRQ_STATUS"], f))
                      & getattr(dut, field_port(by_name["IRQ_ENABLE"], f))
                      for f in by_name["IRQ_STATUS"]["fields"])
        self.check(m, "irq_matches", dut.irq == pending.any())
        raised = Signal()
        with m.If(dut.irq):
            m.d.sync += raised.eq(1)
        cleared = self.past(m, write & (port("awaddr")[2:] == by_name["IRQ_STATUS"]["offset"] >> 2),
                            "clear_write")
        self.cover(m, "reaches_irq_cleared", raised & ~dut.irq & cleared
                   & getattr(dut, field_port(by_name["IRQ_ENABLE"],
                                             by_name["IRQ_ENABLE"]["fields"][0])))


#: Broken copies: the property each fails and the output it changes.
BROKEN = {
    "bvalid_drops": ("b_valid_held", "s_axi_bvalid"), "bresp_flips": ("b_payload_held", "s_axi_bresp"),
    "rvalid_drops": ("r_valid_held", "s_axi_rvalid"), "rdata_flips": ("r_payload_held", "s_axi_rdata"),
    "extra_b": ("writes_answered", "s_axi_bvalid"), "extra_r": ("reads_answered", "s_axi_rvalid"),
    "ar_refused": ("requests_taken", "s_axi_arready"),
    "bresp_slverr": ("bresp_decoded", "s_axi_bresp"), "bresp_okay": ("bresp_decoded", "s_axi_bresp"),
    "rresp_decerr": ("rresp_decoded", "s_axi_rresp"), "rresp_okay": ("rresp_decoded", "s_axi_rresp"), "rdata_shifted": ("read_data", "s_axi_rdata"),
    "rw_stuck": ("rw_follows_writes", "irq_enable_done"),
    "pulse_stuck": ("pulse_follows_writes", "ctrl_start"),
    "w1c_sticky": ("irq_status_w1c", "irq_status_done"), "irq_ignores_enable": ("irq_matches", "irq"),
}
#: Broken copies and the property each fails.
FAULTS = {fault: prop for fault, (prop, _) in BROKEN.items()}


class BrokenRegisters(wiring.Component):
    """The register file with one output changed by ``fault`` (a key of
    :data:`FAULTS`), for the tests that show each proof bites."""

    def __init__(self, fault):
        self.inner = AxiLiteRegisters()
        self.inner._MustUse__silence = True
        self.registers = self.inner.registers
        self.fault = fault
        super().__init__(dict(self.inner.signature.members))

    def elaborate(self, platform):
        m = Module()
        inner = m.submodules.inner = AxiLiteRegisters()
        changed = BROKEN[self.fault][1]
        forward_ports(m, self, inner, [n for n in inner.signature.members if n != changed])
        new, old = getattr(self, changed), getattr(inner, changed)
        toggle = Signal()
        m.d.sync += toggle.eq(~toggle)
        ever = Signal()
        m.d.sync += ever.eq(ever | inner.irq_status_done_set)
        m.d.comb += new.eq({
            "bvalid_drops": old & ~toggle, "bresp_flips": old ^ toggle,
            "rvalid_drops": old & ~toggle, "rdata_flips": old ^ toggle,
            "extra_b": old | toggle, "extra_r": old | toggle,
            "ar_refused": old & ~toggle, "bresp_slverr": 2, "rresp_decerr": 3,
            "bresp_okay": 0, "rresp_okay": 0,     # the old behaviour: OKAY everywhere
            "rdata_shifted": old << 1, "rw_stuck": 0, "pulse_stuck": 0,
            "w1c_sticky": old | ever,
            "irq_ignores_enable": inner.irq_status_done | inner.irq_status_error,
        }[self.fault])
        return m


#: The proofs the default test run holds (each a few seconds; the rest ``slow``).
FAST = ("writes_answered", "read_data", "irq_status_w1c", "irq_matches", "bresp_decoded",
        "rresp_decoded")


def axi_regs_proofs(*, make=None, label=None):
    """The register file's proofs (block ``axi_regs``): k-induction of depth
    6 (its base case finds the broken copies' counterexamples), the cover
    within 8 cycles from reset."""
    label = label or "axi-lite register file (bertforge map)"
    return [Proof(block="axi_regs", name=name, config=label,
                  spec=lambda only: AxiRegsSpec(make, only=only),
                  method="cover" if name.startswith("reaches") else "prove",
                  depth=8 if name.startswith("reaches") else 6, slow=name not in FAST)
            for name in AxiRegsSpec.PROPERTIES]
