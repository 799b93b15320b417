"""Host side of the GEMM board top (:mod:`bertforge.boards.gemm_top`, either
engine): the memory layout and command of a GEMM, its result, and a run
over the link."""

import numpy as np

from bertforge.rtl.errors import ParameterError
from bertforge.rtl.payload import pack

__all__ = ["gemm_board_layout", "gemm_command_bytes", "gemm_result_from_bytes", "run_gemm"]


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
