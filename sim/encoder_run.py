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

__all__ = ["encoder_program", "model_program", "layer_program", "read_stages", "check_shape",
           "OPERATIONS", "program_commands", "elementwise_program"]

#: Operations of the program, in order: (workload name, class); the names are
#: those of :func:`bertforge.generators.workload.encoder_layer` (costed by
#: ``analyze(..., transpose=True)``).
OPERATIONS = [
    ("q, v projections", "gemm"), ("k projection", "gemm"),
    ("attention scores", "gemm"), ("softmax", "softmax"), ("attention context", "gemm"),
    ("output projection", "gemm"), ("residual + layernorm 1", "layernorm"), ("ffn 1", "gemm"),
    ("gelu", "gelu"), ("ffn 2", "gemm"), ("residual + layernorm 2", "layernorm"),
]
#: Activation tensors of a layer in memory order (layer 0 also has ``x``; a
#: later layer's ``x`` is the previous layer's ``out``).
ACTIVATIONS = ("q", "kt", "v", "scores", "p", "ctx", "attn", "ln1", "h1", "g", "f", "out")
#: The layernorms' interleaved sources: each tensor and the one read beside it.
PARTNERS = {"attn": "x", "f": "ln1"}


def program_commands(seq, heads, batch=1):
    """Commands of one layer's program: q and v, k (stored transposed), a
    score and a context command per head and sentence, a softmax per
    sentence, six more (output projection, layernorm, FFN 1, GELU, FFN 2,
    layernorm)."""
    return 2 + 1 + 2 * heads * batch + batch + 6


def check_shape(config, seq, hidden, heads, ffn, batch=1):
    """``ValueError`` (one line) if the adapters cannot take this layer
    (``batch`` sentences of ``seq`` tokens)."""
    mb = config.gemm.mem_bytes
    eb = config.element_bytes
    if seq > config.softmax.l_max:
        raise ParameterError(f"sequence length {seq} exceeds the softmax unit's l_max = {config.softmax.l_max}")
    if hidden > config.layernorm.h_max:
        raise ParameterError(f"hidden {hidden} exceeds the layernorm unit's h_max = {config.layernorm.h_max}")
    if (4 * seq) % mb:
        raise ParameterError(f"sequence length {seq} must be a multiple of {mb // 4} (softmax rows of "
                             f"int32 must fill whole {mb}-byte memory words)")
    for name, n in (("hidden", hidden), ("ffn", ffn)):
        if (n * eb) % mb:
            raise ParameterError(f"{name} {n} must be a multiple of the {mb}-byte memory word "
                                 f"({mb // eb} elements of {eb} bytes)")
    if hidden % heads:
        raise ParameterError(f"hidden {hidden} is not a multiple of heads {heads}")
    if program_commands(seq, heads, batch) > MAX_COMMANDS:
        sentences = "" if batch == 1 else f"{batch} x "
        raise ParameterError(f"a layer of {sentences}sequence length {seq} and {heads} heads needs "
                             f"{program_commands(seq, heads, batch)} commands; the harness queue "
                             f"holds {MAX_COMMANDS}")


def encoder_program(config, layer):
    """``(image, commands, regions, groups, abits)`` of one layer: the
    memory image with the input and weights, the command list, the byte
    address of every tensor, the command indices of each of
    :data:`OPERATIONS`, and the memory's address bits."""
    image, programs, regions, groups, abits = model_program(config, [layer])
    return image, programs[0], regions[0], groups[0], abits


def model_program(config, layers, *, banks=None):
    """``(image, programs, regions, groups, abits)`` of a stack of layers
    (:class:`~bertforge.sim.encoder_golden.EncoderLayer`, one shape): the
    memory image (layer 0's input, every layer's weights), one command
    list per layer, per layer
    the byte address of each tensor, per layer the command indices of each
    of :data:`OPERATIONS`, and the memory's address bits. Activations come
    first (every layer's own, so each can be read back and checked; layer
    ``l``'s input is layer ``l - 1``'s ``out``), then the weights.

    ``banks`` (``(row bytes, banks)`` of an SDRAM, or None): the two
    sources a layernorm interleaves (``attn`` and ``x``, ``f`` and
    ``ln1``) start half the banks apart, so that their rows never share a
    bank (each would close the other's row on every access)."""
    first = layers[0]
    S, H, F, heads, B = first.seq, first.hidden, first.ffn, first.heads, first.batch
    check_shape(config, S, H, heads, F, B)
    mb, eb = config.gemm.mem_bytes, config.element_bytes
    T = B * S           # rows of the stacked batch
    # bytes (scores int32; the probabilities, as every activation, eb bytes)
    act = {name: n * eb for name, n in (("x", T * H), ("q", T * H), ("kt", H * T),
                                         ("v", T * H), ("p", B * heads * S * S), ("ctx", T * H),
                                         ("attn", T * H), ("ln1", T * H), ("h1", T * F),
                                         ("g", T * F), ("f", T * H), ("out", T * H))}
    act["scores"] = B * heads * S * S * 4
    n_out = {"q": H, "v": H, "o": H, "1": F, "2": H}
    regions, cursor = [], 0

    def take(size_bytes):
        nonlocal cursor
        at = cursor
        cursor += -(-size_bytes // mb) * mb
        return at
    for index, layer in enumerate(layers):
        if (layer.seq, layer.hidden, layer.ffn, layer.heads, layer.batch) != (S, H, F, heads, B):
            raise ParameterError(f"layer {index} has another shape than layer 0")
        r = {"x": take(act["x"]) if index == 0 else regions[-1]["out"]}
        for name in ACTIVATIONS:
            if banks is not None and name in PARTNERS:     # half the banks after its partner
                period = banks[0] * banks[1]
                cursor += (r[PARTNERS[name]] + period // 2 - cursor) % period
            r[name] = take(act[name])
        regions.append(r)
    read_bytes = cursor
    for r, layer in zip(regions, layers):
        for name, size in (("wq", H * H), ("wk", H * H), ("wv", H * H), ("wo", H * H),
                           ("w1", H * F), ("w2", F * H), ("ln1p", 2 * H), ("ln2p", 2 * H)):
            r[name] = take(size * eb)
        for key in layer.bq or {}:
            r[f"bias_{key}"] = take(4 * n_out[key])
        for key in layer.words or {}:
            r[f"scale_{key}"] = take(4 * n_out[key])
        r["read_bytes"] = read_bytes
    abits = max(12, (cursor + 2 * mb - 1).bit_length())
    image = np.zeros(1 << abits, dtype=np.uint8)
    dtype = "<i1" if eb == 1 else "<i2"

    def put(at, matrix, kind=dtype):
        raw = np.asarray(matrix, dtype=np.int64).astype(kind).ravel().view(np.uint8)
        image[at:at + raw.size] = raw
    put(regions[0]["x"], first.xq)
    programs, groups = [], []
    for r, layer in zip(regions, layers):
        wq = layer.wq
        put(r["wq"], wq["q"]), put(r["wk"], wq["k"]), put(r["wv"], wq["v"]), put(r["wo"], wq["o"])
        put(r["w1"], wq["1"]), put(r["w2"], wq["2"])
        put(r["ln1p"], np.concatenate([layer.gamma_q[0], layer.beta_q[0]]))
        put(r["ln2p"], np.concatenate([layer.gamma_q[1], layer.beta_q[1]]))
        for key, values in (layer.bq or {}).items():
            put(r[f"bias_{key}"], values, "<i4")
        for key, values in (layer.words or {}).items():
            put(r[f"scale_{key}"], values, "<u4")
        commands, layer_groups = layer_program(config, layer, r)
        programs.append(commands)
        groups.append(layer_groups)
    return image, programs, regions, groups, abits


def layer_program(config, layer, r):
    """One layer's commands and operation groups on its regions ``r`` (one
    of :func:`model_program`'s); the softmax command of each sentence takes
    its ``valid``. The projections, the FFN, layernorm and GELU run on the
    ``batch * seq`` rows of the stacked batch, attention per sentence."""
    S, H, F, heads, d = layer.seq, layer.hidden, layer.ffn, layer.heads, layer.head_dim
    B = layer.batch
    T = B * S
    eb = config.element_bytes
    narrow = {"int8": 1} if eb == 1 else {"int16": 1}
    bq, words = layer.bq or {}, layer.words or {}
    commands, groups = [], []

    def gemm(a, a_stride, b, b_stride, c, c_stride, m, k, n, key=None, **extra):
        """Strides in elements (scores: int32, the others ``eb`` bytes);
        ``extra``: more command fields (``transpose_c``)."""
        fields = {}
        if key in words:
            fields.update(per_channel=1, scale_addr=r[f"scale_{key}"], multiplier=0, shift=0)
        else:
            mult, shift = layer.rq[key] if key is not None else (1, 0)
            fields.update(multiplier=mult, shift=shift)
        if key in bq:
            fields.update(bias=1, bias_addr=r[f"bias_{key}"])
        fields.update(extra)
        out = narrow if key is not None else {}
        commands.append({"op": OP_GEMM, "gemm": {
            "m": m, "k": k, "n": n, "a_addr": a, "b_addr": b, "c_addr": c, "a_stride": a_stride * eb,
            "b_stride": b_stride * eb, "c_stride": c_stride * (eb if key is not None else 4),
            "accumulate": 0, **out, "tag": len(commands) % 256, **fields}})

    def group(build):
        first = len(commands)
        build()
        commands[first]["barrier"] = 1
        groups.append(list(range(first, len(commands))))

    group(lambda: (gemm(r["x"], H, r["wq"], H, r["q"], H, T, H, H, "q"),
                   gemm(r["x"], H, r["wv"], H, r["v"], H, T, H, H, "v")))
    # K = X Wk stored transposed: K^T (H x T, rows of T elements), which the
    # score GEMMs read as their B operand.
    group(lambda: gemm(r["x"], H, r["wk"], H, r["kt"], T, T, H, H, "k", transpose_c=1))
    # attention per sentence b and head h: (b, h) is score matrix b * heads + h
    pairs = [(b, h) for b in range(B) for h in range(heads)]
    group(lambda: [gemm(r["q"] + (b * S * H + h * d) * eb, H, r["kt"] + (h * d * T + b * S) * eb, T,
                        r["scores"] + (b * heads + h) * S * S * 4, S, S, d, S) for b, h in pairs])
    mult, shift = layer.softmax
    group(lambda: [commands.append({"op": OP_SOFTMAX, "src": r["scores"] + b * heads * S * S * 4,
                                    "src_stride": 4 * S, "dst": r["p"] + b * heads * S * S * eb,
                                    "dst_stride": S * eb, "rows": heads * S, "length": S,
                                    "valid": valid if valid and valid < S else 0,
                                    "multiplier": mult, "shift": shift})
                   for b, valid in enumerate(layer.valids())])
    group(lambda: [gemm(r["p"] + (b * heads + h) * S * S * eb, S, r["v"] + (b * S * H + h * d) * eb, H,
                        r["ctx"] + (b * S * H + h * d) * eb, H, S, S, d, "ctx") for b, h in pairs])
    group(lambda: gemm(r["ctx"], H, r["wo"], H, r["attn"], H, T, H, H, "o"))

    def layernorm(x, res, params, out):
        commands.append({"op": OP_LAYERNORM, "src": x, "src_stride": H * eb, "src2": res,
                         "src2_stride": H * eb, "params": params, "dst": out, "dst_stride": H * eb,
                         "rows": T, "length": H})
    group(lambda: layernorm(r["attn"], r["x"], r["ln1p"], r["ln1"]))
    group(lambda: gemm(r["ln1"], H, r["w1"], F, r["h1"], F, T, H, F, "1"))
    group(lambda: commands.append({"op": OP_GELU, "src": r["h1"], "src_stride": F * eb, "dst": r["g"],
                                   "dst_stride": F * eb, "rows": T, "length": F}))
    group(lambda: gemm(r["g"], F, r["w2"], H, r["f"], H, T, F, H, "2"))
    group(lambda: layernorm(r["f"], r["ln1"], r["ln2p"], r["out"]))
    assert len(commands) == program_commands(S, heads, B) and len(groups) == len(OPERATIONS)
    return commands, groups


#: The elementwise commands of :func:`elementwise_program`, in an order
#: with every ordered pair of two back to back (a de Bruijn sequence).
ELEMENTWISE_ORDER = (OP_SOFTMAX, OP_SOFTMAX, OP_LAYERNORM, OP_SOFTMAX, OP_GELU, OP_LAYERNORM,
                     OP_LAYERNORM, OP_GELU, OP_GELU, OP_SOFTMAX)


def elementwise_program(commands, rows=2):
    """Elementwise commands back to back, every ordered pair of softmax,
    layernorm and GELU (a layer's program always has a GEMM between two):
    the layer's own commands (``commands``, :func:`layer_program`'s) again,
    each on ``rows`` of its rows (a different ``rows`` each time, cycling
    through the layernorms). Every tensor of a layer has a region of its
    own, so a command run again on its final inputs writes the values it
    wrote before: the memory after it still equals the golden model."""
    own = {op: [c for c in commands if c.get("op") == op] for op in set(ELEMENTWISE_ORDER)}
    program = []
    for index, op in enumerate(ELEMENTWISE_ORDER):
        c = dict(own[op][index % len(own[op])])
        first = (index * rows) % max(c["rows"] - rows + 1, 1)
        take = min(rows, c["rows"])
        for addr, stride in (("src", "src_stride"), ("src2", "src2_stride"), ("dst", "dst_stride")):
            if addr in c:
                c[addr] += first * c[stride]
        c["rows"] = take
        c.pop("barrier", None)
        program.append(c)
    return program


def _read(image, addr, shape, dtype):
    count = int(np.prod(shape))
    return np.frombuffer(image[addr:addr + count * np.dtype(dtype).itemsize].tobytes(),
                         dtype=dtype).reshape(shape).astype(np.int64)


def read_stages(image, regions, layer, config=None):
    """The hardware's tensors from a memory image (same keys as
    :func:`encoder_golden`; ``config`` None: int8 activations)."""
    S, H, F, heads = layer.seq, layer.hidden, layer.ffn, layer.heads
    T, BH = layer.batch * S, layer.batch * heads
    eb = config.element_bytes if config is not None else 1
    act = "<i1" if eb == 1 else "<i2"
    shapes = {"q": (T, H), "kt": (H, T), "v": (T, H), "scores": (BH, S, S),
              "p": (BH, S, S), "ctx": (T, H), "attn": (T, H), "ln1": (T, H), "h1": (T, F),
              "g": (T, F), "f": (T, H), "out": (T, H)}
    return {key: _read(image, regions[key], shape, "<i4" if key == "scores" else act)
            for key, shape in shapes.items()}
