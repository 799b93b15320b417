"""Cycle model of :class:`~bertforge.rtl.softmax.Softmax` (reads only the config).

Cycles count from the first input handshake to the last output handshake,
both included, with input always valid and output always ready.
"""

from bertforge.rtl.errors import ParameterError

__all__ = ["softmax_beats", "softmax_cycles", "softmax_latency"]


def softmax_beats(config, lengths):
    """Beats per row: ``ceil(L / lanes)``; checks ``1 <= L <= l_max``."""
    lengths = list(lengths)
    if not lengths:
        raise ParameterError("lengths must be a non-empty list of row lengths")
    for length in lengths:
        if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= config.l_max:
            raise ParameterError(f"row length must be an integer in [1, {config.l_max}], not {length!r}")
    return [-(-length // config.lanes) for length in lengths]


def softmax_cycles(config, lengths):
    """Cycles to run rows of ``lengths`` back to back.

    Each of the three passes handles one beat per cycle. With ``b_i`` the
    beats of row ``i``, ``a_i = b_0 + ... + b_{i-1}`` the cycle its first beat
    is taken, the exp pass starts it at
    ``p_i = max(a_i + b_i - 1 + A, p_{i-1} + b_{i-1})`` and the output pass at
    ``c_i = max(p_i + b_i - 1 + B, c_{i-1} + b_{i-1})``; the result is
    ``c_{N-1} + b_{N-1} + C``, with ``A, B, C`` the config's ``a_to_b``,
    ``b_to_c`` and ``c_to_out``. For equal rows of ``b`` beats this is
    ``N * b + 2 * b - 2 + A + B + C``: ``lanes`` elements per cycle in
    steady state.
    """
    beats = softmax_beats(config, lengths)
    start = 0
    p = c = None
    for index, b in enumerate(beats):
        p_new = start + b - 1 + config.a_to_b
        if p is not None:
            p_new = max(p_new, p + beats[index - 1])
        c_new = p_new + b - 1 + config.b_to_c
        if c is not None:
            c_new = max(c_new, c + beats[index - 1])
        p, c = p_new, c_new
        start += b
    return c + beats[-1] + config.c_to_out


def softmax_latency(config, length):
    """Cycles from the first input to the last output of a lone row of
    ``length`` elements: ``3 * b - 2 + a_to_b + b_to_c + c_to_out``."""
    return softmax_cycles(config, [length])
