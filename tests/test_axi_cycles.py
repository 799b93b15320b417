"""The AXI top's cycle model (sim/axi_cycles.py) against the ``cycles``
counter of runs on cocotbext-axi's ``AxiRam`` without pauses (first beat 2
cycles after the AR, a beat a cycle): exact for compute-bound programs,
within 2% for memory-bound ones, at data widths 32, 64, 128 and 256 (one
simulation per width, on the Verilator model test_axi_verilator uses at
that width; 128 and 256 with -m slow); more programs are slow."""

import numpy as np
import pytest
from test_axi_verilator import WIDTH_BUS, config_for, place, problems

from bertforge.generators.axi_sim import program_run, simulate_axi
from bertforge.sim.axi_cycles import AxiReads, axi_top_cycles, axi_write_cycles, write_drain

#: cocotbext-axi AxiRam's read latency in the model's terms.
RAM_LATENCY = 2


def programs(config, rng, count, big=True):
    """Memory and programs: ``count`` single commands, then programs of 3
    and 2 of them, plus two compute-bound GEMMs (long rows of A, few of B)."""
    image = np.zeros(1 << config.addr_width, dtype=np.uint8)
    items = problems(count, rng, big=big) + [{"m": 2, "k": 4, "n": 4}, {"m": 16, "k": 48, "n": 4},
                                             {"m": 2, "k": 64, "n": 8}]
    cmds = place(config, image, items, 0, rng)
    lists = [[c] for c in cmds] + [cmds[:3], cmds[-2:]]
    return image, lists


def check_cycles(mem_width, seed, count):
    """Runs the programs on the top at ``mem_width``; returns per program
    ``(measured, predicted, bound)``."""
    config = config_for(mem_width)
    bus = WIDTH_BUS.get(mem_width, {})
    rng = np.random.default_rng(seed)
    image, lists = programs(config, rng, count)
    base = 0xC000
    runs = [program_run(config, cmds, base=base + 0x200 * i) for i, cmds in enumerate(lists)]
    result = simulate_axi(config, image, runs, pause=0.0, seed=seed, bus=bus)
    assert result["passed"], result.get("log")
    figures = []
    for cmds, run in zip(lists, result["runs"]):
        assert run["code"] == 0 and run["pc"] == len(cmds)
        model = axi_top_cycles(config, cmds, latency=RAM_LATENCY,
                               max_burst=bus.get("max_burst", 16))
        measured = run["counters"]["cycles"]
        figures.append((measured, model["cycles"], model["bound"]))
        if model["exact"]:
            assert measured == model["cycles"], (cmds, measured, model)
        else:
            assert abs(measured - model["cycles"]) <= 0.02 * measured, (cmds, measured, model)
    assert {bound for _, _, bound in figures} == {"compute", "memory"}   # both cases checked
    return figures


#: 128 and 256 bits build a Verilator model each (about a minute cold): slow.
WIDTHS = [32, 64] + [pytest.param(w, marks=pytest.mark.slow) for w in (128, 256)]


@pytest.mark.parametrize("mem_width", WIDTHS)
def test_axi_top_cycles(mem_width):
    figures = check_cycles(mem_width, seed=3, count=4)
    assert sum(bound == "compute" for _, _, bound in figures) >= 2


@pytest.mark.slow
@pytest.mark.parametrize("mem_width", [32, *sorted(WIDTH_BUS)])
def test_axi_top_cycles_more(mem_width):
    check_cycles(mem_width, seed=11, count=10)


def test_two_word_writes_hold_the_master():
    """A 64-bit top's int32 writes of two columns (8 bytes) at a row 4 bytes
    off a word span two words: each holds the master a cycle more."""
    config = config_for(64)
    cmd = {"m": 2, "k": 6, "n": 7, "c_addr": 0, "c_stride": 28}
    chunk = {"m_len": 2, "n_len": 2, "m0": 0, "n0": 0}
    # row 0 at 0 (aligned), row 1 at 28 (4 bytes into its word): one more cycle
    assert axi_write_cycles(config, cmd, chunk) == 3
    assert axi_write_cycles(config, dict(cmd, c_stride=32), chunk) == 2
    # an int8 row of 2 bytes: spans two words only at the word's last byte
    assert axi_write_cycles(config, dict(cmd, int8=1, c_stride=7), chunk) == 3
    assert axi_write_cycles(config, dict(cmd, int8=1, c_stride=6), chunk) == 2


def test_reads_one_request_every_two_cycles():
    # single-beat aligned requests: one AR every 2 cycles, beats 2 apart
    config = config_for(32)
    reads = AxiReads(config, [[(4 * i, 1) for i in range(6)]], latency=3)
    end = reads(0, 10)
    assert reads.delivered == [10 + 2 + 3 + 2 * i for i in range(6)]
    assert end == reads.delivered[-1] + 1


def test_reads_bursts_split_and_bounded():
    config = config_for(32)
    # 40 words from 16 words below a 4 KB page: bursts of 16, then 16, 8
    reads = AxiReads(config, [[(4096 - 64, 40)]], latency=5, max_burst=16, max_reads=4)
    reads(0, 0)
    assert len(reads.done) == 3
    assert reads.done[-1] - reads.done[0] == 24      # beats back to back
    # with one burst in flight, the next AR waits for the last beat
    slow = AxiReads(config, [[(0, 2), (8, 2)]], latency=5, max_reads=1)
    slow(0, 0)
    assert slow.delivered[1] - slow.delivered[0] == 1 + 1 + 5 + 1


def test_write_bursts_drain():
    """The last write burst's drain: AW-bound for 1 or 2 beats, then a cycle
    a beat; a full burst (8 beats) ends a cycle sooner; a 9th beat starts a
    burst of its own; a gap of 3 cycles ends a burst; words on both sides
    of a 4 KB boundary are two bursts."""
    config = config_for(32)

    def run(beats):
        return write_drain(config, [(i, 0x100 + i) for i in range(beats)])
    assert [run(n) for n in range(1, 10)] == [1, 1, 3, 4, 5, 6, 7, 7, 7]
    # merges: an unaligned row (each write's second word is the next's first)
    merged = [(0, 5), (1, 6), (2, 6), (3, 7), (4, 7), (5, 8)]
    assert write_drain(config, merged) == run(4)
    # a burst 3 cycles before the last beat has ended: only the last one counts
    assert write_drain(config, [(0, 5), (1, 6), (2, 7), (5, 8)]) == run(1)
    page = 4096 // config.mem_bytes
    across = [(0, page - 2), (1, page - 1), (2, page)]    # 2 beats, then 1 past 4 KB
    assert write_drain(config, across) == run(1) != run(3)
