"""``bertforge.generators``: the top floor (nothing imports it). The block
registry, configs and presets, Verilog emission, the ``bertforge`` command
line, benchmarks, workload mapping and analysis.

The registry: ``blocks.py`` holds ``BLOCKS``, one
:class:`~bertforge.generators.block.Block` per block (config class,
component, presets, golden and cycle models, testbench, stimulus builders,
summary keys, bench, and its :class:`~bertforge.generators.board_design.BoardDesign`
if it has a board top: ``X_board.py``, the design's ``build`` and ``run``
hooks). Every command (``generate``, ``sim``, ``bench``,
``build``, ``run``, ``presets``) is one generic driver over that registry;
a block's own files here hold only what is its own:

==============  ===========================================================
block           files here
==============  ===========================================================
systolic        ``systolic_sim.py`` (tiles, the user's A/B), bench in ``bench.py``,
                ``systolic_board.py``
gemm            ``gemm_sim.py`` (memory images of GEMM problems), ``gemm_bench.py``,
                ``gemm_board.py`` (also the sparse_engine design: one top
                for either engine)
sparse          ``sparse_sim.py`` (a GEMM as tiles), ``sparse_bench.py``,
                ``sparse_board.py``
sparse_engine   ``sparse_engine_sim.py``
butterfly       ``butterfly_sim.py`` (jobs, bench), ``butterfly_board.py``
softmax         ``softmax_sim.py`` (rows, bench)
layernorm       ``layernorm_sim.py`` (vectors, bench)
gelu            ``gelu_sim.py`` (inputs, bench)
norm            ``norm_bench.py`` (softmax, layernorm and GELU in one table),
                ``norm_board.py`` (the three units' board designs: one top)
encoder         ``encoder_sim.py`` (one BERT layer in Verilator, bench),
                ``model_sim.py`` (a whole checkpoint: ``model fetch``,
                ``sim model``, ``bench model``, ``encode``),
                ``checkpoint.py`` (Hugging Face-format checkpoints: fetch,
                load, tokenize)
axi             ``axi_sim.py`` (the AXI top's Verilog and simulation),
                ``axi_cli.py`` (``--bus axi4``), ``regs.py`` and
                ``regs/bertforge.rdl`` (the register map), ``program.py``
                (the program assembler), ``axi_bench.py`` (``bench axi``:
                the AXI tops against the stream engines on the ULX3S 85F)
==============  ===========================================================

Shared: ``block.py`` (the descriptor), ``blocks.py`` (the registry),
``simulate.py`` (generic ``simulate``/``run_sim``/``run_bench``, with phase
timings), ``emit.py`` (deterministic Verilog, cached on disk by config and
source hash), ``presets.py`` (presets and TOML), ``cli.py`` and
``cli_common.py`` (the command line), ``board_design.py`` (``BoardDesign``
and what the designs' hooks share) and ``board_cli.py``
(``build``/``run``/``flash``), ``soc_cli.py`` (``soc build``: the LiteX
SoC around the accelerator), ``soc_simulate.py`` (the whole SoC in
Verilator: UARTBone checks, encoder layers from the simulated SDRAM; ``soc sim``),
``soc_run.py`` (``soc run``: encoder layers on a board's SoC over UARTBone), ``board_bench.py``
(``bench boards``), ``bench.py`` (result tables), ``workload.py``,
``analyze.py`` and ``analyze_cli.py`` (where a BERT layer's cycles go),
``sweep.py`` (``bertforge sweep``: design-space sweeps on Ray), ``sweep_point.py``
(one point of a sweep, in a Ray worker), ``sweep_report.py`` (its results and
Pareto front), ``sweep_bench.py`` (``bench sweep``), ``demo.py``, ``configs/`` (example TOML files),
``cache_cli.py`` (``bertforge cache``), ``userfiles.py`` (files the user
names, read and checked defensively), ``manual.py`` (``bertforge docs``:
the Sphinx manual in ``docs/``, its stored bench results), ``lowbit.py``
(W8A8 / W4A8 calibration and ``bench model --precision``),
``coverage_cli.py`` (``bertforge coverage``), ``mutate_cli.py``
(``bertforge mutate``).
"""
