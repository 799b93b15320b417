"""Cycle model of :class:`~bertforge.rtl.encoder.EncoderTop` between
operations (reads only configs): what the sequencer and the stream adapters
add to the units' own cycle models.

Operations run one after another (the next starts the cycle after the
previous one's last completion); the commands of one operation (GEMMs of
several heads or independent projections) run back to back. A unit's busy
time is its own cycle model, from its first input to its last output
handshake: :func:`~bertforge.sim.gemm_cycles.gemm_cycles` for the commands of a
GEMM operation (with ``done_always_ready``: the top's engine completes with
its last write beat, as nothing holds its completions),
:func:`~bertforge.sim.softmax_cycles.softmax_cycles`,
:func:`~bertforge.sim.layernorm_cycles.layernorm_cycles`,
:func:`~bertforge.sim.gelu_cycles.gelu_cycles` for the elementwise units,
whose last output beat is written in the same cycle. Before that busy time
each operation waits :func:`operation_gap` cycles:

- GEMM: 0 (the engine counts from its command handshake).
- softmax, GELU: ``ADAPTER_FILL + lat``: dispatch (1), the read request
  reaches the memory's queue and is served (``lat`` + 2), the read port (1),
  the memory's output queue and the adapter's word queue (2).
- layernorm: ``ADAPTER_FILL + lat + 1 + H / lanes``: two words (x and the
  residual, or gamma and beta) before the first beat, and gamma/beta
  (``H / lanes`` beats) loaded before the first vector.

The low-bit top (``EncoderConfig.lowbit``) loads parameters of 4 bytes a
lane, one memory word a beat when ``4 * lanes`` is the memory word (both
shipped low-bit configs; measured there), so the reads set the pace:

- layernorm: ``ADAPTER_FILL + lat + 1 + 8 H / mem_bytes`` (two sources of
  ``4 H`` bytes: gamma|gamma2 and beta|beta2), and every output beat is two
  writes (the int16 residual, the int8 operand), so the unit's busy time
  is :func:`lowbit_layernorm_cycles`;
- GELU: ``ADAPTER_FILL + lat + 4 F / mem_bytes`` (the scale words).
- a GEMM with GELU on its writer (FFN 1; there is no GELU command):
  :func:`fused_gelu_cycles` more than the GEMM alone (its busy time:
  the scale words before the engine starts, the GELU unit after its last
  write beat).

This holds when memory answers one beat per cycle after ``lat`` cycles
(the adapters then feed their unit at one beat per cycle, so the unit models
apply unchanged); measured equal in Verilator by ``tests/test_encoder.py``.
"""

from bertforge.rtl.errors import ParameterError

__all__ = ["ADAPTER_FILL", "operation_gap", "lowbit_layernorm_cycles", "fused_gelu_cycles",
           "FUSED_GELU_TAIL"]

#: Cycles from an elementwise command's dispatch to its unit's first input,
#: less the memory's read latency (one source word needed).
ADAPTER_FILL = 6


def operation_gap(kind, lat, *, layernorm=None, length=None, mem_bytes=None):
    """Cycles an operation of class ``kind`` ("gemm", "softmax",
    "layernorm", "gelu") waits between the previous operation's end and its
    unit's first input; ``layernorm`` (its config) and ``length`` (H) for
    layernorm; in the low-bit top (``layernorm.second_output``) also the
    GELU's ``layernorm`` and ``length`` (F), and ``mem_bytes``."""
    lowbit = layernorm is not None and layernorm.second_output
    if kind == "gemm":
        return 0
    if kind == "softmax" or (kind == "gelu" and not lowbit):
        return ADAPTER_FILL + lat
    if kind == "gelu":
        return ADAPTER_FILL + lat + 4 * length // mem_bytes
    if kind == "layernorm" and lowbit:
        return ADAPTER_FILL + lat + 1 + 8 * length // mem_bytes
    if kind == "layernorm":
        return ADAPTER_FILL + lat + 1 + length // layernorm.lanes
    raise ParameterError(f"no encoder operation class {kind!r}")


def lowbit_layernorm_cycles(config, rows, length):
    """Busy cycles of a low-bit layernorm command (``rows`` vectors of
    ``length``): two writes an output beat, so after the first vector's
    statistics and normalize pass the output leaves one beat every two
    cycles, input running ahead into the unit's buffer."""
    from bertforge.rtl.layernorm import LN_OUT_LATENCY, LN_STATS_LATENCY
    beats = length // config.lanes
    return beats - 1 + LN_STATS_LATENCY + LN_OUT_LATENCY + 2 * rows * beats


#: Cycles of a GEMM with GELU on its writer beyond the engine's own (which
#: end with its last write beat: the top's engine has no completion queue,
#: ``gemm_cycles(..., done_always_ready=True)``) and the scale words' reads:
#: the engine's command after the last scale word, and its last write beat
#: through the adapter's word queue, the unpacker, the GELU unit
#: (:data:`~bertforge.rtl.gelu.GELU_LATENCY`) and the write. (7 while the
#: engine's completion still passed its queue, its 2 cycles counted in the
#: engine's own.)
FUSED_GELU_TAIL = 9


def fused_gelu_cycles(lat, length, mem_bytes):
    """Cycles a low-bit GEMM with GELU on its writer (``length``: N, the
    channels) takes beyond :func:`~bertforge.sim.gemm_cycles.gemm_cycles`
    of the same command: the GELU adapter's dispatch and its ``4 N``
    bytes of scale words (as a GELU command's gap), then
    :data:`FUSED_GELU_TAIL`."""
    return ADAPTER_FILL + lat + 4 * length // mem_bytes + FUSED_GELU_TAIL
