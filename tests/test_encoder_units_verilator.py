"""The encoder's units (GEMM engine, softmax, LayerNorm, GELU) at their
corners, one command at a time through :class:`~bertforge.rtl.encoder.EncoderTop`'s
command interface, on the two Verilator models of
``tests/test_encoder_verilator.py`` (the int8 and int16 layers' harnesses:
same config, same ``abits``, no build of their own).

A tiny layer of random data never reaches the units' saturation arms,
table ends, error paths or stalls; their own tests do (each unit is at 100%
line coverage there). These runs give the units, inside the top, the
stimulus of those tests: the GEMM engine's issue shapes (bias, per-channel
scales, accumulate, int8/int16 saturation, every rejection), its command
fields at their top bits and its counts past bit 13, the softmax's
extreme rows, LayerNorm's largest variances and saturating gamma, a sweep
of GELU's input range. Results are bit-exact against the golden models and
each command's cycles equal its unit's cycle model; a second run stalls the
memory's writes so that the units' pipelines hold
(``verification-coverage.md``, "The encoder's units at their corners").
"""

import dataclasses

import numpy as np
import pytest

from bertforge.generators.analyze import load_hardware
from bertforge.generators.encoder_sim import TINY16_HW, TINY_HW, encoder_config
from bertforge.generators.gemm_sim import layout_problems, read_matrix
from bertforge.generators.softmax_sim import extreme_softmax_rows
from bertforge.rtl.encoder import OP_GELU, OP_GEMM, OP_LAYERNORM, OP_SOFTMAX
from bertforge.sim.encoder_golden import probabilities_int8
from bertforge.sim.gelu_cycles import gelu_cycles
from bertforge.sim.gelu_golden import gelu_golden
from bertforge.sim.gemm_cycles import gemm_cycles
from bertforge.sim.gemm_golden import run_commands
from bertforge.sim.layernorm_cycles import layernorm_cycles
from bertforge.sim.layernorm_golden import layernorm_golden
from bertforge.sim.softmax_cycles import softmax_cycles
from bertforge.sim.softmax_golden import softmax_golden

from helpers import GEMM_ADDR_FIELDS, gemm_refused_at_top_bits, gemm_saturating_problems
from test_encoder_verilator import ABITS, _program
from test_gemm_verilator import issue_shapes, transposed

#: The layer tests' models and their harness memories' address bits.
MODELS = [(TINY_HW, ABITS[1]), (TINY16_HW, ABITS[2])]


def _config(hw):
    return encoder_config(load_hardware(hw), hw)


def _gemm_problems(config, abits):
    """The engine's issue shapes (``test_gemm_verilator.issue_shapes``),
    those with C stored transposed too, laid out in the harness memory;
    their rejected commands' addresses past the memory moved to the top of
    the engine's 32-bit address space (where they are rejected)."""
    small = dataclasses.replace(config.gemm, addr_width=abits)
    shapes = issue_shapes(small)
    problems = shapes + [p for p in transposed(shapes) if p.get("transpose_c")][:8] + _limits(config)
    image, commands = layout_problems(small, problems, np.random.default_rng(abits))
    lift = (1 << config.gemm.addr_width) - (1 << abits)
    for cmd in commands:
        for key in GEMM_ADDR_FIELDS:
            if cmd.get(key, 0) >= (1 << abits) - 16:
                cmd[key] += lift
    return image, commands


def _limits(config):
    """What the issue shapes leave out on this engine (as
    ``test_accumulate_saturates_and_per_channel_scales_without_bias``, at
    the array's 4 x 4 and a 16-wide panel): C += A @ B from old C at the
    int32 limits pushed past them (every accumulator lane, both ways; old
    C's 16 columns), bias at the limits on 8 columns (every requantizer
    lane saturates), per-channel scales without a bias (the scale vector is
    the loader's first job), and chunks 10, 12, 14 and 15 columns wide."""
    lo, hi = -(1 << 31), (1 << 31) - 1
    top = (1 << (config.gemm.width - 1)) - 1
    a = [[top] * 4, [-top - 1] * 4] * 2
    c_old = np.array([[hi] * 16, [lo] * 16] * 2)
    return [dict(m=4, k=4, n=16, accumulate=1, a=a, b=[[top] * 16] * 4, c_old=c_old),
            dict(m=6, k=40, n=8, extreme=True, bias=np.array([hi, lo] * 4)),
            *gemm_saturating_problems()[1:]] + [dict(m=3, k=5, n=n) for n in (10, 12, 14, 15)]


@pytest.mark.parametrize("hw, abits", MODELS, ids=["int8", "int16"])
def test_gemm_engine_issue_shapes_through_the_top(hw, abits):
    """The engine's issue shapes as GEMM commands, each behind a barrier:
    memory and error flags equal the golden model's, every command's
    cycles its cycle model's."""
    config = _config(hw)
    image, commands = _gemm_problems(config, abits)
    want = image.copy()
    errors = run_commands(config.gemm, want, commands)
    program = [{"op": OP_GEMM, "barrier": 1, "gemm": cmd} for cmd in commands]
    memory, run = _program(config, image, program, errors=errors)
    assert run["errors"] == errors and sum(errors) >= 10
    assert (memory == want).all()
    saturated = read_matrix(config.gemm, memory, commands[-8])     # _limits' accumulate
    assert (saturated == [[(1 << 31) - 1] * 16, [-(1 << 31)] * 16] * 2).all()
    # each accepted command's cycles are its cycle model's, where the model
    # says it is exact (compute bound; a memory-bound chunk's edges are an
    # estimate, as in the engine's own tests)
    cycles = [end - start + 1 for start, end in zip(run["starts"], run["ends"])]
    models = [gemm_cycles(config.gemm, [cmd], lat=1, done_always_ready=True) for cmd in commands]
    exact = [(c, model["cycles"]) for c, model, bad in zip(cycles, models, errors)
             if model["exact"] and not bad]
    assert len(exact) >= 10 and all(c == model for c, model in exact), exact


class _Memory:
    """The harness memory image and a cursor: matrices placed one after
    another (16-byte aligned, whole rows)."""

    def __init__(self, abits):
        self.image = np.zeros(1 << abits, dtype=np.uint8)
        self.cursor = 0x100

    def put(self, rows, dtype):
        """Write the 2-D ``rows`` as ``dtype``: ``(address, row stride)``."""
        data = np.ascontiguousarray(np.asarray(rows).astype(dtype)).view(np.uint8)
        addr, stride = self.cursor, data.shape[1]
        self.image[addr:addr + data.size] = data.ravel()
        self.cursor = -(-(addr + data.size + 16) // 16) * 16
        return addr, stride

    def room(self, rows, row_bytes):
        addr = self.cursor
        self.cursor = -(-(addr + rows * row_bytes + 16) // 16) * 16
        return addr, row_bytes


def _softmax_commands(config, mem, rng):
    """The softmax unit's extreme rows (``extreme_softmax_rows``: all equal,
    one huge, all very negative, full range, near one-hot and near uniform
    scales, shift 0) whose length is whole memory words and whose mask is a
    padding mask (``valid``), one command each, and rows masked from
    column 1 and 5 on (every lane masked); ``(commands, expected
    outputs)``."""
    rows = extreme_softmax_rows(config.softmax, rng)
    cases = []
    for x, mask, length, mult, shift in zip(rows["x"], rows["mask"], rows["lengths"],
                                            rows["multipliers"], rows["shifts"]):
        cols = np.arange(length)
        valid = int(np.argmax(mask[:length])) if mask[:length].any() else 0
        if length % 4 == 0 and (valid == 0 or (mask[:length] == (cols >= valid)).all()) \
                and not mask[:length].all():
            cases.append((x[:length], valid, int(mult), int(shift)))
    spread = rng.integers(-(1 << 31), 1 << 31, 32)
    cases += [(spread, 1, 0xFFFF, 20), (spread, 5, 0x8000, 12)]
    commands, outputs = [], []
    for x, valid, mult, shift in cases:
        src, src_stride = mem.put(x[None, :], "<i4")
        obytes = config.softmax.out_width // 8
        dst, dst_stride = mem.room(1, len(x) * obytes)
        commands.append({"op": OP_SOFTMAX, "src": src, "src_stride": src_stride, "dst": dst,
                         "dst_stride": dst_stride, "rows": 1, "length": len(x), "valid": valid,
                         "multiplier": mult, "shift": shift})
        mask = None if valid == 0 else (np.arange(len(x)) >= valid)[None, :]
        p = softmax_golden(config.softmax, x[None, :].astype(np.int64), mask, mult, shift)
        outputs.append((dst, probabilities_int8(p) if obytes == 1 else p, f"<i{obytes}"))
    return commands, outputs


def _layernorm_commands(config, mem):
    """LayerNorm at its extremes, gamma at its top and beta 0: vectors of
    +-v alternating (v = 2**(j/2), x + r up to twice the activations' range,
    and the largest variance: every bit of its leading one) and a +1 and a -1 impulse at
    each lane (``|z| = sqrt(H - 1)``: int8, both output limits on every
    lane; int16 outputs stay below a quarter of their range)."""
    ln, H = config.layernorm, config.layernorm.h_max
    eb = config.element_bytes
    hi = (1 << (8 * eb - 1)) - 1
    dtype = f"<i{eb}"
    signs = np.resize([1, -1], H)
    vs = [v * signs for v in np.unique(np.round(2 ** np.arange(0, np.log2(2 * hi), 0.5)))]
    vs.append(np.where(signs > 0, 2 * hi, -2 * hi - 2))     # the largest variance
    vs += [sign * (np.arange(H) == lane) for lane in range(ln.lanes) for sign in (1, -1)]
    s = np.stack(vs).astype(np.int64)
    x = np.clip(s, -hi - 1, hi)
    r = s - x
    gamma = np.full(H, (1 << (ln.param_width - 1)) - 1)
    beta = np.zeros(H, np.int64)
    params, _ = mem.put(np.concatenate([gamma, beta])[None, :], dtype)
    src, src_stride = mem.put(x, dtype)
    src2, src2_stride = mem.put(r, dtype)
    dst, dst_stride = mem.room(len(s), H * eb)
    command = {"op": OP_LAYERNORM, "src": src, "src_stride": src_stride, "src2": src2,
               "src2_stride": src2_stride, "params": params, "dst": dst, "dst_stride": dst_stride,
               "rows": len(s), "length": H}
    want = np.stack([layernorm_golden(ln, a, b, gamma, beta) for a, b in zip(x, r)])
    top = 1 << (ln.out_width - 1)
    impulses = want[-2 * ln.lanes:, :ln.lanes]
    if eb == 1:
        assert (impulses.max(axis=0) == top - 1).all() and (impulses.min(axis=0) == -top).all()
    else:   # gamma < 8 (12 fraction bits), |z| <= sqrt(63), LSB 2**-7: never near the clamp
        assert np.abs(impulses).max() == 8128
    return [command], [(dst, want, dtype)]


def _gelu_commands(config, mem):
    """GELU over its input range, every value at every lane (int8: each of
    the 256; int16: every 8th)."""
    eb = config.element_bytes
    step = 1 if eb == 1 else 8
    values = np.repeat(np.arange(-(1 << (8 * eb - 1)), 1 << (8 * eb - 1), step), config.gelu.lanes)
    x = values.reshape(-1, 64)
    src, src_stride = mem.put(x, f"<i{eb}")
    dst, dst_stride = mem.room(len(x), 64 * eb)
    command = {"op": OP_GELU, "src": src, "src_stride": src_stride, "dst": dst,
               "dst_stride": dst_stride, "rows": len(x), "length": 64}
    return [command], [(dst, gelu_golden(config.gelu, x), f"<i{eb}")]


def _unit_cycles(config, command):
    """A command's busy cycles by its unit's cycle model."""
    rows, length = command["rows"], command["length"]
    if command["op"] == OP_SOFTMAX:
        return softmax_cycles(config.softmax, [length] * rows)
    if command["op"] == OP_LAYERNORM:
        return layernorm_cycles(config.layernorm, [length] * rows)
    return gelu_cycles(config.gelu, rows * length // config.gelu.lanes)


def _check(memory, outputs):
    for dst, want, dtype in outputs:
        got = memory[dst:dst + want.size * np.dtype(dtype).itemsize].view(dtype).reshape(want.shape)
        assert (got == want).all(), (hex(dst), np.argwhere(got != want)[:5])


@pytest.mark.parametrize("hw, abits", MODELS, ids=["int8", "int16"])
def test_elementwise_units_at_their_extremes(hw, abits):
    """Softmax's extreme rows, LayerNorm's largest variances and saturating
    outputs and GELU's input range, one command after another without
    stalls: bit-exact, each command's cycles its unit's model's; then the
    same commands (GELU on 4 rows) with the memory taking a write one cycle
    in 16 (the units' pipelines hold: softmax's exponential pass runs out
    of room for rows), still bit-exact, each slower."""
    config = _config(hw)
    mem = _Memory(abits)
    commands, outputs = [], []
    for build in (lambda: _softmax_commands(config, mem, np.random.default_rng(7)),
                  lambda: _layernorm_commands(config, mem), lambda: _gelu_commands(config, mem)):
        more, want = build()
        commands += more
        outputs += want
    short = np.random.default_rng(8).integers(-5000, 5000, (200, 4))
    src, src_stride = mem.put(short, "<i4")
    dst, dst_stride = mem.room(200, 4 * config.softmax.out_width // 8)
    commands.append({"op": OP_SOFTMAX, "src": src, "src_stride": src_stride, "dst": dst,
                     "dst_stride": dst_stride, "rows": 200, "length": 4, "valid": 0,
                     "multiplier": 0xC000, "shift": 14})
    p = softmax_golden(config.softmax, short, None, 0xC000, 14)
    outputs.append((dst, probabilities_int8(p) if config.element_bytes == 1 else p,
                    f"<i{config.softmax.out_width // 8}"))
    image = mem.image
    memory, run = _program(config, image.copy(), commands)
    _check(memory, outputs)
    cycles = [end - start + 1 for start, end in zip(run["starts"], run["ends"])]
    assert cycles == [_unit_cycles(config, c) for c in commands]
    # stalled: GELU on 4 rows of its sweep only (every write waits ~16 cycles)
    stalled = [dict(c, rows=4) if c["op"] == OP_GELU else c for c in commands]
    gelu_dst = {c["dst"] for c in commands if c["op"] == OP_GELU}
    memory, run = _program(config, image.copy(), stalled, seed=3, p_wr=240)
    _check(memory, [(dst, want[:4] if dst in gelu_dst else want, dtype)
                    for dst, want, dtype in outputs])
    took = [e - s + 1 for s, e in zip(run["starts"], run["ends"])]
    assert all(t > c for t, c, cmd in zip(took, cycles, stalled) if cmd["op"] != OP_GELU)


@pytest.mark.parametrize("hw, abits", MODELS, ids=["int8", "int16"])
def test_gemm_fields_at_their_top_bits_and_long_counts(hw, abits):
    """As the engine's ``test_every_field_at_its_top_bits`` and
    ``test_long_k_m_and_n_count_past_bit_13``, at the top's 32-bit
    addresses: a refused command with every size at 0xFFFF, every address
    and stride at 2**32 - 1, every flag, the largest multiplier, shift and
    tag, between accepted ones (each bit of the command queue and the
    scheduler rises and falls), then K = 20,000, M = 9,000 and N = 9,000
    with the other sizes 1 or 2 and strides of 0 or one element (the
    counts run through bits 3 to 14 and back): bit-exact over random
    memory, the refused ones refused."""
    config = _config(hw)
    eb = config.element_bytes
    assert config.gemm.addr_width == 32
    refused = dict(gemm_refused_at_top_bits(config.gemm), transpose_c=1)
    int8 = dict(int8=1, multiplier=1 << 13, shift=14)
    commands = [
        dict(m=2, k=8, n=2, a_addr=0x0000, a_stride=0x7FF0, b_addr=0x0040, b_stride=0x0FC0,
             c_addr=0x00C0, c_stride=0x7F00, bias=1, bias_addr=0x7FE0, tag=0x3F),
        refused,
        dict(m=2, k=2, n=2, a_addr=0x0100, a_stride=0x3FF0, b_addr=0x0060, b_stride=0x7F40,
             c_addr=0x0140, c_stride=0x2400, int8=1, per_channel=1, scale_addr=0x1F000,
             tag=0xE0),
        dict(refused, n=0xE000, tag=254),
        dict(m=1, k=20000, n=2, a_addr=0x0000, a_stride=0, b_addr=0x10000, b_stride=0,
             c_addr=0x1FFF0, c_stride=0, tag=1),
        dict(m=9000, k=1, n=1, a_addr=0x0000, a_stride=eb, b_addr=0x6000, b_stride=0,
             c_addr=0x8000, c_stride=1, tag=2, **int8),
        dict(m=1, k=1, n=9000, a_addr=0x6000, a_stride=0, b_addr=0x0000, b_stride=0,
             c_addr=0xC000, c_stride=0, tag=3, **int8),
    ]
    image = np.random.default_rng(16).integers(0, 256, 1 << abits, dtype=np.uint8)
    want = image.copy()
    errors = run_commands(config.gemm, want, commands)
    assert errors == [False, True, False, True, False, False, False]
    program = [{"op": OP_GEMM, "barrier": 1, "gemm": cmd} for cmd in commands]
    memory, run = _program(config, image, program, errors=errors)
    assert run["errors"] == errors
    assert (memory == want).all()
