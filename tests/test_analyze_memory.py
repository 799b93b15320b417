"""analyze with a [memory] section: hardware configs that name their memory
and their clock, bytes moved and compute/memory bound per operation,
totals per sentence, and the roofline PNG."""

from pathlib import Path

import pytest

from bertforge.generators.analyze import analyze, hardware_from_table, load_hardware, write_outputs
from bertforge.generators.presets import ConfigError
from bertforge.sim.sdram import CHIPS

CONFIGS = Path(__file__).parent.parent / "generators" / "configs"
HARDWARE = sorted(p for p in CONFIGS.glob("*.toml")
                  if "[hardware]" in p.read_text() and "[axes]" not in p.read_text())


@pytest.mark.parametrize("path", HARDWARE, ids=lambda p: p.stem)
def test_shipped_configs_state_their_memory_and_clock(path):
    hw = load_hardware(path)
    assert hw.clock_status in ("reached", "what-if")
    if hw.clock_status == "reached":
        assert hw.board and hw.board_mhz >= hw.clock_mhz
    if "[memory]" not in path.read_text():     # as before the section: the stated bandwidth
        assert hw.memory.kind == "ideal" and hw.mem_bytes_per_cycle in (16.0, 32.0, 64.0)


def test_minilm_clock_is_a_what_if():
    hw = load_hardware(CONFIGS / "minilm.toml")
    assert hw.clock_mhz == 200 and hw.clock_status == "what-if" and hw.board_mhz == 104.25


def test_sdr_memory_sets_bandwidth_and_latency():
    hw = load_hardware(CONFIGS / "minilm_ulx3s.toml")
    assert hw.memory == CHIPS["MT48LC16M16"]
    assert hw.mem_bytes_per_cycle == pytest.approx(
        CHIPS["MT48LC16M16"].sustained_bytes_per_cycle(hw.gemm.mem_width, hw.clock_mhz))
    assert hw.mem_latency == 4 + 3                      # [hardware] mem_latency + CL
    with pytest.raises(ConfigError, match=r"^x.toml: with an sdr \[memory\] the bandwidth follows "
                                          r"from its timings; remove \[hardware\] mem_bytes_per_cycle$"):
        hardware_from_table({"hardware": {"mem_bytes_per_cycle": 8}, "memory": {"board": "ulx3s"}},
                            "x.toml", "x")
    with pytest.raises(ConfigError, match=r"^x.toml: \[memory\] the ulx3s preset has chips "):
        hardware_from_table({"memory": {"board": "ulx3s", "chip": "IS42S16"}}, "x.toml", "x")
    with pytest.raises(ConfigError, match=r'^x.toml: clock_status must be "reached" or "what-if", '
                                          r"not 'maybe'$"):
        hardware_from_table({"hardware": {"clock_status": "maybe"}}, "x.toml", "x")


def test_bytes_bounds_and_totals():
    ideal = analyze("minilm-l6-h384", 16, load_hardware(CONFIGS / "minilm.toml"))
    sdram = analyze("minilm-l6-h384", 16, load_hardware(CONFIGS / "minilm_ulx3s.toml"))
    h, f = 384, 1536
    # int16 weights, int32 biases and per-channel scales (q, v, o, FFN 1, FFN 2), gamma and beta
    weights = 2 * (4 * h * h + 2 * h * f) + 4 * 2 * (3 * h + f + h) + 2 * 2 * 2 * h
    assert ideal["totals"]["bytes_per_layer"]["weights"] == weights
    assert ideal["totals"]["bytes_per_sentence"] == pytest.approx(
        6 * sum(ideal["totals"]["bytes_per_layer"].values()))
    bound = {r["operation"]: r["bound"] for r in ideal["operations"]}
    assert bound["ffn 1"] == "compute"
    assert all(r["bound"] == "memory" for r in sdram["operations"] if r["class"] == "gemm")
    # the SDRAM's 2 bytes a cycle: the weights' traffic alone bounds the time
    t = sdram["totals"]
    assert t["cycles_per_sentence"] >= t["traffic_bytes_per_sentence"] / load_hardware(
        CONFIGS / "minilm_ulx3s.toml").mem_bytes_per_cycle * 0.9
    assert t["sentence_ms"] == pytest.approx(t["cycles_per_sentence"] / 104.25e3)
    # batch 2 halves nothing at batch 1's cost per sentence, but the bytes are per sentence
    assert analyze("minilm-l6-h384", 16, load_hardware(CONFIGS / "minilm.toml"), batch=2)[
        "totals"]["layers"] == 6


def test_roofline_png(tmp_path):
    results = [analyze("tiny", 32, load_hardware(CONFIGS / "tiny.toml"))]
    write_outputs(results, tmp_path)
    png = (tmp_path / "roofline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "roofline.png.tmp.png" not in [p.name for p in tmp_path.iterdir()]


def test_engine_buffers_hold_two_chunks_and_fit_the_85f():
    from bertforge.generators.analyze import ECP5_85F_BRAMS, block_rams, buffer_report
    hw = load_hardware(CONFIGS / "minilm.toml")
    g = hw.gemm
    report = buffer_report(g)
    depth = {m["name"]: m["depth"] for m in report["memories"]}
    assert depth["B operand"] == 2 * g.k_chunk                  # two chunks of K rows
    assert depth["A operand (one per array row)"] == 2 * g.segments
    assert depth["accumulator"] == 2 * g.block_rows              # two blocks
    assert report["bytes"] == sum(m["count"] * m["depth"] * m["width"] for m in report["memories"]) // 8
    assert report["block_rams"] <= report["block_rams_all"] and report["fits_85f"]
    assert report["block_rams"] <= ECP5_85F_BRAMS
    assert block_rams(1024, 18) == 1 and block_rams(512, 37) == 2 and block_rams(2048, 512) == 57
    assert analyze("minilm-l6-h384", 16, hw)["totals"]["engine_buffers"] == report
