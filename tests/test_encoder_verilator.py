"""One BERT encoder layer on EncoderTop, the emitted Verilog in Verilator
against the integer golden model and ``analyze``'s prediction.

The runs share one build per config (tiny.toml, and tiny16.toml with int16
activations; seq 32): the layer without stalls (every operation's cycles,
and the layer's, equal the prediction: the k projection stores K^T
directly, so there are no one-column transposing commands), and with
random memory latency and stalls on every stream (still bit-exact)."""

import numpy as np
import pytest

from bertforge.generators.analyze import load_hardware
from bertforge.generators.encoder_sim import TINY16_HW, TINY_HW, encoder_config, run_encoder
from bertforge.generators.simulate import simulate
from bertforge.rtl.encoder import OP_GELU, OP_GEMM, OP_LAYERNORM, OP_SOFTMAX
from bertforge.sim.coverage import uncovered
from bertforge.sim.encoder_harness import encoder_harness_verilog
from bertforge.sim.encoder_golden import probabilities_int8
from bertforge.sim.gelu_golden import gelu_golden
from bertforge.sim.layernorm_golden import layernorm_golden
from bertforge.sim.softmax_golden import softmax_golden


@pytest.mark.parametrize("hw, target", [(TINY_HW, 0.99), (TINY16_HW, 0.9999)])
def test_layer_in_verilator_matches_golden_and_prediction(hw, target):
    """int8 activations (tiny.toml) and int16 (tiny16.toml)."""
    result = run_encoder(hw, seq=32, seed=0)
    assert result["passed"] and result["match"], result["mismatches"]
    assert all(count == 0 for count in result["mismatches"].values())
    # every operation takes the predicted cycles exactly (tiny.toml: 111,387)
    for op in result["operations"]:
        assert op["cycles"] == op["predicted"], op
    assert "input transpose" not in {op["operation"] for op in result["operations"]}
    assert result["cycles"] == result["predicted_cycles"]
    for c in result["classes"]:
        assert c["cycles"] == c["predicted"], c
    assert {c["class"] for c in result["classes"]} == {"gemm", "softmax", "layernorm", "gelu"}
    assert result["cosine"] >= target


def test_layer_with_random_memory_stalls_is_still_exact():
    """The layer, then its elementwise commands back to back in every
    order (``tail``: run again on some of their rows, so the memory still
    equals the golden model's)."""
    result = run_encoder(TINY_HW, seq=32, seed=5, gap=0.3, stall=0.3, tail=True)
    assert result["passed"] and result["match"], result["mismatches"]
    assert result["cycles"] > result["predicted_cycles"]
    # every functional cover point (sim/encoder_tb.py) but those waived
    assert uncovered([result], WAIVED) == []


#: Cover points no run of this design can hit, and why:
#: - ``cmd.idle``: the sequencer takes a command only when it is valid
#:   (``cmd.ready`` is computed from ``cmd.valid``);
#: - ``cmd.refused`` for 1 and 2-3 cycles: a command is held until the one
#:   before it completes (an elementwise command: the read latency, the
#:   unit's pipeline and the write, tens of cycles; a GEMM: the engine's
#:   done), or, a GEMM queued behind GEMMs without a barrier, until the
#:   engine's 4-deep command queue has room: the tile scheduler takes a
#:   command from it at most once per ``dim_width + 3`` = 19 cycles (its
#:   address products take ``dim_width + 1`` steps) and the sequencer
#:   refills it the next cycle, so a burst's first hold, which starts when
#:   the queue fills 5 cycles after the scheduler took the burst's first
#:   command, lasts at least 14 cycles and every later one about 19.
WAIVED = {"encoder.cmd.idle:True", "encoder.cmd.refused:1", "encoder.cmd.refused:2-3"}


#: The int8 layer's harness memory (tiny.toml, seq 32: 2**17 bytes), so
#: that :func:`_program` runs on the model the layer tests built.
ABITS = 17


def _program(config, image, commands, errors=None, abits=ABITS, **knobs):
    """Run ``commands`` (one program) on the int8 layer's harness (``abits``:
    the int16 layer's, 18, for its model) with the
    memory ``image`` (``errors``: the error flags they end with, default
    none; ``knobs``: the memory's ``seed``, ``lat_mask``, ``p_req``,
    ``p_data``, ``p_wr``; default none); ``(memory after,
    stamps and counts)``. The request addresses' bits above the memory must
    sum to those of :func:`_high_sums` (``high``, the harness's ``rd_high``
    and ``wr_high``)."""
    spec = {"image": image, "programs": [[commands]], "abits": abits,
            "mem_bytes": config.gemm.mem_bytes, "seed": 0, "lat_min": 1, "lat_mask": 0,
            "p_req": 0, "p_data": 0, "p_wr": 0, **knobs, "read_bytes": image.size,
            "timeout": 1_000_000,
            "errors": [[errors or [False] * len(commands)]]}
    result = simulate(config, "bertforge.sim.encoder_tb", spec, harness=encoder_harness_verilog,
                      extra=(abits,))
    assert result["passed"], result.get("log")
    run = result["runs"][0]
    assert run["layers"][0]["high"] == _high_sums(config, commands, abits)
    return run["image"], run["layers"][0]


def _high_sums(config, commands, abits=ABITS):
    """``[reads, writes]``: the sums (mod 2**32) of ``addr >> ABITS`` over the
    memory requests of the elementwise ``commands``, as the harness adds
    them (``rd_high``, ``wr_high``): an adapter reads its rows a memory word
    at a time (layernorm: gamma and beta, then x and r), and writes each
    output beat of ``lanes`` elements (row bases and offsets add mod
    ``2**addr_width``)."""
    g = config.gemm
    units = {OP_SOFTMAX: (config.softmax.lanes, 4, config.softmax.out_width // 8),
             OP_LAYERNORM: (config.layernorm.lanes, config.unit_bytes, config.unit_bytes),
             OP_GELU: (config.gelu.lanes, config.unit_bytes, config.element_bytes)}
    reads, writes = [], []
    for c in commands:
        if c["op"] == OP_GEMM:      # the tests' GEMMs address the memory only: 0
            continue
        lanes, ebytes, obytes = units[c["op"]]
        words = range(0, c["length"] * ebytes, g.mem_bytes)
        rows = [(c["src"], c["src_stride"])]
        if c["op"] == OP_LAYERNORM:
            reads += [base + w for w in words
                      for base in (c["params"], c["params"] + c["length"] * ebytes)]
            rows.append((c["src2"], c["src2_stride"]))
        reads += [base + i * stride + w for i in range(c["rows"]) for w in words
                  for base, stride in rows]
        writes += [c["dst"] + i * c["dst_stride"] + k * lanes * obytes
                   for i in range(c["rows"]) for k in range(c["length"] // lanes)]
    return [sum((a % (1 << g.addr_width)) >> abits for a in addrs) % (1 << 32)
            for addrs in (reads, writes)]


#: Address bits 17 to 31: the harness memory (2**17 bytes) ignores them.
HIGH = 0xFFFE0000
#: The command fields that are addresses or strides.
ADDRESSES = {"src", "src_stride", "src2", "src2_stride", "params", "dst", "dst_stride"}


def test_elementwise_commands_at_aliased_addresses():
    """Softmax (a padding mask), two layernorms and GELU with bits 17 to 31
    set in every address and stride: the adapters carry them (row bases
    and strides add mod 2**32) and the memory reads and writes the aliases,
    so a bit above the memory that leaks into one below it changes the
    results, and the harness sums the bits above the memory of every
    request (:func:`_program` checks them against the commands'): one lost
    or set by mistake changes the sums. The memory stalls requests and data at random (a register that
    goes wrong only on some cycles is read on other cycles than without)."""
    config = encoder_config(load_hardware(TINY_HW), TINY_HW)
    rng = np.random.default_rng(4)
    image = np.zeros(1 << ABITS, dtype=np.uint8)

    def put(addr, stride, rows):
        for i, row in enumerate(rows):
            data = row.view(np.uint8)
            image[addr + i * stride:addr + i * stride + data.size] = data
    scores = rng.integers(-3000, 3000, size=(4, 8)).astype(np.int32)
    put(0x1000, 64, scores)
    x, r = (rng.integers(-100, 100, size=(3, 16)).astype(np.int8) for _ in range(2))
    gamma, beta = rng.integers(-128, 128, size=(2, 16)).astype(np.int8)
    put(0x3000, 32, x)
    put(0x4000, 48, r)
    put(0x4800, 16, r[::-1])
    put(0x5000, 16, [gamma, beta])
    g = rng.integers(-128, 128, size=(2, 16)).astype(np.int8)
    put(0x7000, 80, g)
    high = lambda **fields: {k: v + HIGH if k in ADDRESSES else v for k, v in fields.items()}  # noqa: E731
    memory, run = _program(config, image, [
        high(op=OP_SOFTMAX, src=0x1000, src_stride=64, dst=0x2000, dst_stride=16, rows=4, length=8,
             valid=6, multiplier=0xDCF6, shift=16),
        high(op=OP_LAYERNORM, src=0x3000, src_stride=32, src2=0x4000, src2_stride=48,
             params=0x5000, dst=0x6000, dst_stride=16, rows=3, length=16),
        high(op=OP_LAYERNORM, src=0x3000, src_stride=32, src2=0x4800, src2_stride=16,
             params=0x5000, dst=0x9400, dst_stride=16, rows=3, length=16),
        high(op=OP_GELU, src=0x7000, src_stride=80, dst=0x8000, dst_stride=32, rows=2, length=16)],
        seed=5, lat_mask=3, p_req=77, p_data=77, p_wr=77)
    assert run["completions"] == 4 and not any(run["errors"])
    mask = np.broadcast_to(np.arange(8) >= 6, (4, 8))
    p = probabilities_int8(softmax_golden(config.softmax, scores.astype(np.int64), mask, 0xDCF6, 16))
    ln = [np.stack([layernorm_golden(config.layernorm, a, b, gamma, beta) for a, b in zip(x, res)])
          for res in (r, r[::-1])]
    ge = gelu_golden(config.gelu, g.astype(np.int64))
    for addr, stride, want in ((0x2000, 16, p), (0x6000, 16, ln[0]), (0x9400, 16, ln[1]),
                               (0x8000, 32, ge)):
        for i, row in enumerate(want):
            got = memory[addr + i * stride:addr + i * stride + row.size].view(np.int8)
            assert (got == row).all(), (hex(addr), i, got, row)


def test_gelu_past_32768_rows_then_another():
    """A GELU command of 32,769 rows (one word each, strides 0: the row
    counts' bit 15), then a GELU of 2 rows of other values: the first takes
    its 4 beats a row, nothing of it is left for the second (a reader that
    missed its last row would still be reading)."""
    config = encoder_config(load_hardware(TINY_HW), TINY_HW)
    rng = np.random.default_rng(3)
    image = np.zeros(1 << ABITS, dtype=np.uint8)
    x = rng.integers(-128, 128, size=48, dtype=np.int64)
    image[0x1000:0x1030] = x.astype(np.int8).view(np.uint8)
    gelu = {"op": OP_GELU, "length": 16, "src_stride": 0, "dst_stride": 0}
    memory, run = _program(config, image, [
        dict(gelu, rows=32769, src=0x1000, dst=0x2000),
        dict(gelu, rows=2, src=0x1010, dst=0x3000, src_stride=16, dst_stride=16)])
    assert run["completions"] == 2 and not any(run["errors"])
    assert run["ends"][0] - run["starts"][0] >= 4 * 32769
    want = gelu_golden(config.gelu, x).astype(np.int8).view(np.uint8)
    assert (memory[0x2000:0x2010] == want[:16]).all()
    assert (memory[0x3000:0x3020] == want[16:]).all()


def test_rejected_gemm_then_a_gemm_and_a_saturated_softmax():
    """A GEMM the engine rejects (M = 0: it completes at once with its error
    flag, ``finish_error``, and writes nothing), a GEMM queued behind it
    without a barrier, then a softmax of rows with one score far above the
    others (scale 0xFFFF / 2**8: p = 255, whose int8 probability is the
    clamp ``min((p + 1) >> 1, 127)``) and no mask (``valid`` 0)."""
    config = encoder_config(load_hardware(TINY_HW), TINY_HW)
    rng = np.random.default_rng(6)
    image = np.zeros(1 << ABITS, dtype=np.uint8)
    a = rng.integers(-128, 128, size=(4, 16), dtype=np.int64)
    b = rng.integers(-128, 128, size=(16, 8), dtype=np.int64)
    image[0x1000:0x1040] = a.astype(np.int8).view(np.uint8).ravel()
    image[0x2000:0x2080] = b.astype(np.int8).view(np.uint8).ravel()
    scores = rng.integers(-300, 300, size=(4, 8)).astype(np.int32)
    scores[np.arange(4), [0, 5, 2, 7]] = 20000        # on each of the 4 lanes
    image[0x4000:0x4080] = scores.view(np.uint8).ravel()
    gemm = {"k": 16, "n": 8, "a_addr": 0x1000, "b_addr": 0x2000, "c_addr": 0x3000,
            "a_stride": 16, "b_stride": 8, "c_stride": 32}
    memory, run = _program(config, image, [
        {"op": OP_GEMM, "barrier": 1, "gemm": dict(gemm, m=0, c_addr=0x5000, tag=1)},
        {"op": OP_GEMM, "gemm": dict(gemm, m=4, tag=2)},
        {"op": OP_SOFTMAX, "barrier": 1, "src": 0x4000, "src_stride": 32, "dst": 0x6000,
         "dst_stride": 16, "rows": 4, "length": 8, "valid": 0, "multiplier": 0xFFFF, "shift": 8}],
        errors=[True, False, False])
    assert run["completions"] == 3 and run["errors"] == [True, False, False]
    assert not memory[0x5000:0x5100].any()      # the rejected GEMM wrote nothing
    c = memory[0x3000:0x3080].view(np.int32).reshape(4, 8)
    assert (c == a @ b).all()
    p = probabilities_int8(softmax_golden(config.softmax, scores.astype(np.int64), None, 0xFFFF, 8))
    assert (p.max(axis=1) == 127).all()         # the clamp: p = 255
    got = np.stack([memory[0x6000 + 16 * i:0x6000 + 16 * i + 8] for i in range(4)]).view(np.int8)
    assert (got == p).all(), (got, p)
