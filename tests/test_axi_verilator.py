"""The GEMM engine on AXI (rtl/axi_top.py) in Verilator with cocotbext-axi:
``AxiRam`` with random pauses on all five channels, ``AxiLiteMaster`` on the
registers, programs assembled by generators/program.py and run through
boards/driver.py. The register file is read back register by register,
and every performance counter must equal the sum of its step (issue 40:
they kill mutants of the register file and the counters). One model
(32-bit data) runs every case in one simulation; the other data widths
(and a 64-bit address bus) are ``slow``."""

import numpy as np
import pytest

from bertforge.generators import axi_sim
from bertforge.generators.axi_sim import simulate_axi
from bertforge.generators.program import assemble
from bertforge.generators.gemm_sim import layout_problems, read_matrix
from bertforge.boards.axi_board_tb import LANE_BYTES
from bertforge.rtl.axi_regmap import REGISTERS
from bertforge.rtl.axi_top import ERR_ABORTED, ERR_BAD_OPCODE, ERR_REJECTED, record_bytes
from bertforge.rtl.gemm import GemmConfig
from bertforge.sim.coverage import uncovered
from helpers import GEMM_ADDR_FIELDS, gemm_refused_at_top_bits

#: STATUS polls before a run fails (about 4 cycles each): the default
#: tests' programs end in well under 20,000 cycles, so a mutant that
#: hangs one fails in seconds instead of running 100,000 polls.
POLLS = 20_000


def program_run(config, commands, **extra):
    """:func:`bertforge.generators.axi_sim.program_run` with ``polls`` at
    :data:`POLLS` unless given."""
    return axi_sim.program_run(config, commands, **{"polls": POLLS, **extra})


def config_for(mem_width):
    lanes = mem_width // 8
    return GemmConfig(rows=2, cols=2, mem_width=mem_width, k_chunk=max(16, lanes), m_tile=2,
                      addr_width=16)


def problems(count, rng, big=False):
    kinds = [{}, {"bias": True}, {"scale": 0.01}, {"accumulate": True}, {"pad": 3}]
    out = []
    for i in range(count):
        m, k, n = (int(v) for v in rng.integers(1, 9 if big else 6, size=3))
        out.append({"m": m, "k": k * 3, "n": n, **kinds[i % len(kinds)]})
    return out


def place(config, image, items, offset, rng):
    """Lay out ``items`` in a fresh image and copy it to byte ``offset`` of
    ``image``; returns their commands (addresses moved)."""
    part, commands = layout_problems(config, items, rng)
    used = int(np.flatnonzero(part)[-1]) + 1 + 256
    image[offset:offset + used] = part[:used]
    for cmd in commands:
        for key in GEMM_ADDR_FIELDS:
            if key in cmd:
                cmd[key] += offset
    return commands


def span(cmd, which):
    rows = cmd["k"] if which == "b" else cmd["m"]
    return [cmd[f"{which}_addr"], cmd[f"{which}_addr"] + rows * cmd[f"{which}_stride"]]


def scenario(config, seed=0):
    """Memory and runs: good programs, a read error, a write error, buffers at
    unaligned bases straddling 4 KB boundaries, a bad opcode, an END, an abort,
    a command the engine rejects (M = 0) in the middle of a program, then
    good programs (the last straddling 0x8000)."""
    rng = np.random.default_rng(seed)
    image = np.zeros(1 << config.addr_width, dtype=np.uint8)
    good = place(config, image, problems(5, rng), 0x0000, rng)
    faulty = place(config, image, problems(4, rng), 0x1800, rng)
    # unaligned bases (odd offsets) and buffers across the 4 KB boundaries at 0x3000
    straddle = place(config, image, problems(4, rng, big=True), 0x3000 - 0x95, rng)
    more = place(config, image, problems(8, rng), 0x5000 + 1, rng)
    # and across 0x8000, where bit 12 of the address is clear (0x3000 has it set)
    straddle_low = place(config, image, problems(4, rng, big=True), 0x8000 - 0x95, rng)
    base = 0xC000
    runs = [
        program_run(config, good, base=base),
        program_run(config, faulty[:2], base=base + 0x800, expect_code=1,
                    fail_read=span(faulty[1], "b")),
        program_run(config, faulty[2:3], base=base + 0x1000, expect_code=3,
                    fail_write=span(faulty[2], "c")),
        program_run(config, straddle, base=base + 0x1800),
        program_run(config, [more[0], {"opcode": 0x33}, more[1]], base=base + 0x2000,
                    expect_code=ERR_BAD_OPCODE, expect_pc=1),
        program_run(config, [more[2], {"opcode": "end"}, more[3]], base=base + 0x2800, expect_pc=1),
        program_run(config, more[2:8], base=base + 0x3000, expect_code=ERR_ABORTED,
                    abort_after=150),
        program_run(config, [more[4], dict(more[5], m=0), more[6]], base=base + 0x3400,
                    expect_code=ERR_REJECTED, expect_pc=1),
        program_run(config, faulty[3:], base=base + 0x3800),
        program_run(config, straddle_low, base=base + 0x3C00),
    ]
    return image, runs


def check(result, runs, config):
    assert result["passed"], result.get("log")
    got = result["runs"]
    assert [r["code"] for r in got] == [r["expect_code"] for r in runs]
    for run, r in zip(runs, got):
        counters = r["counters"]
        assert 0 < counters["busy_gemm"] <= counters["cycles"] <= r["elapsed"]
        # each counter is the sum of its step since the start (the top's wires)
        assert {"cycles", "busy_gemm", "bytes_read", "bytes_written", "mem_wait"} <= set(r["steps"])
        assert {name: counters[name] for name in r["steps"]} == r["steps"]
        # the unit counters of a GEMM engine read 0; a beat moves at most
        # mem_bytes bytes a cycle, and only while a program runs
        assert counters["busy_softmax"] == counters["busy_layernorm"] == counters["busy_gelu"] == 0
        assert counters["mem_wait"] <= counters["cycles"]
        assert counters["bytes_read"] <= config.mem_bytes * counters["cycles"]
        assert counters["bytes_written"] <= config.mem_bytes * counters["cycles"]
        # IRQ_STATUS holds done (bit 0) or error (bit 1); irq follows a bit
        # only with its IRQ_ENABLE bit (enables 0, 1, 2, 3 in turn)
        # STATUS at the end: done, not busy, error and its code
        assert r["status"] == word("STATUS", done=1, error=int(r["code"] != 0),
                                   error_code=r["code"])
        status = 1 if r["code"] == 0 else 2
        assert r["irq_status"] == status
        assert r["irq_enabled"] == [0, status & 1, status >> 1, 1]
        assert counters["bytes_read"] >= len(run["program"]) // 2 * min(1, r["pc"])
    aborted = got[6]
    assert 1 <= aborted["pc"] < 6
    rejected, after = got[7], got[8]    # memory checked by the testbench
    assert rejected["pc"] == 1 and after["pc"] == len(runs[8]["commands"])
    assert rejected["mismatches"] == 0 and after["mismatches"] == 0
    assert got[0]["pc"] == 5 and got[0]["counters"]["bytes_written"] > 0
    assert got[9]["pc"] == len(runs[9]["commands"]) and got[9]["mismatches"] == 0


def test_axi_gemm_programs():
    config = config_for(32)
    image, runs = scenario(config)
    result = simulate_axi(config, image, runs, pause=0.3, seed=1)
    check(result, runs, config)
    check_registers(result["registers"], config)
    assert result["config"]["rows"] == 2 and result["config"]["mem_width"] == 32
    assert result["config"]["magic"] == 0x42464731
    # Registers answer OKAY; unmapped addresses and writes to read-only
    # registers SLVERR (the write changes nothing).
    assert result["responses"] == {
        "read_id": "OKAY", "read_unmapped": "SLVERR", "read_unmapped_top": "SLVERR",
        "read_id_byte3": ["OKAY", 0x42], "write_irq_enable": "OKAY", "write_unmapped": "SLVERR",
        "write_unmapped_top": "SLVERR", "write_id": "SLVERR", "write_status": "SLVERR",
        "write_cycles": "SLVERR", "id_after_write": 0x42464731,
        "prot": [["OKAY", 0x42464731, "OKAY"]] * 2, "w_after_aw": 3,
        "r_held": [0x42464731, 0x100], "b_held": ["OKAY", "SLVERR"]}
    # functional coverage of the bus: every bin but ERRORS_TEST_POINTS
    assert set(uncovered([result])) <= ERRORS_TEST_POINTS


#: Bus cover points (``boards/axi_board_tb.py`` ``TB.cover_bus``) that
#: test_axi_fields_at_top_bits_and_bus_errors hits (DECERR, and AW held 4
#: cycles or more: it pauses AW 60% of the cycles); test_axi_gemm_programs
#: hits every other bin.
ERRORS_TEST_POINTS = {"axi.r.resp:DECERR", "axi.b.resp:DECERR", "axi.aw.stalled:4+"}


def top_bit_commands(config):
    """The GEMM engine's commands with every field at its top bits
    (``test_every_field_at_its_top_bits`` of test_gemm_verilator.py, at this
    config's 16-bit addresses): a refused one with every size at 0xFFFF and
    every address and stride at 0xFFFF, and accepted ones whose addresses
    and strides set bits 3 to 15. Returns ``(refused, accepted)``."""
    top = 1 << config.addr_width
    refused = gemm_refused_at_top_bits(config)
    accepted = [
        dict(m=2, k=8, n=2, a_addr=0x0000, a_stride=0xFFF0, b_addr=0x0040, b_stride=0x0FC0,
             c_addr=0x00C0, c_stride=0x7F00, bias=1, bias_addr=0xFFE0, tag=0x3F),
        dict(m=2, k=2, n=2, a_addr=0x8100, a_stride=0x3FF0, b_addr=0x0060, b_stride=0xFF40,
             c_addr=0x8140, c_stride=0x2400, int8=1, per_channel=1, scale_addr=top - 8,
             tag=0xE0),                         # the scales end at the top of memory
        dict(m=3, k=5, n=2, a_addr=0xEA00, a_stride=0x0400, b_addr=0x7E00, b_stride=0x0020,
             c_addr=0xDC00, c_stride=0x0200, int16=1, multiplier=0xFFFF, shift=17, tag=0x20),
        dict(m=1, k=1, n=1, a_addr=0x10, a_stride=0, b_addr=0x20, b_stride=0, c_addr=0x30,
             c_stride=0, tag=0),
    ]
    return refused, accepted


#: Values deposited into the performance counters (by name) just after a
#: start: each wraps within the 130-record program.
DEPOSIT = {"cycles": 2**32 - 300, "busy_gemm": 2**32 - 200, "bytes_read": 2**32 - 64,
           "bytes_written": 2**32 - 8, "mem_wait": 2**32 - 40}


def test_axi_fields_at_top_bits_and_bus_errors():
    """Through the AXI top, W paused 90% of the cycles (so the master's W
    queue fills and a burst's last beat waits for room after its AW,
    ``sealed``) and AW 60%, the other channels never: the engine's commands with
    every field at its top bits (refused ones end their program with code
    6 after the commands before them ran; accepted ones bit-exact over
    random memory, from a program at an unaligned base, which the driver
    refuses but the hardware takes); a read error on the program's own
    record (code 1 at its decode, nothing run); DECERR on a read (code 2)
    and on a write (code 4); each program ends with its irq. Then the
    engine's saturations (C += A @ B past the int32 limits, acc + bias past
    them), per-channel scales of four columns without a bias (int8) and
    with one (int16), a C of 40-word rows, a K of 136, and a refused N = 0
    after them;
    last a program of 130 records (the program counter through bit 7),
    its performance counters set near 2**32 just after its start (cocotb
    deposits into the counters' registers): they wrap."""
    config = config_for(32)
    image = np.random.default_rng(21).integers(0, 256, 1 << config.addr_width, dtype=np.uint8)
    refused, ok = top_bit_commands(config)
    rb = record_bytes(config)
    lo, hi = -(1 << 31), (1 << 31) - 1
    limits = place(config, image, [
        dict(m=2, k=4, n=2, accumulate=1, a=[[127] * 4, [-128] * 4], b=[[127, 127]] * 4,
             c_old=np.array([[hi, hi], [lo, lo]])),
        dict(m=6, k=40, n=4, extreme=True, bias=np.array([hi, lo, hi, 5])),
        dict(m=3, k=9, n=4, scale=np.linspace(2e-3, 9e-3, 4)),
        dict(m=3, k=9, n=4, int16=1, bias=True, scale=np.linspace(2e-2, 9e-2, 4)),
        dict(m=4, k=3, n=40),               # rows of 40 words: the W queue fills
        dict(m=2, k=136, n=2),              # K past 127: its record's bit 31 set
        dict(raw=dict(m=3, k=3, n=0))], 0x2000, np.random.default_rng(22))
    runs = [program_run(config, [ok[0], refused], base=0x4000, expect_code=ERR_REJECTED,
                        expect_pc=1),
            program_run(config, [ok[1], ok[2], dict(refused, n=0xE000, tag=254)], base=0x4400,
                        expect_code=ERR_REJECTED, expect_pc=2),
            program_run(config, ok, base=0xEA1F),
            program_run(config, ok[3:], base=0x4C00, expect_code=1, expect_pc=0,
                        fail_read=[0x4C00, 0x4C00 + rb]),
            program_run(config, ok[3:], base=0x4C40, expect_code=2, expect_pc=0,
                        fail_read=[0x10, 0x11], decerr=True),
            program_run(config, ok[3:], base=0x4C80, expect_code=4, expect_pc=0,
                        fail_write=[0x30, 0x34], decerr=True),
            program_run(config, limits, base=0x4D00, expect_code=ERR_REJECTED, expect_pc=6),
            program_run(config, [ok[3]] * 130, base=0x6000, deposit=DEPOSIT)]
    result = simulate_axi(config, image, runs, pause={"w": 0.9, "aw": 0.6}, seed=3)
    assert result["passed"], result.get("log")
    got = result["runs"]
    assert [(r["code"], r["pc"]) for r in got] == [(6, 1), (6, 2), (0, 4), (1, 0), (2, 0), (4, 0),
                                                   (6, 6), (0, 130)]
    assert [got[i]["mismatches"] for i in (0, 1, 2, 6, 7)] == [0] * 5
    assert [r["irq_status"] for r in got] == [2, 2, 1, 2, 2, 2, 2, 1]
    assert not set(uncovered([result])) & ERRORS_TEST_POINTS
    # C at the limits stays there (saturated, not wrapped)
    assert read_matrix(config, result["image"], limits[0]).tolist() == [[hi, hi], [lo, lo]]
    # the counters moved to near 2**32 wrap: each reads its steps plus the
    # deposit's offset, mod 2**32 (so it is below its steps' sum)
    last = got[-1]
    assert set(last["offsets"]) == set(DEPOSIT)
    for name, value in DEPOSIT.items():
        assert last["counters_high"][name] >= value - (1 << 16)
        assert last["counters"][name] == (last["steps"][name] + last["offsets"][name]) % (1 << 32)
        assert last["counters"][name] < last["steps"][name]


def one_block_items(count, rng):
    """Problems whose C is one block of the engine (at most ``m_tile`` rows,
    4 columns): the writer writes it in one go, a piece a cycle."""
    kinds = [{}, {"bias": True}, {"scale": 0.01}, {"accumulate": True}, {"scale": 0.001, "int16": 1}]
    return [{"m": int(rng.integers(1, 3)), "k": int(rng.integers(1, 20)),
             "n": int(rng.integers(2, 5)), **kinds[i % len(kinds)]} for i in range(count)]


#: One record of the wrapping program: C = A @ B of one int8 element, A
#: and B read from the record itself, C written to its byte 31 (past the
#: record's 235 bits: the record stays the same command).
WRAP_COMMAND = dict(m=1, k=4, n=1, a_addr=0, b_addr=0, a_stride=4, b_stride=1, c_addr=31,
                    c_stride=1, int8=1, multiplier=1 << 30, shift=30)


def test_axi_write_bursts():
    """Without pauses, the write bursts (the testbench counts AW
    handshakes) equal the cycle model's, :func:`write_bursts` of the
    writer's beats, for programs of one-block GEMMs, the first with C at
    odd addresses: each int32 spans two words, and the master merges the
    beats of a word into one (issue 40: mutant 23 of the AXI top, the
    merge tied off, only adds bursts)."""
    from bertforge.sim.axi_cycles import write_beats, write_bursts
    from bertforge.sim.gemm_cycles import chunks
    config = config_for(32)
    rng = np.random.default_rng(7)
    image = np.zeros(1 << config.addr_width, dtype=np.uint8)
    odd = place(config, image, one_block_items(10, rng), 0x1000 + 3, rng)
    even = place(config, image, one_block_items(5, rng), 0x2000, rng)
    runs = [program_run(config, odd, base=0xC000), program_run(config, even, base=0xC800)]
    result = simulate_axi(config, image, runs, pause=0.0, seed=2)
    assert result["passed"], result.get("log")
    for cmds, got in zip((odd, even), result["runs"]):
        assert got["code"] == 0 and got["pc"] == len(cmds) and got["mismatches"] == 0
        beats = []
        for cmd in cmds:
            blocks = [c for c in chunks(config, cmd) if c["last"]]
            assert len(blocks) == 1
            beats.append(write_beats(config, cmd, blocks[0]))
        assert got["write_bursts"] == sum(len(write_bursts(config, b)) for b in beats)
    # the odd C's rows have beats to the word of the beat before (merged)
    assert sum(a[1] == b[1] for cmd in odd for row in [write_beats(
        config, cmd, chunks(config, cmd)[-1])] for a, b in zip(row, row[1:])) >= 10


def test_axi_program_counter_top_bits():
    """The program counter's top bits without running 65,535 records: a
    program of 10 records from 0xFF00 (its last two wrap around the memory
    to 0x0000) with PROG_LEN 0xFFFF, its counter set to 0xFFF5 just after
    the start (cocotb deposits into the top's ``pc_count`` register while the first record
    is fetched): the 10 commands run (memory bit-exact), the program ends
    at PC 0xFFFF with code 0, and the cycle and byte counters are their
    steps' sums. A program after it from 0 starts at PC 0 again (the top
    bits of the counter and of the fetch address fall)."""
    config = config_for(32)
    rng = np.random.default_rng(11)
    image = np.zeros(1 << config.addr_width, dtype=np.uint8)
    commands = place(config, image, one_block_items(10, rng), 0x1000, rng)
    rb = record_bytes(config)
    tail = assemble(config, commands[8:])
    image[:len(tail)] = np.frombuffer(tail, dtype=np.uint8)
    top = 0xFFFF
    run = program_run(config, commands[:8], base=(1 << config.addr_width) - 8 * rb,
                      records=top, deposit_pc=top - 10)
    run["commands"] = commands
    after = program_run(config, commands[:3], base=0x0800)
    result = simulate_axi(config, image, [run, after], pause=0.0, seed=5)
    assert result["passed"], result.get("log")
    got = result["runs"]
    assert [(r["code"], r["pc"], r["mismatches"]) for r in got] == [(0, top, 0), (0, 3, 0)]
    for r, records in zip(got, (10, 3)):
        assert {name: r["counters"][name] for name in r["steps"]} == r["steps"]
        assert r["counters"]["bytes_read"] >= records * rb


#: Multipliers of the shift sweep: bits 26, 27 and 30 set, small, one.
SWEEP_MULTIPLIERS = (0x4C3A5F21, 0x0C000001, 0x2B, 1)


def test_axi_requantizer_every_shift():
    """One program of 64 one-block GEMMs, the requantizer's shift 0 to 63
    in turn (int8 and int16 C alternately, multipliers with bits 26, 27
    and 30 set and small ones), then per-channel scales over two columns
    with shifts 62 and 63: every byte of memory equals the golden model's
    (each shift moves the rounding bit ``2**(shift-1)`` to a bit of its
    own)."""
    config = config_for(32)
    rng = np.random.default_rng(12)
    image = np.zeros(1 << config.addr_width, dtype=np.uint8)
    items = [dict(m=2, k=3, n=2, multiplier=SWEEP_MULTIPLIERS[shift % 4], shift=shift,
                  **({"int16": 1} if shift % 2 else {"int8": 1})) for shift in range(64)]
    items.append(dict(m=2, k=5, n=2, int8=1, multipliers=[0x3FFFFFF, 0x2000000],
                      shifts=[62, 63]))
    commands = place(config, image, items, 0x0000, rng)
    result = simulate_axi(config, image, [program_run(config, commands, base=0xC000)],
                          pause=0.0, seed=6)
    assert result["passed"], result.get("log")
    got = result["runs"][0]
    assert (got["code"], got["pc"], got["mismatches"]) == (0, len(commands), 0)
    assert sorted({c["shift"] for c in commands[:64]}) == list(range(64))


@pytest.mark.slow
def test_axi_program_past_4096_records():
    """A program of 4,097 records (PROG_LEN) from 0: the fetch address
    wraps around the 64 KB memory (2,048 records, all the same command), so
    the program counter passes 4,096 (bit 12: mutant 43 of the AXI top) and
    the program ends there with every command run (390,000 cycles: 70 to
    130 s on the shared machine; too long for the default run)."""
    config = config_for(32)
    image = np.zeros(1 << config.addr_width, dtype=np.uint8)
    records = (1 << config.addr_width) // record_bytes(config)
    run = program_run(config, [WRAP_COMMAND] * records, base=0, records=2 * records + 1,
                      polls=200_000)
    run["commands"] = [WRAP_COMMAND] * (2 * records + 1)
    result = simulate_axi(config, image, [run], pause=0.0, seed=2)
    assert result["passed"], result.get("log")
    got = result["runs"][0]
    assert got["code"] == 0 and got["pc"] == 2 * records + 1 > 1 << 12 and got["mismatches"] == 0


def word(register, **values):
    """The 32-bit value of ``register`` (of the map) with its fields at
    ``values`` (the others at their reset value)."""
    fields = next(r for r in REGISTERS if r["name"] == register)["fields"]
    return sum(values.get(f["name"], f["reset"]) << f["lsb"] for f in fields)


def check_registers(got, config):
    """The register file's read-back (the testbench's ``registers``): the
    values after reset (configuration words from ``config``), every
    unmapped word SLVERR and 0, the read-write registers' kept bits after a
    write of all ones, byte lane by byte lane (``WSTRB``), and 0 again."""
    dataflow, units = int(config.dataflow == "ws"), 1
    expect = {r["name"]: 0 for r in REGISTERS}
    expect.update(ID=word("ID"), VERSION=word("VERSION"),
                  CONFIG0=word("CONFIG0", rows=config.rows, cols=config.cols, dataflow=dataflow,
                               bf16=int(config.bf16), width=config.width,
                               acc_width=config.acc_width),
                  CONFIG1=word("CONFIG1", mem_width=config.mem_width,
                               addr_width=config.addr_width, lanes=config.lanes, units=units))
    assert got["reset"] == {name: ["OKAY", value] for name, value in expect.items()}
    assert got["unmapped"] == [["SLVERR", 0]] * (64 - len(REGISTERS))
    # PROG_BASE keeps the engine's address bits (16 here); IRQ_STATUS is
    # write-1-to-clear: software writes never set it
    kept = {"PROG_BASE_LO": (1 << config.addr_width) - 1, "PROG_BASE_HI": 0,
            "PROG_LEN": 0xFFFF, "IRQ_ENABLE": 3, "IRQ_STATUS": 0}
    assert got["ones"] == {name: ["OKAY", mask] for name, mask in kept.items()}
    lanes = [sum(b << 8 * i for i, b in enumerate(LANE_BYTES[:n + 1])) for n in range(4)]
    assert got["lanes"] == {name: [["OKAY", v & mask] for v in lanes]
                            for name, mask in kept.items()}
    assert got["cleared"] == {name: ["OKAY", 0] for name in kept}


#: The AXI parameters of the top at each wider data width (one Verilator
#: model per width, shared with test_axi_cycles).
WIDTH_BUS = {64: {"addr_width": 32, "id_width": 1, "max_burst": 8},
             128: {"addr_width": 64, "id_width": 4, "max_burst": 8},
             256: {"addr_width": 32, "id_width": 2, "max_burst": 8}}


@pytest.mark.slow
@pytest.mark.parametrize("mem_width", sorted(WIDTH_BUS))
def test_axi_gemm_widths(mem_width):
    config = config_for(mem_width)
    image, runs = scenario(config, seed=mem_width)
    result = simulate_axi(config, image, runs, pause=0.3, seed=mem_width, bus=WIDTH_BUS[mem_width])
    check(result, runs, config)


@pytest.mark.slow
def test_axi_sparse_engine_program():
    """The N:M sparse engine behind the same AXI top: a program of sparse
    commands (several patterns), then a read error and a good program."""
    from bertforge.generators.sparse_engine_sim import layout_sparse_problems
    from bertforge.rtl.sparse_engine import SparseEngineConfig
    config = SparseEngineConfig(rows=2, cols=2, mem_width=64, k_chunk=32, m_tile=16, m_max=8,
                                addr_width=15)
    problems = [dict(m=4, k=64, n=8, pat_n=4, pat_m=8), dict(m=2, k=61, n=8, pat_n=3, pat_m=4),
                dict(m=3, k=40, n=8, pat_n=2, pat_m=8, bias=True)]
    image, commands = layout_sparse_problems(config, problems, np.random.default_rng(2))
    runs = [program_run(config, commands, base=0x6000),
            program_run(config, commands[:1], base=0x6400, expect_code=1,
                        fail_read=[commands[0]["a_addr"], commands[0]["a_addr"] + 8]),
            program_run(config, commands[1:], base=0x6800)]
    result = simulate_axi(config, image, runs, pause=0.3, seed=2)
    assert result["passed"], result.get("log")
    assert [r["code"] for r in result["runs"]] == [0, 1, 0]
    assert result["runs"][0]["pc"] == 3 and result["runs"][0]["mismatches"] == 0


@pytest.mark.slow
def test_axi_encoder_layer():
    """A whole encoder layer (tiny.toml, seq 32) as one program on the
    EncoderTop behind the AXI top: every stage equals the integer golden
    model, and the busy counters see every unit class."""
    from bertforge.generators.analyze import load_hardware
    from bertforge.generators.axi_sim import simulate_axi_encoder
    from bertforge.generators.encoder_sim import TINY_HW, encoder_config
    from bertforge.generators.workload import MODELS
    from bertforge.sim.encoder_golden import random_layer
    config = encoder_config(load_hardware(TINY_HW), TINY_HW)
    shape = MODELS["tiny"]
    layer = random_layer(config, 32, shape.hidden, shape.heads, shape.ffn, seed=0)
    result = simulate_axi_encoder(config, layer, pause=0.1, seed=3)
    assert result["passed"], result["log"]
    run = result["run"]
    assert run["code"] == 0 and run["pc"] == result["commands"]
    assert result["match"] and not any(result["mismatches"].values()), result["mismatches"]
    counters = run["counters"]
    assert all(counters[f"busy_{unit}"] > 0 for unit in ("gemm", "softmax", "layernorm", "gelu"))
    assert sum(counters[f"busy_{u}"] for u in ("gemm", "softmax", "layernorm", "gelu")) \
        <= counters["cycles"]


@pytest.mark.slow
def test_axi_encoder_two_layers_one_start():
    """Two stacked layers (tiny.toml, seq 16) as one program: one start runs
    both, the second reading the first's output from memory."""
    from bertforge.generators.analyze import load_hardware
    from bertforge.generators.axi_sim import simulate_axi_encoder
    from bertforge.generators.encoder_sim import TINY_HW, encoder_config
    from bertforge.generators.workload import MODELS
    from bertforge.sim.encoder_golden import encoder_golden, random_layer
    config = encoder_config(load_hardware(TINY_HW), TINY_HW)
    shape = MODELS["tiny"]
    layers = [random_layer(config, 16, shape.hidden, shape.heads, shape.ffn, seed=s)
              for s in (4, 5)]
    stages = sorted(encoder_golden(config, layers[0]))
    result = simulate_axi_encoder(config, layers, seed=4)
    assert result["passed"], result["log"]
    assert result["run"]["pc"] == result["commands"]
    assert result["match"], result["mismatches"]
    # every stage of both layers compared (12 since the k projection has no input transpose)
    assert sorted(result["mismatches"]) == [f"layer{i}.{key}" for i in (0, 1) for key in stages]
