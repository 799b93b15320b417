"""The formal properties of the N:M sparse array (see :mod:`bertforge.sim.formal`): its
:class:`~bertforge.sim.formal_specs.StreamSpec` proofs.
"""

from bertforge.rtl.sparse import SparseArray, SparseConfig
from .formal_specs import Timing, job_end, last_out, stream_proofs

__all__ = ["SPARSE_CONFIG", "sparse_proofs"]


#: The small config of the proofs.
SPARSE_CONFIG = SparseConfig(rows=2, cols=2, m_max=4, acc_width=16)


def sparse_proofs(*, make=None, config=SPARSE_CONFIG):
    """The sparse array's stream proofs; ``first_output``: a one-beat tile's
    first result row within :func:`~bertforge.sim.sparse_cycles.sparse_cycles`
    of it; ``latency``: a tile's last row within ``sparse_cycles`` of a
    one-beat tile less 1 of its last beat."""
    from .sparse_cycles import sparse_cycles
    build = make or SparseArray
    bound = sparse_cycles(config, [1]) - 1
    timing = Timing(start=job_end("a"), done=last_out("c"), lead=2, bound=bound,
                    ports={"c": bound - (config.rows - 1)})     # a tile's first row
    return stream_proofs("sparse", f"{config.rows}x{config.cols} m_max={config.m_max}",
                         lambda: build(config), timing=timing,
                         first_output=sparse_cycles(config, [1]) + 1)
