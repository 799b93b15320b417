"""The block descriptor: everything the tool knows about one block, in one place.

A block is one :class:`Block` entry in :data:`bertforge.generators.blocks.BLOCKS`.
The generic drivers (:func:`~bertforge.generators.simulate.run_sim`,
:func:`~bertforge.generators.simulate.run_bench`, ``generate``, ``presets``)
read only these fields, so adding a block adds no code anywhere else.
"""

import importlib
from dataclasses import dataclass, field
from typing import Callable, Mapping

__all__ = ["Block", "lazy"]


def lazy(path):
    """The function ``"package.module:name"``, its module imported at the
    first call: a registry entry loads none of the block's code until it
    runs. The stand-in keeps the function's ``__module__`` and ``__qualname__``."""
    module, _, name = path.partition(":")

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)
    call.__module__, call.__name__, call.__qualname__ = module, name, name
    return call


@dataclass(frozen=True)
class Block:
    """One block of the generator.

    Hardware: ``config`` (the frozen config dataclass), ``component``
    (config -> the Component ``generate`` emits), ``harness`` (for blocks
    simulated inside an HDL harness: ``(config, *extra) -> Verilog text`` of
    a module named ``<config.name>_harness``; None simulates the component
    itself), ``presets`` (name -> config, "default" first).

    Models: ``golden`` and ``cycles`` (the numpy golden and cycle models),
    ``testbench`` (cocotb module name).

    ``bertforge sim BLOCK``: ``make_config`` ``(block, args)`` -> config (default: the
    preset/TOML/field flags), ``add_sim_args`` (the block's own flags),
    ``user_files`` (argument names that mean "the user's data"),
    ``random_stimulus`` ``(config, args, rng)`` and ``user_stimulus``
    ``(config, args)`` -> a stimulus dict (``summary``: the sizes to report,
    ``title``, optional ``config`` replacing the flags' one, the data),
    ``run`` ``(config, stimulus, args)`` -> the result dict (testbench keys,
    ``phases``, ``output`` to save with ``--out``, optional ``checks``: the
    results whose exit code counts), ``summary_keys`` (result keys in the
    summary), ``report_keys`` (shown without ``--json``), ``report`` and
    ``check`` (replace the generic printout and exit code).

    ``bertforge bench BLOCK``: ``bench_help``, ``add_bench_args`` (parser)
    and ``bench`` (args -> exit code).

    ``board``: the board design (filled by the board side).

    ``bertforge prove BLOCK``: ``proofs`` (keyword arguments -> a list of
    :class:`bertforge.sim.formal.Proof`, the block's small configs).
    """

    name: str
    help: str
    config: type | None = None
    component: Callable | None = None
    harness: Callable | None = None
    presets: Mapping = field(default_factory=dict)
    golden: Callable | None = None
    cycles: Callable | None = None
    testbench: str | None = None
    make_config: Callable | None = None
    add_config_args: Callable | None = None
    add_sim_args: Callable | None = None
    user_files: tuple = ()
    random_stimulus: Callable | None = None
    user_stimulus: Callable | None = None
    run: Callable | None = None
    summary_keys: tuple = ()
    report_keys: tuple = ("cycles", "model_cycles", "ideal_cycles")
    report: Callable | None = None
    check: Callable | None = None
    bench_help: str | None = None
    add_bench_args: Callable | None = None
    bench: Callable | None = None
    board: "BoardDesign | None" = None
    proofs: Callable | None = None

    @property
    def simulates(self):
        return self.run is not None

