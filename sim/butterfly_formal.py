"""The formal properties of the butterfly engine (see :mod:`bertforge.sim.formal`): its
:class:`~bertforge.sim.formal_specs.StreamSpec` proofs.
"""

from bertforge.rtl.butterfly import MODES, ButterflyConfig, ButterflyEngine
from .formal_specs import Timing, last_out, one_command, stream_proofs, took

__all__ = ["BUTTERFLY_CONFIG", "BUTTERFLY_COMMAND", "butterfly_proofs"]


#: The small config of the proofs.
BUTTERFLY_CONFIG = ButterflyConfig(n_max=8)


#: The command of the butterfly engine's timing checks: an FFT of one group
#: of length-2 vectors.
BUTTERFLY_COMMAND = {"mode": MODES["fft"], "n": 2, "groups": 1}


def butterfly_proofs(*, make=None, config=BUTTERFLY_CONFIG):
    """The butterfly engine, ``n_max`` 8; ``first_output`` within the cycles
    of one group of length-2 vectors (``butterfly_cycles(config, 2, 1)``)
    after its command; the timing checks run that command,
    :data:`BUTTERFLY_COMMAND`: ``latency``, its last ``y`` beat within
    ``butterfly_cycles`` of the command's handshake (the loader takes
    ``x`` from the next cycle), and ``y`` valid within as many with
    ``y.ready`` low."""
    from .butterfly_cycles import butterfly_cycles
    build = make or ButterflyEngine
    n, groups = BUTTERFLY_COMMAND["n"], BUTTERFLY_COMMAND["groups"]
    bound = butterfly_cycles(config, n, groups * config.lanes)
    timing = Timing(start=lambda spec, d: took(d.cmd), done=last_out("y"), lead=2,
                    bound=bound, ports={"y": bound - (n - 1)},   # the first of n beats
                    environment=one_command("cmd", BUTTERFLY_COMMAND))
    return stream_proofs("butterfly", f"n_max={config.n_max} lanes={config.lanes}",
                         lambda: build(config), timing=timing,
                         first_output=butterfly_cycles(config, 2, 1) + 2)
