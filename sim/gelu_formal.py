"""The formal properties of the GELU unit (see :mod:`bertforge.sim.formal`): its
:class:`~bertforge.sim.formal_specs.StreamSpec` proofs.
"""

from bertforge.rtl.gelu import Gelu, GeluConfig
from .formal_specs import Timing, stream_proofs, took

__all__ = ["GELU_CONFIG", "gelu_proofs"]


#: The small config of the proofs.
GELU_CONFIG = GeluConfig(lanes=2)


def gelu_proofs(*, make=None, config=GELU_CONFIG):
    """GELU, 2 lanes; ``first_output`` within ``gelu_cycles(config, 1)``;
    ``latency``: a beat's result within ``gelu_cycles(config, 1)`` less 1."""
    from .gelu_cycles import gelu_cycles
    build = make or Gelu
    timing = Timing(start=lambda spec, d: took(d.x), done=lambda d: took(d.y), lead=2,
                    bound=gelu_cycles(config, 1) - 1)
    return stream_proofs("gelu", f"lanes={config.lanes}", lambda: build(config), timing=timing,
                         first_output=gelu_cycles(config, 1) + 1,
                         quick=("y_valid_held", "latency", "y_valid_before_ready"))
