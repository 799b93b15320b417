"""Formal proofs (SymbiYosys from the PyPI wheels): every proof of the
registry holds, and a deliberately broken copy of each design makes its
property fail with a counterexample trace (the proofs bite)."""

import dataclasses
from unittest import mock

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.lib.fifo import SyncFIFOBuffered

from bertforge.generators import cli
from bertforge.generators.blocks import BLOCKS
from bertforge.rtl import systolic as systolic_module
from bertforge.rtl.stream import Queue
from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from bertforge.sim.formal import Proof, run_proof
from bertforge.rtl.tile_scheduler import TileScheduler, chunk_layout, command_layout
from bertforge.sim.formal_specs import QueueSpec, queue_proofs, scheduler_proofs, systolic_proofs

pytestmark = pytest.mark.formal


def _by_name(proofs, name, config=None):
    found = [p for p in proofs if p.name == name and (config is None or p.config == config)]
    assert len(found) == 1, (name, config, [p.config for p in proofs])
    return found[0]


# --- every proof of the registry holds --------------------------------------------

#: Proofs of the scheduler that take 10-60 s each (its spec's byte-span
#: check multiplies): in the slow run.
SLOW = {"error_iff_bad", "a_in_bounds", "b_in_bounds", "c_in_bounds"}


def _params(proofs):
    return [pytest.param(p, marks=[pytest.mark.slow] if p.block == "gemm" and p.name in SLOW
                         else [], id=f"{p.block}-{p.config}-{p.name}".replace(" ", "_"))
            for p in proofs]


@pytest.mark.parametrize("proof", _params(BLOCKS["queue"].proofs() + BLOCKS["systolic"].proofs()
                                          + BLOCKS["gemm"].proofs()))
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


@pytest.mark.parametrize("fault", BROKEN_QUEUES)
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


@pytest.mark.parametrize("dataflow", ["os", "ws"])
@pytest.mark.parametrize("fault, output_queue, name", [
    ("credits_off_by_two", _leaky_output_queue, "queue_never_refuses"),
    ("valid_drops", _glitchy_output_queue, "c_valid_held"),
])
def test_broken_systolic_fails(fault, output_queue, name, dataflow, tmp_path):
    config = SystolicConfig(rows=2, cols=3, dataflow=dataflow, acc_width=16)
    proofs = systolic_proofs(make=_patched_array(output_queue), configs=[config])
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
    assert cli.main(["prove", "queue", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("queue [shape=4 depth=3] o_valid_held: proved (k-induction, depth 7)")
    assert "reached within 16 (cover)" in out[1]
    assert out[-1].startswith("2 of 2 properties hold")

    change, _ = BROKEN_QUEUES["drops_valid_when_full"]
    broken = [p for p in queue_proofs(make=lambda: _BrokenQueue(change, shape=4, depth=3),
                                      label="broken") if p.name == "o_valid_held"]
    monkeypatch.setitem(BLOCKS, "queue", dataclasses.replace(BLOCKS["queue"], proofs=lambda: broken))
    assert cli.main(["prove", "queue", "--out", str(tmp_path), "--depth", "5"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("queue [broken] o_valid_held: FAILED: ")
    assert out[0].split("FAILED: ")[1].split(" [")[0].endswith("trace.vcd")
    assert out[-1].startswith("0 of 1 properties hold")


def test_cli_prove_unknown_block(capsys):
    assert cli.main(["prove", "gelu"]) == 2
    assert "no proofs for gelu" in capsys.readouterr().err
