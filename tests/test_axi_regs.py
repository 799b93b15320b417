"""The register map's single source: generators/regs/bertforge.rdl compiled
with systemrdl-compiler; the committed rtl/axi_regmap.py is up to date; the
C header, Markdown map and IP-XACT are exported from it; the driver's
constants follow it."""

import re
import xml.etree.ElementTree as ET

import pytest

from bertforge.boards.driver import COUNTERS, REG, Driver, ProgramError, field
from bertforge.generators import regs
from bertforge.generators.program import assemble
from bertforge.rtl.axi_regmap import REGISTERS
from bertforge.rtl.axi_top import record_bytes, record_layout
from bertforge.rtl.errors import BertforgeError
from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.payload import unpack


def test_compiled_map_is_up_to_date():
    assert regs.REGMAP_FILE.read_text() == regs.regmap_source(), \
        "rtl/axi_regmap.py is stale: run python -m bertforge.generators.regs"


def test_map_contents():
    names = {reg["name"] for reg in REGISTERS}
    assert {"ID", "VERSION", "CONFIG0", "CONFIG1", "CTRL", "STATUS", "PROG_BASE_LO", "PROG_BASE_HI",
            "PROG_LEN", "IRQ_ENABLE", "IRQ_STATUS", *COUNTERS} <= names
    kinds = {(reg["name"], f["name"]): f["kind"] for reg in REGISTERS for f in reg["fields"]}
    assert kinds[("CTRL", "start")] == "pulse" and kinds[("IRQ_STATUS", "error")] == "w1c"
    offsets = [reg["offset"] for reg in REGISTERS]
    assert len(set(offsets)) == len(offsets) and all(o % 4 == 0 for o in offsets)


def test_exports(tmp_path):
    header, markdown, ipxact = regs.export(tmp_path)
    text = header.read_text()
    for reg in REGISTERS:
        assert reg["name"] in text
    assert "0x42464731" in text
    assert "IRQ_STATUS" in markdown.read_text()
    root = ET.parse(ipxact).getroot()
    found = {el.text for el in root.iter() if el.tag.endswith("}name")}
    assert {"CTRL", "STATUS", "MEM_WAIT"} <= found


def test_bad_rdl(tmp_path):
    bad = tmp_path / "bad.rdl"
    bad.write_text("addrmap x { reg { field {} f[40:0]; } r; };")
    with pytest.raises(BertforgeError, match=r"^.*bad\.rdl: SystemRDL does not compile"):
        regs.compile_rdl(bad)


def test_assembler_records():
    config = GemmConfig(rows=2, cols=2, mem_width=32, k_chunk=16, m_tile=2, addr_width=16)
    size = record_bytes(config)
    program = assemble(config, [{"m": 3, "k": 4, "n": 5, "a_addr": 0x123, "tag": 7},
                                {"opcode": "end"}, {"opcode": 0x33}])
    assert len(program) == 3 * size
    first = unpack(record_layout(config), int.from_bytes(program[:size], "little"))
    assert first["opcode"] == 1 and first["cmd"]["m"] == 3 and first["cmd"]["a_addr"] == 0x123
    assert program[size] == 0x0F and program[2 * size] == 0x33
    with pytest.raises(ValueError, match=r"^command 0: opcode must be 'run' or 'end', not 'mul'$"):
        assemble(config, [{"opcode": "mul"}])


class FakeBoard:
    """Registers and memory in Python: the program ends at once."""

    def __init__(self, code=0):
        self.regs, self.mem, self.code = {}, bytearray(1 << 12), code

    def read32(self, addr):
        if addr == REG["STATUS"]:
            return 0b10 | (self.code << 8) | (int(self.code != 0) << 2)
        return self.regs.get(addr, 0)

    def write32(self, addr, value):
        self.regs[addr] = value

    def read_block(self, addr, length):
        return bytes(self.mem[addr:addr + length])

    def write_block(self, addr, data):
        self.mem[addr:addr + len(data)] = data


def test_driver_sync_backend():
    board = FakeBoard()
    driver = Driver(board, record_bytes=64)
    driver.load(0x400, bytes(128))
    assert board.regs[REG["PROG_BASE_LO"]] == 0x400 and board.regs[REG["PROG_LEN"]] == 2
    driver.point(0x1_0000_0800, 5)          # a program already in memory
    assert [board.regs[REG[r]] for r in ("PROG_BASE_LO", "PROG_BASE_HI", "PROG_LEN")] == [
        0x800, 1, 5]
    with pytest.raises(BertforgeError, match=r"^the program base must be a multiple of 64 bytes, not 0x20$"):
        driver.point(0x20, 1)
    driver.run()
    assert field("CTRL", "start", board.regs[REG["CTRL"]]) == 1
    assert driver.wait() == 0
    assert set(driver.counters()) == {name.lower() for name in COUNTERS}
    with pytest.raises(BertforgeError, match=r"^the program base must be a multiple of 64 bytes, not 0x10$"):
        driver.load(0x10, bytes(64))
    with pytest.raises(ProgramError, match=re.escape("bad opcode (code 5)")):
        Driver(FakeBoard(code=5), record_bytes=64).wait()


def test_docs_table_follows_the_map():
    """generators/docs/axi.md's register table lists every register at its offset."""
    from pathlib import Path
    text = (Path(regs.__file__).parent / "docs" / "axi.md").read_text()
    text = text.split("## The register map")[1].split("\n## ")[0]
    rows = dict((name, int(offset, 16)) for offset, name in
                re.findall(r"^\| (0x[0-9A-F]{2}) \| `(\w+)` \|", text, re.M))
    assert rows == {reg["name"]: reg["offset"] for reg in REGISTERS}


def test_devmem_backend_over_the_fake_board(tmp_path):
    """DevMem (boards/driver.py) over FakeDevMem (a file for /dev/mem, a
    thread for the accelerator): a good program, a bad opcode, a command
    reading outside the buffer, a block outside the buffer refused."""
    import numpy as np

    from bertforge.boards.devmem_fake import FakeDevMem
    from bertforge.boards.driver import DevMem
    config = GemmConfig(rows=2, cols=2, mem_width=32, k_chunk=16, m_tile=2, addr_width=32)
    regs_at, buf, size = 0x20_0000, 0x10_0000, 1 << 16
    board = FakeDevMem(config, regs_base=regs_at, buf_base=buf, buf_size=size,
                       path=tmp_path / "mem")
    dev = DevMem(regs_at, buf, size, path=board.path)
    try:
        driver = Driver(dev, record_bytes=record_bytes(config))
        assert driver.config()["rows"] == 2 and driver.config()["mem_width"] == 32
        a = np.arange(12, dtype=np.int8).reshape(3, 4)
        b = np.arange(-10, 10, dtype=np.int8).reshape(4, 5)
        dev.write_block(buf + 0x100, a.tobytes())
        dev.write_block(buf + 0x200, b.tobytes())
        good = dict(m=3, k=4, n=5, a_addr=buf + 0x100, a_stride=4, b_addr=buf + 0x200,
                    b_stride=5, c_addr=buf + 0x300, c_stride=20)
        driver.load(buf, assemble(config, [good, {"opcode": "end"}, good]))
        driver.run()
        assert driver.wait(interval=0.001) == 1
        c = np.frombuffer(dev.read_block(buf + 0x300, 60), dtype="<i4").reshape(3, 5)
        assert np.array_equal(c, a.astype(np.int32) @ b.astype(np.int32))
        for commands, code in (([good, {"opcode": 0x33}], 5),
                               ([dict(good, a_addr=buf - 0x100)], 2)):
            driver.load(buf, assemble(config, commands))
            driver.run()
            board.settle()      # the previous program's end no longer shows
            with pytest.raises(ProgramError) as error:
                driver.wait(interval=0.001)
            assert error.value.code == code
        with pytest.raises(BertforgeError, match=r"^4 bytes at 0xffffc are outside the buffer"):
            dev.write_block(buf - 4, bytes(4))
    finally:
        dev.close()
        board.close()
