"""Host side of the streaming units' board top (:mod:`bertforge.boards.norm_top`:
softmax, layernorm or GELU): each unit's input phases, and runs over the
link."""

import numpy as np
from amaranth.lib import data

from bertforge.rtl.errors import ParameterError
from bertforge.sim.payload_np import pack_beats, pack_bytes, unpack_bytes

__all__ = ["run_stream", "softmax_phases", "run_softmax", "layernorm_phases", "run_layernorm",
           "gelu_phases", "run_gelu"]


def run_stream(link, top_config, phase_values):
    """Write each phase's beats (``(value, beats)`` per phase, ``value``
    column-wise as :func:`bertforge.sim.payload_np.pack_bytes` takes it),
    run, read the output beats back: returns
    ``(y, cycles)`` with ``y`` the unpacked output payloads (a dict).
    Raises ``ValueError`` if a phase has more beats than its memory holds."""
    memories = top_config.memories()
    strides = top_config.strides()
    if len(phase_values) != len(top_config.phases()):
        raise ParameterError(f"{len(phase_values)} phases given, the design has "
                         f"{len(top_config.phases())}")
    counts = []
    for index, (value, beats) in enumerate(phase_values):
        layout, depth = memories[index]
        if beats > depth:
            raise ParameterError(f"the input needs {beats} beats; this bitstream holds {depth} "
                             f"(build with a larger --depth or send less)")
        counts.append(beats)
    if counts[-1] == 0:
        raise ParameterError("nothing to run: the input is empty")
    for index, (value, beats) in enumerate(phase_values):
        if beats:
            link.write(index, 0, pack_bytes(memories[index][0], value, beats, strides[index]))
    cycles = link.run(b"".join(count.to_bytes(2, "little") for count in counts))
    out = top_config.output_mem
    raw = link.read(out, 0, strides[out] * counts[-1])
    return unpack_bytes(memories[out][0], raw, strides[out])["y"], cycles


def _row_beats(rows, length, lanes, last=True):
    """``(data, last)``: rows x length values as beats of ``lanes`` (the last
    beat of a row zero-padded), ``last`` on each row's final beat."""
    rows_n = len(rows)
    per_row = -(-length // lanes)
    padded = np.zeros((rows_n, per_row * lanes), dtype=np.int64)
    padded[:, :length] = rows
    flags = np.zeros((rows_n, per_row), dtype=np.int64)
    flags[:, -1] = 1
    return padded.reshape(rows_n * per_row, lanes), flags.reshape(-1), per_row


def softmax_phases(unit, x, mask=None, multipliers=None, shifts=None):
    """The ``x`` beats of rows ``x`` (R x L, ``L <= l_max``), ``mask`` (R x L
    bools, True = excluded; padding lanes are masked) and per-row scales."""
    x = np.asarray(x, dtype=np.int64)
    rows, length = x.shape
    if not 1 <= length <= unit.l_max:
        raise ParameterError(f"rows of {length} elements: this bitstream takes 1 to l_max = "
                         f"{unit.l_max}")
    if not unit.mask and (length % unit.lanes or mask is not None):
        raise ParameterError(f"this bitstream has no mask input: rows must fill whole beats "
                         f"(L a multiple of lanes = {unit.lanes}) and no mask may be given")
    data_beats, last, per_row = _row_beats(x, length, unit.lanes)
    fields = {"data": data_beats, "last": last}
    if unit.mask:
        full = np.ones((rows, per_row * unit.lanes), dtype=np.int64)
        full[:, :length] = 0 if mask is None else np.asarray(mask, dtype=np.int64)
        # One bit per lane, lane 0 lowest.
        fields["mask"] = pack_beats(data.ArrayLayout(1, unit.lanes), full.reshape(-1, unit.lanes))
    fields["multiplier"] = np.repeat(np.broadcast_to(multipliers, (rows,)), per_row)
    fields["shift"] = np.repeat(np.broadcast_to(shifts, (rows,)), per_row)
    return [({"x": fields}, rows * per_row)]


def _rows_from_beats(y, rows, length):
    data = np.asarray(y["data"], dtype=np.int64)
    return data.reshape(rows, -1)[:, :length]


def run_softmax(link, top_config, x, mask=None, scale=1.0):
    """Softmax of the rows ``x`` on the board: returns ``(probabilities, cycles)``
    (raw outputs, R x L; masked elements 0). ``scale`` is the real value of one
    input LSB, one number or one per row."""
    from bertforge.rtl.softmax import softmax_scale
    x = np.asarray(x, dtype=np.int64)
    scales = np.broadcast_to(np.asarray(scale, dtype=np.float64), (x.shape[0],))
    pairs = [softmax_scale(float(s)) for s in scales]
    multipliers = np.array([p[0] for p in pairs], dtype=np.int64)
    shifts = np.array([p[1] for p in pairs], dtype=np.int64)
    phases = softmax_phases(top_config.unit, x, mask, multipliers, shifts)
    y, cycles = run_stream(link, top_config, phases)
    return _rows_from_beats(y, *x.shape), cycles


def layernorm_phases(unit, x, r=None, gamma=None, beta=None):
    """Phases of LayerNorm over vectors ``x`` (V x H, ``H`` a multiple of
    lanes, at most ``h_max``), residual ``r`` (V x H, exactly when the unit
    adds one), gamma and beta (H each; ``None``: load none, keep the ones
    loaded before)."""
    x = np.asarray(x, dtype=np.int64)
    vectors, h = x.shape
    if h < 1 or h % unit.lanes or h > unit.h_max:
        raise ParameterError(f"vectors of {h} elements: this bitstream takes a multiple of "
                         f"lanes = {unit.lanes}, at most h_max = {unit.h_max}")
    if unit.add_residual != (r is not None):
        raise ParameterError("a residual is needed exactly when the bitstream adds one "
                         f"(add_residual = {unit.add_residual})")
    data_beats, last, _ = _row_beats(x, h, unit.lanes)
    main = {"x": {"data": data_beats, "last": last}}
    if r is not None:
        main["r"] = np.asarray(r, dtype=np.int64).reshape(-1, unit.lanes)
    params = ({}, 0)
    if gamma is not None:
        g, _, n = _row_beats(np.asarray(gamma, dtype=np.int64)[None, :h], h, unit.lanes)
        b, last_p, _ = _row_beats(np.asarray(beta, dtype=np.int64)[None, :h], h, unit.lanes)
        params = ({"params": {"gamma": g, "beta": b, "last": last_p}}, n)
    return [params, (main, len(data_beats))]


def run_layernorm(link, top_config, x, r=None, gamma=None, beta=None):
    """LayerNorm of the vectors ``x`` on the board: ``(int8 output, cycles)``."""
    x = np.asarray(x, dtype=np.int64)
    y, cycles = run_stream(link, top_config, layernorm_phases(top_config.unit, x, r, gamma, beta))
    return _rows_from_beats(y, *x.shape), cycles


def gelu_phases(unit, x):
    """The ``x`` beats of rows ``x`` (R x L, ``L`` a multiple of lanes)."""
    x = np.asarray(x, dtype=np.int64)
    rows, length = x.shape
    if length < 1 or length % unit.lanes:
        raise ParameterError(f"rows of {length} elements: this bitstream takes a positive "
                         f"multiple of lanes = {unit.lanes}")
    data_beats, last, _ = _row_beats(x, length, unit.lanes)
    return [({"x": {"data": data_beats, "last": last}}, len(data_beats))]


def run_gelu(link, top_config, x):
    """GELU of ``x`` on the board: ``(output, cycles)``."""
    x = np.asarray(x, dtype=np.int64)
    y, cycles = run_stream(link, top_config, gelu_phases(top_config.unit, x))
    return _rows_from_beats(y, *x.shape), cycles
