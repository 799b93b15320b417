"""Cycle model of the GEMM engine's AXI top
(:class:`~bertforge.rtl.axi_top.AxiGemmTop`): the ``cycles`` counter of a
program run on a slave that answers a read burst's first beat ``latency``
cycles after its AR handshake and then one beat a cycle, bursts back to back
(cocotbext-axi's ``AxiRam`` without pauses), and takes writes at once
(answering a write burst when its AW and its last beat are there).

The engine's walk is :func:`~bertforge.sim.gemm_cycles.timeline` with
:class:`AxiReads` as its memory: the engine's read requests (a chunk's old
C, bias and scale rows, then its A rows, then its B rows: one request a
row) pass the master (:class:`~bertforge.rtl.axi.AxiMaster`), which takes a
request when the previous one is armed, arms its first burst the cycle
after and a burst every 2 cycles (AR valid for one cycle each), at most
``max_reads`` bursts in flight and ``max_reads + 1`` requests undelivered;
a request of ``beats`` beats at a byte offset reads one word more.

The engine's writes leave its writer a piece a cycle (:func:`block_writes`);
the master takes one a cycle, but a write whose bytes spill into a second
word holds it a second cycle (:func:`axi_write_cycles`: the writes behind
it wait), which is what wider words add (at 32 bits an aligned int32 write
never spills).

The master gathers the writes into bursts (AW first, each burst's beats
after it ends): a command ends when its last burst is answered,
:func:`write_drain` cycles after its last beat, less a single beat's.

A program: per command :data:`COMMAND` cycles plus the fetch of its record
(a read of the record's words), the engine's cycles from its command
handshake to its completion and the write drain; per program
:data:`PROGRAM` cycles. Exact
when every command is compute bound, at 32 to 256 bits
(tests/test_axi_cycles.py).
"""

from dataclasses import dataclass

from .gemm_cycles import chunks, gemm_cycles

__all__ = ["AxiReads", "axi_top_cycles", "chunk_requests", "block_writes", "axi_write_cycles",
           "write_beats", "write_bursts", "write_drain", "COMMAND", "PROGRAM"]

#: Cycles per command besides the record's read (first beat ``latency`` after
#: the AR), the engine's own and its last write burst's beats: the fetcher's
#: states around them.
COMMAND = 6
#: Cycles per program besides its commands' (the last NEXT state, the end).
PROGRAM = 1


def chunk_requests(config, cmd):
    """Per chunk of ``cmd`` (the scheduler's order,
    :func:`~bertforge.sim.gemm_cycles.chunks`), its read requests as
    ``(byte address, beats)``."""
    eb = config.width // 8
    out = []
    for chunk in chunks(config, cmd):
        m0, n0, k0 = chunk["m0"], chunk["n0"], chunk["k0"]
        words = -(-chunk["n_len"] * 4 // config.mem_bytes)
        reqs = []
        if chunk["first"]:
            if cmd.get("accumulate"):
                reqs += [(cmd["c_addr"] + (m0 + r) * cmd["c_stride"] + n0 * 4, words)
                         for r in range(chunk["m_len"])]
            for flag, key in (("bias", "bias_addr"), ("per_channel", "scale_addr")):
                if cmd.get(flag):
                    reqs.append((cmd[key] + n0 * 4, words))
        a_beats = -(-chunk["k_len"] // config.lanes)
        reqs += [(cmd["a_addr"] + (m0 + r) * cmd["a_stride"] + k0 * eb, a_beats)
                 for r in range(chunk["m_len"])]
        reqs += [(cmd["b_addr"] + (k0 + r) * cmd["b_stride"] + n0 * eb, 1)
                 for r in range(chunk["k_len"])]
        out.append(reqs)
    return out


@dataclass
class AxiReads:
    """The master and the slave as the engine's memory (see the module
    doc): ``self(index, ready)`` is the cycle after the last beat of chunk
    ``index``'s requests, offered from cycle ``ready`` on."""

    config: object
    requests: list          # per chunk: [(addr, beats)]
    latency: int
    max_burst: int = 16
    max_reads: int = 4

    def __post_init__(self):
        self.take_free = 0      # the master may take a request (left == 0)
        self.arm_free = 0       # it may arm a burst (AR not valid)
        self.r_free = 0         # the next R beat's earliest cycle
        self.done = []          # per burst: its last beat's cycle
        self.delivered = []     # per request: its last beat's cycle
        self.offered = 0        # the engine offers its next request

    def _bursts(self, word, words):
        page = 4096 // self.config.mem_bytes
        while words:
            size = min(words, self.max_burst, page - word % page)
            yield size
            word += size
            words -= size

    def __call__(self, index, ready):
        mb = self.config.mem_bytes
        last = None
        for addr, beats in self.requests[index]:
            depth = self.max_reads + 1
            take = max(ready, self.offered, self.take_free)
            if len(self.delivered) >= depth:
                take = max(take, self.delivered[-depth] + 1)
            word, off = divmod(addr, mb)
            arm = take + 1
            for size in self._bursts(word, beats + (off != 0)):
                arm = max(arm, self.arm_free)
                if len(self.done) >= self.max_reads:
                    arm = max(arm, self.done[-self.max_reads] + 1)
                first = max(arm + 1 + self.latency, self.r_free)
                last = first + size - 1
                self.r_free = last + 1
                self.done.append(last)
                self.arm_free = arm + 2
                arm += 2
            self.take_free = arm - 1
            self.offered = take + 1
            self.delivered.append(last)
        return last + 1


def block_writes(config, cmd, chunk):
    """The writer's write requests for the block that ``chunk`` (its last)
    ends, as ``(piece, byte address, bytes)``: the writer reads a row in
    pieces of ``Q = mem_bytes // 4`` columns, a piece a cycle (``piece``
    counts them over the block), and writes an int32 piece as one beat, two
    int16 pieces as one, an int8 row as one (:class:`~bertforge.rtl.writer.Writer`)."""
    mb, q = config.mem_bytes, config.mem_bytes // 4
    size = 1 if cmd.get("int8") else 2 if cmd.get("int16") else 4
    pieces = -(-chunk["n_len"] // q)
    out = []
    for r in range(chunk["m_len"]):
        base = cmd["c_addr"] + (chunk["m0"] + r) * cmd["c_stride"] + chunk["n0"] * size
        for p in range(pieces):
            piece = r * pieces + p
            last = p == pieces - 1
            if size == 1:
                if last:
                    out.append((piece, base, chunk["n_len"]))
            elif size == 2:
                if p % 2 or last:
                    off = (p >> 1) * mb
                    out.append((piece, base + off, min(mb, chunk["n_len"] * 2 - off)))
            else:
                out.append((piece, base + p * mb, min(mb, chunk["n_len"] * 4 - p * mb)))
    return out


def axi_write_cycles(config, cmd, chunk):
    """Cycles a block's rows take to leave the writer through the master:
    a piece a cycle, and a write that spans two words (its bytes past the
    end of its first word) holds the master's write port for a second
    cycle, so the writes after it wait for it."""
    mb = config.mem_bytes
    pieces = chunk["m_len"] * -(-chunk["n_len"] // (mb // 4))
    taken, hold = -1, 0
    for piece, addr, size in block_writes(config, cmd, chunk):
        taken = max(piece, taken + 1 + hold)
        hold = int(addr % mb + size > mb)
    return max(pieces, taken + 1 + hold)


def write_beats(config, cmd, chunk):
    """The aligned beats the master makes of a block's writes, as ``(cycle,
    word)``: a write leaves the writer as :func:`axi_write_cycles` times it,
    its first word that cycle, a second word (the bytes past the first
    word's end) the next."""
    mb = config.mem_bytes
    out, taken, hold = [], -1, 0
    for piece, addr, size in block_writes(config, cmd, chunk):
        taken = max(piece, taken + 1 + hold)
        hold = int(addr % mb + size > mb)
        out.append((taken, addr // mb))
        if hold:
            out.append((taken + 1, addr // mb + 1))
    return out


def write_bursts(config, timed_beats, max_burst=16):
    """The write bursts the master makes of ``timed_beats`` (``(cycle,
    word)``, in order) on a slave that takes everything at once, following
    its rules (:class:`~bertforge.rtl.axi.AxiMaster`): a beat to the held
    beat's word a cycle later (two, if the burst is not full) merges into
    it; a beat to the next word a cycle or two later extends the burst
    unless it is full (``min(max_burst, MAX_WRITE_BURST)`` beats) or its
    word ends a 4 KB page; otherwise the burst ends at the next beat, or 2
    cycles after its last (1 if full). Per burst ``[pushes, end]``: the
    cycle each beat enters the W queue (when the next beat comes, the last
    when the burst ends) and the cycle it ends."""
    from bertforge.rtl.axi import MAX_WRITE_BURST
    longest = min(max_burst, MAX_WRITE_BURST)
    page = 4096 // config.mem_bytes
    bursts = []         # per burst: [push cycle of each beat], then its end
    last = None         # (cycle, word) of the held beat
    for cycle, word in timed_beats:
        if last is not None:
            gap, full = cycle - last[0], len(bursts[-1][0]) == longest or last[1] % page == page - 1
            if word == last[1] and (gap == 1 or (gap == 2 and not full)):
                last = (cycle, word)
                continue
            if gap <= 2 and word == last[1] + 1 and not full:
                bursts[-1][0][-1] = cycle
                bursts[-1][0].append(None)
                last = (cycle, word)
                continue
            end = min(cycle, last[0] + (1 if full else 2))
            bursts[-1][0][-1] = end
            bursts[-1][1] = end
        bursts.append([[None], None])
        last = (cycle, word)
    if last is not None:
        full = len(bursts[-1][0]) == longest or last[1] % page == page - 1
        bursts[-1][1] = bursts[-1][0][-1] = last[0] + (1 if full else 2)
    return bursts


def write_drain(config, timed_beats, max_burst=16):
    """Cycles from the last of ``timed_beats`` (``(cycle, word)``, in order)
    to the response of its write burst, less 3 (a single beat's), on a slave
    that takes everything at once (``AxiRam``): the bursts of
    :func:`write_bursts`; a beat leaves the W queue 2 cycles after it
    entered at the earliest, a cycle after its burst ended, in order, a beat
    a cycle; a burst's AW leaves 2 cycles after it ended, a burst a cycle;
    the slave answers a burst when its AW has come if its last beat came by
    then, else the cycle after its last beat; bursts in order.
    """
    w = aw = answer = -10 ** 9
    for pushes, end in write_bursts(config, timed_beats, max_burst):
        aw = max(end + 2, aw + 1)
        for push in pushes:
            w = max(w + 1, push + 2, end + 1)
        answer = max(answer + 1, aw if w <= aw else w + 1)
    return answer - timed_beats[-1][0] - 3


def axi_top_cycles(config, program, *, latency, max_burst=16, max_reads=4, record_words=None):
    """Predicted ``cycles`` counter of ``program`` (command dicts, all run)
    on the AXI top of the staged GEMM engine ``config`` with a slave of read
    ``latency`` (cycles from the AR handshake to the first beat), one beat a
    cycle. Returns ``{"cycles", "exact", "bound"}``: exact when every
    command is compute bound."""
    from bertforge.rtl.axi_top import record_bytes
    words = record_words or record_bytes(config) // config.mem_bytes
    total, exact = PROGRAM, True
    for cmd in program:
        memory = AxiReads(config, chunk_requests(config, cmd), latency, max_burst, max_reads)
        engine = gemm_cycles(config, [cmd], lat=2, memory=memory,
                             writes=lambda chunk, cmd=cmd: axi_write_cycles(config, cmd, chunk))
        exact &= engine["exact"]
        blocks = [chunk for chunk in chunks(config, cmd) if chunk["last"]][-2:]
        timed = sorted((begin + cycle, word) for chunk, begin
                       in zip(blocks, engine["write_begins"][-len(blocks):])
                       for cycle, word in write_beats(config, cmd, chunk))
        total += COMMAND + latency + words + engine["cycles"] + write_drain(config, timed,
                                                                            max_burst)
    return {"cycles": total, "exact": exact, "bound": "compute" if exact else "memory"}
