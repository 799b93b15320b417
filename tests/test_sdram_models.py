"""The SDRAM memory model (bertforge.sim.sdram): the [memory] config, its
Python schedule against small cases worked out by hand (row hits, row
misses, tRAS, refresh), the sustained bandwidth, and the HDL gate the
simulation harness uses against the Python schedule, in amaranth.sim."""

import dataclasses
import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from bertforge.sim.sdram import CHIPS, MemoryConfig, add_sdram_gate, memory_from_table, schedule

MT = CHIPS["MT48LC16M16"]
CLOCK = 100.0      # MT48LC16M16 at 100 MHz: tRCD 2, tRP 2, tRAS 5, tRFC 6, tREFI 782 cycles
WIDTH = 128        # a 16-byte port: 8 SDRAM words (8 cycles) a port word, 64 port words a row


def test_timings_in_cycles():
    assert MT.timing(CLOCK) == {"trcd": 2, "trp": 2, "tras": 5, "trefi": 782, "trfc": 6}
    assert MT.word_cycles(WIDTH, CLOCK) == 8 and MT.row_words(WIDTH) == 64
    assert dataclasses.replace(MT, burst_length=4).word_cycles(32, CLOCK) == 4   # 2 words, 1 burst
    assert CHIPS["AS4C32M16"].timing(CLOCK)["trcd"] == 3 and CHIPS["AS4C32M16"].row_words(WIDTH) == 128


def test_row_hits_and_misses():
    # latency 1 + CL 3: due at 4; bank 0 closed: activate (tRCD 2), then a word every 8 cycles
    assert schedule(MT, WIDTH, CLOCK, [(0, 0, 3)], latency=1) == [[6, 14, 22]]
    # the next row of the chip is in bank 1 (row | bank | column): a miss there, no precharge
    assert schedule(MT, WIDTH, CLOCK, [(0, 63, 2)], latency=1) == [[6, 16]]
    # bank 0's row 1 (port word 4 * 64): precharge (tRP 2) + activate (tRCD 2) after the hit
    got = schedule(MT, WIDTH, CLOCK, [(0, 0, 1), (0, 256, 1)], latency=1)
    assert got == [[6], [6 + 8 + 2 + 2]]
    # tRAS: a precharge waits 5 cycles after its bank's activation (a 1-cycle word)
    fast = dataclasses.replace(MT, data_width=128)
    got = schedule(fast, WIDTH, CLOCK, [(0, 0, 1), (0, 4 * 512, 1)], latency=1)
    assert got == [[6], [4 + 5 + 2 + 2]]      # activated at 4, precharge at 9, data at 13


def test_refresh():
    times = schedule(MT, WIDTH, CLOCK, [(0, 0, 120)], latency=1)[0]
    assert times[:2] == [6, 14] and times[63] == 6 + 63 * 8
    assert times[64] == 6 + 64 * 8 + 2                   # the next row, in bank 1: tRCD
    assert times[96] == 776                              # due for refresh at 782: the bus is
    assert times[97] == 784 + 2 + 6 + 2                  # free at 784, tRP + tRFC, tRCD again
    assert times[98] == times[97] + 8


def test_sustained_bandwidth_of_a_long_read():
    words = 20_000
    times = schedule(MT, WIDTH, CLOCK, [(0, 0, words)], latency=1)[0]
    measured = words * 16 / (times[-1] - times[0])
    assert measured == pytest.approx(MT.sustained_bytes_per_cycle(WIDTH, CLOCK), rel=0.005)
    assert 1.85 < measured < 2.0      # about 2 bytes a cycle at 100 MHz: 190 MB/s


def test_memory_section():
    assert memory_from_table({}) == MemoryConfig()
    assert memory_from_table({"board": "ulx3s"}) == MT
    assert memory_from_table({"board": "ulx3s", "chip": "AS4C32M16"}).columns == 1024
    assert memory_from_table({"board": "ulx3s", "cas_latency": 2}).cas_latency == 2
    with pytest.raises(ValueError, match=r"^no memory board preset 'de10'; presets: ulx3s$"):
        memory_from_table({"board": "de10"})
    with pytest.raises(ValueError, match=r"^unknown memory field 'tck'; fields: "):
        memory_from_table({"tck": 1})
    with pytest.raises(ValueError, match=r"^kind must be 'ideal' or 'sdr', not 'ddr'$"):
        MemoryConfig(kind="ddr")
    with pytest.raises(ValueError, match=r"^banks must be a power of two, not 3$"):
        MemoryConfig(banks=3)
    with pytest.raises(ValueError, match=r"^cas_latency must be a positive integer, not 0$"):
        MemoryConfig(cas_latency=0)


def run_gate(memory, requests, latency):
    """Serve ``requests`` (as :func:`schedule` takes them) through the HDL
    gate; returns the cycles each beat was served."""
    m = Module()
    go, now = Signal(), Signal(32)
    word, want = Signal(20), Signal()
    m.d.sync += now.eq(now + 1)
    ok = add_sdram_gate(m, memory, mem_width=WIDTH, clock_mhz=CLOCK, go=go, now=now, word=word,
                        want=want)
    cas = memory.cas_latency
    beats = [(max(c + latency + cas, 0), w + b, index)
             for index, (c, w, n) in enumerate(requests) for b in range(n)]
    served = [[] for _ in requests]

    async def bench(ctx):
        await ctx.tick()                  # one cycle with go low: the gate resets
        ctx.set(go, 1)
        position, cycle, floor = 0, 0, 0
        while position < len(beats):
            due, address, index = beats[position]
            floor = max(floor, due)       # the harness's due is in order
            ctx.set(word, address)
            ctx.set(want, cycle >= floor)
            if cycle >= floor and ctx.get(ok):
                served[index].append(cycle)
                position += 1
            await ctx.tick()
            cycle += 1

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return served


def test_hdl_gate_equals_schedule():
    memory = dataclasses.replace(MT, trefi_ns=1500, trfc_ns=90)     # refreshes every 150 cycles
    rng = random.Random(7)
    requests, cycle = [], 0
    for _ in range(40):
        cycle += rng.randint(0, 12)
        requests.append((cycle, rng.choice([0, 60, 64, 256, 300, 1024]) + rng.randint(0, 6),
                         rng.randint(1, 4)))
    expected = schedule(memory, WIDTH, CLOCK, requests, latency=1)
    assert run_gate(memory, requests, 1) == expected
    assert any(t[0] > c + 4 + 2 for (c, _, _), t in zip(requests, expected))   # misses and waits


def test_encoder_layout_keeps_interleaved_streams_in_other_banks():
    from bertforge.generators.analyze import load_hardware
    from bertforge.generators.encoder_sim import TINY_HW, encoder_config
    from bertforge.sim.encoder_golden import random_layer
    from bertforge.sim.encoder_run import model_program
    config = encoder_config(load_hardware(TINY_HW), TINY_HW)
    layers = [random_layer(config, 16, 64, 2, 256, seed=0) for _ in range(2)]
    plain = model_program(config, layers)[2]
    assert (plain[0]["attn"] - plain[0]["x"]) % 4096 == 3584      # rows share banks half the time
    for r in model_program(config, layers, banks=(1024, 4))[2]:   # 1 KB rows, 4 banks
        assert (r["attn"] - r["x"]) % 4096 == 2048 and (r["f"] - r["ln1"]) % 4096 == 2048


# LiteDRAM's SDR controller behind one port (the SoC's): the MT48LC16M16 at
# the SoC's 30 MHz takes tRP 1, tRCD 1, tRFC 2 and tREFI 235 cycles.
SOC = dataclasses.replace(MT, controller="litedram", refresh_postponing=8)
SOC_MHZ = 30.0


def test_litedram_gaps_by_hand():
    """Cycles between two column commands, as LiteDRAM's code gives them
    (and its core measures them, below): a command a cycle in an open row;
    a row miss in the same bank precharges and activates (1 + tRP + tRCD);
    another bank waits for the crossbar's lock (4), plus its activate; reads
    to writes and back are the multiplexer's turnarounds (5, 6)."""
    from bertforge.sim.sdram import litedram_gap
    t = SOC.timing(SOC_MHZ)
    assert (t["trp"], t["trcd"], t["trfc"], t["trefi"]) == (1, 1, 2, 235)

    def gap(pw, w, same, row):
        return litedram_gap(SOC, SOC_MHZ, pw, w, same, row)
    assert gap(0, 0, True, "hit") == 1 and gap(1, 1, True, "hit") == 1
    assert gap(0, 0, True, "miss") == 1 + t["trp"] + t["trcd"] == 3
    assert gap(1, 1, True, "miss") == 6                  # after a write: write recovery first
    assert gap(0, 0, False, "hit") == 4 and gap(0, 0, False, "closed") == 6
    assert gap(0, 0, False, "miss") == 7
    assert gap(0, 1, True, "hit") == 5 and gap(1, 0, True, "hit") == 6
    assert gap(1, 0, False, "closed") == 8               # the activate overlaps the turnaround


def test_litedram_replay_by_hand():
    """A stream through :class:`LiteDram`: 16 reads in bank 0's row 0 (its
    first activates: 1 + tRCD + 1, then 15 more a cycle), 8 reads in bank
    1 (another bank, closed: 6, then 7 more), 4 writes back in bank 0's
    row 0 (a turnaround into another bank, row open: 8, then 3), a read of
    bank 0's row 4 (a miss after a write: 6 + tRP + tRCD = 8). The
    refreshes, 8 every 8 tREFI (each tRP + tRFC + 1) and an activate of
    each of the 2 banks used after them, stretch it by 1 / (1 - 36 / 1880)."""
    from bertforge.sim.sdram import litedram_replay
    row = 512 * 2                                       # bytes of a bank's row
    stream = [(0, 0, 32), (0, row, 16), (1, 64, 8), (0, 4 * 4 * row, 2)]
    got = litedram_replay(SOC, WIDTH, SOC_MHZ, stream)
    busy = (3 + 15) + (6 + 7) + (8 + 3) + 8
    assert got["commands"] == 16 + 8 + 4 + 1 and got["activates"] == 3
    assert got["turnarounds"] == 2
    assert got["cycles"] == pytest.approx(busy / (1 - 36 / 1880))
    # 40 rows read in turn: each next row is in the next bank, closed (5 more
    # than a hit) for the first 3, then another row is open there (6 more);
    # the refreshes reopen all 4 banks' rows
    long = litedram_replay(SOC, WIDTH, SOC_MHZ, [(0, 0, 2 * 512 * 40)])
    busy = 3 + (512 * 40 - 1) + 3 * 5 + 36 * 6
    assert long["activates"] == 40
    assert long["cycles"] == pytest.approx(busy / (1 - (32 + 4 * 2) / 1880))


def test_litedram_controller_config():
    """``controller`` is a [memory] field; the harness's HDL gate builds
    the simple controller only, and says so."""
    from bertforge.rtl.errors import ParameterError
    assert memory_from_table({"board": "ulx3s"}).controller == "simple"
    table = memory_from_table({"board": "ulx3s", "controller": "litedram", "refresh_postponing": 8})
    assert table == SOC
    with pytest.raises(ValueError, match="controller must be 'simple' or 'litedram'"):
        memory_from_table({"board": "ulx3s", "controller": "dfi"})
    m = Module()
    with pytest.raises(ParameterError, match="models the simple SDRAM controller"):
        add_sdram_gate(m, SOC, mem_width=WIDTH, clock_mhz=SOC_MHZ, go=Signal(), now=Signal(32),
                       word=Signal(16), want=Signal())


def _litedram_core_gaps(stream):
    """The cycles between LiteDRAM's column commands (DFI reads and writes)
    for ``stream`` (``(write, native word address)``) offered back to back
    on one native port of its core (LiteDRAM 2024.12, the MT48LC16M16 at
    30 MHz, refreshes postponed 8), in Migen's simulator; a PHY that only
    answers reads after its read latency stands in for the chip."""
    from migen import Module, Signal as MSignal, passive
    from migen.sim import run_simulation
    from litedram import modules
    from litedram.core import LiteDRAMCore
    from litedram.core.controller import ControllerSettings
    from litedram.phy import dfi
    from litedram.phy.model import get_sdram_phy_settings
    clk = SOC_MHZ * 1e6
    chip = modules.MT48LC16M16(clk, "1:1")
    settings = get_sdram_phy_settings(memtype="SDR", data_width=16, clk_freq=clk)

    class Phy(Module):
        def __init__(self):
            self.settings = settings
            g = chip.geom_settings
            self.dfi = dfi.Interface(g.addressbits, g.bankbits, settings.nranks,
                                     settings.dfi_databits, settings.nphases)
            p = self.dfi.phases[0]
            read = MSignal()
            self.comb += read.eq(~p.cs_n & ~p.cas_n & p.ras_n & p.we_n)
            for _ in range(settings.read_latency):
                delayed = MSignal()
                self.sync += delayed.eq(read)
                read = delayed
            self.comb += p.rddata_valid.eq(read)

    class Dut(Module):
        def __init__(self):
            self.submodules.phy = Phy()
            self.submodules.core = LiteDRAMCore(self.phy, chip.geom_settings,
                                                chip.timing_settings, clk,
                                                controller_settings=ControllerSettings(
                                                    refresh_postponing=8))
            self.port = self.core.crossbar.get_port()
    dut = Dut()
    port, cas = dut.port, []
    horizon = 400 + 20 * len(stream)

    def driver():
        for _ in range(300):                            # out of reset
            yield
        for write, addr in stream:
            yield port.cmd.valid.eq(1)
            yield port.cmd.we.eq(write)
            yield port.cmd.addr.eq(addr)
            yield
            while not (yield port.cmd.ready):
                yield
        yield port.cmd.valid.eq(0)

    @passive
    def data():
        yield port.wdata.valid.eq(1)
        yield port.wdata.we.eq(3)
        yield port.rdata.ready.eq(1)

    def monitor():
        p = dut.phy.dfi.phases[0]
        for cycle in range(horizon):
            if not (yield p.cs_n) and not (yield p.cas_n) and (yield p.ras_n):
                cas.append(cycle)
            yield
    run_simulation(dut, [driver(), data(), monitor()])
    return [b - a for a, b in zip(cas, cas[1:])]


@pytest.mark.slow
@pytest.mark.parametrize("pw, w, other, row", [
    (pw, w, other, row) for pw in (0, 1) for w in (0, 1) for other in (False, True)
    for row in ("hit", "miss", "closed") if other or row != "closed"])
def test_litedram_gaps_in_litedram(pw, w, other, row):
    """:func:`litedram_gap` against LiteDRAM's own core: 8 commands in bank
    0's row 0, then 8 to bank 0 or 1 in the row ``row`` says (bank 1's row
    opened, or another row opened, by 2 reads first)."""
    from bertforge.sim.sdram import litedram_gap

    def word(bank, r, col):
        return (r * 4 + bank) * 512 + col
    bank = int(other)
    first = []
    if other and row != "closed":
        first = [(0, word(1, 1 if row == "miss" else 0, 50 + i)) for i in range(2)]
    stream = first + [(pw, word(0, 0, i)) for i in range(8)] + \
        [(w, word(bank, 1 if row == "miss" and not other else 0, 100 + i)) for i in range(8)]
    gaps = _litedram_core_gaps(stream)
    at = len(first) + 7                                 # the gap into the 9th command
    assert gaps[at] == litedram_gap(SOC, SOC_MHZ, pw, w, not other, row)
    assert gaps[at + 1:at + 8] == [1] * 7               # then a command a cycle
