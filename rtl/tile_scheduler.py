"""Tile scheduler of the GEMM engine: commands -> chunk descriptors.

A command asks for ``C = A @ B`` (A is M x K, B is K x N, all row-major in
external memory at byte addresses with byte row strides). The scheduler
checks it and cuts it into *chunks*, one descriptor each, in the order

    for m0 in range(0, M, block_rows):        # block of output rows
        for n0 in range(0, N, panel):         # panel of output columns
            for k0 in range(0, K, k_chunk):   # chunk of the reduction
                emit(m0, n0, k0)

Every chunk of a (m0, n0) block accumulates into the same on-chip
accumulator block; the chunk with ``last`` set ends the block, and the one
with ``end`` set ends the command. A bad command (M, K or N = 0, a matrix
that leaves the address space, accumulate with int8 or int16 output, both
int8 and int16; in a bf16 engine int8, int16, per-channel scales, or
accumulate with bf16 output) gives one
descriptor with ``error`` set and nothing else.
"""

from amaranth.hdl import Array, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .payload import pack

#: Bits of a per-channel multiplier (the rest of its 32-bit word is the shift).
CHANNEL_MULT_BITS = 26

__all__ = ["CHANNEL_MULT_BITS", "command_layout", "pack_command", "completion_layout", "chunk_layout", "TileScheduler"]


def command_layout(config):
    """One GEMM command.

    ``m, k, n``: sizes; ``*_addr``: byte address of element [0, 0];
    ``*_stride``: bytes between rows; ``accumulate``: C = C + A @ B;
    ``bias``: add the int32 vector of N values at ``bias_addr`` to every row
    (``acc + bias`` saturates to int32); ``int8`` (``int16``): write
    ``requantize(acc, multiplier, shift)`` saturated to int8 (int16)
    instead of int32, with ``per_channel`` one (multiplier, shift) per
    output column instead: N
    little-endian 32-bit words at ``scale_addr``, multiplier in bits 0-25
    (:data:`CHANNEL_MULT_BITS`), shift in bits 26-31; ``tag``: echoed on
    the completion. A bf16 engine (``config.arith == "bf16"``) has one more
    field, ``bf16_out``: write C as bfloat16 (2 bytes, rounded to nearest
    even) instead of float32; its ``bias`` is N binary32 values. An engine
    with ``config.transpose_c`` has one more, ``transpose_c``: store C
    transposed, element ``(i, j)`` at ``c_addr + j * c_stride + i *
    size`` (``c_stride``: bytes between C's columns; not with ``accumulate``).
    An engine with ``config.weight_group`` has two more, ``w4`` (B is
    packed 4-bit weights with group multipliers) and ``mult_addr`` (their
    codes: ``ceil(k / weight_group)`` rows of ``ceil(n / 2)`` bytes; see
    :class:`~bertforge.rtl.gemm.GemmConfig`).
    """
    dim, addr = unsigned(config.dim_width), unsigned(config.addr_width)
    bf16 = {"bf16_out": 1} if config.bf16 else {}
    if config.transpose_c:
        bf16["transpose_c"] = 1
    if getattr(config, "weight_group", 0):
        bf16.update(w4=1, mult_addr=addr)
    return data.StructLayout({
        "m": dim, "k": dim, "n": dim,
        "a_addr": addr, "b_addr": addr, "c_addr": addr,
        "a_stride": addr, "b_stride": addr, "c_stride": addr,
        "accumulate": 1, "int8": 1,
        "multiplier": unsigned(32), "shift": unsigned(6), "tag": unsigned(8),
        "bias": 1, "per_channel": 1, "bias_addr": addr, "scale_addr": addr, "int16": 1, **bf16,
    })


def pack_command(config, cmd):
    """A command dict -> the integer of its payload (missing fields 0; see
    :func:`bertforge.rtl.payload.pack`)."""
    return pack(command_layout(config), cmd)


def completion_layout(config):
    """One completion: the command's ``tag`` and ``error`` (rejected, not run)."""
    return data.StructLayout({"tag": unsigned(8), "error": 1})


def chunk_layout(config):
    """One chunk: operand base addresses (element [m0, k0] of A, [k0, n0] of B,
    [m0, n0] of C, entry n0 of the bias and scale vectors), valid sizes,
    per-chunk counts and the command's flags (with ``config.transpose_c``
    also ``transpose_c``; ``c_base`` is then the address of C's element
    [m0, n0] in the transposed layout)."""
    addr = unsigned(config.addr_width)
    transposed = {"transpose_c": 1} if config.transpose_c else {}
    if getattr(config, "weight_group", 0):     # the chunk's row of multiplier codes
        transposed.update(w4=1, mult_base=addr)
    return data.StructLayout({
        "a_base": addr, "b_base": addr, "c_base": addr,
        "a_stride": addr, "b_stride": addr, "c_stride": addr,
        "m_len": range(config.block_rows + 1),
        "n_len": range(config.panel + 1),
        "k_len": range(config.k_chunk + 1),
        "tiles": range(config.group + 1),
        "kblocks": range(config.max_kblocks + 1),
        "first": 1, "last": 1, "end": 1, "error": 1,
        "accumulate": 1, "int8": 1,
        "multiplier": unsigned(32), "shift": unsigned(6), "tag": unsigned(8),
        "bias": 1, "per_channel": 1, "bias_base": addr, "scale_base": addr, "int16": 1,
        **transposed,
    })


class TileScheduler(wiring.Component):
    """Checks commands and emits their chunks (see the module docstring).

    Throughput: one descriptor every other cycle, from an output register
    that is refilled once it is empty, after a
    check of ``dim_width + 3`` cycles per command (the three ``(rows - 1) * stride`` products of the
    range check are shift-and-add, a bit a cycle: no multiplier; with
    ``config.compact`` most significant bit first, with no shifted copy of
    the stride); chunks are
    long (at least ``max(k_len, rows)`` array cycles each), so the scheduler
    never limits the engine.

    Parameters
    ----------
    config : GemmConfig
    b_rows : bool
        The scheduler walks B's rows (``b_stride``): its range check, each
        chunk's ``b_base`` at row ``k0``. ``False`` (the sparse engine,
        whose loader walks B's compressed rows itself): B is one row here,
        with no product and ``b_base`` stays on ``b_addr``'s row; the
        descriptors carry ``b_stride`` for the loader.
    """

    def __init__(self, config, *, b_rows=True):
        self.config = config
        self.b_rows = b_rows
        super().__init__({
            "cmd": In(stream.Signature(command_layout(config))),
            "chunk": Out(stream.Signature(chunk_layout(config))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        aw = cfg.addr_width
        cmd = Signal(command_layout(cfg))
        bad = Signal()
        m0 = Signal(cfg.dim_width)
        n0 = Signal(cfg.dim_width)
        k0 = Signal(cfg.dim_width)
        a_row = Signal(aw)   # a_addr + m0 * a_stride
        b_row = Signal(aw)   # b_addr + k0 * b_stride
        c_row = Signal(aw)   # c_addr + m0 * c_stride

        # Last byte touched by each matrix, in exact (wide) arithmetic. The
        # products (rows - 1) * stride are shift-and-add, one bit a cycle.
        dw = cfg.dim_width
        esize = cfg.width // 8
        limit = 1 << aw
        new = self.cmd.payload
        # log2 of C's bytes per element: int32, int16 or int8 (bf16: float32
        # or bf16, which the writer handles as it does int16).
        two_bytes = cmd.int16 | cmd.bf16_out if cfg.bf16 else cmd.int16
        osize_bits = Mux(cmd.int8, 0, Mux(two_bytes, 1, 2))
        # Per matrix: (multiplier bits, shifted stride, product, rows less one
        # and stride of the incoming command, stride of the held one); compact:
        # Horner's rule, the most significant bit first (p = 2p + bit * stride),
        # so there is no shifted copy of the stride. No B product without
        # ``b_rows``.
        products = {}
        # Packed 4-bit B: ceil(k / 2) rows of n bytes, k_chunk // 2 rows a chunk.
        packed = cfg.weight_bits == 4
        b_rows_less = (new.k - 1) >> 1 if packed else new.k - 1
        # Per command (weight_group): packed B and a row of codes a chunk.
        grouped = getattr(cfg, "weight_group", 0)
        if grouped:
            b_rows_less = Mux(new.w4, (new.k - 1) >> 1, new.k - 1)
            group_bits = grouped.bit_length() - 1
        # C transposed: N - 1 strides (columns), M elements.
        c_rows_less = Mux(new.transpose_c, new.n - 1, new.m - 1) if cfg.transpose_c else new.m - 1
        c_row_bytes = cmd.n << osize_bits
        if cfg.transpose_c:
            c_row_bytes = Mux(cmd.transpose_c, cmd.m << osize_bits, c_row_bytes)
        for matrix, rows_less in (("a", new.m - 1), ("b", b_rows_less), ("c", c_rows_less)):
            if matrix != "b" or self.b_rows:
                stride = f"{matrix}_stride"
                products[matrix] = (Signal(dw), None if cfg.compact else Signal(aw + dw),
                                    Signal(aw + dw), rows_less, new[stride], cmd[stride])
        if grouped:         # the codes: ceil(k / group) rows of ceil(n / 2) bytes
            products["codes"] = (Signal(dw), Signal(aw + dw), Signal(aw + dw),
                                 (new.k - 1) >> group_bits, (new.n + 1) >> 1, (cmd.n + 1) >> 1)
        step = Signal(range(dw + 1))
        # A vector's end, addr + 4 * n < 2**aw + 2**(dw + 2), in just its bits.
        vector_end = max(aw, dw + 2) + 1
        ends = [Signal(aw + dw + 2) for _ in range(3)] + [Signal(vector_end) for _ in range(2)]
        a_end, b_end, c_end, bias_end, scale_end = ends
        a_prod, b_prod, c_prod = (products[x][2] if x in products else 0 for x in "abc")
        # Registered: the check compares them a cycle after the last product step.
        m.d.sync += [
            a_end.eq(cmd.a_addr + a_prod + cmd.k * esize),
            b_end.eq(cmd.b_addr + b_prod + (cmd.n if packed else cmd.n * esize)),
            c_end.eq(cmd.c_addr + c_prod + c_row_bytes),
            bias_end.eq(cmd.bias_addr + (cmd.n << 2)),
            scale_end.eq(cmd.scale_addr + (cmd.n << 2)),
        ]
        if grouped:
            mult_end = Signal(aw + dw + 2)
            m.d.sync += mult_end.eq(cmd.mult_addr + products["codes"][2] + ((cmd.n + 1) >> 1))
        narrow = cmd.int8 | cmd.int16
        check = ((cmd.m == 0) | (cmd.k == 0) | (cmd.n == 0) | (a_end > limit) | (b_end > limit)
                 | (c_end > limit) | (cmd.accumulate & narrow) | (cmd.int8 & cmd.int16)
                 | (cmd.bias & (bias_end > limit))
                 | (cmd.per_channel & (~narrow | (scale_end > limit))))
        if cfg.bf16:      # no requantization; old C is float32
            check = check | narrow | (cmd.accumulate & cmd.bf16_out)
        if cfg.transpose_c:     # old C is read row by row
            check = check | (cmd.accumulate & cmd.transpose_c)
        if grouped:
            check = check | (cmd.w4 & (mult_end > limit))

        # What is left of m, n and k from (m0, n0, k0) on, kept in registers,
        # and whether it is the last block, panel or chunk (registers too:
        # no compare before the advance's enables).
        rows_left = Signal(cfg.dim_width)
        cols_left = Signal(cfg.dim_width)
        red_left = Signal(cfg.dim_width)
        last_m, last_n, last_k = Signal(), Signal(), Signal()

        def left(signal, last, limit, value):
            value = Value.cast(value)[:cfg.dim_width]
            return [signal.eq(value), last.eq(value <= limit)]

        rows = (rows_left, last_m, cfg.block_rows)
        cols = (cols_left, last_n, cfg.panel)
        red = (red_left, last_k, cfg.k_chunk)

        # The next descriptor, computed combinationally and loaded into the
        # registered output ``self.chunk`` (no path from the stages'
        # ``ready`` through the chunk arithmetic).
        d = Signal(chunk_layout(cfg))
        n_len = Signal(range(cfg.panel + 1))
        k_len = Signal(range(cfg.k_chunk + 1))
        # The last block, panel or chunk has at most a whole one left: the
        # counts' low bits (``left`` sets ``last`` when the value fits).
        m.d.comb += [
            n_len.eq(Mux(last_n, cols_left[:len(n_len)], cfg.panel)),
            k_len.eq(Mux(last_k, red_left[:len(k_len)], cfg.k_chunk)),
        ]
        tiles_lut = Array(Const((n + cfg.cols - 1) // cfg.cols, range(cfg.group + 1))
                          for n in range(cfg.panel + 1))
        lanes = cfg.lanes
        tail_lut = Array(Const((r + cfg.rows - 1) // cfg.rows, range(cfg.blocks_per_seg + 1))
                         for r in range(lanes))
        if cfg.dataflow == "ws":
            kblocks = (k_len >> cfg.lane_bits) * cfg.blocks_per_seg + tail_lut[k_len[:cfg.lane_bits]]
        else:
            # Always 1; not a constant, since Verilator never runs an
            # `always @*` block whose right-hand side is a constant.
            kblocks = k_len != 0
        # C transposed: c_row is C's element [m0, 0], c_col adds n0 columns.
        c_base = c_row + (n0 << osize_bits)
        if cfg.transpose_c:
            c_col = Signal(aw)
            c_base = Mux(cmd.transpose_c, c_row + c_col, c_base)
            m.d.comb += d.transpose_c.eq(cmd.transpose_c)
        if grouped:
            m_row = Signal(aw)      # mult_addr + (k0 / group) * ceil(n / 2)
            m.d.comb += [d.w4.eq(cmd.w4), d.mult_base.eq(m_row + (n0 >> 1))]
        m.d.comb += [
            d.a_base.eq(a_row + (k0 << (esize - 1))),
            d.b_base.eq(b_row + (n0 if packed else n0 << (esize - 1))),
            d.c_base.eq(c_base),
            d.a_stride.eq(cmd.a_stride), d.b_stride.eq(cmd.b_stride), d.c_stride.eq(cmd.c_stride),
            d.m_len.eq(Mux(last_m, rows_left[:len(d.m_len)], cfg.block_rows)),
            d.n_len.eq(n_len), d.k_len.eq(k_len),
            d.tiles.eq(tiles_lut[n_len]),
            d.kblocks.eq(kblocks),
            d.first.eq(k0 == 0), d.last.eq(last_k), d.end.eq(last_k & last_n & last_m),
            d.accumulate.eq(cmd.accumulate), d.int8.eq(cmd.int8), d.int16.eq(two_bytes),
            d.multiplier.eq(cmd.multiplier), d.shift.eq(cmd.shift), d.tag.eq(cmd.tag),
            d.bias.eq(cmd.bias), d.per_channel.eq(cmd.per_channel),
            d.bias_base.eq(cmd.bias_addr + (n0 << 2)), d.scale_base.eq(cmd.scale_addr + (n0 << 2)),
        ]

        out = self.chunk
        # The output register takes the next descriptor once it is empty: a
        # descriptor every other cycle at most (chunks take many more), and
        # no path from the stages' ``ready`` into the scheduler's enables.
        load = Signal()
        with m.If(out.ready):
            m.d.sync += out.valid.eq(0)
        m.d.comb += load.eq(~out.valid)
        with m.FSM():
            with m.State("IDLE"):
                # A new command once the last descriptor has left (a caller
                # may keep per-command state next to the descriptors).
                m.d.comb += self.cmd.ready.eq(load)
                with m.If(self.cmd.valid & load):
                    m.d.sync += [cmd.eq(self.cmd.payload), step.eq(0)]
                    for bits, shifted, product, rows_less, stride, _ in products.values():
                        if cfg.compact:
                            m.d.sync += [bits.eq(rows_less), product.eq(0)]
                        else:
                            m.d.sync += [bits.eq(rows_less), shifted.eq(stride), product.eq(0)]
                    m.next = "MULTIPLY"
            with m.State("MULTIPLY"):
                for bits, shifted, product, _, _, stride in products.values():
                    if cfg.compact:     # dw steps, then the ends' cycle
                        with m.If(step != dw):
                            m.d.sync += [bits.eq(bits << 1),
                                         product.eq((product << 1) + Mux(bits[-1], stride, 0))]
                        continue
                    m.d.sync += [bits.eq(bits >> 1), shifted.eq(shifted << 1),
                                 product.eq(product + Mux(bits[0], shifted, 0))]
                m.d.sync += step.eq(step + 1)
                with m.If(step == dw):      # one step more: the ends register
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [bad.eq(check), m0.eq(0), n0.eq(0), k0.eq(0),
                             *left(*rows, cmd.m), *left(*cols, cmd.n), *left(*red, cmd.k),
                             a_row.eq(cmd.a_addr), b_row.eq(cmd.b_addr), c_row.eq(cmd.c_addr)]
                if cfg.transpose_c:
                    m.d.sync += c_col.eq(0)
                if grouped:
                    m.d.sync += m_row.eq(cmd.mult_addr)
                m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += d.error.eq(bad)
                with m.If(load):
                    m.d.sync += [self.chunk.payload.eq(d), self.chunk.valid.eq(1)]
                    with m.If(bad | d.end):
                        m.next = "IDLE"
                    with m.Elif(~last_k):
                        m.d.sync += [k0.eq(k0 + cfg.k_chunk), *left(*red, red_left - cfg.k_chunk)]
                        if self.b_rows:
                            m.d.sync += b_row.eq(b_row + cmd.b_stride
                                                 * (cfg.k_chunk // 2 if packed else cfg.k_chunk))
                        if grouped:
                            m.d.sync += [m_row.eq(m_row + ((cmd.n + 1) >> 1)),
                                         b_row.eq(b_row + Mux(cmd.w4, cmd.b_stride * (grouped // 2),
                                                              cmd.b_stride * grouped))]
                    with m.Else():
                        m.d.sync += [k0.eq(0), *left(*red, cmd.k), b_row.eq(cmd.b_addr)]
                        if grouped:
                            m.d.sync += m_row.eq(cmd.mult_addr)
                        c_step = cmd.c_stride * cfg.block_rows
                        if cfg.transpose_c:
                            c_step = Mux(cmd.transpose_c, Const(cfg.block_rows) << osize_bits,
                                         c_step)
                        with m.If(~last_n):
                            m.d.sync += [n0.eq(n0 + cfg.panel), *left(*cols, cols_left - cfg.panel)]
                            if cfg.transpose_c:
                                m.d.sync += c_col.eq(c_col + cmd.c_stride * cfg.panel)
                        with m.Else():
                            m.d.sync += [n0.eq(0), *left(*cols, cmd.n),
                                         m0.eq(m0 + cfg.block_rows),
                                         *left(*rows, rows_left - cfg.block_rows),
                                         a_row.eq(a_row + cmd.a_stride * cfg.block_rows),
                                         c_row.eq(c_row + c_step)]
                            if cfg.transpose_c:
                                m.d.sync += c_col.eq(0)
        return m
