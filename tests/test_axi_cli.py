"""``--bus axi4`` on the command line: generate writes the AXI top's
Verilog, sidecar (ports under their AXI names), C header, register map and
IP-XACT, deterministically; sim runs a GEMM through the AXI top (the model
of test_axi_verilator, shared) and reports the counters; bad bus
parameters are one line and exit 2, with nothing written."""

import json

import numpy as np
import pytest
from cli_helpers import assert_one_line_error, npy_flags, run_cli

from bertforge.generators.cli import main

SMALL = ["--rows", "2", "--cols", "2", "--mem-width", "32", "--k-chunk", "16", "--m-tile", "2",
         "--addr-width", "16"]


def test_generate_axi(tmp_path, capsys):
    assert main(["generate", "gemm", *SMALL, "--bus", "axi4", "-o", str(tmp_path / "a")]) == 0
    assert main(["generate", "gemm", *SMALL, "--bus", "axi4", "-o", str(tmp_path / "b")]) == 0
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["component.xml", "gemm_2x2_os_axi.json", "gemm_2x2_os_axi.v",
                     "gemm_2x2_os_axi_regs.h", "gemm_2x2_os_axi_regs.md"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    sidecar = json.loads((tmp_path / "a" / "gemm_2x2_os_axi.json").read_text())
    ports = {p["name"]: p for p in sidecar["ports"]}
    for name in ("m_axi_awaddr", "m_axi_wstrb", "m_axi_rlast", "s_axi_awaddr", "s_axi_rdata",
                 "irq", "clk", "rst"):
        assert name in ports
    assert ports["m_axi_wdata"]["width"] == 32 and ports["m_axi_wstrb"]["width"] == 4
    assert ports["m_axi_rready"]["direction"] == "output"
    verilog = (tmp_path / "a" / "gemm_2x2_os_axi.v").read_text()
    assert "module gemm_2x2_os_axi(" in verilog and "m_axi_arlen" in verilog


@pytest.mark.parametrize("flags, message", [
    (["--max-burst", "300"], "--bus axi4: max_burst must be an integer <= 256, not 300"),
    (["--axi-addr-width", "40"], "--bus axi4: addr_width must be 32 or 64, not 40"),
    (["--max-reads", "0"], "--bus axi4: max_reads must be a positive integer, not 0"),
])
def test_bad_bus_parameters(tmp_path, flags, message):
    out = tmp_path / "out"
    result = run_cli("generate", "gemm", *SMALL, "--bus", "axi4", *flags, "-o", str(out))
    assert_one_line_error(result, message)
    assert not out.exists() or not any(out.iterdir())


def test_axi_flags_need_the_bus(tmp_path):
    result = run_cli("sim", "gemm", *SMALL, "--max-burst", "4", "--m", "2", "--k", "2", "--n", "2")
    assert_one_line_error(result, "the AXI flags (--axi-addr-width, --max-burst, ...) need --bus axi4")


def test_sim_axi(tmp_path, capsys):
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, size=(5, 9)).astype(np.int8)
    b = rng.integers(-128, 128, size=(9, 6)).astype(np.int8)
    flags = npy_flags(tmp_path, a=a, b=b)
    assert main(["sim", "gemm", *SMALL, "--bus", "axi4", "--stall", "0.2", "--json", *flags]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["match"] and summary["error_code"] == 0
    counters = summary["counters"]
    assert summary["cycles"] == counters["cycles"] > 0
    assert counters["bytes_written"] == 5 * 6 * 4
    assert counters["bytes_read"] >= a.size + b.size
    c = np.load(tmp_path / "c.npy")
    assert np.array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.slow      # emitting the encoder's top takes ~15 s cold
def test_generate_encoder_axi(tmp_path, capsys):
    assert main(["generate", "encoder", "--bus", "axi4", "--max-burst", "8",
                 "-o", str(tmp_path)]) == 0
    name = "encoder_4x4_os_m128_s4_l4_g4_axi"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["component.xml", f"{name}.json", f"{name}.v", f"{name}_regs.h", f"{name}_regs.md"])
    sidecar = json.loads((tmp_path / f"{name}.json").read_text())
    assert sidecar["engine"] == "EncoderConfig" and sidecar["bus"]["max_burst"] == 8
    assert {"m_axi_rdata", "s_axi_wstrb", "irq"} <= {p["name"] for p in sidecar["ports"]}


def test_sim_encoder_axi_bad_burst():
    result = run_cli("sim", "encoder", "--bus", "axi4", "--max-burst", "0")
    assert_one_line_error(result, "--bus axi4: max_burst must be a positive integer, not 0")


def test_sim_model_axi_bad_flags():
    result = run_cli("sim", "model", "--text", "hi", "--bus", "axi4", "--max-burst", "0")
    assert_one_line_error(result, "--bus axi4: max_burst must be a positive integer, not 0")
    result = run_cli("sim", "model", "--text", "hi", "--max-reads", "2")
    assert_one_line_error(result, "the AXI flags (--axi-addr-width, --max-burst, ...) need --bus axi4")


@pytest.mark.slow
def test_sim_encoder_axi(capsys):
    assert main(["sim", "encoder", "--bus", "axi4", "--seq", "16", "--stall", "0.1",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["match"] and summary["error_code"] == 0 and summary["commands"] > 10
    assert all(summary["counters"][f"busy_{u}"] > 0 for u in ("gemm", "softmax", "layernorm",
                                                              "gelu"))
