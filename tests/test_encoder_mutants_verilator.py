"""Stimulus that kills the survivors of the encoder's mutation sample on
the int16 top (``bertforge mutate encoder --design
encoder_4x4_os_m128_s4_l4_g4_i16_harness``, its own module and word
queues; ``verification-coverage.md``, "The encoder's own module, int16:
a new mutation sample"), on the two layer models of
``tests/test_encoder_verilator.py`` (its ``_program``: no build of their
own). Each command's outputs are bit-exact against the golden models and
its cycles equal its unit's cycle model."""

import numpy as np
import pytest

from bertforge.rtl.encoder import OP_LAYERNORM
from bertforge.sim.layernorm_golden import layernorm_golden

from test_encoder_units_verilator import MODELS, _config, _Memory, _unit_cycles
from test_encoder_verilator import _program


@pytest.mark.parametrize("hw, abits", MODELS, ids=["int8", "int16"])
def test_layernorm_rows_of_32_and_48_elements_past_1024_rows(hw, abits):
    """LayerNorm rows of an odd number of memory words, 48 elements (int8:
    3 words) or 40 (int16: 5), and of 32 elements (the row length's bit 5:
    the other tests' rows are 8, 16 and 64 elements), a command of 1,057
    rows (the reader's row count past bit 10, the others stop at 1,024
    rows, and at 0x420 in its last row), then one of 3 rows of other data: a reader that reads a row
    too few hangs, one too many writes over the next command's
    parameters."""
    config = _config(hw)
    ln, eb = config.layernorm, config.element_bytes
    dtype = f"<i{eb}"
    span = 100 if eb == 1 else 6000
    rng = np.random.default_rng(11)
    mem = _Memory(abits)
    commands, outputs = [], []
    for length, rows, stride in ((48 if eb == 1 else 40, 1057, 0), (32, 3, 1)):
        gamma, beta = rng.integers(-128, 128, size=(2, length))
        x, r = rng.integers(-span, span, size=(2, rows if stride else 1, length))
        params, _ = mem.put(np.concatenate([gamma, beta])[None, :], dtype)
        src, src_stride = mem.put(x, dtype)
        src2, src2_stride = mem.put(r, dtype)
        dst, dst_stride = mem.room(rows, length * eb)
        commands.append({"op": OP_LAYERNORM, "src": src, "src_stride": src_stride * stride,
                         "src2": src2, "src2_stride": src2_stride * stride, "params": params,
                         "dst": dst, "dst_stride": dst_stride, "rows": rows, "length": length})
        want = np.stack([layernorm_golden(ln, a, b, gamma, beta) for a, b in zip(x, r)])
        outputs.append((dst, np.broadcast_to(want, (rows, length))))
    memory, run = _program(config, mem.image, commands)
    assert run["completions"] == len(commands) and not any(run["errors"])
    for dst, want in outputs:
        got = memory[dst:dst + want.size * eb].view(dtype).reshape(want.shape)
        assert (got == want).all(), (hex(dst), np.argwhere(got != want)[:5])
    cycles = [end - start + 1 for start, end in zip(run["starts"], run["ends"])]
    assert cycles == [_unit_cycles(config, c) for c in commands]
