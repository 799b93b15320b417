"""BERT workloads: a model preset x sequence length x batch -> the
operations of one encoder layer, with shapes and sizes.

Forward (per layer, as Demystifying BERT profiles it): Q/K/V and output
projections, per-head attention scores and context GEMMs, softmax with the
padding mask, two residual + layernorm, the FFN with GELU. The operations
are listed as a row-major GEMM engine runs them: K is produced transposed
(``K^T = Wk^T X^T``, an H x H x tokens GEMM) so that the score GEMMs read
it row-major (:mod:`bertforge.sim.encoder_run` programs
:class:`~bertforge.rtl.encoder.EncoderTop` with ``X Wk`` stored transposed
instead, ``analyze(..., transpose=True)``); every GEMM writes int8 except the
attention scores, which stay int32 for the softmax. With ``bias`` (the
real layer) the linear layers whose weight is the B operand (q, v and
output projections, both FFN GEMMs) add their bias and requantize with
per-channel scales in the GEMM engine; the k projection needs neither (its
bias adds the same value to a whole row of attention scores, which the
softmax ignores, and its output channels are rows of ``K^T``, where the
engine's per-column scales cannot reach), nor do the attention GEMMs (one
scale per tensor). ``training``
adds the backward pass: for every GEMM (M x K x N) its data-gradient GEMM
(M x N x K) and weight-gradient GEMM (K x M x N), softmax / layernorm /
GELU backward, dropout (forward mask and backward) after attention
probabilities, attention output and FFN output, and the optimizer step.

``precision`` is the engine's number format, and the bytes of every
element follow it. ``"int8"``: int8 operands, int8 (requantized) or int32
results, int32 gradients, one byte per activation. ``"bf16"`` (mixed
precision, as the study's): bf16 operands (2 bytes), binary32 results and
gradients (4 bytes; no requantization, biases still added), two bytes per
activation in the elementwise work. The optimizer step (``"adam"`` or
``"lamb"``) updates the layer's share of all the model's parameters
(:func:`parameters_per_layer`: the layer's own plus the embeddings spread
over the layers) once per step: elementwise and memory bound, it reads and
writes its :data:`OPTIMIZER_BYTES` per parameter.
"""

from dataclasses import dataclass, replace
from bertforge.rtl.errors import ParameterError

__all__ = ["BertModel", "MODELS", "Operation", "encoder_layer", "PRECISIONS", "OPTIMIZERS",
           "OPTIMIZER_BYTES", "parameters_per_layer"]

#: Engine number formats of :func:`encoder_layer`.
PRECISIONS = ("int8", "bf16")
#: Optimizers of the training step.
OPTIMIZERS = ("adam", "lamb")
#: Bytes an optimizer step moves per parameter, by (optimizer, precision).
#: Adam reads the fp32 master weight, the gradient (int32 / binary32 with
#: int8, binary32 with bf16: 4 bytes), the fp32 moments m and v, and writes
#: the master weight, m, v and the engine's copy of the weight (1 byte int8,
#: 2 bytes bf16). LAMB adds a second pass for its per-layer trust ratio:
#: the update written once and read again, the master weight read again.
OPTIMIZER_BYTES = {("adam", "int8"): 4 * 4 + 3 * 4 + 1, ("adam", "bf16"): 4 * 4 + 3 * 4 + 2,
                   ("lamb", "int8"): 4 * 4 + 3 * 4 + 1 + 3 * 4,
                   ("lamb", "bf16"): 4 * 4 + 3 * 4 + 2 + 3 * 4}


@dataclass(frozen=True)
class BertModel:
    name: str
    hidden: int
    heads: int
    layers: int
    ffn: int
    vocab: int = 30522          # word pieces (BERT's WordPiece vocabulary)
    positions: int = 512        # position embeddings

    @property
    def head_dim(self):
        return self.hidden // self.heads


MODELS = {m.name: m for m in [
    BertModel("bert-base", 768, 12, 12, 3072),
    BertModel("bert-large", 1024, 16, 24, 4096),
    BertModel("minilm-l6-h384", 384, 12, 6, 1536),
    BertModel("tiny", 64, 2, 2, 256),
]}


@dataclass(frozen=True)
class Operation:
    """One operation of a layer, ``count`` times (e.g. once per head).

    ``kind`` is the unit class: ``gemm`` (``m, k, n``), ``softmax`` (``rows``
    of ``length``), ``layernorm`` (``rows`` vectors of ``length``), ``gelu``
    (``rows`` x ``length`` elements) or ``other`` (elementwise memory-bound
    work: ``rows`` x ``length`` elements, ``passes`` reads+writes of each).
    A GEMM writes int8 (requantized) results when ``int8_out``, else int32;
    ``sparse_weights`` marks a GEMM whose B operand is a weight matrix, which
    N:M pruning makes sparse along K; ``bias`` one that adds a bias vector
    and ``per_channel`` one that requantizes with one scale per output
    column (both read from memory by the GEMM engine); ``transpose_c`` one
    that stores C transposed (the encoder top's k projection, ``X Wk``
    written as ``K^T``).
    """

    name: str
    kind: str
    count: int
    m: int = 0              # gemm: M x K times K x N
    k: int = 0
    n: int = 0
    rows: int = 0           # the other kinds: rows x length elements
    length: int = 0
    passes: int = 0         # other: reads + writes of each element
    int8_out: bool = True
    sparse_weights: bool = False
    bias: bool = False
    per_channel: bool = False
    element_bytes: int = 1  # other, optimizer: bytes per element per pass
    backward: bool = False  # part of the backward pass
    transpose_c: bool = False   # gemm: C stored transposed (the engine's transpose_c)
    int16_out: bool = False     # gemm: int16 (requantized) results (the low-bit top's)
    w4: bool = False            # gemm: B packed 4-bit weights with group multiplier codes (W4A8)
    a_stride: int = 0           # gemm: elements from one A row to the next in memory (0: k)
    b_stride: int = 0           # gemm: the same for B (0: n); a head's slice of Q, K^T, V is strided
    gelu: bool = False          # gemm: GELU on its writer, int8 out (the low-bit top's FFN 1)

    @property
    def macs(self):
        return self.count * self.m * self.k * self.n

    @property
    def elements(self):
        return self.count * self.rows * self.length


def parameters_per_layer(model):
    """A layer's share of all of ``model``'s parameters: its own (Q, K, V and
    output projections, FFN, two layernorms, with biases) plus the
    embeddings (words, positions, two token types, their layernorm) over the
    layers."""
    h, f = model.hidden, model.ffn
    layer = 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h
    embeddings = (model.vocab + model.positions + 2) * h + 2 * h
    return layer + -(-embeddings // model.layers)


def encoder_layer(model, seq, batch=1, training=False, *, bias=True, precision="int8",
                  optimizer="adam"):
    """Operations of one encoder layer of ``model`` (a name or BertModel);
    ``bias``: the linear layers add biases and requantize per channel (see
    the module docstring; False: no biases, one scale per tensor, as
    :mod:`bertforge.sim.encoder_run` programs the encoder top);
    ``precision`` and ``optimizer`` as the module docstring says."""
    if isinstance(model, str):
        if model not in MODELS:
            raise ParameterError(f"unknown model {model!r}; models: {', '.join(MODELS)}")
        model = MODELS[model]
    if seq < 1 or batch < 1:
        raise ParameterError(f"seq and batch must be positive, not {seq} and {batch}")
    if precision not in PRECISIONS:
        raise ParameterError(f"precision must be {' or '.join(PRECISIONS)}, not {precision!r}")
    if optimizer not in OPTIMIZERS:
        raise ParameterError(f"optimizer must be {' or '.join(OPTIMIZERS)}, not {optimizer!r}")
    tokens, h, d, heads = batch * seq, model.hidden, model.head_dim, model.heads
    bf16 = precision == "bf16"
    linear = dict(sparse_weights=True, bias=bias, per_channel=bias and not bf16)
    ops = [
        Operation("q, v projections", "gemm", 2, m=tokens, k=h, n=h, **linear),
        Operation("k projection", "gemm", 1, m=h, k=h, n=tokens),
        Operation("attention scores", "gemm", batch * heads, m=seq, k=d, n=seq, int8_out=False,
                  a_stride=h, b_stride=tokens),     # Q's head slice, K^T's sentence and head slice
        Operation("softmax", "softmax", batch * heads, rows=seq, length=seq),
        Operation("attention context", "gemm", batch * heads, m=seq, k=seq, n=d,
                  b_stride=h),                      # V's head slice
        Operation("output projection", "gemm", 1, m=tokens, k=h, n=h, **linear),
        Operation("residual + layernorm 1", "layernorm", 1, rows=tokens, length=h),
        Operation("ffn 1", "gemm", 1, m=tokens, k=h, n=model.ffn, **linear),
        Operation("gelu", "gelu", 1, rows=tokens, length=model.ffn),
        Operation("ffn 2", "gemm", 1, m=tokens, k=model.ffn, n=h, **linear),
        Operation("residual + layernorm 2", "layernorm", 1, rows=tokens, length=h),
    ]
    element = 2 if bf16 else 1
    if bf16:   # binary32 results, no requantization; elementwise work on bf16
        ops = [replace(op, int8_out=False) if op.kind == "gemm" else replace(op, element_bytes=element)
               for op in ops]
    if not training:
        return ops
    backward = []
    for op in ops:
        if op.kind == "gemm":
            # Gradients stay int32 (they are accumulated and scaled later).
            backward.append(Operation(f"{op.name} data grad", "gemm", op.count, m=op.m, k=op.n, n=op.k,
                                      int8_out=False, backward=True))
            backward.append(Operation(f"{op.name} weight grad", "gemm", op.count, m=op.k, k=op.m, n=op.n,
                                      int8_out=False, backward=True))
        else:
            # dX from Y and dY: one more pass over the same elements on the same unit.
            backward.append(Operation(f"{op.name} backward", op.kind, op.count, rows=op.rows,
                                      length=op.length, element_bytes=element, backward=True))
    dropouts = [("attention probabilities", batch * heads, seq, seq), ("attention output", 1, tokens, h),
                ("ffn output", 1, tokens, h)]
    for name, count, rows, length in dropouts:
        backward.append(Operation(f"dropout {name}", "other", count, rows=rows, length=length, passes=2,
                                  element_bytes=element))
        backward.append(Operation(f"dropout {name} backward", "other", count, rows=rows,
                                  length=length, passes=2, element_bytes=element, backward=True))
    step = Operation(f"optimizer step ({optimizer})", "optimizer", 1, rows=1,
                     length=parameters_per_layer(model), passes=1,
                     element_bytes=OPTIMIZER_BYTES[optimizer, precision])
    return ops + backward + [step]
