"""The encoder's GEMM engine at far addresses and large strides, through
:class:`~bertforge.rtl.encoder.EncoderTop`'s command interface, on the two
Verilator models of ``tests/test_encoder_verilator.py`` (no build of their
own; its ``_program``).

The top's engine has 32-bit addresses; the harness memory has 2**17
(int8) or 2**18 (int16) bytes and ignores the bits above (an address and
its aliases are the same byte), and it sums those bits of every request
(``rd_high``, ``wr_high``), which ``_program`` checks against the
commands' (:func:`helpers.gemm_request_addresses`). The tests before
these ran their GEMMs inside the memory, so the engine's address and
stride bits above it never rose (``verification-coverage.md``, "The
encoder's far GEMMs").
"""

import dataclasses

import numpy as np
import pytest

from bertforge.generators.analyze import load_hardware
from bertforge.generators.encoder_sim import TINY16_HW, TINY_HW, encoder_config
from bertforge.rtl.encoder import OP_GEMM
from bertforge.rtl.tile_scheduler import CHANNEL_MULT_BITS
from bertforge.sim.fixed_golden import scale_words
from bertforge.sim.gemm_golden import command_rejected, run_commands

from helpers import GEMM_ADDR_FIELDS
from test_encoder_verilator import ABITS, MODELS, _program

#: The command fields that are strides.
STRIDES = ("a_stride", "b_stride", "c_stride")


def _aliased(cmd, abits):
    """``cmd`` as the harness memory sees it: addresses and strides mod
    ``2**abits`` (every row lies inside the memory, none wraps round it)."""
    return {k: v % (1 << abits) if k in GEMM_ADDR_FIELDS + STRIDES else v for k, v in cmd.items()}


def _far_commands(abits):
    """Accepted GEMMs whose addresses and strides set the bits above the
    harness memory: every base at ``2**32 - 2**abits`` plus an offset
    (every bit from ``abits`` up set; bits 0 to 3 set too, as the engine
    takes any byte address), with old C, a bias, per-channel scales and C
    stored transposed; then A's, B's and C's row strides negative
    (``2**32 - d``: every bit from 15 up set, the second row ``d`` bytes
    before the first, wrapping to the top of the address space); and a
    transposed command whose column stride is ``2**28 - 2**abits + 4096``
    (17 columns: the scheduler's column offset ``16 * c_stride`` sets bits
    16 and ``abits + 4`` to 31); and a plain command last, transposed too,
    so that every one of those bits falls again."""
    far = (1 << 32) - (1 << abits)
    back = 1 << 32
    return [
        dict(m=6, k=70, n=20, a_addr=far + 0x1003, a_stride=0x93, b_addr=far + 0x2007,
             b_stride=0x2B, c_addr=far + 0x4001, c_stride=0x53, accumulate=1, bias=1,
             bias_addr=far + 0x500F, tag=0x11),
        dict(m=5, k=9, n=18, a_addr=far + 0x6002, a_stride=0x1D, b_addr=far + 0x6805,
             b_stride=0x25, c_addr=far + 0x7003, c_stride=0x13, int8=1, bias=1,
             bias_addr=far + 0x7809, per_channel=1, scale_addr=far + 0x7A0B, tag=0x22),
        dict(m=7, k=5, n=6, a_addr=far + 0x8401, a_stride=0x0B, b_addr=far + 0x8803,
             b_stride=0x0D, c_addr=far + 0x9001, c_stride=0x17, int16=1, multiplier=0x5A5A,
             shift=20, transpose_c=1, tag=0x33),
        dict(m=2, k=16, n=3, a_addr=0x1230, a_stride=back - 0x6543, b_addr=0xC000,
             b_stride=0x10, c_addr=0xD000, c_stride=0x40, tag=0x44),
        dict(m=3, k=2, n=5, a_addr=0xC100, a_stride=0x10, b_addr=0x2345,
             b_stride=back - 0x5A5B, c_addr=0xD100, c_stride=0x40, tag=0x55),
        dict(m=2, k=3, n=4, a_addr=0xC200, a_stride=0x10, b_addr=0xC300, b_stride=0x10,
             c_addr=0x3450, c_stride=back - 0x47C1, accumulate=1, tag=0x66),
        dict(m=5, k=4, n=2, a_addr=0xC400, a_stride=0x10, b_addr=0xC500, b_stride=0x10,
             c_addr=0x2561, c_stride=back - 0x3B3F, int8=1, multiplier=0x7777, shift=9,
             transpose_c=1, tag=0x77),
        dict(m=3, k=3, n=17, a_addr=0xC600, a_stride=0x10, b_addr=0xC700, b_stride=0x20,
             c_addr=0x0100, c_stride=(1 << 28) - (1 << abits) + 0x1000, int8=1,
             multiplier=0x4321, shift=12, transpose_c=1, tag=0x88),
        dict(m=3, k=3, n=3, a_addr=0xC600, a_stride=0x10, b_addr=0xC700, b_stride=0x10,
             c_addr=0xD200, c_stride=0x10, bias=1, bias_addr=0xC800, transpose_c=1, tag=0x00),
    ]


def _shift_commands(image, rng):
    """Per-channel scales with every shift on every requantizer lane: C of
    256 columns (lane ``j % 4`` takes column ``j``), column ``j``'s shift
    ``j // 4`` (0 to 63, so the rounding constant ``2**(shift - 1)`` sets
    each of its bits in turn), random multipliers; int8, then int16
    output."""
    columns = 256
    shifts = np.arange(columns) // 4
    words = scale_words(rng.integers(0, 1 << CHANNEL_MULT_BITS, columns), shifts)
    image[0xE000:0xE000 + 4 * columns] = words.view(np.uint8)
    same = dict(k=8, n=columns, a_addr=0xC900, a_stride=0x10, b_addr=0x0, b_stride=0x200,
                per_channel=1, scale_addr=0xE000)
    return [dict(same, m=4, c_addr=0xF000, c_stride=columns, int8=1, tag=0x99),
            dict(same, m=2, c_addr=0x10000, c_stride=2 * columns, int16=1, tag=0xAA)]


@MODELS
def test_gemms_at_far_addresses_and_negative_strides(hw):
    """The commands of :func:`_far_commands` and :func:`_shift_commands`,
    each behind a barrier, over random memory: memory equals the golden model's run on the addresses
    the memory sees (bit-exact), and the harness's sums of the address bits
    above the memory equal the commands' (a base or stride bit above the
    memory lost or set by mistake changes one or the other)."""
    config = encoder_config(load_hardware(hw), hw)
    abits = ABITS[config.element_bytes]
    rng = np.random.default_rng(40)
    image = rng.integers(0, 256, 1 << abits, dtype=np.uint8)
    commands = _far_commands(abits) + _shift_commands(image, rng)
    assert not any(command_rejected(config.gemm, cmd) for cmd in commands)
    small = dataclasses.replace(config.gemm, addr_width=abits)
    want = image.copy()
    assert run_commands(small, want, [_aliased(cmd, abits) for cmd in commands]) == \
        [False] * len(commands)
    program = [{"op": OP_GEMM, "barrier": 1, "gemm": cmd} for cmd in commands]
    memory, run = _program(config, image, program)
    assert run["completions"] == len(commands) and not any(run["errors"])
    assert (memory == want).all(), np.argwhere(memory != want)[:8]
    assert all(high > 0 for high in run["high"])
