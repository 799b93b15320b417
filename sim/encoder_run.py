"""One encoder layer on :class:`~bertforge.rtl.encoder.EncoderTop`: memory
layout, command program, results read back (the run is
``bertforge.generators.encoder_sim.simulate_encoder``).

The testbench (:mod:`bertforge.sim.encoder_tb`) only loads the memory image,
queues the commands, waits and reads memory back; every cycle in between
runs in HDL (:class:`~bertforge.sim.encoder_harness.EncoderHarness`).
"""

import numpy as np

from .encoder_harness import MAX_COMMANDS
from bertforge.rtl.encoder import OP_GELU, OP_GEMM, OP_LAYERNORM, OP_SOFTMAX
from bertforge.rtl.errors import ParameterError

__all__ = ["encoder_program", "read_stages", "check_shape", "OPERATIONS"]

#: Operations of the program, in order: (workload name, class); the names are
#: those of :func:`bertforge.generators.workload.encoder_layer`.
OPERATIONS = [
    ("q, v projections", "gemm"), ("k projection", "gemm"), ("attention scores", "gemm"),
    ("softmax", "softmax"), ("attention context", "gemm"), ("output projection", "gemm"),
    ("residual + layernorm 1", "layernorm"), ("ffn 1", "gemm"), ("gelu", "gelu"), ("ffn 2", "gemm"),
    ("residual + layernorm 2", "layernorm"),
]

def check_shape(config, seq, hidden, heads, ffn):
    """``ValueError`` (one line) if the adapters cannot take this layer."""
    mb = config.gemm.mem_bytes
    if seq > config.softmax.l_max:
        raise ParameterError(f"sequence length {seq} exceeds the softmax unit's l_max = {config.softmax.l_max}")
    if hidden > config.layernorm.h_max:
        raise ParameterError(f"hidden {hidden} exceeds the layernorm unit's h_max = {config.layernorm.h_max}")
    if (4 * seq) % mb:
        raise ParameterError(f"sequence length {seq} must be a multiple of {mb // 4} (softmax rows of "
                         f"int32 must fill whole {mb}-byte memory words)")
    for name, n in (("hidden", hidden), ("ffn", ffn)):
        if n % mb:
            raise ParameterError(f"{name} {n} must be a multiple of the {mb}-byte memory word")
    if hidden % heads:
        raise ParameterError(f"hidden {hidden} is not a multiple of heads {heads}")


def encoder_program(config, layer):
    """``(image, commands, regions, groups, abits)``: the memory image with
    the input and weights, the command list, the byte address of every
    tensor, the command indices of each of :data:`OPERATIONS`, and the
    memory's address bits."""
    S, H, F, heads, d = layer.seq, layer.hidden, layer.ffn, layer.heads, layer.head_dim
    check_shape(config, S, H, heads, F)
    mb = config.gemm.mem_bytes
    # Activations first (the testbench reads memory back up to "out"), then the weights.
    sizes = [("x", S * H), ("xt", H * S), ("q", S * H),
             ("kt", H * S), ("v", S * H), ("scores", heads * S * S * 4), ("p", heads * S * S),
             ("ctx", S * H), ("attn", S * H), ("ln1", S * H), ("h1", S * F), ("g", S * F),
             ("f", S * H), ("out", S * H), ("wq", H * H), ("wkt", H * H), ("wv", H * H),
             ("wo", H * H), ("w1", H * F), ("w2", F * H), ("ln1p", 2 * H), ("ln2p", 2 * H)]
    bq, words = layer.bq or {}, layer.words or {}
    n_out = {"q": H, "v": H, "o": H, "1": F, "2": H}
    sizes += [(f"bias_{key}", 4 * n_out[key]) for key in bq]
    sizes += [(f"scale_{key}", 4 * n_out[key]) for key in words]
    regions, cursor = {}, 0
    for name, size in sizes:
        regions[name] = cursor
        cursor += -(-size // mb) * mb
    abits = max(12, (cursor + 2 * mb - 1).bit_length())
    image = np.zeros(1 << abits, dtype=np.uint8)

    def put(name, matrix):
        raw = np.asarray(matrix, dtype=np.int64).astype(np.int8).ravel().view(np.uint8)
        image[regions[name]:regions[name] + raw.size] = raw
    wq = layer.wq
    put("x", layer.xq)
    put("xt", layer.xq.T)
    put("wq", wq["q"]), put("wkt", wq["k"].T), put("wv", wq["v"]), put("wo", wq["o"])
    put("w1", wq["1"]), put("w2", wq["2"])
    put("ln1p", np.concatenate([layer.gamma_q[0], layer.beta_q[0]]))
    put("ln2p", np.concatenate([layer.gamma_q[1], layer.beta_q[1]]))
    for name, values, dtype in ([(f"bias_{k}", v, "<i4") for k, v in bq.items()]
                                + [(f"scale_{k}", v, "<u4") for k, v in words.items()]):
        raw = np.asarray(values).astype(dtype).view(np.uint8)
        image[regions[name]:regions[name] + raw.size] = raw

    r = regions
    commands, groups = [], []

    def gemm(a, a_stride, b, b_stride, c, c_stride, m, k, n, key=None):
        fields = {}
        if key in words:
            fields.update(per_channel=1, scale_addr=r[f"scale_{key}"], multiplier=0, shift=0)
        else:
            mult, shift = layer.rq[key] if key else (1, 0)
            fields.update(multiplier=mult, shift=shift)
        if key in bq:
            fields.update(bias=1, bias_addr=r[f"bias_{key}"])
        commands.append({"op": OP_GEMM, "gemm": {
            "m": m, "k": k, "n": n, "a_addr": a, "b_addr": b, "c_addr": c, "a_stride": a_stride,
            "b_stride": b_stride, "c_stride": c_stride, "accumulate": 0, "int8": int(key is not None),
            "tag": len(commands) % 256, **fields}})

    def group(build):
        first = len(commands)
        build()
        commands[first]["barrier"] = 1
        groups.append(list(range(first, len(commands))))

    group(lambda: (gemm(r["x"], H, r["wq"], H, r["q"], H, S, H, H, "q"),
                   gemm(r["x"], H, r["wv"], H, r["v"], H, S, H, H, "v")))
    group(lambda: gemm(r["wkt"], H, r["xt"], S, r["kt"], S, H, H, S, "k"))
    group(lambda: [gemm(r["q"] + h * d, H, r["kt"] + h * d * S, S, r["scores"] + h * S * S * 4, 4 * S,
                        S, d, S) for h in range(heads)])
    mult, shift = layer.softmax
    group(lambda: commands.append({"op": OP_SOFTMAX, "src": r["scores"], "src_stride": 4 * S,
                                   "dst": r["p"], "dst_stride": S, "rows": heads * S, "length": S,
                                   "valid": layer.valid if layer.valid and layer.valid < S else 0,
                                   "multiplier": mult, "shift": shift}))
    group(lambda: [gemm(r["p"] + h * S * S, S, r["v"] + h * d, H, r["ctx"] + h * d, H, S, S, d, "ctx")
                   for h in range(heads)])
    group(lambda: gemm(r["ctx"], H, r["wo"], H, r["attn"], H, S, H, H, "o"))

    def layernorm(x, res, params, out):
        commands.append({"op": OP_LAYERNORM, "src": x, "src_stride": H, "src2": res, "src2_stride": H,
                         "params": params, "dst": out, "dst_stride": H, "rows": S, "length": H})
    group(lambda: layernorm(r["attn"], r["x"], r["ln1p"], r["ln1"]))
    group(lambda: gemm(r["ln1"], H, r["w1"], F, r["h1"], F, S, H, F, "1"))
    group(lambda: commands.append({"op": OP_GELU, "src": r["h1"], "src_stride": F, "dst": r["g"],
                                   "dst_stride": F, "rows": S, "length": F}))
    group(lambda: gemm(r["g"], F, r["w2"], H, r["f"], H, S, F, H, "2"))
    group(lambda: layernorm(r["f"], r["ln1"], r["ln2p"], r["out"]))
    assert len(commands) <= MAX_COMMANDS and len(groups) == len(OPERATIONS)
    return image, commands, regions, groups, abits


def _read(image, addr, shape, dtype):
    count = int(np.prod(shape))
    return np.frombuffer(image[addr:addr + count * np.dtype(dtype).itemsize].tobytes(),
                         dtype=dtype).reshape(shape).astype(np.int64)


def read_stages(image, regions, layer):
    """The hardware's tensors from a memory image (same keys as :func:`encoder_golden`)."""
    S, H, F, heads = layer.seq, layer.hidden, layer.ffn, layer.heads
    shapes = {"q": (S, H), "kt": (H, S), "v": (S, H), "scores": (heads, S, S), "p": (heads, S, S),
              "ctx": (S, H), "attn": (S, H), "ln1": (S, H), "h1": (S, F), "g": (S, F), "f": (S, H),
              "out": (S, H)}
    return {key: _read(image, regions[key], shape, "<i4" if key == "scores" else "<i1")
            for key, shape in shapes.items()}
