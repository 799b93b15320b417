"""The external memory a hardware config names (its ``[memory]`` section):
an ideal port, or an SDR SDRAM with its datasheet timings, and the timing
model of that SDRAM that the simulation's memory and ``analyze`` share.

An SDR SDRAM chip (``kind = "sdr"``) is ``data_width`` bits wide and
clocked at the accelerator's clock (``clock_mhz`` 0) or its own; its
timings are in nanoseconds, as datasheets give them, and become cycles of
the accelerator's clock rounded up (:meth:`MemoryConfig.cycles`). The
controller the model stands for is the simplest a board design has:

- one read at a time, in order, open-page policy, one open row per bank;
  the address maps as row | bank | column (consecutive rows of the chip
  fall in consecutive banks);
- a port word of ``mem_width`` bits is ``ratio = mem_width / data_width``
  SDRAM words, read in bursts of ``burst_length``: it holds the SDRAM bus
  :meth:`MemoryConfig.word_cycles` accelerator cycles;
- a word in a row that is not open in its bank waits ``tRP`` (if another
  row is open there, and no earlier than ``tRAS`` after that row's
  activation) and ``tRCD`` before its bursts;
- every ``tREFI`` the controller refreshes: it waits for the bus, then
  precharges all banks and refreshes (``tRP + tRFC``); every row is closed
  afterwards;
- the CAS latency is part of the read latency (``[hardware] mem_latency
  + cas_latency`` cycles from request to the first data of a row hit).

:func:`schedule` is that model in Python, beat by beat;
:func:`add_sdram_gate` builds it in HDL for the simulation harness
(:func:`~bertforge.sim.gemm_harness.add_sim_memory`), and the two are
checked against each other. :meth:`MemoryConfig.sustained_bytes_per_cycle`
is the bandwidth of a long sequential read (row hits, one row miss per
row, refresh), which ``analyze`` uses.
"""

import dataclasses
import math

from bertforge.rtl.errors import ParameterError, ParameterTypeError
from bertforge.rtl.params import check_choice, check_int

__all__ = ["MemoryConfig", "CHIPS", "BOARDS", "memory_from_table", "schedule", "add_sdram_gate",
           "CONTROLLERS", "litedram_gap", "LiteDram", "litedram_replay"]

#: The controllers a ``[memory]`` section names: ``simple`` (the module
#: docstring's, which the harness memory builds) and ``litedram``
#: (LiteDRAM's SDR controller behind one crossbar port, as the SoC has it:
#: :func:`litedram_replay`).
CONTROLLERS = ("simple", "litedram")

_TIMINGS = ("trcd_ns", "trp_ns", "tras_ns", "trefi_ns", "trfc_ns")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """The ``[memory]`` section of a hardware config (module docstring).

    ``kind`` "ideal" (the [hardware] bandwidth and latency, as before this
    section) or "sdr"; the other fields describe the SDRAM: ``data_width``
    bits, ``clock_mhz`` (0: the accelerator's clock), ``cas_latency``
    cycles, the timings in ns, ``burst_length`` words, ``banks``,
    ``columns`` (words per row), ``chip`` (a name for reports).
    """

    kind: str = "ideal"
    chip: str = ""
    data_width: int = 16
    clock_mhz: float = 0.0
    cas_latency: int = 3
    trcd_ns: float = 18.0
    trp_ns: float = 18.0
    tras_ns: float = 42.0
    trefi_ns: float = 7812.5
    trfc_ns: float = 60.0
    burst_length: int = 1
    banks: int = 4
    columns: int = 512
    controller: str = "simple"
    refresh_postponing: int = 1

    def __post_init__(self):
        check_choice("kind", self.kind, ("ideal", "sdr"))
        check_choice("controller", self.controller, CONTROLLERS)
        if not isinstance(self.chip, str):
            raise ParameterTypeError(f"chip must be a string, not {self.chip!r}")
        for name in ("data_width", "cas_latency", "burst_length", "banks", "columns",
                     "refresh_postponing"):
            check_int(name, getattr(self, name))
        for name in ("data_width", "burst_length", "banks", "columns"):
            value = getattr(self, name)
            if value & (value - 1):
                raise ParameterError(f"{name} must be a power of two, not {value}")
        for name in _TIMINGS + ("clock_mhz",):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ParameterError(f"{name} must be a non-negative number, not {value!r}")
        if self.trefi_ns <= 0:
            raise ParameterError(f"trefi_ns must be positive, not {self.trefi_ns!r}")

    @property
    def ideal(self):
        return self.kind == "ideal"

    def cycles(self, ns, clock_mhz):
        """``ns`` in cycles of a ``clock_mhz`` clock, rounded up."""
        return math.ceil(ns * clock_mhz / 1000 - 1e-9)

    def timing(self, clock_mhz):
        """The timings in cycles of the accelerator's ``clock_mhz``: dict
        ``trcd, trp, tras, trefi, trfc``."""
        return {name[:-3]: self.cycles(getattr(self, name), clock_mhz) for name in _TIMINGS}

    def ratio(self, mem_width):
        """SDRAM words per port word of ``mem_width`` bits."""
        if mem_width % self.data_width:
            raise ParameterError(f"the port's {mem_width} bits are not a multiple of the "
                                 f"SDRAM's data_width {self.data_width}")
        return mem_width // self.data_width

    def word_cycles(self, mem_width, clock_mhz):
        """Accelerator cycles one port word holds the SDRAM bus: its
        ``ratio`` words in whole bursts, at the SDRAM's clock."""
        words = -(-self.ratio(mem_width) // self.burst_length) * self.burst_length
        memory_clock = self.clock_mhz or clock_mhz
        return math.ceil(words * clock_mhz / memory_clock - 1e-9)

    def row_words(self, mem_width):
        """Port words per SDRAM row (a page)."""
        words = self.columns // self.ratio(mem_width)
        if words < 1:
            raise ParameterError(f"an SDRAM row of {self.columns} columns is narrower than one "
                                 f"{mem_width}-bit port word")
        return words

    def sustained_bytes_per_cycle(self, mem_width, clock_mhz):
        """Bytes per accelerator cycle of a long sequential read: a row of
        port words at :meth:`word_cycles` each, one row miss per row
        (``tRP + tRCD``, ``tRAS`` respected), and a refresh (``tRP + tRFC``)
        every ``tREFI``."""
        t = self.timing(clock_mhz)
        words = self.row_words(mem_width)
        busy = words * self.word_cycles(mem_width, clock_mhz)
        row = max(busy, t["tras"]) + t["trp"] + t["trcd"]
        rate = words * (mem_width // 8) / row
        return rate * (1 - (t["trp"] + t["trfc"]) / t["trefi"])

    def to_dict(self):
        return dataclasses.asdict(self)


#: Datasheet timings of the SDRAM chips ULX3S boards carry (the speed grades
#: fitted): 4 banks x 8192 rows, 16 bits, refresh 8192 rows in 64 ms.
CHIPS = {
    # Micron MT48LC16M16A2-6A: 32 MB, 512 columns; CL 3; tRCD, tRP 18 ns,
    # tRAS 42 ns, tRFC 60 ns.
    "MT48LC16M16": MemoryConfig(kind="sdr", chip="MT48LC16M16", data_width=16, cas_latency=3,
                                trcd_ns=18, trp_ns=18, tras_ns=42, trefi_ns=7812.5, trfc_ns=60,
                                burst_length=1, banks=4, columns=512),
    # Alliance AS4C32M16SB-7: 64 MB, 1024 columns; CL 3; tRCD, tRP 21 ns,
    # tRAS 42 ns, tRFC (= tRC) 63 ns.
    "AS4C32M16": MemoryConfig(kind="sdr", chip="AS4C32M16", data_width=16, cas_latency=3,
                              trcd_ns=21, trp_ns=21, tras_ns=42, trefi_ns=7812.5, trfc_ns=63,
                              burst_length=1, banks=4, columns=1024),
}
#: Board presets: the SDRAM chips a board is fitted with, the first the default.
BOARDS = {"ulx3s": ("MT48LC16M16", "AS4C32M16")}


def memory_from_table(fields):
    """A :class:`MemoryConfig` from a ``[memory]`` table: ``board`` (a
    preset of :data:`BOARDS`) with optional ``chip``, or ``kind`` and the
    fields; fields given override the preset's. ``ValueError``/``TypeError``
    (one line) for anything wrong."""
    fields = dict(fields)
    known = {f.name for f in dataclasses.fields(MemoryConfig)} | {"board"}
    bad = sorted(set(fields) - known)
    if bad:
        raise ParameterError(f"unknown memory field {bad[0]!r}; fields: {', '.join(sorted(known))}")
    board = fields.pop("board", None)
    base = MemoryConfig()
    if board is not None:
        if board not in BOARDS:
            raise ParameterError(f"no memory board preset {board!r}; presets: {', '.join(BOARDS)}")
        chip = fields.pop("chip", BOARDS[board][0])
        if chip not in BOARDS[board]:
            raise ParameterError(f"the {board} preset has chips {', '.join(BOARDS[board])}, "
                                 f"not {chip!r}")
        base = CHIPS[chip]
    elif fields.get("kind") == "sdr" and fields.get("chip") in CHIPS:
        base = CHIPS[fields["chip"]]
    return dataclasses.replace(base, **fields)


def schedule(memory, mem_width, clock_mhz, requests, *, latency):
    """Cycles at which the SDRAM delivers each port word of ``requests``
    (``(cycle, word, beats)``: issued at ``cycle`` (increasing), ``beats``
    port words from port word ``word``), in order, as the harness memory
    does with ``[memory]`` ``memory`` and read latency ``latency``
    (``mem_latency``; the CAS latency is added). The refresh counter starts
    at cycle 0. Returns a list, per request, of its beats' cycles."""
    t = memory.timing(clock_mhz)
    step = memory.word_cycles(mem_width, clock_mhz)
    row_words, banks = memory.row_words(mem_width), memory.banks
    lat = latency + memory.cas_latency
    open_row = [None] * banks
    activated = [0] * banks
    ready = 0                 # first cycle the bus may deliver
    refresh_at = t["trefi"]   # the counter's next expiry
    due_floor, out = 0, []
    for cycle, word, beats in requests:
        due = max(cycle + lat, due_floor)
        due_floor = due
        times = []
        for beat in range(beats):
            w = word + beat
            bank, row = (w // row_words) % banks, w // (row_words * banks)
            now = max(due, ready)
            while True:
                if now >= refresh_at:          # refresh first, once the bus is free
                    ready = max(ready, refresh_at)
                    ready += t["trp"] + t["trfc"]
                    refresh_at += t["trefi"]
                    open_row = [None] * banks
                    now = max(now, ready)
                    continue
                if open_row[bank] != row:      # row miss
                    start = now
                    if open_row[bank] is not None:
                        start = max(start, activated[bank] + t["tras"]) + t["trp"]
                    activated[bank] = start
                    ready = start + t["trcd"]
                    open_row[bank] = row
                    now = max(now, ready)
                    continue
                break
            times.append(now)
            ready = now + step
        out.append(times)
    return out


def add_sdram_gate(m, memory, *, mem_width, clock_mhz, go, now, word, want):
    """The SDRAM's timing in HDL (:func:`schedule`'s rules) in module ``m``:
    returns ``ok``, high when the port word ``word`` (a signal, the word
    address the memory is about to serve) may be delivered this cycle,
    given ``want`` (the memory would serve it: due, room in its queues).
    ``now`` is the harness's free-running cycle counter; the gate's state
    resets while ``go`` is low. Whether the word is taken is ``want & ok``."""
    from amaranth.hdl import Array, Mux, Signal
    if memory.controller != "simple":
        raise ParameterError(f"the harness memory models the simple SDRAM controller, not "
                             f"{memory.controller!r}; leave [memory] controller unset")
    t = memory.timing(clock_mhz)
    step = memory.word_cycles(mem_width, clock_mhz)
    row_words, banks = memory.row_words(mem_width), memory.banks
    col_bits = row_words.bit_length() - 1
    bank_bits = banks.bit_length() - 1
    bank = Signal(max(bank_bits, 1), name="sdram_bank")
    row = Signal(len(word), name="sdram_row")
    m.d.comb += [bank.eq(word[col_bits:col_bits + bank_bits] if bank_bits else 0),
                 row.eq(word >> (col_bits + bank_bits))]
    opened = Array(Signal(name=f"sdram_open{b}") for b in range(banks))
    rows = Array(Signal(len(word), name=f"sdram_row{b}") for b in range(banks))
    activated = Array(Signal(32, name=f"sdram_act{b}") for b in range(banks))
    ready = Signal(32, name="sdram_ready")
    refresh_at = Signal(32, name="sdram_refresh_at")
    free = now >= ready
    refresh = free & (now >= refresh_at)
    hit = opened[bank] & (rows[bank] == row)
    ok = Signal(name="sdram_ok")
    m.d.comb += ok.eq(free & ~refresh & hit)
    with m.If(~go):
        m.d.sync += [ready.eq(0), refresh_at.eq(now + 1 + t["trefi"])]
        for b in range(banks):
            m.d.sync += opened[b].eq(0)
    with m.Elif(refresh):
        m.d.sync += [ready.eq(now + t["trp"] + t["trfc"]), refresh_at.eq(refresh_at + t["trefi"])]
        for b in range(banks):
            m.d.sync += opened[b].eq(0)
    with m.Elif(free & want & ~hit):
        start = Signal(32, name="sdram_start")
        late = activated[bank] + t["tras"]
        m.d.comb += start.eq(Mux(opened[bank], Mux(late > now, late, now) + t["trp"], now))
        m.d.sync += [opened[bank].eq(1), rows[bank].eq(row), activated[bank].eq(start),
                     ready.eq(start + t["trcd"])]
    with m.Elif(want & ok):
        m.d.sync += ready.eq(now + step)
    return ok


# LiteDRAM's SDR controller behind one crossbar port (the SoC's): cycles
# between the column commands (reads, writes) of two consecutive native
# commands of the port, measured in LiteDRAM 2024.12 (its core in Migen's
# simulator, a port offering commands back to back, the MT48LC16M16 at
# 30 MHz: tRP, tRCD 1 cycle) and read off its code:
# - one bank, row open, same direction: a command a cycle;
# - another bank: the crossbar keeps a port's commands in order, so the
#   port waits until the bank machine of the previous bank has issued its
#   last command before the next enters the other's command buffer
#   (:data:`_SWITCH`);
# - a row miss: the bank machine precharges (tRP) and activates (tRCD);
#   after a write it waits the write recovery first (tWTP);
# - reads to writes and back: the multiplexer's turnaround (tWTR, the
#   read-to-write delay).
#: Cycles between two column commands, ``(previous write, write)``: same
#: bank and row, another bank (its row open).
_SAME = {(0, 0): 1, (0, 1): 5, (1, 0): 6, (1, 1): 1}
_SWITCH = {(0, 0): 4, (0, 1): 8, (1, 0): 7, (1, 1): 4}
#: Cycles a write adds before a precharge of its bank (write recovery).
_WRITE_RECOVERY = 3
#: Cycles one refresh of a postponed burst takes besides tRP + tRFC, and
#: the burst's end to the next command besides an activate.
_REFRESH_STEP, _REFRESH_END = 1, 0


def litedram_gap(memory, clock_mhz, previous_write, write, same_bank, row):
    """Cycles from one column command to the next in LiteDRAM's SDR
    controller (one port, commands offered back to back): the previous
    command a write or not, this one ``write``, in the same bank or not,
    its ``row`` "hit" (open), "closed" or "miss" (another row open)."""
    t = memory.timing(clock_mhz)
    key = (int(previous_write), int(write))
    if same_bank:
        gap = _SAME[key]
        if row == "closed":
            gap += t["trcd"] + 1
        elif row == "miss":
            gap += t["trp"] + t["trcd"] + (_WRITE_RECOVERY if key == (1, 1) else 0)
        return gap
    gap = _SWITCH[key]
    if row != "hit":      # after a write the activate overlaps the turnaround's first cycle
        gap += t["trcd"] + (key != (1, 0)) + (t["trp"] if row == "miss" else 0)
    return gap


class LiteDram:
    """LiteDRAM's SDR controller (:data:`CONTROLLERS`) behind one port, as
    state: ``run(stream)`` takes the port's native commands, offered back
    to back (runs ``(write, byte address, bytes)``, each a command per
    SDRAM word it touches, in order), and returns the cycles the
    controller spends on them; rows map as row | bank | column and stay
    open from one call to the next. Refreshes are counted at their mean
    rate (an operation starts at any phase of the refresh timer): every
    ``refresh_postponing`` x tREFI the refresher issues that many refreshes
    (each tRP + tRFC and a cycle) and closes every row, so each burst also
    costs an activate in each bank in use; ``refresh_share`` is the share
    of the controller's time they take."""

    def __init__(self, memory, mem_width, clock_mhz):
        self.memory, self.clock_mhz = memory, clock_mhz
        self.t = t = memory.timing(clock_mhz)
        self.open_row = [None] * memory.banks
        self.last = None                        # (bank, write) of the last command
        self.used = set()
        self.commands = self.activates = self.turnarounds = 0
        period = memory.refresh_postponing * t["trefi"]
        self.burst = memory.refresh_postponing * (t["trp"] + t["trfc"] + _REFRESH_STEP) + _REFRESH_END

        def share():
            return (self.burst + len(self.used) * (t["trcd"] + 1)) / period
        self.refresh_share = share

    def run(self, stream):
        mem, t = self.memory, self.t
        wb, columns, banks = mem.data_width // 8, mem.columns, mem.banks
        cycles = 0
        for write, addr, size in stream:
            write = bool(write)
            word, end = addr // wb, -(-(addr + size) // wb)
            while word < end:
                bank, row = (word // columns) % banks, word // (columns * banks)
                take = min(end, (word // columns + 1) * columns) - word     # to the row's end
                state = "hit" if self.open_row[bank] == row else \
                    "closed" if self.open_row[bank] is None else "miss"
                if self.last is None:
                    cycles += 1 + (t["trcd"] + 1 if state != "hit" else 0)
                else:
                    cycles += litedram_gap(mem, self.clock_mhz, self.last[1], write,
                                           bank == self.last[0], state)
                    self.turnarounds += write != self.last[1]
                self.activates += state != "hit"
                self.open_row[bank] = row
                self.used.add(bank)
                cycles += take - 1
                self.commands += take
                word += take
                self.last = (bank, write)
        return cycles / (1 - self.refresh_share())


def litedram_replay(memory, mem_width, clock_mhz, stream):
    """``stream`` (as :meth:`LiteDram.run` takes it) through a fresh
    :class:`LiteDram`: ``{"cycles", "commands", "activates",
    "turnarounds", "refreshes"}`` (refreshes at their mean rate)."""
    dram = LiteDram(memory, mem_width, clock_mhz)
    cycles = dram.run(stream)
    refreshes = cycles * dram.refresh_share() / (dram.burst + len(dram.used)
                                                  * (dram.t["trcd"] + 1)) \
        * memory.refresh_postponing if cycles else 0.0
    return {"cycles": cycles, "commands": dram.commands, "activates": dram.activates,
            "turnarounds": dram.turnarounds, "refreshes": refreshes}
