"""The formal properties of the LayerNorm unit (see :mod:`bertforge.sim.formal`): its
:class:`~bertforge.sim.formal_specs.StreamSpec` proofs.
"""

from bertforge.rtl.layernorm import LayerNorm, LayerNormConfig
from .formal_specs import Timing, job_end, row_bound, stream_proofs, took

__all__ = ["LAYERNORM_CONFIG", "layernorm_proofs"]


#: The small config of the proofs.
LAYERNORM_CONFIG = LayerNormConfig(lanes=2, h_max=8)


def layernorm_proofs(*, make=None, config=LAYERNORM_CONFIG):
    """LayerNorm, 2 lanes; ``first_output`` within the cycles of a one-beat
    vector (:func:`~bertforge.sim.layernorm_cycles.layernorm_cycles`);
    ``latency``: a vector's first output within the cycle model's cycles
    of its last beat."""
    from .layernorm_cycles import layernorm_cycles
    build = make or LayerNorm
    beats = config.h_max // config.lanes
    timing = Timing(start=job_end("x"), done=lambda d: took(d.y), lead=beats,
                    bound=row_bound(lambda b: layernorm_cycles(config, [b * config.lanes]),
                                     beats))
    return stream_proofs("layernorm", f"lanes={config.lanes} h_max={config.h_max}",
                         lambda: build(config), timing=timing,
                         first_output=layernorm_cycles(config, [config.lanes]) + 1)
