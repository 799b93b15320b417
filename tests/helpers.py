"""Designs and data builders shared by several ``tests/test_<block>_<kind>.py``
files of one block (one definition each; import with ``from helpers import``).

Block-specific names carry the block as prefix; a test file may import them
under its own short name (``from helpers import LAYERNORM_SMALL as SMALL``).
Only rtl and golden-model modules are imported at the top, so one block's
files do not fail to collect because of another block's generator module."""

from bertforge.rtl.gelu import GeluConfig
from bertforge.rtl.layernorm import LayerNormConfig
from bertforge.sim.layernorm_golden import layernorm_config_for_scale

# ---- layernorm ---------------------------------------------------------------

#: 4 lanes, int16 x + r, int8 gamma/beta; the CLI tests use the same design.
LAYERNORM_SMALL = LayerNormConfig(lanes=4, h_max=64)
#: 3 lanes, int32 x, no residual, int16 gamma/beta, a non-power-of-two output scale.
LAYERNORM_WIDE = layernorm_config_for_scale(
    LayerNormConfig(lanes=3, h_max=48, in_width=32, add_residual=False, param_width=16,
                    gamma_frac=12, beta_frac=10), 0.05)


def layernorm_bert_vectors(config, count, length, seed):
    import numpy as np

    from bertforge.generators.layernorm_sim import random_layernorm_data
    return random_layernorm_data(config, count, length, np.random.default_rng(seed))


# ---- encoder -----------------------------------------------------------------

def tiny_encoder_config():
    from bertforge.generators.analyze import load_hardware
    from bertforge.generators.encoder_sim import TINY_HW
    from bertforge.rtl.encoder import EncoderConfig
    hw = load_hardware(TINY_HW)
    return EncoderConfig(gemm=hw.gemm, softmax=hw.softmax, layernorm=hw.layernorm, gelu=hw.gelu)


# ---- gelu --------------------------------------------------------------------

#: int16 in (LSB 2**-10) and int16 out (LSB 2**-11): the 0.02 bound holds end to end.
GELU_WIDE = GeluConfig(lanes=3, in_width=16, out_width=16, in_mult=1, in_shift=0, out_mult=1,
                       out_shift=3)
#: the default: int8 in and out, LSB 1/16.
GELU_DEFAULT = GeluConfig()


# ---- softmax -----------------------------------------------------------------

#: The bound on every softmax output's error against float softmax (2 LSB of uint8).
SOFTMAX_MAX_ERR = 2 / 256


# ---- gemm engines ------------------------------------------------------------

def kind_sequence(kinds):
    """A sequence of ``kinds`` with every ordered pair (a kind after
    itself too) back to back: a de Bruijn sequence, ``len(kinds)**2 + 1``
    long."""
    k, a, out = len(kinds), [0] * 3, []

    def walk(t, p):
        if t > 2:
            if 2 % p == 0:
                out.extend(a[1:p + 1])
            return
        a[t] = a[t - p]
        walk(t + 1, p)
        for j in range(a[t - p] + 1, k):
            a[t] = j
            walk(t + 1, t)
    walk(1, 1)
    return [kinds[i] for i in out + out[:1]]


def gemm_pair_problems(config, **fields):
    """Commands of every kind (``sim.gemm_tb.command_kinds``) after every
    kind, rejected ones for each reason (size 0, format, address), and A and
    C ending at the memory's last byte (accepted) and one past it (rejected),
    for a GEMM engine's harness; ``fields`` go into every command (a sparse
    engine's pattern, and its compressed weights' addresses for the raw ones:
    ``b_addr``/``idx_addr`` and strides)."""
    top, esize = 1 << config.addr_width, config.width // 8
    pattern = {key: value for key, value in fields.items() if key.startswith("pat_")}
    size = dict(m=2, k=3, n=2, **pattern)
    kinds = {"int32": size, "accumulate": dict(size, accumulate=1),
             "int8": dict(size, int8=1, multiplier=3, shift=4),
             "int16": dict(size, int16=1, multiplier=3, shift=2)}
    bad = [dict(raw=dict(m=0, k=2, n=2, **pattern)),
           dict(raw=dict(m=2, k=2, n=2, int8=1, int16=1, **pattern))]
    problems = []
    for kind in kind_sequence([*kinds, "rejected"]):
        problems.append(kinds[kind] if kind != "rejected" else bad[len(problems) % 2])
    scratch = top - 4096
    at_top = dict(dict(m=1, k=2, n=2, b_addr=0, b_stride=2 * esize, c_stride=8), **fields)
    return problems + [
        dict(raw=dict(at_top, a_addr=top - 2 * esize, c_addr=scratch)),          # A ends at the top
        dict(raw=dict(at_top, a_addr=top - 2 * esize + 1, c_addr=scratch)),      # one past it
        dict(raw=dict(at_top, a_addr=scratch, c_addr=top - 7)),                  # C one past
        dict(raw=dict(at_top, a_addr=scratch, c_addr=top - 8)),                  # C ends at the top
    ]


# ---- the GEMM engine in its Verilator harness ---------------------------------

#: C of :func:`gemm_saturating_problems`' first problem: int32's limits, row by row.
GEMM_INT32_LIMITS = [[(1 << 31) - 1] * 2, [-(1 << 31)] * 2]


def gemm_refused_at_top_bits(config):
    """A GEMM command the engine refuses, with every size at 0xFFFF, every
    address and stride at the top of ``config``'s addresses, all flags and
    the largest multiplier, shift and tag."""
    full, wide = 0xFFFF, (1 << config.addr_width) - 1
    return dict(m=full, k=full, n=full, a_addr=wide, b_addr=wide, c_addr=wide, a_stride=wide,
                b_stride=wide, c_stride=wide, accumulate=1, int8=1, int16=1, bias=1,
                per_channel=1, bias_addr=wide, scale_addr=wide, multiplier=2**32 - 1,
                shift=63, tag=255)


def gemm_top_bits_commands(config):
    """Command fields at their top bits, for a GEMM engine of 15-bit
    addresses on random memory (``test_every_field_at_its_top_bits``). A
    refused command with every size at 0xFFFF, every address and stride at
    0x7FFF, all flags, the largest multiplier, shift and tag (the range
    check's shift-and-add runs on them all), between accepted ones, so that
    each bit of the command queue and the scheduler rises and falls; and
    accepted commands whose strides and addresses set bits 3 to 14 (rows
    half a memory apart, C and the bias near the top of memory, the scales
    ending exactly there, per-channel scales with a C stride of bit 10) and
    tags above 32. Commands 1 and 4 are refused."""
    top = 1 << config.addr_width
    refused = gemm_refused_at_top_bits(config)
    return [
        dict(m=2, k=8, n=2, a_addr=0x0000, a_stride=0x7FF0, b_addr=0x0040, b_stride=0x0FC0,
             c_addr=0x00C0, c_stride=0x7F00, bias=1, bias_addr=0x7FE0, tag=0x3F),
        refused,
        dict(m=2, k=2, n=2, a_addr=0x0100, a_stride=0x3FF0, b_addr=0x0060, b_stride=0x7F40,
             c_addr=0x0140, c_stride=0x2400, int8=1, per_channel=1, scale_addr=top - 8,
             tag=0xE0),                         # the scales end at the top of memory
        dict(m=3, k=5, n=2, a_addr=0x6A00, a_stride=0x0400, b_addr=0x7E00, b_stride=0x0020,
             c_addr=0x5C00, c_stride=0x0200, int16=1, multiplier=0xFFFF, shift=17,
             tag=0x20),
        dict(refused, n=0xE000, tag=254),      # the vectors' ends: 0x3FFFF, bits 0 to 17
        dict(m=1, k=1, n=1, a_addr=0x10, a_stride=0, b_addr=0x20, b_stride=0, c_addr=0x30,
             c_stride=0, tag=0),
    ]


def gemm_long_count_commands():
    """K = 20,000, M = 9,000 and N = 9,000, each with the other sizes 1 or
    2 and strides of 0 (one row of A or B read again and again), so that a
    GEMM engine's chunk offsets and what is left of m, n and k count through
    bits 3 to 14 and back (``test_long_k_m_and_n_count_past_bit_13``; a
    later command's C overwrites an earlier one's A: the engine reads in
    command order)."""
    int8 = dict(int8=1, multiplier=1 << 13, shift=14)
    return [
        dict(m=1, k=20000, n=2, a_addr=0x0000, a_stride=0, b_addr=0x6D00, b_stride=0,
             c_addr=0x7FF0, c_stride=0, tag=1),
        dict(m=9000, k=1, n=1, a_addr=0x0000, a_stride=1, b_addr=0x2400, b_stride=0,
             c_addr=0x2500, c_stride=1, tag=2, **int8),
        dict(m=1, k=1, n=9000, a_addr=0x2400, a_stride=0, b_addr=0x0000, b_stride=0,
             c_addr=0x4900, c_stride=0, tag=3, **int8),
    ]


def gemm_saturating_problems(b_key="b", **fields):
    """Problems (``layout_problems``) of C += A @ B from old C at the int32
    limits, pushed past them in both columns and both ways (the
    accumulator's saturating add; C is then :data:`GEMM_INT32_LIMITS`), and
    per-channel scales without a bias (the scale vector is then the
    loader's first job), int8 and int16. ``b_key``: the key of B (``w``
    for the sparse engine); ``fields`` go into every problem (a pattern)."""
    import numpy as np
    lo, hi = -(1 << 31), (1 << 31) - 1
    return [dict(m=2, k=4, n=2, accumulate=1, a=[[127] * 4, [-128] * 4],
                 c_old=np.array([[hi, hi], [lo, lo]]), **{b_key: [[127, 127]] * 4}, **fields),
            dict(m=3, k=9, n=5, scale=np.linspace(2e-3, 9e-3, 5), **fields),
            dict(m=3, k=9, n=5, int16=1, scale=np.linspace(2e-2, 9e-2, 5), **fields)]


def gemm_request_addresses(config, cmd):
    """``(reads, writes)``: the byte addresses of the memory requests of an
    accepted GEMM command ``cmd`` on engine ``config``, in no particular
    order: a read a row of each loader job
    (:func:`~bertforge.sim.axi_cycles.chunk_requests`), a write a beat of
    the writer (:func:`~bertforge.sim.axi_cycles.block_writes`) or, C
    stored transposed, an element (``c_addr + column * c_stride + row *
    element bytes``)."""
    from bertforge.sim.axi_cycles import block_writes, chunk_requests
    from bertforge.sim.gemm_cycles import chunks
    from bertforge.sim.gemm_golden import output_dtype
    reads = [addr for requests in chunk_requests(config, cmd) for addr, _ in requests]
    osize = output_dtype(cmd).itemsize
    writes = []
    for chunk in chunks(config, cmd):
        if not chunk["last"]:
            continue
        if chunk["transpose_c"]:
            writes += [cmd["c_addr"] + (chunk["n0"] + j) * cmd["c_stride"] + (chunk["m0"] + i) * osize
                       for i in range(chunk["m_len"]) for j in range(chunk["n_len"])]
        else:
            writes += [addr for _, addr, _ in block_writes(config, cmd, chunk)]
    return reads, writes


#: The fields of a GEMM command that are byte addresses.
GEMM_ADDR_FIELDS = ("a_addr", "b_addr", "c_addr", "bias_addr", "scale_addr")

#: Random memory latency and valid/ready stalls on every stream of the GEMM harness.
GEMM_STRESS = dict(lat_min=2, lat_mask=15, p_req=70, p_data=70, p_wr=70, p_cmd=90, p_done=90)


def gemm_exact(config, problems, rng, workdir):
    """Compute-bound ``problems`` on ``config``'s engine in Verilator
    without stalls: bit-exact, and the cycles the cycle model's."""
    from bertforge.generators.gemm_sim import layout_problems, simulate_gemm
    image, commands = layout_problems(config, problems, rng)
    result = simulate_gemm(config, image, commands, seed=5, lat_min=3, workdir=workdir)
    assert result["match"] and result["passed"], result.get("log")
    assert result["model_exact"]
    assert result["cycles"] == result["model_cycles"]


def gemm_stressed(config, problems, rng, workdir):
    """``problems`` behind :data:`GEMM_STRESS`, the last two a command
    whose operand leaves memory (refused) and one that just fits:
    bit-exact against the golden model, stalled, only the first refused.
    Returns ``(image, commands)`` (the memory after the run)."""
    from bertforge.generators.gemm_sim import layout_problems, simulate_gemm
    image, commands = layout_problems(config, problems, rng)
    result = simulate_gemm(config, image, commands, seed=12, workdir=workdir, **GEMM_STRESS)
    assert result["match"] and result["passed"], result.get("log")
    assert result["stalls"]
    assert result["errors"] == [False] * (len(problems) - 2) + [True, False]
    return result["image"], commands
