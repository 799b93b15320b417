"""BERT workloads: a model preset x sequence length x batch -> the
operations of one encoder layer, with shapes and sizes.

Forward (per layer, as Demystifying BERT profiles it): Q/K/V and output
projections, per-head attention scores and context GEMMs, softmax with the
padding mask, two residual + layernorm, the FFN with GELU. The operations
are listed as a row-major GEMM engine runs them (and as
:mod:`bertforge.sim.encoder_run` programs :class:`~bertforge.rtl.encoder.EncoderTop`):
K is produced transposed (``K^T = Wk^T X^T``, an H x H x tokens GEMM) so that
the score GEMMs read it row-major; every GEMM writes int8 except the
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
GELU backward, and dropout (forward mask and backward) after attention
probabilities, attention output and FFN output.
"""

from dataclasses import dataclass
from bertforge.rtl.errors import ParameterError

__all__ = ["BertModel", "MODELS", "Operation", "encoder_layer"]


@dataclass(frozen=True)
class BertModel:
    name: str
    hidden: int
    heads: int
    layers: int
    ffn: int

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
    column (both read from memory by the GEMM engine).
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

    @property
    def macs(self):
        return self.count * self.m * self.k * self.n

    @property
    def elements(self):
        return self.count * self.rows * self.length


def encoder_layer(model, seq, batch=1, training=False, *, bias=True):
    """Operations of one encoder layer of ``model`` (a name or BertModel);
    ``bias``: the linear layers add biases and requantize per channel (see
    the module docstring; False: no biases, one scale per tensor, as
    :mod:`bertforge.sim.encoder_run` programs the encoder top)."""
    if isinstance(model, str):
        if model not in MODELS:
            raise ParameterError(f"unknown model {model!r}; models: {', '.join(MODELS)}")
        model = MODELS[model]
    if seq < 1 or batch < 1:
        raise ParameterError(f"seq and batch must be positive, not {seq} and {batch}")
    tokens, h, d, heads = batch * seq, model.hidden, model.head_dim, model.heads
    linear = dict(sparse_weights=True, bias=bias, per_channel=bias)
    ops = [
        Operation("q, v projections", "gemm", 2, m=tokens, k=h, n=h, **linear),
        Operation("k projection", "gemm", 1, m=h, k=h, n=tokens),
        Operation("attention scores", "gemm", batch * heads, m=seq, k=d, n=seq, int8_out=False),
        Operation("softmax", "softmax", batch * heads, rows=seq, length=seq),
        Operation("attention context", "gemm", batch * heads, m=seq, k=seq, n=d),
        Operation("output projection", "gemm", 1, m=tokens, k=h, n=h, **linear),
        Operation("residual + layernorm 1", "layernorm", 1, rows=tokens, length=h),
        Operation("ffn 1", "gemm", 1, m=tokens, k=h, n=model.ffn, **linear),
        Operation("gelu", "gelu", 1, rows=tokens, length=model.ffn),
        Operation("ffn 2", "gemm", 1, m=tokens, k=model.ffn, n=h, **linear),
        Operation("residual + layernorm 2", "layernorm", 1, rows=tokens, length=h),
    ]
    if not training:
        return ops
    backward = []
    for op in ops:
        if op.kind == "gemm":
            # Gradients stay int32 (they are accumulated and scaled later).
            backward.append(Operation(f"{op.name} data grad", "gemm", op.count, m=op.m, k=op.n, n=op.k,
                                      int8_out=False))
            backward.append(Operation(f"{op.name} weight grad", "gemm", op.count, m=op.k, k=op.m, n=op.n,
                                      int8_out=False))
        else:
            # dX from Y and dY: one more pass over the same elements on the same unit.
            backward.append(Operation(f"{op.name} backward", op.kind, op.count, rows=op.rows,
                                      length=op.length))
    dropouts = [("attention probabilities", batch * heads, seq, seq), ("attention output", 1, tokens, h),
                ("ffn output", 1, tokens, h)]
    for name, count, rows, length in dropouts:
        backward.append(Operation(f"dropout {name}", "other", count, rows=rows, length=length, passes=2))
        backward.append(Operation(f"dropout {name} backward", "other", count, rows=rows,
                                  length=length, passes=2))
    return ops + backward
