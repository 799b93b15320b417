"""Host side of a board: operand packing for the board memories, and
``bertforge run`` over a serial port (pyserial)."""

import numpy as np

__all__ = ["pack_words", "unpack_words", "systolic_tile_bytes", "systolic_result_from_bytes",
           "gemm_board_layout", "gemm_command_bytes", "gemm_result_from_bytes", "run_gemm"]


def pack_words(rows, width, word_bytes):
    """Each row of signed ints -> one little-endian word of ``word_bytes``
    bytes, element 0 in the low bits."""
    out = bytearray()
    mask = (1 << width) - 1
    for row in np.asarray(rows, dtype=np.int64):
        value = 0
        for index, element in enumerate(row.tolist()):
            value |= (element & mask) << (index * width)
        out += value.to_bytes(word_bytes, "little")
    return bytes(out)


def unpack_words(data, width, count, word_bytes):
    """Inverse of :func:`pack_words`: bytes -> rows of ``count`` signed ints."""
    rows = []
    for offset in range(0, len(data), word_bytes):
        value = int.from_bytes(data[offset:offset + word_bytes], "little")
        row = []
        for index in range(count):
            field = (value >> (index * width)) & ((1 << width) - 1)
            row.append(field - (1 << width) if field >> (width - 1) else field)
        rows.append(row)
    return np.array(rows, dtype=np.int64).reshape(-1, count)


def systolic_tile_bytes(top_config, a, b):
    """Memory images of A and B for one tile, and its K.

    OS: ``a`` is R x K (word k = column k), ``b`` is K x C (word k = row k).
    WS: ``a`` is K x R (word k = row k), ``b`` is R x C (word i = row i).
    """
    array = top_config.array
    a_bytes, b_bytes, _ = top_config.word_bytes()
    a = np.asarray(a)
    if array.dataflow == "os":
        k, a_words = a.shape[1], a.T
    else:
        k, a_words = a.shape[0], a
    if not 1 <= k <= top_config.k_max:
        raise ValueError(f"K = {k} does not fit this bitstream (k_max {top_config.k_max})")
    return (pack_words(a_words, array.width, a_bytes), pack_words(b, array.width, b_bytes), k)


def systolic_result_from_bytes(top_config, data, rows):
    array = top_config.array
    return unpack_words(data, array.acc_width, array.cols, top_config.word_bytes()[2])[:rows]


def gemm_board_layout(top_config, a, b, *, int8=False, multiplier=1, shift=0, tag=0):
    """Place A (M x K) and B (K x N) in a GEMM board's data memory, row-major
    and back to back (each matrix starts on a memory word), with C after them.

    Returns ``(image, command)``: the bytes to write from address 0 and the
    command dict (:func:`bertforge.rtl.tile_scheduler.pack_command` takes it).
    Raises ``ValueError`` if the matrices do not fit the board memory.
    """
    engine = top_config.engine
    esize = engine.width // 8
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"A {a.shape} and B {b.shape} do not multiply (A is M x K, B is K x N)")
    (m, k), n = a.shape, b.shape[1]
    limit = (1 << engine.dim_width) - 1
    if max(m, k, n) > limit:
        raise ValueError(f"M, K, N = {m}, {k}, {n}: this bitstream takes sizes up to {limit}")
    word = engine.mem_bytes

    def align(value):
        return -(-value // word) * word

    a_bytes = a.astype(f"<i{esize}").tobytes()
    b_addr = align(len(a_bytes))
    b_bytes = b.astype(f"<i{esize}").tobytes()
    c_addr = align(b_addr + len(b_bytes))
    c_stride = n * (1 if int8 else 4)
    end = c_addr + m * c_stride
    size = 1 << engine.addr_width
    if end > size:
        raise ValueError(f"A, B and C need {end} bytes; the board memory holds {size} "
                         f"(build with a larger --mem-kib or use smaller matrices)")
    image = bytearray(c_addr)
    image[:len(a_bytes)] = a_bytes
    image[b_addr:b_addr + len(b_bytes)] = b_bytes
    command = {"m": m, "k": k, "n": n, "a_addr": 0, "b_addr": b_addr, "c_addr": c_addr,
               "a_stride": k * esize, "b_stride": n * esize, "c_stride": c_stride,
               "accumulate": 0, "int8": int(bool(int8)), "multiplier": multiplier,
               "shift": shift, "tag": tag}
    return bytes(image), command


def gemm_command_bytes(top_config, command):
    """The bytes of ``command`` for the board's command register (memory 1)."""
    from bertforge.rtl.tile_scheduler import pack_command
    return pack_command(top_config.engine, command).to_bytes(top_config.command_bytes, "little")


def gemm_result_from_bytes(command, data):
    """C (M x N, int64) from the bytes read back from the board."""
    dtype = "<i1" if command["int8"] else "<i4"
    return np.frombuffer(bytes(data), dtype=dtype).reshape(command["m"], command["n"]).astype(np.int64)


def run_gemm(link, top_config, a, b, **flags):
    """Write A and B, run ``C = A @ B`` on a GEMM board, read C back:
    returns ``(C, cycles)``. ``link`` is a :class:`protocol.HostLink`."""
    image, command = gemm_board_layout(top_config, a, b, **flags)
    link.write(0, 0, image)
    link.write(1, 0, gemm_command_bytes(top_config, command))
    cycles = link.run(b"")
    data = link.read(0, command["c_addr"], command["m"] * command["c_stride"])
    return gemm_result_from_bytes(command, data), cycles
