"""Formal proofs (SymbiYosys from the PyPI wheels): every proof of the
registry holds, and a deliberately broken copy of each design makes its
property fail with a counterexample trace (the proofs bite)."""

import dataclasses
import json
import re
from unittest import mock

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.lib.fifo import SyncFIFOBuffered

from bertforge.generators import cli
from bertforge.generators.blocks import BLOCKS
from bertforge.rtl import accumulator as accumulator_module
from bertforge.rtl import systolic as systolic_module
from bertforge.rtl.stream import Queue
from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from bertforge.rtl import host_link as host_link_module
from bertforge.rtl.butterfly import ButterflyEngine
from bertforge.rtl.gelu import Gelu
from bertforge.rtl.gemm import GemmEngine
from bertforge.rtl.host_link import HostLink, crc8_step
from bertforge.rtl.softmax import Softmax
from bertforge.rtl.sparse import SparseArray
from bertforge.sim.formal import Proof, read_trace, replay, run_proof
from bertforge.rtl.tile_scheduler import TileScheduler, chunk_layout, command_layout
from bertforge.sim.butterfly_formal import butterfly_proofs
from bertforge.sim.gelu_formal import gelu_proofs
from bertforge.sim.gemm_formal import _accumulator, accumulator_proofs, engine_proofs, scheduler_proofs
from bertforge.sim.host_link_formal import host_link_proofs
from bertforge.sim.queue_formal import QueueSpec, queue_proofs
from bertforge.sim.softmax_formal import softmax_proofs
from bertforge.sim.sparse_formal import sparse_proofs
from bertforge.sim.systolic_formal import systolic_proofs

pytestmark = pytest.mark.formal


def _by_name(proofs, name, config=None):
    found = [p for p in proofs if p.name == name and (config is None or p.config == config)]
    assert len(found) == 1, (name, config, [p.config for p in proofs])
    return found[0]


# --- every proof of the registry holds --------------------------------------------

#: The blocks with proofs (every one ``bertforge prove`` runs).
PROVED = [name for name, block in BLOCKS.items() if block.proofs]


def _params(proofs):
    """(:attr:`Proof.slow` leaves all but a few properties per block to
    ``-m slow``: each SymbiYosys run spends seconds starting up.)"""
    return [pytest.param(p, marks=[pytest.mark.slow] if p.slow else [],
                         id=f"{p.block}-{p.config}-{p.name}".replace(" ", "_"))
            for p in proofs]


def test_every_listed_block_has_proofs():
    assert {"systolic", "gemm", "sparse", "butterfly", "softmax", "layernorm", "gelu", "queue",
            "host_link"} <= set(PROVED)
    gemm = {p.name for p in BLOCKS["gemm"].proofs()}
    assert {"done_valid_held", "rd_req_payload_held", "wr_req_valid_held", "a_in_bounds"} <= gemm


def test_each_block_proofs_live_with_its_name():
    """A block's properties are in ``sim/<block>_formal.py``; the shared
    kit (``formal_specs.py``) holds none."""
    for name in PROVED:
        proofs = BLOCKS[name].proofs
        assert (proofs.__module__, proofs.__name__) == (f"bertforge.sim.{name}_formal",
                                                       f"{name}_proofs")


@pytest.mark.parametrize("proof", _params([p for name in PROVED for p in BLOCKS[name].proofs()]))
def test_proof_holds(proof, tmp_path):
    result = run_proof(proof, tmp_path)
    expected = {"prove": "proved", "bmc": "bounded", "cover": "reached"}[proof.method]
    assert result.status == expected, result.line()
    assert result.ok and result.depth == proof.depth
    if proof.method == "cover":
        assert result.trace.exists()


# --- broken copies: each property fails, with a counterexample ---------------------

class _BrokenQueue(Queue):
    """Queue with one wire changed by ``fault(m, fifo)``: a list of statements
    replacing the named connections."""

    def __init__(self, fault, **kwargs):
        super().__init__(**kwargs)
        self.fault = fault

    def elaborate(self, platform):
        m = Module()
        fifo = m.submodules.fifo = SyncFIFOBuffered(width=self._width, depth=self.depth)
        wires = {
            "w_data": fifo.w_data.eq(self.i.payload), "w_en": fifo.w_en.eq(self.i.valid),
            "i_ready": self.i.ready.eq(fifo.w_rdy), "o_payload": self.o.payload.eq(fifo.r_data),
            "o_valid": self.o.valid.eq(fifo.r_rdy), "r_en": fifo.r_en.eq(self.o.ready),
            "level": self.level.eq(fifo.level),
        }
        wires.update(self.fault(self, fifo))
        m.d.comb += list(wires.values())
        return m


BROKEN_QUEUES = {
    # a stall on a full queue still takes the input beat: dropped
    "drops_beat_when_full_and_stalled": (
        lambda q, fifo: {"i_ready": q.i.ready.eq(fifo.w_rdy | ~q.o.ready)},
        ["order", "level_counts"]),
    # valid withdrawn while the queue is full, though o is stalled
    "drops_valid_when_full": (
        lambda q, fifo: {"o_valid": q.o.valid.eq(fifo.r_rdy & (fifo.level != q.depth))},
        ["o_valid_held"]),
    # the payload changes with the fill level while o is stalled
    "payload_follows_level": (
        lambda q, fifo: {"o_payload": q.o.payload.eq(fifo.r_data ^ (fifo.level == q.depth))},
        ["o_payload_held"]),
    # an empty queue offers the input beat as well: a beat from nothing
    "offers_beat_when_empty": (
        lambda q, fifo: {"o_valid": q.o.valid.eq(fifo.r_rdy | q.i.valid)},
        ["no_beat_from_nothing"]),
    # writes whatever is offered, taken or not (ready low): beats from nothing
    "writes_without_handshake": (lambda q, fifo: {"i_ready": q.i.ready.eq(0)},
                                 ["order", "level_counts"]),
    # a queue that never takes anything: its bmc properties hold vacuously,
    # the cover shows it
    "dead": (lambda q, fifo: {"i_ready": q.i.ready.eq(0), "w_en": fifo.w_en.eq(0)},
             ["reaches_full_stall"]),
}


@pytest.mark.parametrize("fault", [pytest.param(fault, marks=[] if fault == "offers_beat_when_empty"
                                                 else [pytest.mark.slow])
                                   for fault in BROKEN_QUEUES])
def test_broken_queue_fails(fault, tmp_path):
    change, broken = BROKEN_QUEUES[fault]
    proofs = queue_proofs(make=lambda: _BrokenQueue(change, shape=4, depth=3),
                          label=f"broken {fault}")
    for name in broken:
        result = run_proof(_by_name(proofs, name), tmp_path)
        assert result.status == "failed", result.line()
        assert not result.ok and "FAILED" in result.line()
        if result.proof.method != "cover":
            assert result.trace.suffix == ".vcd" and result.trace.stat().st_size > 0
            assert "dut" in result.trace.read_text()


def _output_queue(m, c, depth, rows, *, extra_credits=0, glitch=False):
    """A copy of :func:`bertforge.rtl.systolic.output_queue` with a fault:
    ``extra_credits`` credits too many (rows in flight can meet a full
    queue), or with ``glitch``, ``c.valid`` withdrawn in the cycle a tile's
    last beat is taken."""
    queue = m.submodules.queue = Queue(shape=c.payload.shape(), depth=depth)
    credits = Signal(range(depth + extra_credits + 1), init=depth + extra_credits)
    reserve = Signal(range(rows + 1))
    m.d.comb += [c.payload.eq(queue.o.payload), queue.o.ready.eq(c.ready),
                 c.valid.eq(queue.o.valid & ~(glitch & (reserve != 0)))]
    m.d.sync += credits.eq(credits - reserve + (c.valid & c.ready))
    return queue, credits, reserve


def _leaky_output_queue(m, c, depth, rows):
    return _output_queue(m, c, depth, rows, extra_credits=2)


def _glitchy_output_queue(m, c, depth, rows):
    return _output_queue(m, c, depth, rows, glitch=True)




def _patched_array(output_queue):
    class Broken(SystolicArray):
        def elaborate(self, platform):
            with mock.patch.object(systolic_module, "output_queue", output_queue):
                return super().elaborate(platform)
    return Broken


@pytest.mark.parametrize("fault, output_queue, name, dataflow", [
    pytest.param(*case, marks=[] if case[0] == "valid_drops" and case[3] == "os"
                 else [pytest.mark.slow])
    for case in [(fault, queue, name, dataflow) for dataflow in ("os", "ws")
                 for fault, queue, name in [
                     ("credits_off_by_two", _leaky_output_queue, "queue_never_refuses"),
                     ("credits_off_by_two", _leaky_output_queue, "rows_conserved"),
                     ("valid_drops", _glitchy_output_queue, "c_valid_held")]]])
def test_broken_systolic_fails(fault, output_queue, name, dataflow, tmp_path):
    config = SystolicConfig(rows=2, cols=3, dataflow=dataflow, acc_width=16)
    proofs = systolic_proofs(make=_patched_array(output_queue), config=config, data=True)
    result = run_proof(_by_name(proofs, name), tmp_path)
    assert result.status == "failed", result.line()
    assert result.trace.suffix == ".vcd" and result.trace.stat().st_size > 0


class _BrokenScheduler(wiring.Component):
    """A tile scheduler with a fault on its chunk port: ``"a_base_plus_one"``
    (an off-by-one in A's address) or ``"error_twice"`` (a bad command's
    error descriptor given twice)."""

    def __init__(self, config, fault):
        self.config, self.fault = config, fault
        super().__init__({"cmd": In(stream.Signature(command_layout(config))),
                          "chunk": Out(stream.Signature(chunk_layout(config)))})

    def elaborate(self, platform):
        m = Module()
        inner = m.submodules.inner = TileScheduler(self.config)
        wiring.connect(m, wiring.flipped(self.cmd), inner.cmd)
        d = inner.chunk.payload
        m.d.comb += [self.chunk.payload.eq(d), self.chunk.valid.eq(inner.chunk.valid),
                     inner.chunk.ready.eq(self.chunk.ready)]
        if self.fault == "a_base_plus_one":
            m.d.comb += self.chunk.payload.a_base.eq(d.a_base + 1)
        else:
            again = Signal()
            held = Signal.like(self.chunk.payload)
            took_error = Signal()
            m.d.comb += [inner.chunk.ready.eq(self.chunk.ready & ~again),
                         took_error.eq(inner.chunk.valid & self.chunk.ready & ~again & d.error)]
            with m.If(again):
                m.d.comb += [self.chunk.valid.eq(1), self.chunk.payload.eq(held)]
            with m.If(again & self.chunk.ready):
                m.d.sync += again.eq(0)
            with m.If(took_error):
                m.d.sync += [again.eq(1), held.eq(d)]
        return m


@pytest.mark.parametrize("fault, name", [
    pytest.param("a_base_plus_one", "a_in_bounds", marks=pytest.mark.slow),
    ("error_twice", "bad_gives_one_descriptor"),
])
def test_broken_scheduler_fails(fault, name, tmp_path):
    proofs = scheduler_proofs(make=lambda config: _BrokenScheduler(config, fault))
    result = run_proof(_by_name(proofs, name), tmp_path)
    assert result.status == "failed", result.line()
    assert result.trace.suffix == ".vcd" and result.trace.stat().st_size > 0


class _SwappedAccumulator(wiring.Component):
    """The GEMM engine's accumulator with its two read ports' data swapped:
    the add's base taken from the wrong source (a block's first chunk that
    accumulates from the buffer's word, later chunks from old C)."""

    def __init__(self, config):
        self.inner = _accumulator(config)
        super().__init__(self.inner.signature)

    def elaborate(self, platform):
        m = Module()
        inner = m.submodules.inner = self.inner
        for name in ("chunk", "c"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(inner, name))
        m.d.comb += [self.wr.addr.eq(inner.wr.addr), self.wr.data.eq(inner.wr.data),
                     self.wr.en.eq(inner.wr.en), self.committed.eq(inner.committed),
                     inner.released.eq(self.released),
                     self.rd.addr.eq(inner.rd.addr), self.old.addr.eq(inner.old.addr),
                     inner.rd.data.eq(self.old.data), inner.old.data.eq(self.rd.data)]
        return m


@pytest.mark.parametrize("fault", ["wraps", "base_swapped"])
def test_broken_accumulator_fails(fault, tmp_path, monkeypatch):
    """``sums_saturate`` fails for an accumulator whose add wraps instead of
    saturating (its ``clamp`` replaced by truncation) and for one whose
    add's base comes from the wrong buffer."""
    make = None
    if fault == "wraps":
        monkeypatch.setattr(accumulator_module, "clamp", lambda value, width: value[:width])
    else:
        make = _SwappedAccumulator
    result = run_proof(_by_name(accumulator_proofs(make=make), "sums_saturate"), tmp_path)
    assert result.status == "failed", result.line()
    assert result.trace.suffix == ".vcd" and result.trace.stat().st_size > 0


def test_spec_rejects_unknown_property():
    from bertforge.sim.formal import FormalError
    from amaranth.back import rtlil
    spec = QueueSpec(lambda: Queue(shape=2, depth=2), only=("no_such_property",))
    with pytest.raises(FormalError, match="no_such_property"):
        rtlil.convert(spec, ports=[spec.cd.clk], platform="formal")


def test_proof_method_checked():
    with pytest.raises(ValueError, match="method"):
        Proof(block="queue", name="x", config="", spec=None, method="induct", depth=3)


# --- bertforge prove ------------------------------------------------------------

def test_cli_prove_lines_and_exit_code(tmp_path, monkeypatch, capsys):
    quick = [p for p in queue_proofs() if p.name in ("o_valid_held", "reaches_full_stall")]
    monkeypatch.setitem(BLOCKS, "queue", dataclasses.replace(BLOCKS["queue"], proofs=lambda: quick))
    bench = tmp_path / "bench"
    assert cli.main(["prove", "queue", "--out", str(tmp_path), "--bench", str(bench)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("queue [shape=4 depth=3] o_valid_held: proved (k-induction, depth 7)")
    assert "reached within 16 (cover)" in out[1]
    assert out[3].startswith("2 of 2 properties hold")    # then the bench's table
    rows = json.loads((bench / "bench.json").read_text())["results"]
    assert [(r["property"], r["method"], r["status"], r["depth"]) for r in rows] == [
        ("o_valid_held", "prove", "proved", 7), ("reaches_full_stall", "cover", "reached", 16)]
    table = (bench / "bench.md").read_text()
    assert "| queue | shape=4 depth=3 | o_valid_held | prove | proved (7) |" in table
    assert "- 2 of 2 properties hold" in table

    change, _ = BROKEN_QUEUES["drops_valid_when_full"]
    broken = [p for p in queue_proofs(make=lambda: _BrokenQueue(change, shape=4, depth=3),
                                      label="broken") if p.name == "o_valid_held"]
    monkeypatch.setitem(BLOCKS, "queue", dataclasses.replace(BLOCKS["queue"], proofs=lambda: broken))
    assert cli.main(["prove", "queue", "--out", str(tmp_path), "--depth", "5"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("queue [broken] o_valid_held: FAILED: ")
    trace, script = out[0].split("FAILED: ")[1].split(" [")[0].split(" (replay: python3 ")
    assert trace.endswith("trace.vcd") and script.endswith("replay.py)")
    assert out[-1].startswith("0 of 1 properties hold")


@pytest.mark.slow
def test_cli_prove_reports_methods_and_total(tmp_path, monkeypatch, capsys):
    names = ("bad_crc_never_runs", "first_output")
    quick = [_by_name(host_link_proofs(), name) for name in names]
    monkeypatch.setitem(BLOCKS, "host_link",
                        dataclasses.replace(BLOCKS["host_link"], proofs=lambda: quick))
    assert cli.main(["prove", "host_link", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("host_link [design_id=1] bad_crc_never_runs (with crc_tracks, "
                             "state_tracks, length_tracks, writes_after_good): proved "
                             "(k-induction, depth 4) [")
    assert out[1].startswith("host_link [design_id=1] first_output: reached within 12 (cover)")
    assert re.fullmatch(r"methods: 1 proved by k-induction \([\d.]+ s\); "
                        r"1 covers reached \([\d.]+ s\)", out[2])
    assert re.fullmatch(r"2 of 2 properties hold \([\d.]+ s\)", out[3])


@pytest.mark.parametrize("argv, message", [
    (["prove", "nosuch"], "no proofs for nosuch (blocks with proofs: "),
    (["prove", "gelu", "--depth", "0"], "--depth must be at least 1, not 0"),
    (["prove", "--depth", "x"], "argument --depth: invalid int value: 'x'"),
])
def test_cli_prove_bad_input(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


# --- broken copies of the new property classes ---------------------------------

class _BrokenOutput(wiring.Component):
    """``make()`` with one fault on its output stream ``port``, every other
    port passed through: ``"valid_drops"`` (``valid`` withdrawn the cycle
    after a stall), ``"payload_changes"`` (the payload's low bit flips
    while stalled), ``"waits_for_ready"`` (``valid`` only with ``ready``:
    a producer that waits for ``ready``), ``"one_cycle_late"`` (a register
    stage that obeys the rules but adds a cycle of latency)."""

    def __init__(self, make, port, fault):
        self.inner, self.port, self.fault = make(), port, fault
        super().__init__(dict(self.inner.signature.members))

    def elaborate(self, platform):
        m = Module()
        inner = m.submodules.inner = self.inner
        for name, member in self.signature.members.items():
            mine, theirs = getattr(self, name), getattr(inner, name)
            if name == self.port:
                continue
            if member.is_port:
                m.d.comb += (theirs.eq(mine) if member.flow == In else mine.eq(theirs))
            elif member.flow == In:
                wiring.connect(m, wiring.flipped(mine), theirs)
            else:
                wiring.connect(m, theirs, wiring.flipped(mine))
        mine, theirs = getattr(self, self.port), getattr(inner, self.port)
        if self.fault == "one_cycle_late":
            full = Signal()
            m.d.comb += [mine.valid.eq(full), theirs.ready.eq(~full | mine.ready)]
            with m.If(theirs.valid & theirs.ready):
                m.d.sync += [full.eq(1), mine.payload.eq(theirs.payload)]
            with m.Elif(mine.ready):
                m.d.sync += full.eq(0)
            return m
        stalled = Signal()
        m.d.sync += stalled.eq(theirs.valid & ~mine.ready)
        m.d.comb += [mine.payload.eq(theirs.payload), mine.valid.eq(theirs.valid),
                     theirs.ready.eq(mine.ready)]
        if self.fault == "valid_drops":
            m.d.comb += mine.valid.eq(theirs.valid & ~stalled)
            m.d.comb += theirs.ready.eq(mine.ready & ~stalled)
        elif self.fault == "payload_changes":
            flip = Signal()
            m.d.sync += flip.eq(flip ^ stalled)
            m.d.comb += mine.payload.as_value()[0].eq(theirs.payload.as_value()[0] ^ flip)
        elif self.fault == "waits_for_ready":
            m.d.comb += mine.valid.eq(theirs.valid & mine.ready)
        return m


def _broken(proofs_of, port, fault):
    return proofs_of(make=lambda config: _BrokenOutput(lambda: _build(proofs_of, config), port,
                                                       fault))


def _build(proofs_of, config):
    return {sparse_proofs: SparseArray, gelu_proofs: Gelu, engine_proofs: GemmEngine,
            softmax_proofs: Softmax, butterfly_proofs: ButterflyEngine}[proofs_of](config)


@pytest.mark.parametrize("proofs_of, port, fault, name, depth", [
    pytest.param(gelu_proofs, "y", "valid_drops", "y_valid_held", 16, marks=pytest.mark.slow),
    pytest.param(gelu_proofs, "y", "payload_changes", "y_payload_held", 16,
                 marks=pytest.mark.slow),
    pytest.param(gelu_proofs, "y", "waits_for_ready", "y_valid_before_ready", None,
                 marks=pytest.mark.slow),
    (gelu_proofs, "y", "one_cycle_late", "latency", None),
    pytest.param(sparse_proofs, "c", "one_cycle_late", "latency", None, marks=pytest.mark.slow),
    pytest.param(softmax_proofs, "y", "one_cycle_late", "latency", None, marks=pytest.mark.slow),
    pytest.param(butterfly_proofs, "y", "one_cycle_late", "latency", None,
                 marks=pytest.mark.slow),
    pytest.param(engine_proofs, "done", "one_cycle_late", "latency", None,
                 marks=pytest.mark.slow),
    # the write the old cover never reached: a writer that waits for ready
    pytest.param(engine_proofs, "wr_req", "waits_for_ready", "wr_req_valid_before_ready", None,
                 marks=pytest.mark.slow),
    # the engine's first read request comes ~20 cycles after a command
    pytest.param(engine_proofs, "rd_req", "payload_changes", "rd_req_payload_held", 28,
                 marks=pytest.mark.slow),
], ids=lambda value: getattr(value, "__name__", value))
def test_broken_stream_fails(proofs_of, port, fault, name, depth, tmp_path):
    """(k-induction of a broken copy does not close; bmc of ``depth``
    cycles, deep enough to reach a stall of the output, gives the
    counterexample.)"""
    proof = _by_name(_broken(proofs_of, port, fault), name)
    if proof.method == "prove":
        assert not run_proof(proof, tmp_path).ok
    if depth:
        proof = dataclasses.replace(proof, method="bmc", depth=depth)
    result = run_proof(proof, tmp_path)
    assert result.status == "failed", result.line()
    if result.proof.method != "cover":
        assert result.trace.suffix == ".vcd" and "inner" in result.trace.read_text()


# --- the timing bounds are the cycle model's, and tight -------------------------

#: The timing checks (bmc, fair environment) of every block.
TIMED = [p for name in PROVED for p in BLOCKS[name].proofs()
         if p.name == "latency" or p.name.endswith("_valid_before_ready")]

#: Cycles the cycle model's bound is above the true one, where the model
#: cannot say more (by block, config and proof; the serial engine's bounds
#: are exact): the engine's ``START`` and ``END`` each lump two spans
#: (command to first read and last read to the array; array to first write
#: and last write to completion), so its first read request (13 cycles
#: after the command, 22 by the model) and first write (50, 51 by the
#: model) come earlier than the model's bounds.
SLACK = {("gemm", "engine 2x2 os", "rd_req_valid_before_ready"): 9,
         ("gemm", "engine 2x2 os", "wr_req_valid_before_ready"): 1}


def _tightened(proof, cycles):
    """``proof`` with its timing bounds ``cycles`` lower."""
    def spec(only):
        built = proof.spec(only)
        timing = built.timing
        built.timing = dataclasses.replace(
            timing, bound=timing.bound - cycles,
            ports={port: bound - cycles for port, bound in timing.ports.items()})
        return built
    return dataclasses.replace(proof, spec=spec)


def _timed_params():
    quick = {("gelu", "latency")}
    return [pytest.param(p, marks=[] if (p.block, p.name) in quick else [pytest.mark.slow],
                         id=f"{p.block}-{p.config}-{p.name}".replace(" ", "_"))
            for p in TIMED]


def test_every_block_has_timing_checks():
    """Every listed block (the GEMM block: its engine): each output
    stream's valid without ready, by bmc on the property's cone of
    influence (the host link's without: its frame buffer is 8 kbit); and
    a latency check."""
    timed = {(p.block, p.config, p.name) for p in TIMED}
    for name in ("systolic", "gemm", "sparse", "butterfly", "softmax", "layernorm", "gelu",
                 "host_link"):
        proofs = [p for p in BLOCKS[name].proofs() if p.name.endswith("_valid_held")
                  and not p.config.startswith(("scheduler",     # inside the engine
                                               "axi"))]         # the AXI master: no timing bound yet
        assert proofs
        for proof in proofs:
            port = proof.name[:-len("_valid_held")]
            assert (name, proof.config, f"{port}_valid_before_ready") in timed
            if name != "host_link":
                assert (name, proof.config, "latency") in timed
    assert all(p.method == "bmc" and (p.cone or p.block == "host_link") for p in TIMED)


@pytest.mark.parametrize("proof", _timed_params())
def test_timing_bound_is_tight(proof, tmp_path):
    """One cycle less than the bound fails (below the model's bound by its
    :data:`SLACK`): the bound is the cycle model's, not loose, and the job
    does start within the check's depth (the check is not vacuous); the
    counterexample, found on the cone of influence, fails the same check
    when replayed on the whole design in amaranth.sim."""
    tight = _tightened(proof, SLACK.get((proof.block, proof.config, proof.name), 0) + 1)
    result = run_proof(tight, tmp_path)
    assert result.status == "failed", result.line()
    # the counterexample of the cone replays on the whole design
    assert replay(tight, result.trace).properties == (proof.name,)


@pytest.mark.slow
def test_broken_output_still_proves_the_rest(tmp_path):
    """A stage that adds a cycle keeps the stream rules (the faults above
    are each caught by their own property, not by any)."""
    proofs = _broken(gelu_proofs, "y", "one_cycle_late")
    for name in ("y_valid_held", "y_payload_held"):
        assert run_proof(_by_name(proofs, name), tmp_path).status == "proved"


class _CrcBlindLink(HostLink):
    """A host link whose CRC register is off by one bit: it takes frames
    whose CRC byte is wrong (and rejects right ones)."""

    def elaborate(self, platform):
        with mock.patch.object(host_link_module, "crc8_step",
                               lambda crc, byte: crc8_step(crc, byte) ^ 1):
            return super().elaborate(platform)


@pytest.mark.slow
@pytest.mark.parametrize("name, depth", [("bad_crc_never_runs", 6), ("bad_crc_never_writes", 11)])
def test_broken_host_link_fails(name, depth, tmp_path):
    """Proved by bmc alone (no parser invariants, which would fail first),
    so the failure is the property's own."""
    proof = dataclasses.replace(
        _by_name(host_link_proofs(make=lambda: _CrcBlindLink(design_id=1), label="crc blind"),
                 name), method="bmc", depth=depth, together=())
    result = run_proof(proof, tmp_path)
    assert result.status == "failed", result.line()
    assert replay(proof, result.trace).properties == (name,)


# --- counterexample replay ---------------------------------------------------------

def test_counterexample_replays_in_amaranth_sim(tmp_path):
    """A failed proof gives a VCD, a replay script, and :func:`replay` runs
    the counterexample in amaranth.sim (no SymbiYosys, no cocotb): the same
    property fails, at the cycle before the trace's last step."""
    proof = _by_name(_broken(gelu_proofs, "y", "valid_drops"), "y_valid_held")
    proof = dataclasses.replace(proof, method="bmc", depth=8)
    result = run_proof(proof, tmp_path)
    assert result.status == "failed"
    steps = read_trace(result.trace)
    assert {"x_valid", "x_payload", "y_ready"} <= set(steps[0])
    assert "(replay: python3 " in result.line() and result.replay_script.exists()
    assert "replay(proofs[0]" in result.replay_script.read_text()
    replayed = replay(proof, result.trace, vcd=tmp_path / "replay.vcd")
    assert replayed.failed and not replayed.diverged
    assert replayed.properties == ("y_valid_held",) and replayed.cycle == len(steps) - 2
    assert "y_valid_held fails at cycle" in replayed.message
    assert "inner" in (tmp_path / "replay.vcd").read_text()


@pytest.mark.slow
def test_replay_of_a_passing_run_finds_nothing(tmp_path):
    """The replay checks, it does not assume: the counterexample of the
    broken copy replayed on the good design fails nothing."""
    broken = dataclasses.replace(_by_name(_broken(gelu_proofs, "y", "valid_drops"),
                                          "y_valid_held"), method="bmc", depth=8)
    result = run_proof(broken, tmp_path)
    good = _by_name(gelu_proofs(), "y_valid_held")
    replayed = replay(good, result.trace)
    assert not replayed.failed and replayed.message in (
        "no assertion fails in the replay", f"the replay left the counterexample at cycle "
                                            f"{replayed.cycle}")
