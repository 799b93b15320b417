"""Host side of a board: operand packing for the board memories, and
``bertforge run`` over a serial port (pyserial)."""

import numpy as np
from amaranth.hdl import signed
from amaranth.lib import data

from bertforge.rtl.errors import ParameterError
from bertforge.rtl.payload import bytes_to_words, pack, pack_beats, pack_bytes, unpack_bytes, words_to_bytes

__all__ = ["vector_layout", "systolic_tile_bytes", "systolic_result_from_bytes",
           "sparse_tile_bytes", "sparse_run_args", "sparse_result_from_bytes", "run_sparse",
           "gemm_board_layout", "gemm_command_bytes", "gemm_result_from_bytes", "run_gemm",
           "run_stream", "softmax_phases", "run_softmax",
           "layernorm_phases", "run_layernorm", "gelu_phases", "run_gelu", "BUTTERFLY_RUN_LAYOUT",
           "butterfly_run_args", "butterfly_scale_bytes", "butterfly_images",
           "butterfly_result_from_bytes", "run_butterfly"]


def vector_layout(width, count):
    """A memory word of ``count`` signed ``width``-bit elements, element 0 in
    the low bits (pack and unpack with :mod:`bertforge.rtl.payload`)."""
    return data.ArrayLayout(signed(width), count)


def systolic_tile_bytes(top_config, a, b):
    """Memory images of A and B for one tile, and its K.

    OS: ``a`` is R x K (word k = column k), ``b`` is K x C (word k = row k).
    WS: ``a`` is K x R (word k = row k), ``b`` is R x C (word i = row i).
    """
    array = top_config.array
    a_bytes, b_bytes, _ = top_config.word_bytes()
    a, b = np.asarray(a), np.asarray(b)
    if array.dataflow == "os":
        k, a_words = a.shape[1], a.T
    else:
        k, a_words = a.shape[0], a
    if not 1 <= k <= top_config.k_max:
        raise ParameterError(f"K = {k} does not fit this bitstream (k_max {top_config.k_max})")
    return (pack_bytes(vector_layout(array.width, a_words.shape[1]), a_words, stride=a_bytes),
            pack_bytes(vector_layout(array.width, b.shape[1]), b, stride=b_bytes), k)


def systolic_result_from_bytes(top_config, raw, rows):
    """The result rows (``rows`` x C) from the bytes of memory C."""
    array = top_config.array
    layout = vector_layout(array.acc_width, array.cols)
    return unpack_bytes(layout, raw, top_config.word_bytes()[2])[:rows]


def sparse_tile_bytes(top_config, a, w, n, m):
    """Memory images of A and B for one tile of the N:M sparse top
    (:mod:`bertforge.boards.sparse_top`), and its counts.

    ``a`` is R x K activations, ``w`` K x C weights with at most N non-zeros
    in every group of M rows of K per column (:func:`~bertforge.sim.sparse_golden.prune_nm`
    makes such weights). Returns ``(mem_a, mem_b, groups, beats)``:
    ``groups = ceil(K / M)`` words of A, ``beats = groups * N`` words of B.
    Raises ``ValueError`` (one line) for a bad pattern, bad shapes, values
    outside ``signed(width)``, weights that are not N:M sparse (naming the
    group and column) or a tile longer than ``k_max``.
    """
    from bertforge.rtl.sparse import a_layout, b_layout
    from bertforge.sim.sparse_golden import check_pattern, compress_nm, compressed_rows, sparse_columns
    array = top_config.array
    n, m = check_pattern(n, m, array.m_max)
    a, w = np.asarray(a), np.asarray(w)
    for name, matrix in (("A", a), ("W", w)):
        if matrix.ndim != 2 or matrix.dtype.kind not in "iu":
            raise ParameterError(f"{name} must be a 2-D integer matrix, not {matrix.dtype} of "
                             f"shape {matrix.shape}")
    rows, cols = array.rows, array.cols
    if a.shape[0] != rows or w.shape[1] != cols or a.shape[1] != w.shape[0] or a.shape[1] < 1:
        raise ParameterError(f"A is {a.shape[0]} x {a.shape[1]} and W is {w.shape[0]} x {w.shape[1]}; "
                         f"the {rows}x{cols} array takes A as {rows} x K and W as K x {cols}")
    lo, hi = -(1 << (array.width - 1)), (1 << (array.width - 1)) - 1
    for name, matrix in (("A", a), ("W", w)):
        if matrix.min() < lo or matrix.max() > hi:
            raise ParameterError(f"{name} holds values in [{matrix.min()}, {matrix.max()}]; "
                             f"int{array.width} values must lie in [{lo}, {hi}]")
    k = a.shape[1]
    groups, beats = compressed_rows(k, 1, m), compressed_rows(k, n, m)
    if beats > top_config.k_max:
        raise ParameterError(f"K = {k} at {n}:{m} is {beats} compressed beats; this bitstream "
                         f"holds k_max = {top_config.k_max} (build with a larger --k-max)")
    try:
        values, indices = compress_nm(w, n, m)
    except ValueError as error:
        raise ParameterError(f"W breaks the {n}:{m} pattern: {error}") from None
    a_value, b_value, _ = sparse_columns(array, [(a.astype(np.int64), values, indices, n, m)])
    a_bytes, b_bytes, _ = top_config.word_bytes()
    # Memory A holds the data of each a beat (the top makes ``last``), B whole b beats.
    mem_a = pack_bytes(a_layout(array)["data"].shape, a_value["data"], stride=a_bytes)
    mem_b = pack_bytes(b_layout(array), b_value, stride=b_bytes)
    return mem_a, mem_b, groups, beats


def sparse_run_args(groups, beats):
    """The sparse top's ``RUN`` arguments: groups, then beats, 2 bytes each."""
    return groups.to_bytes(2, "little") + beats.to_bytes(2, "little")


def sparse_result_from_bytes(top_config, raw):
    """The R x C result from the bytes of memory C."""
    array = top_config.array
    layout = vector_layout(array.acc_width, array.cols)
    return unpack_bytes(layout, raw, top_config.word_bytes()[2])[:array.rows]


def run_sparse(link, top_config, a, w, n, m):
    """``A @ W`` at N:M on a sparse board: write A and B, run, read C back.
    Returns ``(C, cycles)``. ``link`` is a :class:`protocol.HostLink`."""
    mem_a, mem_b, groups, beats = sparse_tile_bytes(top_config, a, w, n, m)
    link.write(0, 0, mem_a)
    link.write(1, 0, mem_b)
    cycles = link.run(sparse_run_args(groups, beats))
    data = link.read(2, 0, top_config.word_bytes()[2] * top_config.array.rows)
    return sparse_result_from_bytes(top_config, data), cycles


def gemm_board_layout(top_config, a, b, *, int8=False, multiplier=1, shift=0, tag=0,
                      pattern=None):
    """Place A (M x K) and B (K x N) in a GEMM board's data memory, row-major
    and back to back (each matrix starts on a memory word), with C after them.

    On an N:M sparse engine's board (``top_config.sparse``) B is the
    weights W, N:M sparse along K for ``pattern = (N, M)`` (M a power of
    two up to ``m_max``): its compressed values and then its indices
    (:func:`~bertforge.sim.sparse_golden.compress_nm`, ``ceil(K / M) * N``
    rows each) stand where B would.

    Returns ``(image, command)``: the bytes to write from address 0 and the
    command dict (:func:`gemm_command_bytes` packs it). Raises ``ValueError``
    (one line) if the matrices do not fit the board memory, if a sparse
    engine gets no pattern (a dense one, one), for a bad pattern or a W
    that breaks it.
    """
    engine = top_config.engine
    esize = engine.width // 8
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ParameterError(f"A {a.shape} and B {b.shape} do not multiply (A is M x K, B is K x N)")
    (m, k), n = a.shape, b.shape[1]
    limit = (1 << engine.dim_width) - 1
    if max(m, k, n) > limit:
        raise ParameterError(f"M, K, N = {m}, {k}, {n}: this bitstream takes sizes up to {limit}")
    for name, value, bits in (("multiplier", multiplier, 32), ("shift", shift, 6), ("tag", tag, 8)):
        if not 0 <= value < 1 << bits:
            raise ParameterError(f"{name} must be between 0 and {(1 << bits) - 1}, not {value}")
    operand = f"<i{esize}"
    if not top_config.sparse:
        if pattern is not None:
            raise ParameterError(f"this bitstream's engine is dense: it takes no N:M pattern, "
                                 f"not {pattern}")
        b_parts = [(b, operand)]
    else:
        if pattern is None:
            raise ParameterError("this bitstream's engine is N:M sparse: give the pattern of W")
        from bertforge.sim.sparse_golden import check_pattern, compress_nm
        if len(pattern) != 2:
            raise ParameterError(f"the pattern of W is two numbers (N, M), not {pattern}")
        pat_n, pat_m = check_pattern(*pattern, engine.m_max)
        if pat_m & (pat_m - 1):
            raise ParameterError(f"the sparse engine takes M a power of two, not {pat_n}:{pat_m}")
        try:
            values, indices = compress_nm(b, pat_n, pat_m)
        except ValueError as error:
            raise ParameterError(f"W breaks the {pat_n}:{pat_m} pattern: {error}") from None
        b_parts = [(values, operand), (indices, "u1")]
    word = engine.mem_bytes

    def align(value):
        return -(-value // word) * word

    image = bytearray(a.astype(operand).tobytes())
    addrs = []
    for matrix, dtype in b_parts:
        addrs.append(align(len(image)))
        image += bytes(addrs[-1] - len(image)) + matrix.astype(dtype).tobytes()
    c_addr = align(len(image))
    c_stride = n * (1 if int8 else 4)
    end = c_addr + m * c_stride
    size = 1 << engine.addr_width
    if end > size:
        raise ParameterError(f"A, B and C need {end} bytes; the board memory holds {size} "
                         f"(build with a larger --mem-kib or use smaller matrices)")
    image += bytes(c_addr - len(image))
    command = {"m": m, "k": k, "n": n, "a_addr": 0, "b_addr": addrs[0], "c_addr": c_addr,
               "a_stride": k * esize, "b_stride": n * esize, "c_stride": c_stride,
               "accumulate": 0, "int8": int(bool(int8)), "multiplier": multiplier,
               "shift": shift, "tag": tag}
    if top_config.sparse:
        command.update(pat_n=pat_n, pat_m=pat_m, idx_addr=addrs[1], idx_stride=n)
    return bytes(image), command


def gemm_command_bytes(top_config, command):
    """The bytes of ``command`` for the board's command register (memory 1),
    packed in the engine's :attr:`~bertforge.boards.gemm_top.GemmTopConfig.command_layout`."""
    return pack(top_config.command_layout, command).to_bytes(top_config.command_bytes, "little")


def gemm_result_from_bytes(command, data):
    """C (M x N, int64) from the bytes read back from the board."""
    dtype = "<i1" if command["int8"] else "<i4"
    return np.frombuffer(bytes(data), dtype=dtype).reshape(command["m"], command["n"]).astype(np.int64)


def run_gemm(link, top_config, a, b, **flags):
    """Write A and B, run ``C = A @ B`` on a GEMM board, read C back:
    returns ``(C, cycles)``. ``link`` is a :class:`protocol.HostLink`;
    ``flags`` as :func:`gemm_board_layout` takes them (``pattern`` on a
    sparse engine's board)."""
    image, command = gemm_board_layout(top_config, a, b, **flags)
    link.write(0, 0, image)
    link.write(1, 0, gemm_command_bytes(top_config, command))
    cycles = link.run(b"")
    data = link.read(0, command["c_addr"], command["m"] * command["c_stride"])
    return gemm_result_from_bytes(command, data), cycles


# ---- streaming units (boards/norm_top.py) ----------------------------------

def run_stream(link, top_config, phase_values):
    """Write each phase's beats (``(value, beats)`` per phase, ``value``
    column-wise as :func:`bertforge.rtl.payload.pack_bytes` takes it), run, read the output beats back: returns
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


# ---- butterfly engine (boards/butterfly_top.py) --------------------------------

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
