"""The low-bit (W8A8) encoder top (issue 36): int8 operands for every GEMM,
the int16 residual stream, the layernorm's int8 second output and GELU's
per-channel int8 output on FFN 1's writer, run as ``sim model --hw tiny_int8.toml`` on the
small random checkpoint (one Verilator build): bit-exact per layer against
the W8A8 integer golden model (``IntegerLowbit``), every operation's cycles
equal to ``analyze``'s; with random memory latency and stalls on every
stream, still bit-exact. Then the configs the low-bit top refuses, and the
top's low-bit layernorm and GELU adapters in amaranth.sim. The real
all-MiniLM-L6-v2 on minilm_int8.toml runs under ``-m slow``."""

import dataclasses

import numpy as np
import pytest

from bertforge.generators.analyze import load_hardware
from bertforge.generators.cli import main
from bertforge.generators.encoder_sim import TINY_HW, TINY_INT8_HW, encoder_config
from bertforge.rtl.encoder import EncoderConfig, encoder_command_layout
from bertforge.rtl.errors import ParameterError

from checkpoint_helpers import TEXTS, low_bit_stalled, sim_model_low_bit, write_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("lowbit-top") / "random-bert")


def test_sim_model_w8a8_on_a_random_checkpoint(checkpoint, tmp_path, capsys):
    result = sim_model_low_bit(checkpoint, TINY_INT8_HW, tmp_path / "emb.npy", capsys)
    assert result["design"].endswith("_w8a8")
    # GELU runs on FFN 1's writer: no class of its own
    assert {c["class"] for c in result["classes"]} == {"gemm", "softmax", "layernorm"}
    assert result["cosine_min"] > 0.99


def test_w8a8_layers_with_memory_stalls(checkpoint):
    """Both layers of two sentences in one run behind random memory latency
    and stalls: every stage bit-exact (q, k, v, ctx, attn, both layernorm
    outputs, h1, g, f, out), slower than the prediction."""
    from bertforge.generators.checkpoint import load_checkpoint, tokenize
    from bertforge.generators.encoder_sim import simulate_lowbit
    from bertforge.generators.lowbit import calibration_stats, integer_model, quantize_model
    model = load_checkpoint(checkpoint)
    ids = tokenize(model, TEXTS, 64)
    stats = calibration_stats(model, ids[2:], hessian=False)
    config = encoder_config(load_hardware(TINY_INT8_HW), TINY_INT8_HW)
    imodel = integer_model(model, config, quantize_model(model, stats, "w8a8"), stats)
    result, runs = low_bit_stalled(config, model, imodel, ids, seed=4)
    clean = simulate_lowbit(config, imodel, runs[:1], mem_latency=2)
    for run in result["runs"]:
        assert all(layer["cycles"] > clean["runs"][0][0]["cycles"] for layer in run)
        assert "out8" in run[0]["mismatches"]          # layer 1's int8 input, checked
        assert np.abs(run[0]["stages"]["ln1_8"]).max() > 64    # int8 operands use their range


def _units(path):
    config = encoder_config(load_hardware(path), path)
    return {name: getattr(config, name) for name in ("gemm", "softmax", "layernorm", "gelu")}


NEEDS = r"^the low-bit encoder top \(layernorm second_output\) needs "


@pytest.mark.parametrize("unit, change, message", [
    ("gemm", dict(width=16), NEEDS + r"gemm width 8, not 16$"),
    ("softmax", dict(out_width=16), NEEDS + r"softmax out_width 8, not 16$"),
    ("layernorm", dict(in_width=32), NEEDS + r"layernorm in_width 16, not 32$"),
    ("layernorm", dict(param_width=8, gamma_frac=6, beta_frac=4),
     NEEDS + r"layernorm param_width 16, not 8$"),
    ("layernorm", dict(out_width=8), NEEDS + r"layernorm out_width 16, not 8$"),
    ("gelu", dict(in_width=8), NEEDS + r"gelu in_width 16, not 8$"),
    ("gelu", dict(out_width=16), NEEDS + r"gelu out_width 8, not 16$"),
    ("gelu", dict(channel_scales=False), NEEDS + r"gelu channel_scales True, not False$"),
    ("gelu", dict(lanes=8, channels_max=256),
     r"^the low-bit encoder top loads 4 bytes per channel and lane \(layernorm's two gamma/beta "
     r"pairs, GELU's scale words\): 4 x lanes must divide the 16-byte memory word$"),
])
def test_bad_lowbit_config(unit, change, message):
    units = _units(TINY_INT8_HW)
    units[unit] = dataclasses.replace(units[unit], **change)
    with pytest.raises(ParameterError, match=message):
        EncoderConfig(**units)


def test_lowbit_top_and_todays_tops():
    config = encoder_config(load_hardware(TINY_INT8_HW), TINY_INT8_HW)
    assert config.lowbit and (config.element_bytes, config.unit_bytes) == (1, 2)
    assert {"dst2", "dst2_stride"} <= set(encoder_command_layout(config).members)
    today = encoder_config(load_hardware(TINY_HW), TINY_HW)
    assert not today.lowbit and today.unit_bytes == 1 and not today.name.endswith("_w8a8")
    assert "dst2" not in encoder_command_layout(today).members      # today's commands unchanged
    units = _units(TINY_HW)
    units["gelu"] = dataclasses.replace(units["gelu"], channel_scales=True, channels_max=256)
    with pytest.raises(ParameterError, match=r"^gelu channel_scales is for the low-bit encoder "
                                             r"top: set \[layernorm\] second_output too$"):
        EncoderConfig(**units)


def test_analyze_counts_the_lowbit_bytes():
    """MiniLM at 16 tokens: int8 operands, the int16 residual stream, the
    layernorm's two gamma/beta pairs and two outputs, FFN 1 with GELU on its
    writer (GELU's scale words, int8 out; no GELU operation); 51.1% of
    minilm.toml's bytes (q and v one GEMM)."""
    from bertforge.generators.analyze import analyze
    from bertforge.generators.model_sim import MINILM_HW
    from bertforge.generators.workload import BertModel
    shape = BertModel("minilm", 384, 12, 6, 1536)
    low = analyze(shape, 16, load_hardware(MINILM_HW.with_name("minilm_int8.toml")), bias=True,
                  transpose=True)
    today = analyze(shape, 16, load_hardware(MINILM_HW), bias=True, transpose=True)
    ops = {op["operation"]: op["bytes"] for op in low["operations"]}
    T, H, F = 16, 384, 1536
    assert ops["residual + layernorm 1"] == {"weights": 8 * H, "activations": 4 * T * H,
                                             "outputs": 3 * T * H}
    assert "gelu" not in ops
    assert ops["ffn 1"] == {"weights": H * F + 8 * F + 4 * F, "activations": T * H,
                            "outputs": T * F}
    assert ops["q, v projections"]["outputs"] == 2 * T * H
    # 12,441,600 with q and v two GEMMs, 13,031,424 also with GELU alone
    assert low["totals"]["bytes_per_sentence"] == 12_404_736
    assert today["totals"]["bytes_per_sentence"] == 24_274_944


def test_sim_encoder_refuses_a_lowbit_top(capsys):
    """``sim encoder`` runs today's random int8/int16 layers: a one-line
    error for a low-bit top, before any build."""
    assert main(["sim", "encoder", "--hw", str(TINY_INT8_HW)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertforge: error: a low-bit (W8A8) encoder top runs W8A8 layers")
    assert len(err.strip().splitlines()) == 1


def test_sim_model_lowbit_one_sentence_a_run(checkpoint, capsys):
    assert main(["sim", "model", "--checkpoint", str(checkpoint), "--hw", str(TINY_INT8_HW),
                 "--batch", "2", "--text", "a", "--text", "b"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"bertforge: error: {TINY_INT8_HW}: the low-bit top runs one sentence "
                           "at a time: --batch 1")


def test_sim_model_lowbit_on_the_harness_only(checkpoint, capsys):
    assert main(["sim", "model", "--checkpoint", str(checkpoint), "--hw", str(TINY_INT8_HW),
                 "--bus", "axi4", "--text", "a"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"bertforge: error: {TINY_INT8_HW}: the low-bit top runs on the "
                           "harness only: remove --bus")


def test_lowbit_program_refuses(checkpoint):
    from bertforge.sim.encoder_run import lowbit_program
    today = encoder_config(load_hardware(TINY_HW), TINY_HW)
    with pytest.raises(ParameterError, match=r"^a low-bit program needs a low-bit encoder top"):
        lowbit_program(today, None, 8)
    config = encoder_config(load_hardware(TINY_INT8_HW), TINY_INT8_HW)
    narrow = dataclasses.replace(config, gelu=dataclasses.replace(config.gelu, channels_max=128))
    imodel = type("M", (), {"heads": 2, "plan": [{"w": {"1": np.zeros((64, 256))}}]})
    with pytest.raises(ParameterError, match=r"^ffn 256 exceeds the GELU unit's channels_max = 128$"):
        lowbit_program(narrow, imodel, 8)


@pytest.mark.slow
def test_all_minilm_l6_v2_w8a8_end_to_end():
    """The real checkpoint on minilm_int8.toml, the 24 evaluation sentences:
    bit-exact; every class's cycles as analyze predicts, the GEMMs (FFN 1
    with GELU on its writer, q and v as one GEMM) included (measured: 704,586
    cycles a sentence, exact, 390 s); W8A8's targets against the float64
    model (cosine min >= 0.99, Spearman >= 0.98)."""
    from bertforge.generators.model_sim import EVALUATION, MINILM_HW, encode, read_sentences
    result = encode(read_sentences(EVALUATION), hw=MINILM_HW.with_name("minilm_int8.toml"))
    assert result["match"]
    for c in result["classes"]:
        assert c["cycles"] == c["predicted"], c
    assert result["cosine_min"] >= 0.99 and result["spearman"] >= 0.98, (
        f"cosine mean {result['cosine_mean']:.4f}, min {result['cosine_min']:.4f}, "
        f"spearman {result['spearman']:.4f}")


def _run_top(config, image, commands, limit=3000, errors=None):
    """Commands on an EncoderTop in amaranth.sim, a memory answering reads
    two cycles on (its ``ready`` low every third cycle); the memory after.
    Every command must finish once, with ``finish_error`` as ``errors``
    says (default: none; a refused command finishes in the cycle it is
    taken)."""
    from collections import deque

    from amaranth.sim import Simulator

    from bertforge.rtl.encoder import EncoderTop
    from bertforge.sim.stream_sim import stream_put
    dut = EncoderTop(config)
    mem, mb = bytearray(image), config.gemm.mem_bytes
    finished = []

    async def memory(ctx):
        words, cycle = deque(), 0
        ctx.set(dut.wr_req.ready, 1)
        while True:
            cycle += 1
            ctx.set(dut.rd_req.ready, cycle % 3 != 0)
            ready_words = [w for w in words if w[0] <= cycle]
            ctx.set(dut.rd_data.valid, bool(ready_words))
            if ready_words:
                ctx.set(dut.rd_data.payload, int.from_bytes(ready_words[0][1], "little"))
            read = ctx.get(dut.rd_req.valid) and cycle % 3 != 0
            addr, beats = ctx.get(dut.rd_req.payload.addr), ctx.get(dut.rd_req.payload.beats)
            taken = bool(ready_words) and ctx.get(dut.rd_data.ready)
            write = ctx.get(dut.wr_req.valid)
            waddr, wdata = ctx.get(dut.wr_req.payload.addr), ctx.get(dut.wr_req.payload.data)
            wbytes = ctx.get(dut.wr_req.payload.bytes)
            await ctx.tick()
            if taken:
                words.remove(ready_words[0])
            if read:
                words.extend((cycle + 2, bytes(mem[addr + b * mb:addr + (b + 1) * mb]))
                             for b in range(beats))
            if write:
                mem[waddr:waddr + wbytes] = wdata.to_bytes(mb, "little")[:wbytes]

    async def watch(ctx):      # every cycle's finish strobe, the handshake's too
        while True:
            if ctx.get(dut.finish):
                finished.append(bool(ctx.get(dut.finish_error)))
            await ctx.tick()

    async def host(ctx):
        for number, command in enumerate(commands):
            await stream_put(ctx, dut.cmd, command)
            for _ in range(limit):
                if len(finished) > number:
                    break
                await ctx.tick()
        await ctx.tick().repeat(4)     # the memory takes the last write a cycle on

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(memory, background=True)
    sim.add_testbench(watch, background=True)
    sim.add_testbench(host)
    sim.run()      # until the host is done: each command finished, or waited out
    assert finished == (errors or [False] * len(commands))
    return mem


def test_amaranth_lowbit_layernorm_and_gelu_commands():
    """The low-bit top's adapters in amaranth.sim: a layernorm command
    (int16 x and residual, gamma|gamma2 and beta|beta2 beats, the int16
    output at dst and the int8 second output at dst2) and a GELU command
    (scale words, then int16 rows, int8 out) against the golden models."""
    from bertforge.rtl.encoder import OP_GELU, OP_LAYERNORM
    from bertforge.sim.encoder_run import _interleave
    from bertforge.sim.fixed_golden import channel_scale_words
    from bertforge.sim.gelu_golden import gelu_golden
    from bertforge.sim.layernorm_golden import layernorm_golden, layernorm_second
    config = encoder_config(load_hardware(TINY_INT8_HW), TINY_INT8_HW)
    ln, rng = config.layernorm, np.random.default_rng(9)
    rows, H = 3, 16
    x = rng.integers(-3000, 3000, (rows, H))
    r = rng.integers(-3000, 3000, (rows, H))
    g, b, g2, b2 = (rng.integers(-8000, 8000, H) for _ in range(4))
    mult2, shift2 = 45678, 35
    words = channel_scale_words(2.0 ** rng.uniform(-12, -6, H)).astype(np.int64)
    image = np.zeros(4096, np.uint8)

    def put(at, values, kind):
        raw = np.asarray(values, dtype=np.int64).astype(kind).ravel().view(np.uint8)
        image[at:at + raw.size] = raw
    put(0x000, x, "<i2"), put(0x100, r, "<i2"), put(0x600, x, "<i2"), put(0x500, words, "<u4")
    put(0x200, np.concatenate([_interleave(g, g2, ln.lanes), _interleave(b, b2, ln.lanes)]), "<i2")
    layout = encoder_command_layout(config)
    zero = {name: 0 for name in layout.members if name != "gemm"}
    commands = [
        {**zero, "op": OP_LAYERNORM, "src": 0x000, "src_stride": 2 * H, "src2": 0x100,
         "src2_stride": 2 * H, "params": 0x200, "dst": 0x300, "dst_stride": 2 * H, "dst2": 0x400,
         "dst2_stride": H, "rows": rows, "length": H, "multiplier": mult2, "shift": shift2},
        {**zero, "op": OP_GELU, "src": 0x600, "src_stride": 2 * H, "params": 0x500, "dst": 0x700,
         "dst_stride": H, "rows": rows, "length": H}]
    mem = np.frombuffer(bytes(_run_top(config, image, commands)), np.uint8)
    out = mem[0x300:0x300 + 2 * rows * H].view("<i2").reshape(rows, H)
    out2 = mem[0x400:0x400 + rows * H].view("<i1").reshape(rows, H)
    gelu = mem[0x700:0x700 + rows * H].view("<i1").reshape(rows, H)
    for t in range(rows):
        assert out[t].tolist() == layernorm_golden(ln, x[t], r[t], g, b).tolist()
        assert out2[t].tolist() == layernorm_second(ln, x[t], r[t], g2, b2, mult2, shift2).tolist()
    assert gelu.tolist() == gelu_golden(config.gelu, x, words).tolist()
    assert len(set(out2.ravel().tolist())) > 20 and len(set(gelu.ravel().tolist())) > 5


def test_amaranth_gemm_with_gelu_on_its_writer():
    """A GEMM command with ``gelu`` on the low-bit top in amaranth.sim: the
    engine's int16 results (per-channel scales and a bias) go through GELU
    and its per-channel scale words to int8 at ``dst``, in the engine's
    block order (M = 5: a block of 4 rows and one of 1; N = 32: two
    panels); nothing else is written. A rejected command (K = 0) before it
    finishes (no write, no hang)."""
    from bertforge.rtl.encoder import OP_GEMM
    from bertforge.sim.fixed_golden import channel_scale_words, split_scale_words
    from bertforge.sim.gelu_golden import gelu_golden
    from bertforge.sim.gemm_golden import gemm_golden
    config = encoder_config(load_hardware(TINY_INT8_HW), TINY_INT8_HW)
    rng = np.random.default_rng(21)
    M, K, N = 5, 16, 32
    a = rng.integers(-128, 128, (M, K))
    b = rng.integers(-128, 128, (K, N))
    bias = rng.integers(-20000, 20000, N)
    words = channel_scale_words(rng.uniform(0.005, 0.05, N)).astype(np.int64)
    gelu_words = channel_scale_words(2.0 ** rng.uniform(-10, -6, N)).astype(np.int64)
    image = np.zeros(4096, np.uint8)

    def put(at, values, kind):
        raw = np.asarray(values, dtype=np.int64).astype(kind).ravel().view(np.uint8)
        image[at:at + raw.size] = raw
    put(0x000, a, "<i1"), put(0x100, b, "<i1"), put(0x300, bias, "<i4")
    put(0x380, words, "<u4"), put(0x400, gelu_words, "<u4")
    layout = encoder_command_layout(config)
    zero = {name: 0 for name in layout.members if name != "gemm"}

    def fused(k, dst):
        return {**zero, "op": OP_GEMM, "barrier": 1, "gelu": 1, "params": 0x400, "dst": dst,
                "dst_stride": N, "rows": M, "length": N, "gemm": {
                    "m": M, "k": k, "n": N, "a_addr": 0x000, "b_addr": 0x100, "c_addr": dst,
                    "a_stride": K, "b_stride": N, "c_stride": 2 * N, "int16": 1, "bias": 1,
                    "bias_addr": 0x300, "per_channel": 1, "scale_addr": 0x380}}
    before = image.copy()
    mem = np.frombuffer(bytes(_run_top(config, image, [fused(0, 0x600), fused(K, 0x500)],
                                       errors=[True, False])),
                        np.uint8)
    mult, shift = split_scale_words(words)
    h1 = gemm_golden(config.gemm, a, b, bias=bias, int16=True, multiplier=mult, shift=shift)
    want = gelu_golden(config.gelu, h1, gelu_words)
    assert mem[0x500:0x500 + M * N].view("<i1").reshape(M, N).tolist() == want.tolist()
    written = np.flatnonzero(mem != before)
    assert written.min() >= 0x500 and written.max() < 0x500 + M * N
    assert len(set(want.ravel().tolist())) > 20


def test_amaranth_lowbit_refuses_misaligned_commands():
    """The low-bit top refuses, at decode, a GEMM with ``gelu`` whose scale
    words are off the word grid (``params`` or ``4 * length``) and a GELU
    command whose ``params`` is: each finishes with ``finish_error`` in the
    cycle it is taken and writes nothing; an aligned GELU after them runs."""
    from bertforge.rtl.encoder import OP_GELU, OP_GEMM
    from bertforge.sim.fixed_golden import channel_scale_words
    from bertforge.sim.gelu_golden import gelu_golden
    config = encoder_config(load_hardware(TINY_INT8_HW), TINY_INT8_HW)
    rng = np.random.default_rng(5)
    rows, H = 2, 16
    x = rng.integers(-3000, 3000, (rows, H))
    words = channel_scale_words(2.0 ** rng.uniform(-12, -6, H)).astype(np.int64)
    image = np.zeros(4096, np.uint8)
    image[0x000:0x000 + x.size * 2] = x.astype("<i2").ravel().view(np.uint8)
    image[0x500:0x500 + H * 4] = words.astype("<u4").view(np.uint8)
    zero = {name: 0 for name in encoder_command_layout(config).members if name != "gemm"}
    gelu = {**zero, "op": OP_GELU, "src": 0x000, "src_stride": 2 * H, "params": 0x500,
            "dst": 0x700, "dst_stride": H, "rows": rows, "length": H}
    gemm = {**zero, "op": OP_GEMM, "barrier": 1, "gelu": 1, "params": 0x500, "dst": 0x600,
            "dst_stride": H, "rows": 1, "length": H, "gemm": {
                "m": 1, "k": 16, "n": H, "a_addr": 0x000, "b_addr": 0x100, "c_addr": 0x600,
                "a_stride": 16, "b_stride": H, "c_stride": 2 * H, "int16": 1}}
    commands = [{**gemm, "params": 0x504}, {**gemm, "length": 6}, {**gelu, "params": 0x508},
                gelu]
    before = image.copy()
    mem = np.frombuffer(bytes(_run_top(config, image, commands,
                                       errors=[True, True, True, False])), np.uint8)
    written = np.flatnonzero(mem != before)
    assert written.min() >= 0x700 and written.max() < 0x700 + rows * H
    assert (mem[0x700:0x700 + rows * H].view("<i1").reshape(rows, H).tolist()
            == gelu_golden(config.gelu, x, words).tolist())
