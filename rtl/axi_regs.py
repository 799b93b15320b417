"""AXI4-Lite register file built from a compiled register map.

The map is plain data (``rtl/axi_regmap.py``'s ``REGISTERS``, compiled from
the SystemRDL file by :mod:`bertforge.generators.regs`): registers with an
offset and fields with a kind. Each field becomes a port named
``{register}_{field}`` in lower case:

- ``const``: none (reads its reset value);
- ``r``: ``In(width)``, the value the hardware drives;
- ``rw``: ``Out(width)``, the stored value (reset value at reset);
- ``pulse``: ``Out(1)`` high for the cycle after a write of 1 (reads 0);
- ``w1c``: ``In(1)`` ``{register}_{field}_set`` sets it, ``Out(1)`` its value;
  writing 1 clears it (a set in the same cycle wins).

With an ``IRQ_STATUS`` and an ``IRQ_ENABLE`` register in the map, ``irq``
is high while a status field and the enable field of the same name are
both set.

Responses: a read of a register answers OKAY; a read of an unmapped
address answers SLVERR (data 0). A write to a register with a
software-writable field (``rw``, ``pulse``, ``w1c``) answers OKAY; a write
to an unmapped address, or to a register whose fields are all read-only
(``const`` / ``r``: ID, VERSION, CONFIG*, STATUS, PC, the counters),
answers SLVERR and changes nothing. (SystemRDL only says that software
writes to read-only fields have no effect; the AXI specification gives
SLVERR for an access that reached a slave which refuses it, so a driver
bug, a wrong offset or a write that cannot take effect, is reported rather
than silently lost.) The slave honours ``WSTRB`` byte by byte, and takes AW and W
together: ``awready = wready`` is high for one cycle when both are valid
and no response is pending; ``bvalid`` / ``rvalid`` come from registers
and are held until ``bready`` / ``rready``. A write answers in 1 cycle, a
read in 1 cycle.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi_regmap import REGISTERS
from .errors import ParameterError
from .params import check_int

__all__ = ["AxiLiteRegisters", "axi_lite_members", "field_port", "is_writable", "RESP_OKAY",
           "RESP_SLVERR"]

RESP_OKAY = 0
RESP_SLVERR = 2


def axi_lite_members(prefix, *, addr_width, data_width=32):
    """The flat ports of an AXI4-Lite slave named ``{prefix}_awaddr`` and so
    on (the slave's view)."""
    p = prefix
    return {
        f"{p}_awaddr": In(addr_width), f"{p}_awprot": In(3), f"{p}_awvalid": In(1),
        f"{p}_awready": Out(1),
        f"{p}_wdata": In(data_width), f"{p}_wstrb": In(data_width // 8), f"{p}_wvalid": In(1),
        f"{p}_wready": Out(1),
        f"{p}_bresp": Out(2), f"{p}_bvalid": Out(1), f"{p}_bready": In(1),
        f"{p}_araddr": In(addr_width), f"{p}_arprot": In(3), f"{p}_arvalid": In(1),
        f"{p}_arready": Out(1),
        f"{p}_rdata": Out(data_width), f"{p}_rresp": Out(2), f"{p}_rvalid": Out(1),
        f"{p}_rready": In(1),
    }


def is_writable(register):
    """Software can write ``register`` (a dict of the map): one of its fields
    is ``rw``, ``pulse`` or ``w1c``."""
    return any(f["kind"] in ("rw", "pulse", "w1c") for f in register["fields"])


def field_port(register, field):
    """The port name of ``field`` of ``register`` (dicts of the map)."""
    return f"{register['name']}_{field['name']}".lower()


class AxiLiteRegisters(wiring.Component):
    """A 32-bit AXI4-Lite register file (see the module doc).

    Parameters
    ----------
    registers : tuple
        The compiled map (default: bertforge's, ``REGISTERS``).
    addr_width : int
        Width of ``s_axi_awaddr`` / ``araddr`` (at least the map's).
    values : dict
        Constant values of ``r`` fields by port name (the hardware's
        configuration, say): those fields get no port and read the value.
    kept : dict
        Bits kept of ``rw`` fields by port name (the low ones; the others
        read their reset value, 0, and writes to them are ignored): the
        port is that wide (a field with no bit kept has no port).
    """

    def __init__(self, *, registers=REGISTERS, addr_width=8, values=None, kept=None):
        self.registers = registers
        self.values = dict(values or {})
        self.kept = dict(kept or {})
        ports = {field_port(reg, f): f for reg in registers for f in reg["fields"]}
        for name, bits in self.kept.items():
            if name not in ports or ports[name]["kind"] != "rw" or ports[name]["reset"]:
                raise ParameterError(f"kept: {name!r} is not a read-write ('rw') field's port "
                                     "with reset value 0")
            check_int(name, bits, minimum=0, maximum=ports[name]["width"])
        for name, value in self.values.items():
            if name not in ports or ports[name]["kind"] != "r":
                raise ParameterError(f"values: {name!r} is not a read-only ('r') field's port")
            check_int(name, value, minimum=0, maximum=(1 << ports[name]["width"]) - 1)
        need = max(r["offset"] for r in registers).bit_length()
        self.addr_width = check_int("addr_width", addr_width, minimum=max(need, 3), maximum=64)
        self.axi_names = list(axi_lite_members("s_axi", addr_width=addr_width))
        members = axi_lite_members("s_axi", addr_width=addr_width)
        by_name = {reg["name"]: reg for reg in registers}
        #: ``(status port, enable port)`` name pairs that raise ``irq``.
        self.irq_pairs = [(field_port(by_name["IRQ_STATUS"], f),
                           field_port(by_name["IRQ_ENABLE"], f))
                          for f in by_name.get("IRQ_STATUS", {"fields": ()})["fields"]
                          if "IRQ_ENABLE" in by_name]
        if self.irq_pairs:
            members["irq"] = Out(1)
        for reg in registers:
            for f in reg["fields"]:
                name, kind = field_port(reg, f), f["kind"]
                if kind == "r" and name not in self.values:
                    members[name] = In(f["width"])
                elif kind == "rw" and self.kept.get(name, 1):
                    members[name] = Out(self.kept.get(name, f["width"]), init=f["reset"])
                elif kind == "pulse":
                    members[name] = Out(f["width"])
                elif kind == "w1c":
                    members[name] = Out(f["width"], init=f["reset"])
                    members[name + "_set"] = In(f["width"])
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        s = self
        bvalid = Signal()
        rvalid = Signal()
        rdata = Signal(32)
        bresp = Signal(2)
        rresp = Signal(2)
        take_w = s.s_axi_awvalid & s.s_axi_wvalid & ~bvalid
        take_r = s.s_axi_arvalid & ~rvalid
        m.d.comb += [s.s_axi_awready.eq(take_w), s.s_axi_wready.eq(take_w),
                     s.s_axi_bvalid.eq(bvalid), s.s_axi_bresp.eq(bresp),
                     s.s_axi_arready.eq(take_r), s.s_axi_rvalid.eq(rvalid),
                     s.s_axi_rdata.eq(rdata), s.s_axi_rresp.eq(rresp)]
        with m.If(take_w):
            m.d.sync += bvalid.eq(1)
        with m.Elif(s.s_axi_bready):
            m.d.sync += bvalid.eq(0)
        with m.If(take_r):
            m.d.sync += rvalid.eq(1)
        with m.Elif(s.s_axi_rready):
            m.d.sync += rvalid.eq(0)

        waddr = s.s_axi_awaddr[2:]
        mask = Cat(bit.replicate(8) for bit in s.s_axi_wstrb)
        wbits = s.s_axi_wdata & mask
        # The read data: a tree of 2:1 multiplexers on the word address's
        # bits (unmapped words read 0). yosys synth_ecp5 maps a case over
        # the registers far worse in the register file alone (the 4x4 AXI
        # top's: 725 LUT4s against 319 with the tree), about the same once
        # flattened into the top.
        raddr = s.s_axi_araddr[2:]
        words = {reg["offset"] >> 2: self._read_value(reg) for reg in self.registers}
        levels = max(words).bit_length()
        in_range = raddr >> levels == 0
        with m.If(take_r):
            m.d.sync += [rdata.eq(Mux(in_range, _tree(words, raddr, 0, levels), 0)),
                         rresp.eq(Mux(in_range & Cat(raddr == word for word in words).any(),
                                      RESP_OKAY, RESP_SLVERR))]
        writable = [reg["offset"] >> 2 for reg in self.registers if is_writable(reg)]
        with m.If(take_w):
            m.d.sync += bresp.eq(Mux(Cat(waddr == word for word in writable).any(),
                                     RESP_OKAY, RESP_SLVERR))
        for reg in [reg for reg in self.registers if is_writable(reg)]:
            hit = take_w & (waddr == reg["offset"] >> 2)
            for f in reg["fields"]:
                port = getattr(self, field_port(reg, f), None)
                lo, hi = f["lsb"], f["lsb"] + f["width"]
                if f["kind"] == "rw":       # byte by byte: WSTRB enables, no merge logic
                    top = lo + self.kept.get(field_port(reg, f), f["width"])
                    for byte in range(lo // 8, (top - 1) // 8 + 1):
                        a, b = max(lo, 8 * byte), min(top, 8 * byte + 8)
                        with m.If(hit & s.s_axi_wstrb[byte]):
                            m.d.sync += port[a - lo:b - lo].eq(s.s_axi_wdata[a:b])
                elif f["kind"] == "pulse":
                    m.d.sync += port.eq(hit.replicate(f["width"]) & wbits[lo:hi])
                elif f["kind"] == "w1c":
                    setter = getattr(self, field_port(reg, f) + "_set")
                    cleared = port & ~(hit.replicate(f["width"]) & wbits[lo:hi])
                    m.d.sync += port.eq(cleared | setter)
        if self.irq_pairs:
            m.d.comb += self.irq.eq(Cat(getattr(self, status) & getattr(self, enable)
                                        for status, enable in self.irq_pairs).any())
        return m

    def _read_value(self, reg):
        """The value ``reg`` reads, up to its highest bit that is not
        constant 0: its fields at their bits in one ``Cat`` (zeros
        between), a register whose fields are all constant one ``Const``.
        No constant bit is emitted above a register's live ones, nor as an
        intermediate (an OR of each field shifted to its place left about
        2,860 constant toggle points in the AXI top's register file, and
        32-bit words in its read multiplexer a few hundred more)."""
        parts, at = [], 0
        for f in sorted(reg["fields"], key=lambda f: f["lsb"]):
            name = field_port(reg, f)
            if f["kind"] == "const":
                value = Const(f["reset"], f["width"])
            elif f["kind"] == "pulse" or self.kept.get(name) == 0:
                value = Const(0, f["width"])
            elif name in self.values:
                value = Const(self.values[name], f["width"])
            else:       # an rw field reads its kept bits (its port's), the others 0
                value = getattr(self, name)
            if f["lsb"] > at:
                parts.append(Const(0, f["lsb"] - at))
            parts.append(value)
            at = f["lsb"] + len(value)
        if all(isinstance(part, Const) for part in parts):
            value = 0
            for part in reversed(parts):
                value = value << len(part) | part.value
            return Const(value)
        while isinstance(parts[-1], Const) and parts[-1].value == 0:
            parts.pop()
        return Cat(*parts) if len(parts) > 1 else parts[0]


def _tree(words, addr, base, levels):
    """The word at ``addr`` among ``words`` (word index -> value; 0 where
    none) at indices ``base`` to ``base + 2**levels - 1``: a multiplexer
    tree on ``addr``'s low ``levels`` bits."""
    if not any(base <= word < base + (1 << levels) for word in words):
        return Const(0)
    if levels == 0:
        return words[base]
    half = 1 << (levels - 1)
    return Mux(addr[levels - 1], _tree(words, addr, base + half, levels - 1),
               _tree(words, addr, base, levels - 1))
