"""Fast amaranth.sim tests of the AXI master (rtl/axi.py) and register file
(rtl/axi_regs.py): a Python AXI slave with random stalls, unaligned
requests, 4 KB crossings, error responses; parameter checks."""

import random

import pytest
from amaranth.sim import Simulator

from bertforge.rtl.axi import AxiMaster
from bertforge.rtl.axi_regs import AxiLiteRegisters


def run_master(dut, memory, reads, writes, *, seed=0, p=0.3, fail=None, max_cycles=20000,
               w_after_aw=False):
    """Serve ``dut``'s AXI port from ``memory`` (a bytearray) while the
    engine side issues ``reads`` ((addr, beats)) and ``writes`` ((addr,
    data, bytes)); returns the read beats, the error code and protocol
    observations. ``w_after_aw``: the slave takes a W beat only for a burst
    whose AW it has taken (AXI allows either)."""
    rng = random.Random(seed)
    MB = dut.data_width // 8
    got = []
    finished = {}
    seen = {"ar": [], "aw": [], "max_reads": 0, "max_writes": 0}

    async def engine(ctx):
        for addr, beats in reads:
            ctx.set(dut.rd_req.payload.addr, addr)
            ctx.set(dut.rd_req.payload.beats, beats)
            ctx.set(dut.rd_req.valid, 1)
            await ctx.tick().until(dut.rd_req.ready)
            ctx.set(dut.rd_req.valid, 0)
        for addr, data, count in writes:
            ctx.set(dut.wr_req.payload.addr, addr)
            ctx.set(dut.wr_req.payload.data, data)
            ctx.set(dut.wr_req.payload.bytes, count)
            ctx.set(dut.wr_req.valid, 1)
            await ctx.tick().until(dut.wr_req.ready)
            ctx.set(dut.wr_req.valid, 0)
        finished["engine"] = True

    async def sink(ctx):
        total = sum(beats for _, beats in reads)
        while len(got) < total:
            ready = rng.random() > p
            ctx.set(dut.rd_data.ready, ready)
            await ctx.tick()
        ctx.set(dut.rd_data.ready, 0)
        finished["sink"] = True

    async def slave(ctx):
        aw_q, r_q, b_q = [], [], []
        w_beats = []
        held = {}
        while True:
            # sample, decide readies
            ready = {ch: rng.random() > p for ch in ("ar", "aw", "w")}
            if w_after_aw:
                ready["w"] &= sum(n for _, n in aw_q) > len(w_beats)
            ctx.set(dut.m_axi_arready, ready["ar"])
            ctx.set(dut.m_axi_awready, ready["aw"])
            ctx.set(dut.m_axi_wready, ready["w"])
            if r_q and rng.random() > p:
                addr, last, resp = r_q[0]
                ctx.set(dut.m_axi_rvalid, 1)
                ctx.set(dut.m_axi_rdata, int.from_bytes(memory[addr:addr + MB], "little"))
                ctx.set(dut.m_axi_rlast, last)
                ctx.set(dut.m_axi_rresp, resp)
            else:
                ctx.set(dut.m_axi_rvalid, 0)
            if b_q and rng.random() > p:
                ctx.set(dut.m_axi_bvalid, 1)
                ctx.set(dut.m_axi_bresp, b_q[0])
            else:
                ctx.set(dut.m_axi_bvalid, 0)
            # observe at the edge
            _, _, *state = await ctx.tick().sample(
                dut.m_axi_arvalid, dut.m_axi_araddr, dut.m_axi_arlen,
                dut.m_axi_awvalid, dut.m_axi_awaddr, dut.m_axi_awlen,
                dut.m_axi_wvalid, dut.m_axi_wdata, dut.m_axi_wstrb, dut.m_axi_wlast,
                dut.m_axi_rvalid, dut.m_axi_rready, dut.m_axi_bvalid, dut.m_axi_bready,
                dut.rd_data.valid, dut.rd_data.ready, dut.rd_data.payload)
            (arv, araddr, arlen, awv, awaddr, awlen, wv, wdata, wstrb, wlast,
             rv, rr, bv, br, dv, dr, dp) = state
            for ch, valid, payload in (("ar", arv, (araddr, arlen)), ("aw", awv, (awaddr, awlen)),
                                       ("w", wv, (wdata, wstrb, wlast))):
                if ch in held:   # valid held, payload stable until ready
                    assert valid and payload == held[ch], f"{ch} dropped or changed before ready"
                    del held[ch]
                if valid and not ready[ch]:
                    held[ch] = payload
            if arv and ready["ar"]:
                assert araddr % MB == 0 and (araddr & 0xFFF) + (arlen + 1) * MB <= 4096
                seen["ar"].append((araddr, arlen + 1))
                bad = fail and fail[0] <= araddr < fail[1]
                for beat in range(arlen + 1):
                    r_q.append((araddr + beat * MB, beat == arlen, 2 if bad else 0))
            if rv and rr:
                r_q.pop(0)
            if dv and dr:
                got.append(dp)
            if awv and ready["aw"]:
                assert awaddr % MB == 0 and (awaddr & 0xFFF) + (awlen + 1) * MB <= 4096
                seen["aw"].append((awaddr, awlen + 1))
                aw_q.append([awaddr, awlen + 1])
            if wv and ready["w"]:
                w_beats.append((wdata, wstrb, wlast))
            while aw_q and len(w_beats) >= aw_q[0][1]:
                addr, n = aw_q.pop(0)
                for i in range(n):
                    data, strb, last = w_beats.pop(0)
                    assert last == (i == n - 1), "WLAST on the wrong beat"
                    for byte in range(MB):
                        if strb >> byte & 1:
                            memory[addr + i * MB + byte] = data >> (8 * byte) & 0xFF
                b_q.append(0)
            if bv and br:
                b_q.pop(0)
            inflight = sum(1 for *_, last, _ in [(a, l, r) for a, l, r in r_q] if last)
            seen["max_reads"] = max(seen["max_reads"], inflight)
            seen["max_writes"] = max(seen["max_writes"], len(aw_q) + len(b_q))

    async def finish(ctx):
        for _ in range(max_cycles):
            await ctx.tick()
            if len(finished) == 2 and ctx.get(dut.idle):
                break
        await ctx.tick().repeat(8)
        seen["error"] = ctx.get(dut.error)
        seen["idle"] = ctx.get(dut.idle)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_process(slave)
    sim.add_testbench(engine)
    sim.add_testbench(sink)
    sim.add_testbench(finish)
    sim.run()
    return got, seen


def expected_beats(memory, reads, MB):
    return [int.from_bytes(memory[addr + i * MB:addr + (i + 1) * MB], "little")
            for addr, beats in reads for i in range(beats)]


@pytest.mark.parametrize("data_width", [32, 128])
def test_reads_and_writes(data_width):
    MB = data_width // 8
    dut = AxiMaster(data_width=data_width, inner_addr_width=16, request_beats=20, max_burst=4,
                    max_reads=2, max_writes=2)
    rng = random.Random(data_width)
    memory = bytearray(rng.randrange(256) for _ in range(1 << 16))
    # aligned, unaligned, crossing 4 KB, a 20-beat request split into bursts
    reads = [(0x100, 3), (0x103, 5), (0x1000 - 2 * MB + 1, 4), (0x2000 - 5, 20), (0x40, 1)]
    writes = [(0x5000, 0x1122334455667788, 3), (0x5001 + MB, (1 << data_width) - 1, MB),
              (0x6000 - 2, 0xA1A2A3A4, 4)]
    expected = expected_beats(memory, reads, MB)
    want = bytearray(memory)
    for addr, data, count in writes:
        want[addr:addr + count] = (data & ((1 << 8 * count) - 1)).to_bytes(count, "little")
    got, seen = run_master(dut, memory, reads, writes, seed=data_width)
    assert got == expected
    assert memory == want
    assert seen["error"] == 0 and seen["idle"] == 1
    assert max(n for _, n in seen["ar"]) <= 4
    assert seen["max_writes"] <= 2
    # the 4 KB crossings were split
    assert (0x1000 - 2 * MB, 2) in seen["ar"] and (0x1000, 3 if MB > 1 else 3) in seen["ar"]
    assert (0x6000 - MB, 1) in seen["aw"] and (0x6000, 1) in seen["aw"]


@pytest.mark.parametrize("data_width, p, w_after_aw", [
    (32, 0.0, False), (32, 0.3, False), (64, 0.3, False), (32, 0.0, True), (64, 0.3, True)])
def test_write_bursts(data_width, p, w_after_aw):
    """An engine writing rows a word a cycle: aligned words become bursts of
    ``max_burst`` beats, split at 4 KB; unaligned words (each spilling into
    the next word) merge into full words and bursts too; memory right, also
    on a slave that takes W only after its burst's AW (bursts of 16 do not
    fit the W queue of 4: no deadlock)."""
    MB = data_width // 8
    dut = AxiMaster(data_width=data_width, inner_addr_width=16, max_burst=16 if w_after_aw else 4,
                    max_writes=2)
    rng = random.Random(data_width)
    memory = bytearray(1 << 16)
    aligned = [(0x3000 - 6 * MB + i * MB, rng.getrandbits(data_width), MB) for i in range(10)]
    unaligned = [(0x5003 + i * MB, rng.getrandbits(data_width), MB) for i in range(6)]
    single = [(0x6100, 0xAB, 1)]
    writes = aligned + unaligned + single
    want = bytearray(memory)
    for addr, data, count in writes:
        want[addr:addr + count] = (data & ((1 << 8 * count) - 1)).to_bytes(count, "little")
    _, seen = run_master(dut, memory, [], writes, seed=data_width, p=p, w_after_aw=w_after_aw)
    assert memory == want
    assert seen["error"] == 0 and seen["idle"] == 1
    assert all(n <= (16 if w_after_aw else 4) for _, n in seen["aw"])
    if p == 0 and not w_after_aw:      # a slave that keeps up: the longest bursts
        assert seen["aw"] == [(0x3000 - 6 * MB, 4), (0x3000 - 2 * MB, 2), (0x3000, 4),
                              (0x5000, 4), (0x5000 + 4 * MB, 3), (0x6100, 1)]
    assert len(seen["aw"]) < len(writes) / 2


def test_read_error_sets_code_and_still_answers():
    dut = AxiMaster(data_width=32, inner_addr_width=16)
    memory = bytearray(1 << 16)
    reads = [(0x200, 4), (0x300, 2)]
    got, seen = run_master(dut, memory, reads, [], fail=(0x200, 0x210))
    assert len(got) == 6           # every beat answered: the engine cannot hang
    assert seen["error"] == 1      # read SLVERR
    assert seen["idle"] == 1


@pytest.mark.parametrize("kwargs, message", [
    ({"data_width": 48}, r"^data_width must be 32, 64, 128, 256 or 512, not 48$"),
    ({"data_width": 32, "addr_width": 40}, r"^addr_width must be 32 or 64, not 40$"),
    ({"data_width": 32, "max_burst": 257}, r"^max_burst must be an integer <= 256, not 257$"),
    ({"data_width": 32, "max_burst": 0}, r"^max_burst must be a positive integer, not 0$"),
    ({"data_width": 32, "max_reads": 0}, r"^max_reads must be a positive integer, not 0$"),
    ({"data_width": 32, "id_width": 17}, r"^id_width must be an integer <= 16, not 17$"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AxiMaster(**kwargs)


def test_bad_parameter_types():
    with pytest.raises(TypeError, match=r"^data_width must be an integer, not '32'$"):
        AxiMaster(data_width="32")


def _lite(ctx, regs, responses):
    """``(write, read)``: AXI4-Lite accesses of ``regs`` in a testbench; each
    appends its BRESP / RRESP to ``responses``."""
    async def write(addr, value, strb=0xF):
        ctx.set(regs.s_axi_awaddr, addr)
        ctx.set(regs.s_axi_wdata, value)
        ctx.set(regs.s_axi_wstrb, strb)
        ctx.set(regs.s_axi_awvalid, 1)
        ctx.set(regs.s_axi_wvalid, 1)
        ctx.set(regs.s_axi_bready, 1)
        await ctx.tick().until(regs.s_axi_awready)
        ctx.set(regs.s_axi_awvalid, 0)
        ctx.set(regs.s_axi_wvalid, 0)
        assert ctx.get(regs.s_axi_bvalid)
        responses.append(ctx.get(regs.s_axi_bresp))
        await ctx.tick()

    async def read(addr):
        ctx.set(regs.s_axi_araddr, addr)
        ctx.set(regs.s_axi_arvalid, 1)
        ctx.set(regs.s_axi_rready, 1)
        await ctx.tick().until(regs.s_axi_arready)
        ctx.set(regs.s_axi_arvalid, 0)
        assert ctx.get(regs.s_axi_rvalid)        # answered the cycle after
        value = ctx.get(regs.s_axi_rdata)
        responses.append(ctx.get(regs.s_axi_rresp))
        await ctx.tick()
        return value

    return write, read


def test_register_file():
    regs = AxiLiteRegisters()
    responses = []      # BRESP / RRESP of each access

    async def bench(ctx):
        write, read = _lite(ctx, regs, responses)
        assert await read(0x00) == 0x42464731
        assert await read(0x04) == 0x100
        ctx.set(regs.config0_rows, 4)
        ctx.set(regs.config0_cols, 8)
        assert await read(0x08) == 4 | 8 << 8
        await write(0x18, 0x12345678)
        assert ctx.get(regs.prog_base_lo_addr) == 0x12345678
        await write(0x18, 0xAB00, strb=0b0010)          # WSTRB: byte 1 only
        assert await read(0x18) == 0x1234AB78
        # W1C: set by hardware, cleared by writing 1
        ctx.set(regs.irq_status_error_set, 1)
        await ctx.tick()
        ctx.set(regs.irq_status_error_set, 0)
        assert await read(0x2C) == 0b10
        await write(0x2C, 0b01)
        assert await read(0x2C) == 0b10
        await write(0x2C, 0b10)
        assert await read(0x2C) == 0
        assert await read(0x10) == 0                  # pulses read 0
        assert responses == [0] * len(responses)      # OKAY so far
        SLVERR = 2
        assert await read(0x3C) == 0 and responses[-1] == SLVERR     # unmapped
        await write(0x3C, 1)
        assert responses[-1] == SLVERR
        await write(0x00, 0)                          # ID: read-only
        assert responses[-1] == SLVERR and await read(0x00) == 0x42464731
        await write(0x40, 0)                          # a counter: read-only
        assert responses[-1] == SLVERR

    sim = Simulator(regs)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_register_file_constants_and_kept_bits():
    """``values``: read-only fields read a constant (no port); ``kept``: a
    read-write field keeps its low bits only (its port is that wide; none
    with no bit kept); an address above the map's words reads 0 with
    SLVERR."""
    regs = AxiLiteRegisters(values={"config0_rows": 4, "config0_cols": 8},
                            kept={"prog_base_lo_addr": 12, "prog_base_hi_addr": 0})
    assert not hasattr(regs, "config0_rows") and hasattr(regs, "config0_width")
    assert len(regs.prog_base_lo_addr) == 12 and not hasattr(regs, "prog_base_hi_addr")
    responses = []

    async def bench(ctx):
        write, read = _lite(ctx, regs, responses)
        assert await read(0x08) == 4 | 8 << 8
        await write(0x18, 0xFFFFFFFF)
        await write(0x1C, 0xFFFFFFFF)
        assert ctx.get(regs.prog_base_lo_addr) == 0xFFF
        assert await read(0x18) == 0xFFF and await read(0x1C) == 0
        assert responses == [0] * 5                     # OKAY: the registers are writable
        assert await read(0x80) == 0 and responses[-1] == 2     # above the map: SLVERR, 0

    sim = Simulator(regs)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("kwargs, message", [
    ({"values": {"prog_len_count": 3}}, r"^values: 'prog_len_count' is not a read-only \('r'\) field's port$"),
    ({"values": {"config0_rows": 256}}, r"^config0_rows must be an integer <= 255, not 256$"),
    ({"kept": {"pc_count": 3}}, r"^kept: 'pc_count' is not a read-write \('rw'\) field's port with reset value 0$"),
])
def test_register_file_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AxiLiteRegisters(**kwargs)


def test_gemm_engine_bus():
    from bertforge.rtl.axi_top import AxiGemmTop, with_bus
    from bertforge.rtl.gemm import GemmConfig, GemmEngine
    from bertforge.rtl.serial_engine import gemm_engine
    config = GemmConfig(rows=2, cols=2, mem_width=64, k_chunk=32, m_tile=2)
    top = with_bus(config, bus="axi4", max_burst=8, addr_width=64)
    assert isinstance(top, AxiGemmTop)
    assert len(top.m_axi_araddr) == 64 and len(top.m_axi_rdata) == 64
    assert {"s_axi_awaddr", "irq"} <= set(top.signature.members)
    assert isinstance(with_bus(config), GemmEngine) and isinstance(gemm_engine(config), GemmEngine)
    with pytest.raises(ValueError, match=r"^bus must be 'stream' or 'axi4', not 'pci'$"):
        with_bus(config, bus="pci")
    with pytest.raises(ValueError, match=r"^max_burst needs bus='axi4'$"):
        with_bus(config, max_burst=8)
    with pytest.raises(ValueError, match=r"^max_burst must be an integer <= 256, not 512$"):
        with_bus(config, bus="axi4", max_burst=512)
