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

from helpers import gemm_refused_at_top_bits, gemm_request_addresses


@pytest.mark.parametrize("hw, target", [(TINY_HW, 0.99), (TINY16_HW, 0.9999)])
def test_layer_in_verilator_matches_golden_and_prediction(hw, target):
    """int8 activations (tiny.toml) and int16 (tiny16.toml)."""
    result = run_encoder(hw, seq=32, seed=0)
    assert result["passed"] and result["match"], result["mismatches"]
    assert all(count == 0 for count in result["mismatches"].values())
    # every operation takes the predicted cycles exactly (tiny.toml: 111,373)
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


#: The layer's harness memory by element bytes (seq 32: tiny.toml 2**17
#: bytes, tiny16.toml 2**18), so that :func:`_program` runs on the models
#: the layer tests built.
ABITS = {1: 17, 2: 18}


def _program(config, image, commands, errors=None, **knobs):
    """Run ``commands`` (one program) on the layer's harness (int8 or
    int16, as ``config``) with the memory ``image`` (``errors``: the error
    flags they end with, default none; ``knobs``: the memory's ``seed``,
    ``lat_mask``, ``p_req``, ``p_data``, ``p_wr``; default none); ``(memory
    after, stamps and counts)``. The request addresses' bits above the
    memory must sum to those of :func:`_high_sums` (``high``, the harness's
    ``rd_high`` and ``wr_high``)."""
    abits = ABITS[config.element_bytes]
    errors = errors or [False] * len(commands)
    spec = {"image": image, "programs": [[commands]], "abits": abits,
            "mem_bytes": config.gemm.mem_bytes, "seed": 0, "lat_min": 1, "lat_mask": 0,
            "p_req": 0, "p_data": 0, "p_wr": 0, **knobs, "read_bytes": image.size,
            "timeout": 1_000_000,
            "errors": [[errors]]}
    result = simulate(config, "bertforge.sim.encoder_tb", spec, harness=encoder_harness_verilog,
                      extra=(abits,))
    assert result["passed"], result.get("log")
    run = result["runs"][0]
    kept = [c for c, refused in zip(commands, errors) if not refused]
    assert run["layers"][0]["high"] == _high_sums(config, kept)
    return run["image"], run["layers"][0]


def _high_sums(config, commands):
    """``[reads, writes]``: the sums (mod 2**32) of ``addr >> abits`` over the
    memory requests of ``commands`` (none refused), as the harness adds
    them (``rd_high``, ``wr_high``): a GEMM's are the engine's
    (:func:`gemm_request_addresses`); an adapter reads its rows
    a memory word at a time (layernorm: gamma and beta, then x and r), and
    writes each output beat of ``lanes`` elements (row bases and offsets
    add mod ``2**addr_width``)."""
    g = config.gemm
    units = {OP_SOFTMAX: (config.softmax.lanes, 4, config.softmax.out_width // 8),
             OP_LAYERNORM: (config.layernorm.lanes, config.unit_bytes, config.unit_bytes),
             OP_GELU: (config.gelu.lanes, config.unit_bytes, config.element_bytes)}
    reads, writes = [], []
    for c in commands:
        if c["op"] == OP_GEMM:      # the engine's requests (tests/helpers.py)
            more = gemm_request_addresses(g, c["gemm"])
            reads, writes = reads + more[0], writes + more[1]
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
    abits = ABITS[config.element_bytes]
    return [sum((a % (1 << g.addr_width)) >> abits for a in addrs) % (1 << 32)
            for addrs in (reads, writes)]


#: The command fields that are addresses or strides.
ADDRESSES = {"src", "src_stride", "src2", "src2_stride", "params", "dst", "dst_stride"}
MODELS = pytest.mark.parametrize("hw", [TINY_HW, TINY16_HW], ids=["int8", "int16"])


@MODELS
def test_elementwise_commands_at_aliased_addresses(hw):
    """Softmax (a padding mask), two layernorms and GELU three times, int8
    and int16: first with every stride negative (``2**32 - stride``: the
    row bases run backwards and wrap, reading and writing the same rows),
    then with the bits above the memory (17 or 18 to 31) set in every
    address and stride, then plain: the adapters carry them (row bases and
    strides add mod 2**32; every address, stride and scale bit rises and
    falls) and the memory reads and writes the aliases, so a bit above the
    memory that leaks into one below it changes the results, and the
    harness sums the bits above the memory of every request
    (:func:`_program` checks them against the commands'): one lost or set
    by mistake changes the sums. The memory stalls requests and data at
    random (a register that goes wrong only on some cycles is read on
    other cycles than without)."""
    config = encoder_config(load_hardware(hw), hw)
    eb, abits = config.element_bytes, ABITS[config.element_bytes]
    act = np.int8 if eb == 1 else np.int16
    top = (1 << 32) - (1 << abits)
    rng = np.random.default_rng(4)
    image = np.zeros(1 << abits, dtype=np.uint8)

    def put(addr, stride, rows):
        for i, row in enumerate(rows):
            data = row.view(np.uint8)
            image[addr + i * stride:addr + i * stride + data.size] = data
    span = 100 if eb == 1 else 6000
    scores = rng.integers(-3000, 3000, size=(4, 8)).astype(np.int32)
    put(0x1000, 64, scores)
    x, r = (rng.integers(-span, span, size=(3, 16)).astype(act) for _ in range(2))
    gamma, beta = rng.integers(-128, 128, size=(2, 16)).astype(act)
    put(0x3000, 32 * eb, x)
    put(0x4000, 48 * eb, r)
    put(0x4800, 16 * eb, r[::-1])
    put(0x5000, 16 * eb, [gamma, beta])
    g = rng.integers(-span, span, size=(2, 16)).astype(act)
    put(0x7000, 80 * eb, g)
    scales = [(0xFFFF, 63, 0xFFFF), (0x0000, 0, 6), (0xDCF6, 16, 0)]     # multiplier, shift, valid
    softmax = dict(op=OP_SOFTMAX, src=0x1000, src_stride=64, dst_stride=8 * eb, rows=4, length=8)
    layernorm = [dict(op=OP_LAYERNORM, src=0x3000, src_stride=32 * eb, src2=0x4000,
                      src2_stride=48 * eb, params=0x5000, dst_stride=16 * eb, rows=3,
                      length=16),
                 dict(op=OP_LAYERNORM, src=0x3000, src_stride=32 * eb, src2=0x4800,
                      src2_stride=16 * eb, params=0x5000, dst_stride=16 * eb, rows=3,
                      length=16)]
    gelu = dict(op=OP_GELU, src=0x7000, src_stride=80 * eb, dst_stride=32 * eb, rows=2, length=16)

    def backwards(c):       # the last row first, strides 2**32 - stride
        c = dict(c)
        for addr in ("src", "src2", "dst"):
            if addr in c:
                c[addr] += (c["rows"] - 1) * c[addr + "_stride"]
                c[addr + "_stride"] = (1 << 32) - c[addr + "_stride"]
        return c
    commands, outputs = [], []
    for n, (mult, shift, valid) in enumerate(scales):
        base = 0xA000 + 0x2000 * n      # each pass writes its own outputs
        out = {"sm": base, "ln0": base + 0x400, "ln1": base + 0x800, "ge": base + 0xC00}
        outputs.append(out)
        group = [dict(softmax, dst=out["sm"], multiplier=mult, shift=shift, valid=valid),
                 *(dict(c, dst=out[f"ln{i}"]) for i, c in enumerate(layernorm)),
                 dict(gelu, dst=out["ge"])]
        if n == 0:
            group = [backwards(c) for c in group]
        elif n == 1:
            group = [{k: (v + top) % (1 << 32) if k in ADDRESSES else v for k, v in c.items()}
                     for c in group]
        commands += group
    memory, run = _program(config, image, commands, seed=5, lat_mask=3, p_req=77, p_data=77,
                           p_wr=77)
    assert run["completions"] == 12 and not any(run["errors"])
    ln = [np.stack([layernorm_golden(config.layernorm, a, b, gamma, beta) for a, b in zip(x, res)])
          for res in (r, r[::-1])]
    ge = gelu_golden(config.gelu, g.astype(np.int64))
    for (mult, shift, valid), out in zip(scales, outputs):
        mask = np.broadcast_to(np.arange(8) >= valid, (4, 8)) if valid else None
        p = softmax_golden(config.softmax, scores.astype(np.int64), mask, mult, shift)
        p = probabilities_int8(p) if eb == 1 else p
        for addr, stride, want in ((out["sm"], 8 * eb, p), (out["ln0"], 16 * eb, ln[0]),
                                   (out["ln1"], 16 * eb, ln[1]), (out["ge"], 32 * eb, ge)):
            for i, row in enumerate(want):
                got = memory[addr + i * stride:addr + (i + 1) * stride][:row.size * eb].view(act)
                assert (got == row).all(), (hex(addr), i, got, row)


def test_gelu_past_32768_rows_then_another():
    """A GELU command of 32,769 rows (one word each, strides 0: the row
    counts' bit 15), then a GELU of 2 rows of other values: the first takes
    its 4 beats a row, nothing of it is left for the second (a reader that
    missed its last row would still be reading)."""
    config = encoder_config(load_hardware(TINY_HW), TINY_HW)
    rng = np.random.default_rng(3)
    image = np.zeros(1 << ABITS[1], dtype=np.uint8)
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
    image = np.zeros(1 << ABITS[1], dtype=np.uint8)
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


@MODELS
def test_refused_commands_and_fields_at_their_top_bits(hw):
    """Between accepted GEMMs (bit-exact), a GEMM the engine refuses with
    every field at its top bits (and every elementwise field too), then
    elementwise commands the top refuses at decode, each with one fault:
    a read address or stride off the memory's word grid (bits 0 to 3), a
    row that is not whole words, no rows, no elements, a softmax or
    layernorm row longer than its unit takes (``l_max``, ``h_max``), and
    three with every field at its top bits. A refused command completes at once with its
    error flag and touches no memory; a softmax after them runs as
    usual."""
    config = encoder_config(load_hardware(hw), hw)
    eb, abits = config.element_bytes, ABITS[config.element_bytes]
    act = np.int8 if eb == 1 else np.int16
    rng = np.random.default_rng(6)
    image = np.zeros(1 << abits, dtype=np.uint8)
    a = rng.integers(-128, 128, size=(4, 16), dtype=np.int64)
    b = rng.integers(-128, 128, size=(16, 8), dtype=np.int64)
    image[0x1000:0x1000 + a.size * eb] = a.astype(act).view(np.uint8).ravel()
    image[0x2000:0x2000 + b.size * eb] = b.astype(act).view(np.uint8).ravel()
    scores = rng.integers(-3000, 3000, size=(4, 8)).astype(np.int32)
    image[0x4000:0x4080] = scores.view(np.uint8).ravel()
    gemm = {"m": 4, "k": 16, "n": 8, "a_addr": 0x1000, "b_addr": 0x2000, "a_stride": 16 * eb,
            "b_stride": 8 * eb, "c_stride": 32}
    full = (1 << 32) - 1
    assert config.gemm.addr_width == 32
    every = dict(gemm_refused_at_top_bits(config.gemm), transpose_c=1)
    top = {**{k: full for k in ADDRESSES}, "rows": 0xFFFF, "length": 0xFFFF, "valid": 0xFFFF,
           "multiplier": 0xFFFF, "shift": 63}
    sm = dict(op=OP_SOFTMAX, src=0x4000, src_stride=32, dst=0x6000, dst_stride=16, rows=4,
              length=8, valid=5, multiplier=0xDCF6, shift=16)
    ln = dict(op=OP_LAYERNORM, src=0x1000, src_stride=16 * eb, src2=0x1000, src2_stride=16 * eb,
              params=0x2000, dst=0x7000, dst_stride=16 * eb, rows=2, length=16)
    ge = dict(op=OP_GELU, src=0x1000, src_stride=16 * eb, dst=0x7000, dst_stride=16 * eb,
              rows=2, length=16)
    refused = [dict(sm, src=0x4001), dict(sm, src_stride=34), dict(sm, length=10),
               dict(sm, rows=0), dict(sm, length=0), dict(sm, length=config.softmax.l_max + 4),
               dict(ln, src=0x1004), dict(ln, src_stride=16 * eb + 8), dict(ln, src2=0x1002),
               dict(ln, src2_stride=16 * eb + 1), dict(ln, params=0x2008), dict(ln, length=20),
               dict(ln, rows=0), dict(ln, length=0),
               dict(ln, length=config.layernorm.h_max + 16 // eb),
               dict(ge, src=0x1008), dict(ge, src_stride=16 * eb + 4), dict(ge, length=20),
               dict(ge, rows=0), dict(ge, length=0),
               *(dict(top, op=op) for op in (OP_SOFTMAX, OP_LAYERNORM, OP_GELU))]
    commands = [{"op": OP_GEMM, "barrier": 1, "gemm": dict(gemm, c_addr=0x3000, tag=0x5A)},
                {"op": OP_GEMM, **top, "gemm": every},
                {"op": OP_GEMM, "gemm": dict(gemm, c_addr=0x3800, tag=0xA5)},
                *refused, sm]
    errors = [False, True, False, *[True] * len(refused), False]
    memory, run = _program(config, image, commands, errors=errors)
    assert run["completions"] == len(commands) and run["errors"] == errors
    assert len(run["starts"]) == len(commands)
    assert all(end >= start for start, end in zip(run["starts"], run["ends"]))
    for c_addr in (0x3000, 0x3800):
        c = memory[c_addr:c_addr + 0x80].view(np.int32).reshape(4, 8)
        assert (c == a @ b).all()
    assert not memory[0x7000:0x8000].any()      # the refused commands wrote nothing
    mask = np.broadcast_to(np.arange(8) >= 5, (4, 8))
    p = softmax_golden(config.softmax, scores.astype(np.int64), mask, 0xDCF6, 16)
    p = probabilities_int8(p) if eb == 1 else p
    got = np.stack([memory[0x6000 + 16 * i:0x6000 + 16 * i + 8 * eb] for i in range(4)]).view(act)
    assert (got == p).all(), (got, p)


@MODELS
def test_long_rows_and_many_rows(hw):
    """Each unit's counts past their low bits: a GELU row of 65,520 (int8)
    or 65,528 (int16) elements, the longest a 16-bit length whose row is
    whole words allows (the row's word and element counts through bit 11
    and 15), then a short one; a softmax row of ``l_max`` = 128 and a
    layernorm row of ``h_max`` = 64 elements (the units' longest), then
    1,023 and 1,024 one-word rows of each (the row counts through bit 10),
    strides 0 (the same row again and again); every output bit-exact."""
    config = encoder_config(load_hardware(hw), hw)
    eb, abits = config.element_bytes, ABITS[config.element_bytes]
    act = np.int8 if eb == 1 else np.int16
    rng = np.random.default_rng(9)
    image = np.zeros(1 << abits, dtype=np.uint8)
    half = 1 << (abits - 1)
    span = 128 if eb == 1 else 8000
    long = 0x10000 - 16 // eb
    image[:long * eb] = rng.integers(-span, span, size=long).astype(act).view(np.uint8)
    scores = rng.integers(-3000, 3000, size=128).astype(np.int32)
    image[half - 0x1000:half - 0x1000 + 512] = scores.view(np.uint8)
    x, r, gamma, beta = rng.integers(-span // 2, span // 2, size=(4, 64)).astype(act)
    base = half - 0x800
    for i, row in enumerate((x, r, gamma, beta)):
        image[base + i * 64 * eb:base + (i + 1) * 64 * eb] = row.view(np.uint8)
    g = image[:long * eb].view(act).astype(np.int64)    # GELU's row: the others' inputs too
    one = 16 // eb          # elements of one word (layernorm)
    sm_out, ln_out, many = 0x8000, 0x9000, 0xA000       # written after GELU read them
    commands = [
        dict(op=OP_GELU, src=0, src_stride=0, dst=half, dst_stride=0, rows=1, length=long),
        dict(op=OP_GELU, src=0, src_stride=0, dst=0x7000, dst_stride=0, rows=1,
             length=one),
        dict(op=OP_SOFTMAX, src=half - 0x1000, src_stride=0, dst=sm_out, dst_stride=0, rows=1,
             length=128, multiplier=0x5000, shift=14),
        dict(op=OP_LAYERNORM, src=base, src_stride=0, src2=base + 64 * eb, src2_stride=0,
             params=base + 128 * eb, dst=ln_out, dst_stride=0, rows=1, length=64),
        *(dict(op=OP_SOFTMAX, src=half - 0x1000, src_stride=0, dst=many, dst_stride=0,
               rows=rows, length=4, multiplier=0x5000, shift=14) for rows in (0x3FF, 0x400)),
        *(dict(op=OP_LAYERNORM, src=base, src_stride=0, src2=base + 64 * eb, src2_stride=0,
               params=base + 128 * eb, dst=many + 0x100, dst_stride=0, rows=rows, length=one)
          for rows in (0x3FF, 0x400)),
    ]
    memory, run = _program(config, image, commands)
    assert run["completions"] == len(commands) and not any(run["errors"])

    def read(addr, count):
        return memory[addr:addr + count * eb].view(act)
    ge = gelu_golden(config.gelu, g.astype(np.int64))
    assert (read(half, long) == ge).all()
    assert (read(0x7000, one) == ge[:one]).all()

    def probabilities(row):
        p = softmax_golden(config.softmax, row[None].astype(np.int64), None, 0x5000, 14)[0]
        return probabilities_int8(p) if eb == 1 else p
    assert (read(sm_out, 128) == probabilities(scores)).all()
    assert (read(many, 4) == probabilities(scores[:4])).all()
    ln = config.layernorm
    assert (read(ln_out, 64) == layernorm_golden(ln, x, r, gamma, beta)).all()
    # a row of one word: its beta is right after its gamma (gamma's next word)
    want = layernorm_golden(ln, x[:one], r[:one], gamma[:one], gamma[one:2 * one])
    assert (read(many + 0x100, one) == want).all()
