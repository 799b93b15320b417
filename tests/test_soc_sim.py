"""The whole SoC in Verilator (generators/soc_simulate.py): the LiteX SoC
with LiteDRAM's SDR controller on its SDRAM PHY model (DFI timing checker
on), reached over UARTBone's UART pins driven bit by bit; one Verilator
build serves every test. The host code is the board's: UARTBone frames
(boards/uartbone.py), LiteDRAM's init (boards/soc_host.py), the driver.
A tiny encoder layer runs from the SDRAM, bit-exact; the full tiny layer
and UARTBone's 100 ms resynchronization are ``slow``."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from bertforge.boards.soc import MAIN_RAM_BASE
from bertforge.boards.soc_host import DFII_CONTROL_HARDWARE, sdram_init
from bertforge.boards.uartbone import (MAX_BURST, UartBone, UartBoneError, decode_words,
                                       read_frame, write_frame)
from bertforge.generators.soc_simulate import simulate_soc, soc_encoder, soc_sim_model
from bertforge.rtl.axi_regmap import REGISTERS

BLOCK_ADDR = MAIN_RAM_BASE + 0x1_0000
#: Where the swallowed read of the corrupted-frame check lands (an SDRAM word).
TARGET = MAIN_RAM_BASE + 0x804


@pytest.fixture(scope="module")
def model():
    return soc_sim_model()


@pytest.fixture(scope="module")
def image():
    """The SDRAM's content at the start (the back door): 8 KiB, across the
    four banks' first rows (1 KiB a bank row) and into the second rows."""
    return np.random.default_rng(1).integers(0, 256, 8192, dtype=np.uint8)


PROBES = [[MAIN_RAM_BASE, 16], [MAIN_RAM_BASE + 0x3F8, 16],       # bank 0 -> bank 1
          [MAIN_RAM_BASE + 0xFF8, 16], [MAIN_RAM_BASE + 0x1FF0, 16]]  # bank 3 -> row 1, last


@pytest.fixture(scope="module")
def block():
    return np.random.default_rng(2).integers(0, 256, 4 * (MAX_BURST + 45), dtype=np.uint8).tobytes()


def test_frames_are_litex_remote_clients():
    """The frames are those LiteX's own host (``CommUART``, behind
    ``litex_server --uart``) sends."""
    from litex.tools.remote.comm_uart import CommUART
    client = CommUART("loop://")
    client.write(0x4000_0010, [0x11223344, 0xA5A5A5A5, 7])
    sent = client.port.read(client.port.in_waiting)
    assert sent == write_frame(0x4000_0010, [0x11223344, 0xA5A5A5A5, 7])
    assert sent == bytes.fromhex("01 03 10000004 11223344 a5a5a5a5 00000007")
    assert read_frame(0x804, 2) == bytes.fromhex("02 02 00000201")
    assert decode_words(bytes.fromhex("12345678 000000ff")) == [0x12345678, 0xFF]
    with pytest.raises(UartBoneError, match="1 to 255 words, not 256"):
        write_frame(0, [0] * 256)
    with pytest.raises(UartBoneError, match="not a multiple of 4"):
        read_frame(2, 1)


class _Loop:
    """A transport that records frames and answers reads from a dict."""

    def __init__(self, memory, short=False):
        self.memory, self.frames, self.pending, self.short = memory, [], b"", short

    def write(self, frame):
        self.frames.append(frame)
        if frame[0] == 0x02:
            addr = int.from_bytes(frame[2:6], "big") * 4
            self.pending = b"".join(self.memory.get(addr + 4 * i, 0).to_bytes(4, "big")
                                    for i in range(frame[1]))

    def read(self, count):
        reply, self.pending = self.pending[:count - self.short], b""
        return reply


def test_blocks_split_into_frames_little_endian():
    loop = _Loop({0x100 + 4 * i: i for i in range(600)})
    bus = UartBone(loop)
    data = bus.read_block(0x100, 4 * 600)
    assert [len(f) for f in loop.frames] == [6, 6, 6] and [f[1] for f in loop.frames] == [255, 255, 90]
    assert np.array_equal(np.frombuffer(data, "<u4"), np.arange(600))
    loop.frames.clear()
    bus.write_block(0x200, bytes([1, 2, 3, 4, 5, 6, 7, 8]))
    assert loop.frames == [bytes.fromhex("01 02 00000080 04030201 08070605")]
    with pytest.raises(UartBoneError, match=r"at 0x100: 3 of 4 bytes came back"):
        UartBone(_Loop({}, short=True)).read32(0x100)


def test_remote_client_bus():
    """LiteX's ``RemoteClient`` (its read/write calls) as the host's bus."""
    from bertforge.boards.soc_host import RemoteClientBus
    memory = {}

    class Client:      # RemoteClient's calls: read(addr[, length]), write(addr, value or list)
        def read(self, addr, length=None):
            assert length is None or 1 <= length <= 255
            values = [memory.get(addr + 4 * i, 0) for i in range(length or 1)]
            return values if length is not None else values[0]

        def write(self, addr, data):
            for i, value in enumerate(data if isinstance(data, list) else [data]):
                memory[addr + 4 * i] = value
    bus = RemoteClientBus(Client())
    bus.write32(0x804, 0xCAFEF00D)
    assert bus.read32(0x804) == 0xCAFEF00D
    data = np.random.default_rng(3).integers(0, 256, 4 * 300, dtype=np.uint8).tobytes()
    bus.write_block(MAIN_RAM_BASE, data)
    assert memory[MAIN_RAM_BASE] == int.from_bytes(data[:4], "little")
    assert bus.read_block(MAIN_RAM_BASE, len(data)) == data


def test_sdram_init_is_the_bios_sequence(model, tmp_path):
    """:func:`sdram_init` writes what LiteX's BIOS runs (``sdram_init`` in
    liblitedram: software control, LiteDRAM's generated ``init_sequence()``
    for this chip, hardware control), CSR by CSR, with its delays."""
    from litedram.init import get_sdram_phy_c_header
    from bertforge.boards.soc_map import DFII_BITS
    from bertforge.boards.soc_sim import make_sim_soc
    from bertforge.generators.soc_cli import DEFAULT_HW, soc_accelerator
    config, sim = model
    _, bus_args, verilog, module = soc_accelerator(DEFAULT_HW)
    (tmp_path / f"{module}.v").write_text(verilog)
    settings = make_sim_soc(config, tmp_path / f"{module}.v", module, bus=bus_args,
                            sys_clk_mhz=30.0).sdram.controller.settings
    header = get_sdram_phy_c_header(settings.phy, settings.timing, settings.geom)
    body = header[header.index("init_sequence(void)"):]
    bios = [("sdram_dfii_control", 0x0E)]           # sdram_software_control_on
    for call, arg in re.findall(r"(\w+)\(([^)]*)\);", body):
        value = (sum(DFII_BITS[name] for name in arg.split("|")) if arg.startswith("DFII")
                 else int(arg, 0))
        if call == "command_p0":
            bios += [("sdram_dfii_pi0_command", value), ("sdram_dfii_pi0_command_issue", 1)]
        elif call == "cdelay":
            bios.append(("sleep", value))
        else:
            bios.append((call.removesuffix("_write"), value))
    bios.append(("sdram_dfii_control", DFII_CONTROL_HARDWARE))    # sdram_software_control_off
    names = {reg["addr"]: name for name, reg in sim["map"]["csr"].items()}
    done = []

    class Recorder:
        def write32(self, addr, value):
            done.append((names[addr], value))

        def read32(self, addr):
            return DFII_CONTROL_HARDWARE

    clock = sim["map"]["sys_clk_hz"]
    assert sdram_init(Recorder(), sim["map"], sleep=lambda s: done.append(
        ("sleep", round(s * clock)))) == DFII_CONTROL_HARDWARE
    assert len(bios) > 20 and done == bios


def test_uartbone_path(model, image, block):
    """One simulation (the Verilator model shared by every test here):
    registers, the SDRAM read before and after its init, a block written
    and read back, corrupted frames."""
    _, sim = model
    checks = [{"kind": "registers"}, {"kind": "probes", "ranges": PROBES},
              {"kind": "sdram_init"}, {"kind": "probes", "ranges": PROBES},
              {"kind": "block", "addr": BLOCK_ADDR, "data": block.hex()},
              {"kind": "corrupt", "target": TARGET}]
    run = simulate_soc(sim, checks, image=image)
    assert run["passed"], run.get("log")
    assert [c["kind"] for c in run["checks"]] == [c["kind"] for c in checks]
    check_registers(run)
    check_sdram(run, image, block)
    check_corrupted_frames(run)


def check_registers(run):
    registers = run["checks"][0]
    assert registers["scratch_reset"] == 0x12345678        # LiteX's reset value
    assert registers["scratch_written"] == 0xCAFEF00D
    assert registers["status"] == 0                        # no irq before a program
    config = registers["config"]
    assert config["magic"] == 0x42464731 == REGISTERS[0]["fields"][0]["reset"]   # "BFG1"
    assert config["version_major"] == 1
    assert (config["rows"], config["cols"], config["mem_width"]) == (4, 4, 128)


def check_sdram(run, image, block):
    """The back-door image reads back over UARTBone across banks and rows;
    LiteDRAM's init hands the SDRAM to the controller; a block of 300
    words (two frames) is written and read back. The PHY model ignores CKE
    and the mode register: it answers before the init too (a real chip
    would not)."""
    before, init, after, written = (run["checks"][i] for i in (1, 2, 3, 4))
    expected = [image[a - MAIN_RAM_BASE:a - MAIN_RAM_BASE + n].tobytes().hex() for a, n in PROBES]
    assert after["data"] == expected
    assert before["data"] == expected
    assert init["control"] == DFII_CONTROL_HARDWARE
    assert written["data"] == block.hex()
    assert run["violations"] == []                        # the DFI timing checker's


def check_corrupted_frames(run):
    """UARTBone has no checksum: a frame with an unknown command is
    dropped (the next is answered); a truncated frame takes the next
    frame's bytes as its rest: the host's read gets no reply and its 6
    bytes complete the truncated write (its address and data)."""
    corrupt = run["checks"][5]
    assert corrupt["after_unknown"] == 0x5A5A0001
    assert corrupt["swallowed_reply"] is None and "0 of 4 bytes" in corrupt["swallowed_error"]
    frame = bytes.fromhex(corrupt["swallowed_frame"])
    assert frame[:2] == b"\x01\x01" and len(frame) == 10
    assert int.from_bytes(frame[2:6], "big") * 4 == TARGET     # the address it completed
    assert corrupt["target_after"] == int.from_bytes(frame[6:10], "big") != 0xFFFFFFFF
    assert corrupt["after_swallow"] == 0x5A5A0001


def _tiny_layer(config, seq, seed=0):
    from bertforge.generators.workload import MODELS
    from bertforge.sim.encoder_golden import random_layer
    shape = MODELS["tiny"]
    return random_layer(config, seq, shape.hidden, shape.heads, shape.ffn, seed=seed)


def test_encoder_layer_from_sdram(model):
    """A tiny encoder layer (hidden 64, 2 heads, FFN 256; sequence 8):
    weights and input in the SDRAM, the program written over UARTBone,
    started by one CTRL write, the irq seen in ``bertforge_status``, the
    output read back over UARTBone: bit for bit the integer golden model."""
    config, _ = model
    result = soc_encoder([_tiny_layer(config, 8)])
    assert result["passed"], result["log"]
    program = result["program"]
    assert program["irq_status"] == 1 and program["pc"] == result["commands"] == 14
    assert result["match"] and result["mismatches"] == 0
    counters = program["counters"]
    assert all(counters[f"busy_{u}"] > 0 for u in ("gemm", "softmax", "layernorm", "gelu"))
    assert counters["cycles"] <= program["wall_cycles"]
    assert result["violations"] == []
    # The SoC's counters over the run: each byte the engine read is one
    # SDRAM read of its 16-bit word (no more), each AXI beat 16 bytes; the
    # narrow writes (the transposed K's single bytes, the units' 4-byte
    # results) cost an SDRAM write per 16-bit word written, not 8 a beat
    # (the last writes reach the SDRAM after the irq: writes are posted).
    perf = program["perf"]
    assert counters["cycles"] <= perf["cycles"] <= program["wall_cycles"]
    assert perf["read"] * 2 == counters["bytes_read"] == perf["r"] * 16
    assert perf["wide_cmd"] == perf["r"] + perf["w"]
    written = perf["native_cmd"] - perf["read"]          # native write commands
    assert counters["bytes_written"] <= 2 * written     # 2 bytes a native write
    assert written < 8 * perf["w"]                       # not all 8 words of every beat
    assert written - 128 <= perf["write"] <= written
    assert perf["refresh"] > 0 and perf["activate"] > 0


@pytest.mark.slow
def test_tiny_layer_from_sdram(model):
    """The tiny layer at sequence 32 and two stacked layers (one start) from the SDRAM."""
    config, _ = model
    result = soc_encoder([_tiny_layer(config, 32)], upload=False)
    assert result["passed"] and result["match"], result
    assert result["violations"] == []
    two = soc_encoder([_tiny_layer(config, 16, seed=s) for s in (4, 5)])
    assert two["passed"] and two["match"] and two["program"]["pc"] == 28, two


@pytest.mark.slow
def test_truncated_frame_dropped_after_100_ms(model):
    """A truncated frame, then 100 ms of idle line (3 million clocks):
    UARTBone drops it and answers the next frame; the truncated write
    never happened."""
    _, sim = model
    result = simulate_soc(sim, [{"kind": "corrupt", "target": TARGET, "resync": True}])
    assert result["passed"], result.get("log")
    corrupt = result["checks"][0]
    assert corrupt["after_resync"] == 0x5A5A0001
    assert corrupt["target_after_resync"] == corrupt["target_after"]


@pytest.mark.slow
def test_layer_bench(tmp_path):
    """``soc_layer_bench`` (the manual's results/soc_sim.json) on one small case."""
    import json
    from bertforge.generators.soc_simulate import soc_layer_bench
    rows = soc_layer_bench(tmp_path, cases=((1, 8),))
    assert json.loads((tmp_path / "bench.json").read_text())["results"] == rows
    assert [r["class"] for r in rows] == ["gemm", "softmax", "layernorm", "gelu", "all"]
    *classes, row = rows
    assert row["cycles"] == sum(r["cycles"] for r in classes)
    assert row["sdram_reads"] == sum(r["sdram_reads"] for r in classes)
    assert row["match"] and row["mismatches"] == 0 and row["violations"] == 0
    assert 0 < row["mem_wait"] < row["cycles"] and 0 < row["bytes_per_cycle"] <= 2
    assert row["analyze_cycles"] > 0 and row["activates"] > 0 and row["refreshes"] > 0


def _convert(commands, rng):
    """Run ``commands`` (``(we, addr, data, strobes)``) through the SoC's
    down-converter (128 to 16 bits) in Migen's simulator; the native side
    takes commands and data on random cycles (``rng``), or on every cycle
    (None). Returns the native commands (with their cycles), write data
    and the wide read data seen."""
    from migen import run_simulation
    from litedram.common import LiteDRAMNativePort
    from bertforge.boards.soc import down_converter
    wide, native = LiteDRAMNativePort("both", 20, 128), LiteDRAMNativePort("both", 23, 16)
    seen = {"cmd": [], "cycles": [], "wdata": [], "rdata": []}
    pending = []

    def host():
        for we, addr, data, strobe in commands:
            for signal, value in ((wide.cmd.valid, 1), (wide.cmd.we, we), (wide.cmd.addr, addr),
                                  (wide.wdata.valid, we), (wide.wdata.data, data),
                                  (wide.wdata.we, strobe)):
                yield signal.eq(value)
            yield
            while not (yield wide.cmd.ready):
                yield
        yield wide.cmd.valid.eq(0)
        yield wide.wdata.valid.eq(0)

    def controller():
        yield wide.rdata.ready.eq(1)
        for cycle in range(1000):
            ready = 1 if rng is None else int(rng.integers(2))
            yield native.cmd.ready.eq(ready)
            yield native.wdata.ready.eq(1 if rng is None else int(rng.integers(2)))
            yield native.rdata.valid.eq(bool(pending))
            yield native.rdata.data.eq(_word(pending[0]) if pending else 0)
            yield
            if (yield native.cmd.valid) and ready:
                we, addr = (yield native.cmd.we), (yield native.cmd.addr)
                seen["cmd"].append((we, addr))
                seen["cycles"].append(cycle)
                if not we:
                    pending.append(addr)
            if (yield native.wdata.valid) and (yield native.wdata.ready):
                seen["wdata"].append(((yield native.wdata.data), (yield native.wdata.we)))
            if (yield native.rdata.valid) and (yield native.rdata.ready):
                pending.pop(0)
            if (yield wide.rdata.valid):
                seen["rdata"].append((yield wide.rdata.data))

    run_simulation(down_converter(wide, native), [host(), controller()])
    return seen


def _word(addr):
    """What the converter test's "SDRAM" holds at a native address."""
    return (addr * 2654435761) & 0xFFFF


def test_down_converter():
    """The SoC's down-converter (boards/soc.py), its native side taking
    commands and data on random cycles: a wide read is 8 native reads at
    consecutive addresses and comes back gathered in order; a wide write
    is a native write per 16-bit word with a byte enabled (none for an
    all-zero strobe), carrying those words' data and strobes. With the
    native side always ready, reads stream one native command a cycle
    (LiteDRAM's converter idles a cycle per wide word)."""
    rng = np.random.default_rng(3)
    strobes = [0xFFFF, 0x0001, 0x0000, 0x8000, 0x00F0, 0x3C3C] + \
        [int(s) for s in rng.integers(0, 1 << 16, 6)]
    commands = [(1, int(rng.integers(1 << 20)), int.from_bytes(rng.bytes(16), "little"), s)
                for s in strobes]
    commands += [(0, int(rng.integers(1 << 20)), 0, 0) for _ in range(6)]
    rng.shuffle(commands)
    seen = _convert(commands, rng)
    expected_cmd, expected_wdata, expected_rdata = [], [], []
    for we, addr, data, strobe in commands:
        for i in range(8):
            enable = (strobe >> 2 * i) & 3
            if not we or enable:
                expected_cmd.append((we, addr * 8 + i))
            if we and enable:
                expected_wdata.append(((data >> 16 * i) & 0xFFFF, enable))
        if not we:
            expected_rdata.append(sum(_word(addr * 8 + i) << 16 * i for i in range(8)))
    assert seen["cmd"] == expected_cmd
    assert seen["wdata"] == expected_wdata
    assert seen["rdata"] == expected_rdata
    steady = _convert([(0, 100 + i, 0, 0) for i in range(4)], None)
    assert len(steady["cycles"]) == 32 and steady["cycles"][-1] - steady["cycles"][0] == 31
    assert len(steady["rdata"]) == 4


def test_soc_sim_command(tmp_path):
    """``bertforge soc sim --per-operation``: a tiny layer from the
    simulated SoC's SDRAM, bit-exact, its cycles beside analyze's; the
    report in ``-o DIR``. analyze (the ULX3S SDRAM behind LiteDRAM's
    controller, each operation at the program's addresses, a unit's after
    its record's fetch) predicts the layer and its GEMM, layernorm and GELU
    classes within 2%, softmax within 3% (568 cycles at sequence 8, where
    the replay of its 16 write bursts comes out 26 cycles above the
    unit's busy time: analyze 583)."""
    import json
    from cli_helpers import run_cli
    result = run_cli("soc", "sim", "--seq", "8", "--per-operation", "-o", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report == json.loads((tmp_path / "report.json").read_text())
    assert report["match"] and report["mismatches"] == 0 and report["violations"] == []
    assert report["commands"] == 14 and report["cycles"] == report["counters"]["cycles"] > 0
    assert report["predicted_cycles"] > 0 and report["perf"]["read"] * 2 == \
        report["counters"]["bytes_read"]
    text = (tmp_path / "report.md").read_text()
    assert f"cycles {report['cycles']:,}, predicted {report['predicted_cycles']:,}" in text
    assert "match: yes" in text
    errors = {c["class"]: c["difference"] for c in report["classes"]}
    assert set(errors) == {"gemm", "softmax", "layernorm", "gelu"}
    assert abs(report["difference"]) < 0.02, errors
    assert all(abs(errors[kind]) < 0.02 for kind in ("gemm", "layernorm", "gelu")), errors
    assert abs(errors["softmax"]) < 0.03, errors


@pytest.mark.parametrize("args, message", [
    (["--seq", "6"], "sequence length 6 must be a multiple of 4"),
    (["--model", "minilm-l6-h384"], "hidden 384 exceeds the layernorm unit's h_max = 64"),
    (["--hw", "/nonexistent.toml"], "/nonexistent.toml does not exist"),
    (["--layers", "0"], "--layers: must be a positive integer"),
    (["--seq", "100000"], "at most 512"),
])
def test_soc_sim_command_errors(args, message):
    from cli_helpers import assert_one_line_error, run_cli
    assert_one_line_error(run_cli("soc", "sim", *args), message)


def test_upload_once(model):
    """The board's upload (boards/soc_host.py ``upload``, as ``soc run``
    calls it) over the simulated UART: written, read back and marked; the
    same image again is not written (the marker matches); another image
    is; the SDRAM holds the last one."""
    _, sim = model
    rng = np.random.default_rng(5)
    first, second = (rng.integers(0, 256, 512, dtype=np.uint8).tobytes() for _ in range(2))
    addr = MAIN_RAM_BASE + 0x2000
    checks = [{"kind": "upload", "addr": addr, "data": first.hex()},
              {"kind": "upload", "addr": addr, "data": first.hex()},
              {"kind": "upload", "addr": addr, "data": second.hex()},
              {"kind": "probes", "ranges": [[addr, len(second)]]}]
    run = simulate_soc(sim, checks)
    assert run["passed"], run.get("log")
    done = run["checks"]
    assert [c["uploaded"] for c in done[:3]] == [True, False, True]
    assert done[0]["crc32"] == done[1]["crc32"] != done[2]["crc32"]
    assert done[3]["data"] == [second.hex()]


class _WordBus:
    """A bus of 32-bit words in a dict (``flip``: a byte address whose bit 0
    reads back inverted, a bad SDRAM)."""

    def __init__(self, flip=None):
        self.words, self.flip, self.writes = {}, flip, 0

    def read32(self, addr):
        value = self.words.get(addr, 0)
        if self.flip is not None and addr == self.flip & ~3:
            value ^= 1 << 8 * (self.flip & 3)
        return value

    def write32(self, addr, value):
        self.words[addr] = value
        self.writes += 1

    def write_block(self, addr, data):
        for i in range(0, len(data), 4):
            self.write32(addr + i, int.from_bytes(data[i:i + 4], "little"))

    def read_block(self, addr, length):
        return b"".join(self.read32(addr + i).to_bytes(4, "little") for i in range(0, length, 4))


def test_upload_checks_readback_and_fit(model):
    from bertforge.boards.soc_host import marker_address, upload
    from bertforge.rtl.errors import BertforgeError
    soc_map = model[1]["map"]
    data = bytes(range(256)) * 4
    with pytest.raises(BertforgeError, match=r"differs from the upload at 0x40000107"):
        upload(_WordBus(flip=MAIN_RAM_BASE + 0x107), soc_map, MAIN_RAM_BASE, data)
    bus = _WordBus()
    assert upload(bus, soc_map, MAIN_RAM_BASE, data)["uploaded"]
    writes = bus.writes
    assert not upload(bus, soc_map, MAIN_RAM_BASE, data)["uploaded"] and bus.writes == writes
    assert upload(bus, soc_map, MAIN_RAM_BASE, data, force=True)["uploaded"]
    with pytest.raises(BertforgeError, match="do not fit the SDRAM"):
        upload(bus, soc_map, marker_address(soc_map) - 8, data)


TINY_HW = Path(__file__).parents[1] / "generators" / "configs" / "tiny.toml"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A random checkpoint of the tiny shape (hidden 64, 2 heads, FFN 256), 2 layers."""
    from checkpoint_helpers import write_checkpoint
    return write_checkpoint(tmp_path_factory.mktemp("checkpoint"), seed=3)


def _checkpoint_layers(checkpoint, text, hw=TINY_HW):
    """``(config, layers)``: the checkpoint's layers quantized for ``hw``'s
    SoC (as soc_encode and soc run make them), layer 0's input the text's."""
    from bertforge.generators.model_sim import prepare, quantized_runs
    from bertforge.generators.soc_simulate import soc_hardware
    prep = prepare([text], checkpoint=checkpoint, hw=hw, hardware=soc_hardware(hw))
    qmodel, [(x, valid)] = quantized_runs(prep)
    for layer in qmodel.layers:
        layer.valid = valid
    qmodel.layers[0].xq = np.asarray(x, dtype=np.int64)
    return prep["config"], qmodel.layers


def test_board_blob_keeps_the_weights(model, checkpoint):
    """``soc run``'s SDRAM image of a checkpoint (generators/soc_run.py
    ``board_blob``): the upload (marked, skipped when the board holds it)
    is the weights alone, the same for every sentence; each sentence's
    input and program are written beside it; together they are the image
    the simulation loads."""
    from checkpoint_helpers import TEXTS
    from bertforge.generators.soc_run import board_blob
    soc_map = model[1]["map"]
    plans = []
    for text in TEXTS[:2]:
        config, layers = _checkpoint_layers(checkpoint, text)
        plan, blob, writes = board_blob(config, layers, soc_map)
        memory = bytearray(plan["base"] + len(plan["program"]))
        memory[:len(blob)] = blob
        for at, data in writes:
            memory[at:at + len(data)] = data
        assert bytes(memory[:plan["base"]]) == plan["image"][:plan["base"]].tobytes()
        assert bytes(memory[plan["base"]:]) == plan["program"]
        at, size = plan["input"]
        assert not any(blob[at:at + size]) and len(blob) <= plan["base"]
        assert writes[0][0] == at and any(writes[0][1])
        plans.append((blob, writes))
    (blob_a, writes_a), (blob_b, writes_b) = plans
    assert blob_a == blob_b and writes_a[0][1] != writes_b[0][1]


@pytest.mark.slow
def test_board_run_on_the_simulated_soc(model, tmp_path):
    """``soc run``'s host path (generators/soc_run.py ``board_blob``,
    boards/soc_host.py ``run_image``) with the transport swapped: over the
    simulated UART, a one-layer checkpoint's weights uploaded bit by bit
    and read back, the sentence's input and the program written, the layer
    run, its output bit-exact; then another sentence, the upload skipped."""
    from checkpoint_helpers import TEXTS, write_checkpoint
    from bertforge.generators.soc_run import board_blob
    from bertforge.generators.soc_simulate import check_outputs
    _, sim = model
    one = write_checkpoint(tmp_path / "one", seed=4, layers=1)
    checks, plans = [], []
    for text in TEXTS[:2]:
        config, layers = _checkpoint_layers(one, text)
        plan, blob, writes = board_blob(config, layers, sim["map"])
        checks.append({"kind": "run_image", "blob": blob.hex(), "program": plan["base"],
                       "writes": [[at, data.hex()] for at, data in writes],
                       "records": plan["commands"], "outputs": [[plan["out"], plan["out_bytes"]]],
                       "poll_cycles": 20_000})
        plans.append(plan)
    run = simulate_soc(sim, checks)
    assert run["passed"], run.get("log")
    first, second = run["checks"]
    assert first["upload"]["uploaded"] and not second["upload"]["uploaded"]
    outputs = []
    for done, plan in zip((first, second), plans):
        assert done["run"]["pc"] == plan["commands"] == 14
        mismatches, [out] = check_outputs(config, plan, [bytes.fromhex(done["outputs"][0])])
        assert mismatches == [0]
        outputs.append(out)
    assert not np.array_equal(*outputs)
    assert run["bytes_sent"] > 2 * len(bytes.fromhex(checks[0]["blob"])) // 2


def test_soc_sim_checkpoint(checkpoint, tmp_path):
    """``bertforge soc sim --checkpoint DIR --text ...``: a sentence's
    embedding from the simulated SoC (the random two-layer checkpoint on
    the default SoC's tiny encoder): both layers as one program, each
    layer's output read back and bit-exact, the embedding against the
    float model; the report as ``sim model``'s."""
    from checkpoint_helpers import TEXTS
    from cli_helpers import run_cli
    from bertforge.generators.soc_simulate import soc_model_rows
    result = run_cli("soc", "sim", "--checkpoint", str(checkpoint), "--text", TEXTS[0],
                     "--hw", str(TINY_HW), "-o", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report == json.loads((tmp_path / "report.json").read_text())
    assert report["match"] and report["layers"] == 2 and report["texts"] == 1
    [soc] = report["soc"]
    assert soc["layer_mismatches"] == [0, 0] and soc["violations"] == []
    [sentence] = report["sentences"]
    assert sentence["cosine"] >= 0.99 and sentence["cycles"] == sentence["counters"]["cycles"] > 0
    assert report["predicted_cycles"] > 0 and soc["perf"]["read"] > 0
    text = (tmp_path / "report.md").read_text()
    assert "match: yes" in text and "elements differing per layer [0, 0]" in text
    # The bench's rows of it (results/soc_minilm.json is MiniLM's).
    rows = soc_model_rows(report)
    assert [row["class"] for row in rows] == ["gemm", "softmax", "layernorm", "gelu", "all"]
    assert rows[-1]["cycles"] == sentence["cycles"] and rows[-1]["layers_exact"] == 2
    assert rows[-1]["analyze_cycles"] == report["predicted_cycles"]
    assert rows[0]["cycles"] == sentence["counters"]["busy_gemm"]


def test_soc_sim_batch(checkpoint, tmp_path):
    """``soc sim --text A --text B --batch 2``: both sentences as ONE
    program (stacked along M in the projections and the FFN), both layers
    bit-exact, each embedding against the float model, and the run within
    2% of ``analyze`` at batch 2 (measured +0.4%)."""
    from checkpoint_helpers import TEXTS
    from cli_helpers import run_cli
    result = run_cli("soc", "sim", "--checkpoint", str(checkpoint), "--text", TEXTS[0],
                     "--text", "rain falls", "--batch", "2", "--hw", str(TINY_HW), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["match"] and report["texts"] == 2
    [soc] = report["soc"]
    assert soc["layer_mismatches"] == [0, 0] and soc["violations"] == []
    assert all(sentence["cosine"] >= 0.99 for sentence in report["sentences"])
    assert abs(report["cycles"] / report["predicted_cycles"] - 1) < 0.02


@pytest.mark.slow
def test_minilm_from_sdram():
    """all-MiniLM-L6-v2, all six layers, from the simulated SoC's SDRAM
    (configs/minilm_soc.toml): a 13-token sentence (sequence 16) as one
    program, every layer's output bit for bit the integer golden model's,
    the embedding against the float model (cosine >= 0.99); the run's
    cycles and the GEMMs', softmax's and GELU's within 2% of ``analyze``
    with LiteDRAM's controller, the layernorms' within 5% (measured: +3.8%)."""
    from bertforge.generators.soc_simulate import MINILM_SENTENCE, soc_encode, soc_model_rows
    result = soc_encode([MINILM_SENTENCE])
    assert result["layers"] == 6 and result["seq"] == 16
    [soc] = result["soc"]
    assert soc["layer_mismatches"] == [0] * 6 and soc["violations"] == []
    assert result["match"] and result["cosine_min"] >= 0.99
    over = {row["class"]: row["over_analyze"] for row in soc_model_rows(result)}
    assert all(abs(over[name]) < 0.02 for name in ("all", "gemm", "softmax", "gelu")), over
    assert abs(over["layernorm"]) < 0.05, over


@pytest.fixture(scope="module")
def sim_map(model, tmp_path_factory):
    """The simulation SoC's map as a file (as ``soc build`` writes a board's)."""
    import json
    path = tmp_path_factory.mktemp("socmap") / "soc_map.json"
    path.write_text(json.dumps(model[1]["map"]))
    return path


def test_soc_run_without_a_board(sim_map, tmp_path):
    """``bertforge soc run``: one line naming the port when there is no
    board; the map, the shape and the accelerator are checked first."""
    from cli_helpers import assert_one_line_error, run_cli
    port = str(tmp_path / "ttyUSB9")
    assert_one_line_error(run_cli("soc", "run", "--port", port, "--map", str(sim_map)),
                          f"cannot open the serial port {port}")
    assert_one_line_error(run_cli("soc", "run", "--port", port, cwd=tmp_path),
                          "no SoC map build-soc-ulx3s-85f/soc_map.json")
    assert_one_line_error(run_cli("soc", "run", "--port", port, "--map", str(sim_map), "--seq", "6"),
                          "sequence length 6 must be a multiple of 4")
    other = Path(__file__).parents[1] / "generators" / "configs" / "tiny16.toml"
    assert_one_line_error(run_cli("soc", "run", "--port", port, "--map", str(sim_map),
                                  "--hw", str(other)), "not the accelerator of")
    (tmp_path / "bad.json").write_text("[]")
    assert_one_line_error(run_cli("soc", "run", "--port", port, "--map", str(tmp_path / "bad.json")),
                          "is not a SoC map")
    # A checkpoint's sentences: the map must carry configs/minilm_soc.toml's accelerator.
    assert_one_line_error(run_cli("soc", "run", "--port", port, "--map", str(sim_map), "--text",
                                  "a sentence"), "not the accelerator of")
    minilm = tmp_path / "minilm_map.json"
    minilm.write_text(json.dumps(_renamed_map(sim_map)))
    assert_one_line_error(run_cli("soc", "run", "--port", port, "--map", str(minilm),
                                  "--text", "a sentence"), f"cannot open the serial port {port}")


def _renamed_map(path):
    """The simulation SoC's map naming configs/minilm_soc.toml's accelerator."""
    from bertforge.generators.analyze import load_hardware
    from bertforge.generators.axi_sim import axi_name
    from bertforge.generators.encoder_sim import encoder_config
    from bertforge.generators.soc_simulate import MINILM_SOC_HW
    soc_map = json.loads(path.read_text())
    soc_map["accelerator"]["module"] = axi_name(encoder_config(load_hardware(MINILM_SOC_HW),
                                                               MINILM_SOC_HW))
    return soc_map


@pytest.mark.parametrize("args, message", [
    (["--text", "a man", "--layers", "2", "--seed", "1"],
     "--layers, --seed: for random layers; with --text or --checkpoint"),
    (["--checkpoint", "CHECKPOINT"], "no text to encode: give --text or --file"),
    (["--batch", "2"], "--batch: for sentences; give --text or --file"),
    (["--checkpoint", "WIDE", "--text", "a man", "--hw", str(TINY_HW)],
     "at sequence length 4 does not fit"),
    (["--text", "a man", "--file", "/nonexistent.txt"], "sentence file /nonexistent.txt does not exist"),
])
def test_soc_text_errors(args, message, checkpoint, tmp_path):
    """``soc sim`` / ``soc run`` with sentences: one-line errors (before any simulation)."""
    from checkpoint_helpers import write_checkpoint
    from cli_helpers import assert_one_line_error, run_cli
    wide = write_checkpoint(tmp_path / "wide", hidden=128, layers=1)     # h_max 64 in tiny.toml
    args = [{"CHECKPOINT": str(checkpoint), "WIDE": str(wide)}.get(a, a) for a in args]
    assert_one_line_error(run_cli("soc", "sim", *args), message)


def test_flash_design_soc(tmp_path):
    """``bertforge flash --design soc`` takes soc build's bitstream
    (build-soc-BOARD/report.json)."""
    import json
    from cli_helpers import assert_one_line_error, run_cli
    assert_one_line_error(run_cli("flash", "--board", "ulx3s-85f", "--design", "soc", cwd=tmp_path),
                          "no build in build-soc-ulx3s-85f; run: bertforge soc build")
    build = tmp_path / "build-soc-ulx3s-85f"
    build.mkdir()
    (build / "report.json").write_text(json.dumps({"bitstream": str(build / "soc.bit")}))
    assert_one_line_error(run_cli("flash", "--board", "ulx3s-85f", "--design", "soc", cwd=tmp_path),
                          f"bitstream {build / 'soc.bit'} does not exist")
    assert_one_line_error(run_cli("flash", "--board", "ulx3s-85f", "--design", "nope", cwd=tmp_path),
                          "no design 'nope'; designs: soc, gemm")
