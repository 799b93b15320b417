"""cocotb drivers and monitors for ``amaranth.lib.stream`` ports.

A stream port ``x`` of an emitted component appears in Verilog as
``x__valid``, ``x__ready`` and ``x__payload`` (the payload layout flattened,
first field in the low bits). One clock loop in :class:`StreamTB` steps every
driver and monitor once per cycle, which keeps Python's share per cycle small.

Sampling happens right after ``RisingEdge``, where cocotb reads the values
the signals had at the edge, so ``valid and ready`` there is exactly the
handshake the design saw. Payloads are ints, packed and unpacked with
:mod:`bertforge.rtl.payload`.
"""

import json
import os
import random

from cocotb.clock import Clock
from cocotb.triggers import RisingEdge

__all__ = ["StreamDriver", "StreamMonitor", "StreamTB", "read_spec", "unit_result", "finish"]


class StreamDriver:
    """Sends ``beats`` (payload ints) on input stream ``prefix``.

    Before each beat it inserts an idle cycle with probability ``gap``; once
    ``valid`` is up it holds the beat until ``ready``, as stream rules ask.
    """

    def __init__(self, dut, prefix, beats, rng, gap=0.0):
        self.valid = getattr(dut, f"{prefix}__valid")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.beats = list(beats)
        self.rng = rng
        self.gap = gap
        self.sent = 0
        self.offering = False
        self.valid.value = 0

    @property
    def done(self):
        return self.sent == len(self.beats)

    def sample(self):
        """After an edge: return True if a beat was taken at it."""
        if self.offering and self.ready.value:
            self.sent += 1
            self.offering = False
            return True
        return False

    def drive(self):
        """Before the next edge: offer the next beat, or idle."""
        if self.offering:
            return
        if self.done or (self.gap and self.rng.random() < self.gap):
            self.valid.value = 0
            return
        self.payload.value = self.beats[self.sent]
        self.valid.value = 1
        self.offering = True


class StreamMonitor:
    """Receives payload ints from output stream ``prefix``; ``ready`` is low
    with probability ``stall`` each cycle."""

    def __init__(self, dut, prefix, rng, stall=0.0):
        self.valid = getattr(dut, f"{prefix}__valid")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.rng = rng
        self.stall = stall
        self.received = []
        self.ready_now = False
        self.ready.value = 0

    def sample(self):
        if self.ready_now and self.valid.value:
            self.received.append(int(self.payload.value))
            return True
        return False

    def drive(self, force_ready=False):
        self.ready_now = force_ready or not (self.stall and self.rng.random() < self.stall)
        self.ready.value = int(self.ready_now)


class StreamTB:
    """Clock, reset and the per-cycle loop shared by every block's testbench."""

    def __init__(self, dut, seed):
        self.dut = dut
        self.rng = random.Random(seed)
        Clock(dut.clk, 10, unit="ns").start()

    async def reset(self, cycles=3):
        self.dut.rst.value = 1
        for _ in range(cycles):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0

    async def reset_mid_stream(self, drivers, monitors, cycles):
        """Offer the ``drivers``' beats for ``cycles`` cycles while every
        monitor holds ``ready`` low (the block fills with data it cannot
        give), then drop ``valid`` and reset the block: a run cut short.
        Returns the beats the drivers sent before the reset."""
        for monitor in monitors:
            monitor.ready_now = False
            monitor.ready.value = 0
        for _ in range(cycles):
            for driver in drivers:
                driver.drive()
            await RisingEdge(self.dut.clk)
            for driver in drivers:
                driver.sample()
        for driver in drivers:
            driver.valid.value = 0
        await self.reset()
        return [driver.sent for driver in drivers]

    async def run(self, drivers, monitors, expected, *, timeout, drain=64, coverage=None):
        """Run until every driver is done and monitor ``i`` has ``expected[i]``
        beats, then ``drain`` more cycles with ``ready`` high: any beat that
        arrives then is an extra (duplicated) one and fails the test.
        ``coverage`` (a :class:`bertforge.sim.funcov_tb.StreamCoverage`) is
        sampled every cycle before the drain.

        Returns ``(first_input_cycle, last_output_cycle)``.
        """
        first_in = last_out = None
        for driver in drivers:
            driver.drive()
        for monitor in monitors:
            monitor.drive()
        cycle = 0
        while not (all(d.done for d in drivers)
                   and all(len(m.received) >= n for m, n in zip(monitors, expected))):
            if cycle >= timeout:
                sent = [f"{d.sent}/{len(d.beats)}" for d in drivers]
                got = [f"{len(m.received)}/{n}" for m, n in zip(monitors, expected)]
                raise AssertionError(f"timeout after {cycle} cycles: sent {sent}, received {got}")
            await RisingEdge(self.dut.clk)
            for driver in drivers:
                if driver.sample() and first_in is None:
                    first_in = cycle
            if coverage is not None:
                coverage.sample()
            for monitor in monitors:
                if monitor.sample():
                    last_out = cycle
            for driver in drivers:
                driver.drive()
            for monitor in monitors:
                monitor.drive()
            cycle += 1
        for _ in range(drain):
            for monitor in monitors:
                monitor.drive(force_ready=True)
            await RisingEdge(self.dut.clk)
            for monitor in monitors:
                monitor.sample()
        for monitor, n in zip(monitors, expected):
            if len(monitor.received) != n:
                raise AssertionError(f"expected {n} output beats, got {len(monitor.received)}")
        return first_in, last_out


def read_spec():
    """The JSON spec of this run: the file the Verilator runner
    (:mod:`bertforge.sim.runner`) names in ``BERTFORGE_SPEC``."""
    with open(os.environ["BERTFORGE_SPEC"]) as f:
        return json.load(f)


def unit_result(spec, *, cycles, model, ideal, elements, mismatches, stalls, seconds, cover,
                **errors):
    """The result of a unit's run (softmax, layernorm, GELU): measured,
    modelled and ideal ``cycles``, ``elements`` per cycle, ``mismatches``
    against the golden model, whether there were ``stalls``, the unit's
    ``errors`` (``max_abs_err``, ...), the simulator's speed, the outputs'
    file and the functional coverage ``cover`` reports."""
    return {"cycles": cycles, "model_cycles": model, "ideal_cycles": ideal,
            "utilization": ideal / cycles, "elements_per_cycle": elements / cycles,
            "match": mismatches == 0, "mismatches": mismatches, "stalls": stalls, **errors,
            "sim_cycles_per_second": cycles / seconds, "outputs": spec["result_path"] + ".npz",
            "functional_coverage": cover.report()}


def finish(spec, result):
    """Write ``result`` to ``spec["result_path"]``, then fail the test if
    outputs differed from the golden model or, without stalls, the measured
    cycles differ from the cycle model."""
    with open(spec["result_path"], "w") as f:
        json.dump(result, f)
    mismatches = result["mismatches"]
    assert mismatches == 0, f"{mismatches} output values or last flags differ from the golden model"
    if not result["stalls"]:
        assert result["cycles"] == result["model_cycles"], (
            f"measured {result['cycles']} cycles, cycle model says {result['model_cycles']}")
