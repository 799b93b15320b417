"""Host side of the butterfly board top (:mod:`bertforge.boards.butterfly_top`):
the ``RUN`` word and scale, the memory images, the result, and a run over
the link."""

import numpy as np
from amaranth.lib import data

from bertforge.rtl.errors import ParameterError
from bertforge.rtl.payload import bytes_to_words, pack, words_to_bytes
from bertforge.sim.payload_np import pack_bytes
from .host import vector_layout

__all__ = ["BUTTERFLY_RUN_LAYOUT", "butterfly_run_args", "butterfly_scale_bytes",
           "butterfly_images", "butterfly_result_from_bytes", "run_butterfly"]


#: The butterfly top's ``RUN`` word: ``mode`` (0 linear, 1 fft, 2 ifft) in
#: bits 1:0, ``n`` in bits 17:2, ``groups`` in bits 31:18.
BUTTERFLY_RUN_LAYOUT = data.StructLayout({"mode": 2, "n": 16, "groups": 14})


def butterfly_run_args(mode, n, groups):
    """The butterfly top's ``RUN`` word (4 bytes, :data:`BUTTERFLY_RUN_LAYOUT`).
    Any values that fit go to the board, which judges them; ``ValueError``
    for a field that does not fit."""
    fields = {"mode": mode, "n": n, "groups": groups}
    for name, field in BUTTERFLY_RUN_LAYOUT:
        if not 0 <= fields[name] < 1 << field.width:
            raise ParameterError(f"{name} must be in [0, {(1 << field.width) - 1}], not {fields[name]}")
    return words_to_bytes([pack(BUTTERFLY_RUN_LAYOUT, fields)], 4)


def butterfly_scale_bytes(mult, shift):
    """The scale register's bytes: ``mult`` (2 bytes), ``shift`` (1 byte)."""
    if not 0 <= mult <= 0xFFFF:
        raise ParameterError(f"mult must be in [0, 65535], not {mult}")
    if not 0 <= shift <= 63:
        raise ParameterError(f"shift must be in [0, 63], not {shift}")
    return mult.to_bytes(2, "little") + bytes([shift])


def _check_signed(name, matrix, width):
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    if matrix.size and (matrix.min() < lo or matrix.max() > hi):
        raise ParameterError(f"{name} holds values in [{matrix.min()}, {matrix.max()}]; "
                         f"int{width} values must lie in [{lo}, {hi}]")


def butterfly_images(top_config, mode, re, im=None, weights=None):
    """Memory images of X and W for one run of the butterfly top
    (:mod:`bertforge.boards.butterfly_top`), and its groups.

    ``re`` (and for fft/ifft ``im``, default zeros) are batch x n, ``n`` a
    power of two up to ``n_max``; linear mode needs ``weights``
    (``log2 n x n/2 x 4``, ``[w00, w01, w10, w11]`` per butterfly) and takes
    no ``im``. The batch is padded with zero vectors to whole groups of
    ``lanes``. Returns ``(mem_x, mem_w, groups)`` (``mem_w`` empty for
    FFTs); ``ValueError`` (one line) for a bad mode, shape or value, or a
    batch that does not fit ``depth``.
    """
    from bertforge.boards.butterfly_top import RUN_MODES
    from bertforge.sim.butterfly_cycles import butterfly_groups
    from bertforge.sim.butterfly_golden import log2_length, x_beats
    engine = top_config.engine
    if mode not in RUN_MODES:
        raise ParameterError(f"mode must be {', '.join(RUN_MODES[:-1])} or {RUN_MODES[-1]}, not {mode!r}")
    re = np.asarray(re)
    if re.ndim != 2 or re.dtype.kind not in "iu" or re.shape[0] < 1:
        raise ParameterError(f"X must be a batch x n integer matrix with at least one vector, "
                         f"not {re.dtype} of shape {re.shape}")
    batch, n = re.shape
    m = log2_length(engine, n)
    if mode == "linear" and im is not None:
        raise ParameterError("linear mode is real: no imaginary part")
    im = np.zeros_like(re) if im is None else np.asarray(im)
    if im.shape != re.shape or im.dtype.kind not in "iu":
        raise ParameterError(f"the imaginary part must be integers of X's shape {re.shape}, "
                         f"not {im.dtype} of shape {im.shape}")
    _check_signed("X", re, engine.width)
    _check_signed("X (imaginary)", im, engine.width)
    groups = butterfly_groups(engine, batch)
    if groups * n > top_config.depth:
        raise ParameterError(f"{batch} vectors of {n} ({groups} groups of {engine.lanes}) are "
                         f"{groups * n} beats; this bitstream holds depth = {top_config.depth} "
                         f"(build with a larger --depth or send fewer vectors)")
    x_bytes, w_bytes, _ = top_config.word_bytes()
    mem_x = words_to_bytes(x_beats(engine, re.astype(np.int64), im.astype(np.int64)), x_bytes)
    mem_w = b""
    if mode == "linear":
        if weights is None:
            raise ParameterError("linear mode needs weights")
        weights = np.asarray(weights)
        if weights.shape != (m, n // 2, 4) or weights.dtype.kind not in "iu":
            raise ParameterError(f"weights for n = {n} must be integers of shape {(m, n // 2, 4)}, "
                             f"not {weights.dtype} of shape {weights.shape}")
        _check_signed("weights", weights, engine.weight_width)
        mem_w = pack_bytes(vector_layout(engine.weight_width, 4), weights.reshape(-1, 4),
                           stride=w_bytes)
    elif weights is not None:
        raise ParameterError(f"weights are for linear mode only, not {mode}")
    return mem_x, mem_w, groups


def butterfly_result_from_bytes(top_config, raw, batch, n):
    """``(re, im)`` (batch x n each) from the bytes of memory Y."""
    from bertforge.sim.butterfly_golden import y_vectors
    payloads = bytes_to_words(raw, top_config.word_bytes()[2])
    re, im, _ = y_vectors(top_config.engine, payloads, batch, n)
    return re, im


def run_butterfly(link, top_config, mode, re, im=None, weights=None, mult=1, shift=0):
    """One run on a butterfly board: write X (and in linear mode W and the
    scale register), run, read Y back. Returns ``((re, im), cycles)``
    (linear mode: ``im`` all zero). ``link`` is a :class:`protocol.HostLink`."""
    from bertforge.boards.butterfly_top import RUN_MODES, SCALE_MEM
    mem_x, mem_w, groups = butterfly_images(top_config, mode, re, im, weights)
    scale = butterfly_scale_bytes(mult, shift)
    batch, n = np.shape(re)
    link.write(0, 0, mem_x)
    if mode == "linear":
        link.write(1, 0, mem_w)
        link.write(SCALE_MEM, 0, scale)
    cycles = link.run(butterfly_run_args(RUN_MODES.index(mode), n, groups))
    data = link.read(2, 0, top_config.word_bytes()[2] * groups * n)
    return butterfly_result_from_bytes(top_config, data, batch, n), cycles
