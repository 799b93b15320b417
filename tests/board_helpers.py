"""Shared parts of the board tests (tests/test_boards.py,
tests/test_*_board.py): a board top run over its UART in Verilator, the
build-plan check on every board, the stand-in serial board behind
``bertforge run``, and the one-line CLI error check."""

import json

import numpy as np
import pytest

from amaranth.back import verilog

from bertforge.boards import protocol
from bertforge.boards.build import connect_uart_top
from bertforge.boards.clocking import ClockShell
from bertforge.boards.targets import board
from bertforge.generators.cli import main
from bertforge.sim import runner

__all__ = ["run_board_top", "check_build_plan", "FakeBoard", "cli_error", "save_build_report"]


def run_board_top(tmp_path, top, config, testbench, arrays, **spec):
    """Emit ``top`` (its ``config``) and run ``bertforge.boards.<testbench>``
    on it in Verilator with ``config.to_dict()``, ``arrays`` (name -> array,
    saved as the spec's ``data``, an ``.npz``) and ``spec``; the run must
    pass. Returns the testbench's results."""
    np.savez(tmp_path / "data.npz", **arrays)
    text = verilog.convert(top, name=config.name, emit_src=False)
    result = runner.run(text, config.name, f"bertforge.boards.{testbench}",
                        {"config": config.to_dict(), "data": str(tmp_path / "data.npz"), **spec},
                        workdir=tmp_path / "sim")
    assert result["passed"], result["log"]
    return result


def check_build_plan(name, top, submodule):
    """Board ``name`` plans a build of ``top`` (behind its clock shell and
    UART pins, with a PLL where the family has one): a build script, and a
    netlist holding the host link and ``submodule``."""
    target = board(name)
    mhz = {"ice40": 24.0, "ecp5": 100.0}.get(target.family)
    shell = ClockShell(top, target.family, target.clock_mhz, mhz, connect_uart_top(target))
    plan = target.make_platform().build(shell, name="top", do_build=False)
    netlist = plan.files.get("top.il") or plan.files.get("top.v")
    assert "build_top.sh" in plan.files and netlist
    assert f"module \\top.top.{submodule}\n" in netlist and "module \\top.top.link\n" in netlist
    if mhz:
        assert ("SB_PLL40_PAD" if target.family == "ice40" else "EHXPLLL") in netlist


class FakeBoard:
    """A serial port with a Python stand-in for a board top behind it: the
    protocol's frames (every one must have a good CRC), ``memories`` of
    64 KiB answering WRITE and READ, PING with ``design_id``; a subclass's
    ``run(args)`` answers RUN with the reply payload, the cycles (``flip``:
    it should spoil its result)."""

    def __init__(self, config, design_id, flip=False, memories=3):
        self.config, self.design_id, self.flip = config, design_id, flip
        self.mems = [bytearray(1 << 16) for _ in range(memories)]
        self.parser = protocol.FrameParser(protocol.SYNC_HOST)
        self.out = bytearray()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, data):
        for code, payload, crc_ok in self.parser.feed(data):
            assert crc_ok
            self.out += protocol.encode_frame(protocol.SYNC_BOARD, protocol.OK,
                                              self.answer(code, payload))

    def read(self, count):
        data = bytes(self.out[:count])
        del self.out[:count]
        return data

    def answer(self, code, payload):
        if code == protocol.PING:
            return b"BF" + bytes([self.design_id, 1])
        if code == protocol.RUN:
            return self.run(payload)
        mem, addr = payload[0], int.from_bytes(payload[1:3], "little")
        if code == protocol.WRITE:
            self.mems[mem][addr:addr + len(payload) - 3] = payload[3:]
            return b""
        return bytes(self.mems[mem][addr:addr + int.from_bytes(payload[3:5], "little")])


def cli_error(capsys, argv):
    """``bertforge argv`` must fail with exit code 2 and one line on stderr
    starting ``bertforge: error: ``; returns that line."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("bertforge: error: "), err
    return err


def save_build_report(tmp_path, design, config, board_name="ulx3s-85f"):
    """A build directory's ``report.json`` as ``bertforge build`` leaves it,
    for ``bertforge run`` to read the design and its config (an object with
    ``to_dict()`` or a dict) from."""
    build = tmp_path / f"build-{board_name}-{design}"
    build.mkdir(exist_ok=True)
    raw = config if isinstance(config, dict) else config.to_dict()
    (build / "report.json").write_text(json.dumps({"design": {"name": design, "config": raw}}))


def top_config_test(config_class, cases, **fixed):
    """A test that each of ``cases`` (``(fields, error, message)``) fails
    when a ``config_class`` board top config is built from ``fixed`` and
    those fields, with ``message`` (an anchored regex)."""
    @pytest.mark.parametrize("fields, error, message", cases)
    def test_top_config_validation(fields, error, message):
        with pytest.raises(error, match=message):
            config_class(**fixed, **fields)
    return test_top_config_validation


def run_exit_checked(code, out, err, *, flip, ran, cycles, wrote):
    """The exit of ``bertforge run`` past a stand-in board on ulx3s-85f:
    with ``flip`` (the board's result one bit off) exit 1 and the mismatch
    line; else exit 0, ``"<ran> on ulx3s-85f in <cycles> cycles; wrote
    <wrote>"`` and the golden model matched. Returns whether the run passed."""
    if flip:
        assert code == 1 and ran in out
        assert err.strip() == "bertforge: error: the board's result differs from the golden model"
        return False
    assert code == 0, err
    assert f"{ran} on ulx3s-85f in {cycles} cycles; wrote {wrote}" in out
    assert "matches the golden model" in out
    return True
