"""Bit-exact numpy golden models of :class:`~bertforge.rtl.butterfly.ButterflyEngine`.

Both modes follow the engine's constant-geometry dataflow: stage ``s``
butterfly ``i`` reads positions ``(i, i + n/2)`` and writes ``(2i, 2i + 1)``.
In the original index space stage ``s`` pairs ``(j, j + n / 2**(s+1))`` with
``j = rotr(i, s)`` (the ``log2 n``-bit rotation right); see
:func:`butterfly_dense_factors`. Rescaling uses the house rule
:func:`bertforge.sim.fixed_golden.requantize`.
"""

import numpy as np
from amaranth.lib import data

from bertforge.rtl.butterfly import FFT_GUARD_BITS, complex_layout, twiddle_table
from bertforge.sim.payload_np import pack_beats, unpack_beats
from .fixed_golden import requantize
from bertforge.rtl.errors import ParameterError

__all__ = ["log2_length", "butterfly_linear", "butterfly_dense_factors", "dense_linear",
           "butterfly_fft", "bit_reverse_permutation", "sqnr_db", "board_golden",
           "vector_layout", "butterfly_groups", "x_beats", "y_vectors"]


def log2_length(config, n):
    """``log2 n`` if ``n`` is a length the engine accepts, else ValueError."""
    if not isinstance(n, int) or n < 2 or n > config.n_max or n & (n - 1):
        raise ParameterError(f"n must be a power of two in [2, {config.n_max}], not {n!r}")
    return n.bit_length() - 1


def _rotr(i, s, bits):
    s %= bits
    return ((i >> s) | (i << (bits - s))) & ((1 << bits) - 1)


def _check_weights(weights, n, m):
    weights = np.asarray(weights, dtype=np.int64)
    if weights.shape != (m, n // 2, 4):
        raise ParameterError(f"weights must have shape {(m, n // 2, 4)}, not {weights.shape}")
    return weights


def butterfly_linear(config, x, weights, mult, shift):
    """``y = B_{m-1} ... B_0 x`` for each row of ``x`` (``batch x n`` ints).

    ``weights[s, i] = [w00, w01, w10, w11]`` is butterfly ``i`` of stage ``s``:
    ``v'[2i] = rq(w00 v[i] + w01 v[i+n/2])``, ``v'[2i+1] = rq(w10 v[i] + w11 v[i+n/2])``
    with ``rq = requantize(., mult, shift)`` to ``signed(width)``.
    """
    x = np.asarray(x, dtype=np.int64)
    n = x.shape[1]
    m = log2_length(config, n)
    weights = _check_weights(weights, n, m)
    v = x
    for s in range(m):
        a, b = v[:, : n // 2], v[:, n // 2:]
        w = weights[s]
        out = np.empty_like(v)
        out[:, 0::2] = requantize(w[:, 0] * a + w[:, 1] * b, mult, shift, config.width)
        out[:, 1::2] = requantize(w[:, 2] * a + w[:, 3] * b, mult, shift, config.width)
        v = out
    return v


def butterfly_dense_factors(weights, n):
    """The ``n x n`` matrices ``B_0 .. B_{m-1}``: ``B_s`` has the 2x2 block of
    butterfly ``i`` on rows/columns ``j = rotr(i, s)`` and ``j + n/2**(s+1)``."""
    m = n.bit_length() - 1
    weights = _check_weights(weights, n, m)
    factors = []
    for s in range(m):
        dense = np.zeros((n, n), dtype=np.int64)
        for i in range(n // 2):
            j = _rotr(i, s, m)
            k = j + (n >> (s + 1))
            w00, w01, w10, w11 = weights[s, i]
            dense[j, j], dense[j, k], dense[k, j], dense[k, k] = w00, w01, w10, w11
        factors.append(dense)
    return factors


def dense_linear(config, x, weights, mult, shift):
    """The same product through the dense factors: ``x <- rq(x @ B_s.T)``."""
    x = np.asarray(x, dtype=np.int64)
    for dense in butterfly_dense_factors(weights, x.shape[1]):
        x = requantize(x @ dense.T, mult, shift, config.width)
    return x


def bit_reverse_permutation(n):
    m = n.bit_length() - 1
    return np.array([int(format(k, f"0{m}b")[::-1], 2) for k in range(n)], dtype=np.int64)


def butterfly_fft(config, re, im, inverse=False):
    """Fixed-point radix-2 FFT of each row of ``re + i im`` (``batch x n``
    ints of ``signed(width)``): returns ``(re, im)`` of ``fft(x) / n``
    (``inverse``: ``ifft(x)``), natural order, bit-exact to the engine.

    Inside, values carry ``G = FFT_GUARD_BITS`` extra fraction bits and one
    extra integer bit (``v = x << G`` in ``signed(width + 1 + G)``); per
    stage ``v'[2i] = rq(a + b, 1, 1)``, ``v'[2i+1] = rq((a - b) W, 1, F + 1)``
    per component, ``W = W_n^((i >> s) << s)`` from :func:`twiddle_table`
    (conjugated for the inverse), ``F`` the twiddle fraction bits. Halving
    every stage never grows the complex magnitude, so with the extra integer
    bit nothing saturates inside; the result is ``rq(v, 1, G)`` to
    ``signed(width)`` (saturating only where ``|fft(x)/n|`` exceeds full scale
    in a component).
    """
    guard = FFT_GUARD_BITS
    re = np.asarray(re, dtype=np.int64) << guard
    im = np.asarray(im, dtype=np.int64) << guard
    n = re.shape[1]
    m = log2_length(config, n)
    table = np.array(twiddle_table(config), dtype=np.int64)
    frac = config.twiddle_format.frac_bits
    stride = config.n_max // n
    width = config.width + 1 + guard
    for s in range(m):
        i = np.arange(n // 2)
        index = ((i >> s) << s) * stride
        wr, wi = table[index, 0], table[index, 1]
        if inverse:
            wi = -wi
        ar, ai, br, bi = re[:, : n // 2], im[:, : n // 2], re[:, n // 2:], im[:, n // 2:]
        dr, di = ar - br, ai - bi
        new_re, new_im = np.empty_like(re), np.empty_like(im)
        new_re[:, 0::2] = requantize(ar + br, 1, 1, width)
        new_im[:, 0::2] = requantize(ai + bi, 1, 1, width)
        new_re[:, 1::2] = requantize(dr * wr - di * wi, 1, frac + 1, width)
        new_im[:, 1::2] = requantize(dr * wi + di * wr, 1, frac + 1, width)
        re, im = new_re, new_im
    order = bit_reverse_permutation(n)
    re, im = re[:, order], im[:, order]
    return (requantize(re, 1, guard, config.width), requantize(im, 1, guard, config.width))


def sqnr_db(config, re, im, out_re, out_im, inverse=False):
    """SQNR in dB of the engine's output against ``numpy.fft`` (``fft(x)/n``
    or ``ifft(x)``) of the same integer input, in LSBs."""
    x = np.asarray(re, dtype=np.float64) + 1j * np.asarray(im, dtype=np.float64)
    n = x.shape[1]
    ref = np.fft.ifft(x, axis=1) if inverse else np.fft.fft(x, axis=1) / n
    got = np.asarray(out_re, dtype=np.float64) + 1j * np.asarray(out_im, dtype=np.float64)
    noise = np.sum(np.abs(got - ref) ** 2)
    signal = np.sum(np.abs(ref) ** 2)
    if noise == 0:
        return float("inf")
    return float(10 * np.log10(signal / noise))


def board_golden(engine, mode, re, im=None, weights=None, mult=1, shift=0):
    """``(re, im)`` one run of a butterfly board top computes
    (:mod:`bertforge.boards.butterfly_top`): :func:`butterfly_linear` in
    ``"linear"`` mode (``im`` all zero), else :func:`butterfly_fft`."""
    re = np.asarray(re, dtype=np.int64)
    if mode == "linear":
        return butterfly_linear(engine, re, weights, mult, shift), np.zeros_like(re)
    im = np.zeros_like(re) if im is None else np.asarray(im, dtype=np.int64)
    return butterfly_fft(engine, re, im, inverse=mode == "ifft")


# ---- wire format of the engine's x and y streams (and the board's memories) ----

def vector_layout(config):
    """One ``x`` beat / the data of a ``y`` beat: ``lanes`` complex values."""
    return data.ArrayLayout(complex_layout(config.width), config.lanes)


def butterfly_groups(config, batch):
    """Groups of ``lanes`` vectors a batch occupies: ``ceil(batch / lanes)``."""
    return -(-batch // config.lanes)


def x_beats(config, re, im):
    """Payload ints of the ``x`` stream for vectors ``re``, ``im`` (batch x n):
    beat ``k`` of group ``g`` holds element ``k`` of vectors
    ``gL .. gL+L-1``, ``(re, im)`` per lane; a batch not filling its last
    group is padded with zero vectors."""
    lanes = config.lanes
    batch, n = re.shape
    groups = butterfly_groups(config, batch)
    full = np.zeros((groups * lanes, n, 2), dtype=np.int64)
    full[:batch, :, 0] = re
    full[:batch, :, 1] = im
    # (groups, lanes, n, 2) -> (groups, n, lanes, 2) -> one row per beat.
    beats = full.reshape(groups, lanes, n, 2).transpose(0, 2, 1, 3).reshape(groups * n, lanes, 2)
    return pack_beats(vector_layout(config), {"re": beats[..., 0], "im": beats[..., 1]})


def y_vectors(config, payloads, batch, n):
    """Output beats of one job (``y`` payloads, or memory Y's words: the
    ``last`` bit above the data is optional) -> ``(re, im, last_flags)``
    (batch x n arrays, a list of bools)."""
    lanes = config.lanes
    layout = data.StructLayout({"data": vector_layout(config), "last": 1})
    beats = unpack_beats(layout, payloads)
    groups = len(payloads) // n
    values = np.stack([beats["data"]["re"], beats["data"]["im"]], axis=-1)
    values = values.reshape(groups, n, lanes, 2).transpose(0, 2, 1, 3).reshape(groups * lanes, n, 2)
    return values[:batch, :, 0], values[:batch, :, 1], [bool(flag) for flag in beats["last"]]
