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
