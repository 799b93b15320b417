"""One encoder layer on :class:`~bertforge.rtl.encoder.EncoderTop`: memory
layout, command program, results read back (the run is
``bertforge.generators.encoder_sim.simulate_encoder``).

The testbench (:mod:`bertforge.sim.encoder_tb`) only loads the memory image,
queues the commands, waits and reads memory back; every cycle in between
runs in HDL (:class:`~bertforge.sim.encoder_harness.EncoderHarness`).
"""

import numpy as np

from .encoder_harness import QUEUE_LIMIT
from bertforge.rtl.encoder import OP_GELU, OP_GEMM, OP_LAYERNORM, OP_SOFTMAX
from bertforge.rtl.errors import ParameterError

__all__ = ["encoder_program", "model_program", "layer_program", "read_stages", "check_shape",
           "OPERATIONS", "program_commands", "elementwise_program", "lowbit_program",
           "read_lowbit_stages", "LOWBIT_OPERATIONS"]

#: Operations of the program, in order: (workload name, class); the names are
#: those of :func:`bertforge.generators.workload.encoder_layer` (costed by
#: ``analyze(..., transpose=True)``).
OPERATIONS = [
    ("q, v projections", "gemm"), ("k projection", "gemm"),
    ("attention scores", "gemm"), ("softmax", "softmax"), ("attention context", "gemm"),
    ("output projection", "gemm"), ("residual + layernorm 1", "layernorm"), ("ffn 1", "gemm"),
    ("gelu", "gelu"), ("ffn 2", "gemm"), ("residual + layernorm 2", "layernorm"),
]
#: The low-bit top's operations: :data:`OPERATIONS` with GELU on FFN 1's
#: writer (one command, the GEMM's, for both).
LOWBIT_OPERATIONS = [(name, kind) for name, kind in OPERATIONS if name != "gelu"]
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
    if program_commands(seq, heads, batch) > QUEUE_LIMIT:
        sentences = "" if batch == 1 else f"{batch} x "
        raise ParameterError(f"a layer of {sentences}sequence length {seq} and {heads} heads needs "
                             f"{program_commands(seq, heads, batch)} commands; the harness queue "
                             f"holds at most {QUEUE_LIMIT}")


def encoder_program(config, layer):
    """``(image, commands, regions, groups, abits)`` of one layer: the
    memory image with the input and weights, the command list, the byte
    address of every tensor, the command indices of each of
    :data:`OPERATIONS`, and the memory's address bits."""
    image, programs, regions, groups, abits = model_program(config, [layer])
    return image, programs[0], regions[0], groups[0], abits


class _Image:
    """A memory image's regions, one after another, each from a ``word``
    boundary: ``take(size)`` is the next region's byte address, ``end`` the
    first byte after the last."""

    def __init__(self, word):
        self.word, self.end = word, 0

    def take(self, size):
        at = self.end
        self.end += -(-size // self.word) * self.word
        return at


def model_program(config, layers, *, banks=None, origin=0):
    """``(image, programs, regions, groups, abits)`` of a stack of layers
    (:class:`~bertforge.sim.encoder_golden.EncoderLayer`, one shape): the
    memory image (layer 0's input, every layer's weights), one command
    list per layer, per layer
    the byte address of each tensor (and ``end``: the first byte past them
    all), per layer the command indices of each of :data:`OPERATIONS`, and
    the memory's address bits. Activations come
    first (every layer's own, so each can be read back and checked; layer
    ``l``'s input is layer ``l - 1``'s ``out``), then the weights.

    ``banks`` (``(row bytes, banks)`` of an SDRAM, or None): the two
    sources a layernorm interleaves (``attn`` and ``x``, ``f`` and
    ``ln1``) start half the banks apart, so that their rows never share a
    bank (each would close the other's row on every access).

    ``origin``: the address at which the accelerator sees the image's first
    byte (an SoC's SDRAM base): the commands' addresses are ``origin`` on;
    the regions stay offsets into the image."""
    if config.lowbit:
        raise ParameterError("a low-bit (W8A8) encoder top runs W8A8 layers: give it a checkpoint "
                             "(sim model; lowbit_program), not today's int8 or int16 layers")
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
    regions, memory = [], _Image(mb)
    take = memory.take
    for index, layer in enumerate(layers):
        if (layer.seq, layer.hidden, layer.ffn, layer.heads, layer.batch) != (S, H, F, heads, B):
            raise ParameterError(f"layer {index} has another shape than layer 0")
        r = {"x": take(act["x"]) if index == 0 else regions[-1]["out"]}
        for name in ACTIVATIONS:
            if banks is not None and name in PARTNERS:     # half the banks after its partner
                period = banks[0] * banks[1]
                memory.end += (r[PARTNERS[name]] + period // 2 - memory.end) % period
            r[name] = take(act[name])
        regions.append(r)
    read_bytes = memory.end
    for r, layer in zip(regions, layers):
        for name, size in (("wq", H * H), ("wk", H * H), ("wv", H * H), ("wo", H * H),
                           ("w1", H * F), ("w2", F * H), ("ln1p", 2 * H), ("ln2p", 2 * H)):
            r[name] = take(size * eb)
        for key in layer.bq or {}:
            r[f"bias_{key}"] = take(4 * n_out[key])
        for key in layer.words or {}:
            r[f"scale_{key}"] = take(4 * n_out[key])
        r["read_bytes"] = read_bytes
    for r in regions:
        r["end"] = memory.end          # the first byte past every tensor
    abits = max(12, (memory.end + 2 * mb - 1).bit_length())
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
        commands, layer_groups = layer_program(config, layer, {
            key: value + origin if key not in ("read_bytes", "end") else value
            for key, value in r.items()})
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


# ---- the low-bit (W8A8) top: IntegerLowbit layers

#: Activation tensors of a low-bit layer in memory order: (name, bytes per
#: element, rows, columns) with T tokens, H hidden, F FFN, heads of S x S;
#: ``x16``/``x8`` (layer 0's input: the int16 residual and the int8
#: smoothed operand) are the previous layer's ``out``/``out8`` after it;
#: ``qv``: q and v side by side, rows of 2H (one GEMM writes both).
LOWBIT_ACTIVATIONS = ("qv", "kt", "scores", "p", "ctx", "attn", "ln1", "ln1_8", "g", "f",
                      "out", "out8")


def _interleave(first, second, lanes):
    """``first`` and ``second`` (length H) as beats of ``lanes`` elements
    of ``first`` followed by ``lanes`` of ``second`` (a low-bit layernorm
    parameter source: gamma|gamma2 or beta|beta2)."""
    a = np.asarray(first, dtype=np.int64).reshape(-1, lanes)
    b = np.asarray(second, dtype=np.int64).reshape(-1, lanes)
    return np.concatenate([a, b], axis=1).ravel()


def _lowbit_gemms(plan, H, F):
    """A low-bit layer's GEMM operands by the program's keys, each
    ``(K, N, weights, q4, bias, (multipliers, shifts))`` (``q4``: the
    plan's ``(q, codes, group)`` of 4-bit weights, or None): ``qv`` is the
    q and v projections as one GEMM, ``[Wq | Wv]`` with their per-channel
    scales, biases and group codes side by side along N (each is per
    output column, so q's and v's results are those of two GEMMs)."""
    def one(key):
        q4 = plan.get("q4", {}).get(key)
        return plan["w"][key], q4, plan["bias"][key], plan["rq"][key]

    def cat(a, b):
        return np.concatenate([np.asarray(a), np.asarray(b)], axis=-1)
    (wq, q4q, bq, rq), (wv, q4v, bv, rv) = one("q"), one("v")
    if (q4q is None) != (q4v is None):
        raise ParameterError("the q and v projections' weights must both be 4-bit or both not")
    q4 = None if q4q is None else (cat(q4q[0], q4v[0]), None if q4q[1] is None or q4v[1] is None
                                   else cat(q4q[1], q4v[1]), q4q[2])
    gemms = {"qv": (H, 2 * H, cat(wq, wv), q4, cat(bq, bv), (cat(rq[0], rv[0]), cat(rq[1], rv[1])))}
    for key, (k, n) in {"k": (H, H), "o": (H, H), "1": (H, F), "2": (F, H)}.items():
        gemms[key] = (k, n, *one(key))
    return gemms


def lowbit_program(config, imodel, seq, valid=None):
    """``(image, programs, regions, groups, abits)`` of an
    :class:`~bertforge.sim.lowbit_golden.IntegerLowbit` model (one sentence
    of ``seq`` tokens, ``valid`` of them real) on a low-bit
    :class:`~bertforge.rtl.encoder.EncoderTop` (``config.lowbit``), as
    :func:`model_program` lays out today's layers; layer 0's input
    (``x16`` then ``x8``) is written by the caller at ``regions[0]["x16"]``.

    The commands follow :func:`layer_program` (the same :data:`OPERATIONS`)
    with int8 GEMM operands, but the q and v projections are one GEMM
    (:func:`_lowbit_gemms`: ``[Wq | Wv]``, N = 2H) writing ``qv``, q's and
    v's rows side by side (rows of 2H), which the attention GEMMs read
    with a row stride of 2H: the layer's int8 input is read twice, not
    three times. q, v and ``K^T`` int8 with per-channel scales
    and int32 biases (V at the context's smoothed scale, per channel); ``P
    V`` int8 with one scale;
    the output projection, FFN 1 and FFN 2 int16; each layernorm reads the
    int16 sum and residual and writes the int16 residual (``dst``) and the
    next GEMM's int8 operand (``dst2``, its scale in ``multiplier`` and
    ``shift``); FFN 1's command has ``gelu``: its int16 results go through
    the GELU unit (the per-channel scale words at ``params``) to the int8
    ``g`` at ``dst``, and the int16 ``h1`` is never stored (the GEMM's C
    address and stride, g's here, are only range-checked).

    4-bit weights (W4A8: the plan's ``q4``) need a GEMM engine with group
    multipliers (``[gemm] weight_group`` equal to the weights' group): each
    is stored packed (``pack_int4(q.T).T``, ``ceil(K / 2)`` rows of N
    bytes) with its multiplier codes (``K / group`` rows of ``ceil(N / 2)``
    bytes, :func:`~bertforge.sim.payload_np.pack_codes`), and its command
    has ``w4`` and ``mult_addr``."""
    from bertforge.rtl.tile_scheduler import CHANNEL_MULT_BITS
    from .payload_np import pack_codes, pack_int4
    if not config.lowbit:
        raise ParameterError("a low-bit program needs a low-bit encoder top (layernorm "
                             "second_output)")
    S, heads, mb = seq, imodel.heads, config.gemm.mem_bytes
    first = imodel.plan[0]["w"]
    H, F = first["1"].shape
    d, T = H // heads, S
    check_shape(config, S, H, heads, F)      # int8 rows of whole words (int16 rows follow)
    if F > config.gelu.channels_max:
        raise ParameterError(f"ffn {F} exceeds the GELU unit's channels_max = "
                             f"{config.gelu.channels_max}")
    if F % config.gemm.panel:
        raise ParameterError(f"ffn {F} must be a multiple of the GEMM engine's {config.gemm.panel}-"
                             "column panel (GELU on FFN 1's writer takes whole panels)")
    act = {"x16": T * H * 2, "x8": T * H, "qv": T * 2 * H, "kt": H * T,
           "scores": heads * S * S * 4, "p": heads * S * S, "ctx": T * H, "attn": T * H * 2,
           "ln1": T * H * 2, "ln1_8": T * H, "g": T * F, "f": T * H * 2,
           "out": T * H * 2, "out8": T * H}
    regions, memory = [], _Image(mb)
    take = memory.take
    for index in range(len(imodel.plan)):
        r = {"x16": take(act["x16"]), "x8": take(act["x8"])} if index == 0 else \
            {"x16": regions[-1]["out"], "x8": regions[-1]["out8"]}
        for name in LOWBIT_ACTIVATIONS:
            r[name] = take(act[name])
        regions.append(r)
    read_bytes = memory.end
    gemms = [_lowbit_gemms(plan, H, F) for plan in imodel.plan]
    group = config.gemm.weight_group
    for plan in imodel.plan:
        for key, (_, codes, size) in plan.get("q4", {}).items():
            if not group:
                raise ParameterError("4-bit weights (W4A8) need a GEMM engine with group "
                                     f"multipliers: set [gemm] weight_group = {size} and k_chunk "
                                     f"= {size}")
            if size != group:
                raise ParameterError(f"the 4-bit weights come in groups of {size} along K, but "
                                     f"[gemm] weight_group is {group}")
            if codes is None:
                raise ParameterError("the 4-bit weights' group multipliers are not codes of "
                                     "MULT_CODES (quantize with mult_codes)")
    for r, layer in zip(regions, gemms):
        for key, (k, n, _, q4, _, _) in layer.items():
            if q4 is not None:
                r[f"w{key}"] = take(-(-k // 2) * n)
                r[f"mults_{key}"] = take(-(-k // group) * -(-n // 2))
            else:
                r[f"w{key}"] = take(k * n)
            r[f"bias_{key}"] = take(4 * n)
            r[f"scale_{key}"] = take(4 * n)
        r["ln1p"], r["ln2p"] = take(8 * H), take(8 * H)
        r["gelu_words"] = take(4 * F)
        r["read_bytes"] = read_bytes
    abits = max(12, (memory.end + 2 * mb - 1).bit_length())
    image = np.zeros(1 << abits, dtype=np.uint8)

    def put(at, matrix, kind):
        raw = np.asarray(matrix, dtype=np.int64).astype(kind).ravel().view(np.uint8)
        image[at:at + raw.size] = raw

    def words(pair):
        mult, shift = pair
        return (np.asarray(shift, dtype=np.int64) << CHANNEL_MULT_BITS) | np.asarray(mult)
    lanes = config.layernorm.lanes
    ln_scales = []
    for index, (plan, r) in enumerate(zip(imodel.plan, regions)):
        for key, (_, _, w, q4, bias, rq) in gemms[index].items():
            if q4 is not None:
                q, codes, _ = q4
                even = np.concatenate([q, np.zeros((q.shape[0] % 2, q.shape[1]), np.int64)])
                put(r[f"w{key}"], pack_int4(even.T).T, "<u1")
                put(r[f"mults_{key}"], pack_codes(codes), "<u1")
            else:
                put(r[f"w{key}"], w, "<i1")
            put(r[f"bias_{key}"], bias, "<i4")
            put(r[f"scale_{key}"], words(rq), "<u4")
        put(r["gelu_words"], words(plan["g"]), "<u4")
        scales = []
        for which, name in ((0, "ln1p"), (1, "ln2p")):
            gamma, beta = plan["ln"][which]
            second = plan["ln8"][which]
            if second is None:      # the last layer: its int8 output at the int16 one's scale
                cfg8, gamma2, beta2 = config.layernorm, gamma, beta
                mult2, shift2 = 1, config.layernorm.out_shift - 8
            else:
                cfg8, gamma2, beta2 = second
                mult2, shift2 = cfg8.out_mult, cfg8.out_shift
            put(r[name], np.concatenate([_interleave(gamma, gamma2, lanes),
                                         _interleave(beta, beta2, lanes)]), "<i2")
            scales.append((mult2, shift2))
        ln_scales.append(scales)
    programs, groups = [], []
    for r, scales, plan, layer in zip(regions, ln_scales, imodel.plan, gemms):
        # P V: V is stored at the context's smoothed scale per channel, so
        # one scale (1/128, P's) is left: every channel's word is the same
        mult, shift = plan["ctx"]
        if len(set(mult.tolist())) != 1 or len(set(shift.tolist())) != 1:
            raise ParameterError("the context's requantization must be one scale")
        w4 = {key: r[f"mults_{key}"] for key, (_, _, _, q4, _, _) in layer.items()
              if q4 is not None}
        commands, layer_groups = _lowbit_layer_program(r, S, H, F, heads, d, valid, scales,
                                                       plan["softmax"], (int(mult[0]), int(shift[0])),
                                                       w4)
        programs.append(commands)
        groups.append(layer_groups)
    return image, programs, regions, groups, abits


def _lowbit_layer_program(r, S, H, F, heads, d, valid, ln_scales, softmax, ctx_scale, w4):
    """``w4``: the weights (keys) stored as packed 4-bit, with their codes' addresses."""
    commands, groups = [], []

    def gemm(a, a_stride, b, b_stride, c, c_stride, m, k, n, key=None, out=8, scale=None, **extra):
        """Strides in elements (A, B int8; C ``out`` bits: int8, int16 or
        int32 scores); ``key``: the weight's per-channel scale words and
        bias; ``scale``: one (multiplier, shift) instead."""
        fields = {"multiplier": 1, "shift": 0}
        if scale is not None:
            fields = {"multiplier": scale[0], "shift": scale[1], "int8": 1}
        elif key is not None:
            fields = {"per_channel": 1, "scale_addr": r[f"scale_{key}"], "bias": 1,
                      "bias_addr": r[f"bias_{key}"], "multiplier": 0, "shift": 0,
                      ("int8" if out == 8 else "int16"): 1}
            if key in w4:
                fields.update(w4=1, mult_addr=w4[key])
        commands.append({"op": OP_GEMM, "gemm": {
            "m": m, "k": k, "n": n, "a_addr": a, "b_addr": b, "c_addr": c, "a_stride": a_stride,
            "b_stride": b_stride, "c_stride": c_stride * out // 8, "accumulate": 0,
            "tag": len(commands) % 256, **fields, **extra}})

    def group(build):
        start = len(commands)
        build()
        commands[start]["barrier"] = 1
        groups.append(list(range(start, len(commands))))
    T = S
    qv = r["qv"]        # q's row then v's row: rows of 2H
    group(lambda: gemm(r["x8"], H, r["wqv"], 2 * H, qv, 2 * H, T, H, 2 * H, "qv"))
    group(lambda: gemm(r["x8"], H, r["wk"], H, r["kt"], T, T, H, H, "k", transpose_c=1))
    group(lambda: [gemm(qv + h * d, 2 * H, r["kt"] + h * d * T, T, r["scores"] + h * S * S * 4, S,
                        S, d, S, out=32) for h in range(heads)])
    mult, shift = softmax
    group(lambda: commands.append({"op": OP_SOFTMAX, "src": r["scores"], "src_stride": 4 * S,
                                   "dst": r["p"], "dst_stride": S, "rows": heads * S, "length": S,
                                   "valid": valid if valid and valid < S else 0,
                                   "multiplier": mult, "shift": shift}))
    group(lambda: [gemm(r["p"] + h * S * S, S, qv + H + h * d, 2 * H, r["ctx"] + h * d, H, S, S, d,
                        scale=ctx_scale) for h in range(heads)])
    group(lambda: gemm(r["ctx"], H, r["wo"], H, r["attn"], H, T, H, H, "o", out=16))

    def layernorm(x, res, params, out, out8, scale):
        commands.append({"op": OP_LAYERNORM, "src": x, "src_stride": 2 * H, "src2": res,
                         "src2_stride": 2 * H, "params": params, "dst": out, "dst_stride": 2 * H,
                         "dst2": out8, "dst2_stride": H, "rows": T, "length": H,
                         "multiplier": scale[0], "shift": scale[1]})
    group(lambda: layernorm(r["attn"], r["x16"], r["ln1p"], r["ln1"], r["ln1_8"], ln_scales[0]))

    def ffn1():     # GELU on its writer: int16 results -> GELU -> int8 g
        gemm(r["ln1_8"], H, r["w1"], F, r["g"], F, T, H, F, "1", out=16)
        commands[-1].update(gelu=1, params=r["gelu_words"], dst=r["g"], dst_stride=F, rows=T,
                            length=F)
    group(ffn1)
    group(lambda: gemm(r["g"], F, r["w2"], H, r["f"], H, T, F, H, "2", out=16))
    group(lambda: layernorm(r["f"], r["ln1"], r["ln2p"], r["out"], r["out8"], ln_scales[1]))
    assert len(commands) == program_commands(S, heads) - 2
    assert len(groups) == len(LOWBIT_OPERATIONS)
    return commands, groups


def read_lowbit_stages(image, r, seq, hidden, ffn, heads):
    """A low-bit layer's tensors from a memory image (the keys of
    :meth:`~bertforge.sim.lowbit_golden.IntegerLowbit.run`'s stages, with
    ``k`` read from ``K^T``)."""
    S, H, F = seq, hidden, ffn
    shapes = {"x16": ((S, H), "<i2"), "x8": ((S, H), "<i1"), "qv": ((S, 2 * H), "<i1"),
              "kt": ((H, S), "<i1"), "ctx": ((S, H), "<i1"),
              "attn": ((S, H), "<i2"), "ln1": ((S, H), "<i2"), "ln1_8": ((S, H), "<i1"),
              "g": ((S, F), "<i1"), "f": ((S, H), "<i2"),
              "out": ((S, H), "<i2"), "out8": ((S, H), "<i1")}
    stages = {key: _read(image, r[key], shape, dtype) for key, (shape, dtype) in shapes.items()}
    stages["k"] = stages.pop("kt").T
    qv = stages.pop("qv")
    stages["q"], stages["v"] = qv[:, :H], qv[:, H:]
    return stages
