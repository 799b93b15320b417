"""Golden outputs of a streaming unit behind the board host link
(:mod:`bertforge.boards.norm_top`), for ``bertforge run --check`` and the
board testbench: one call per design, on whole input matrices."""

import numpy as np

from bertforge.rtl.softmax import softmax_scale
from bertforge.rtl.errors import ParameterError

__all__ = ["norm_golden"]


def norm_golden(design, unit, x, *, mask=None, scale=1.0, r=None, gamma=None, beta=None):
    """The unit's output for the rows / vectors ``x`` (2-D ints), as
    :func:`bertforge.boards.norm_host.run_softmax` (``mask``, ``scale``),
    :func:`~bertforge.boards.norm_host.run_layernorm` (``r``, ``gamma``, ``beta``:
    the gamma/beta the unit holds) and :func:`~bertforge.boards.norm_host.run_gelu`
    return it."""
    x = np.asarray(x, dtype=np.int64)
    if design == "softmax":
        from bertforge.sim.softmax_golden import softmax_golden
        scales = np.broadcast_to(np.asarray(scale, dtype=np.float64), (x.shape[0],))
        pairs = [softmax_scale(float(s)) for s in scales]
        return softmax_golden(unit, x, mask, [p[0] for p in pairs], [p[1] for p in pairs])
    if design == "layernorm":
        from bertforge.sim.layernorm_golden import layernorm_golden
        return np.stack([layernorm_golden(unit, x[v], None if r is None else np.asarray(r)[v],
                                          gamma, beta) for v in range(x.shape[0])]).astype(np.int64)
    if design == "gelu":
        from bertforge.sim.gelu_golden import gelu_golden
        return gelu_golden(unit, x)
    raise ParameterError(f"no streaming design named {design!r}")
