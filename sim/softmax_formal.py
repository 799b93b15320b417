"""The formal properties of the softmax unit (see :mod:`bertforge.sim.formal`): its
:class:`~bertforge.sim.formal_specs.StreamSpec` proofs.
"""

from bertforge.rtl.softmax import Softmax, SoftmaxConfig
from .formal_specs import Timing, job_end, row_bound, rows_of_at_most, stream_proofs, took

__all__ = ["SOFTMAX_CONFIG", "softmax_proofs"]


#: The small config of the proofs.
SOFTMAX_CONFIG = SoftmaxConfig(lanes=2, l_max=8)


def softmax_proofs(*, make=None, config=SOFTMAX_CONFIG):
    """Softmax, 2 lanes; ``first_output`` within the latency of a one-beat
    row (:func:`~bertforge.sim.softmax_cycles.softmax_latency`);
    ``latency``: a row's first output within the cycle model's cycles of
    its last beat (rows of 1 to ``beats_max`` beats)."""
    from .softmax_cycles import softmax_cycles, softmax_latency
    build = make or Softmax
    beats = config.beats_max
    timing = Timing(start=job_end("x"), done=lambda d: took(d.y), lead=beats,
                    bound=row_bound(lambda b: softmax_cycles(config, [b * config.lanes]), beats),
                    environment=rows_of_at_most("x", beats))
    return stream_proofs("softmax", f"lanes={config.lanes} l_max={config.l_max}",
                         lambda: build(config), timing=timing,
                         first_output=softmax_latency(config, 1) + 1)
