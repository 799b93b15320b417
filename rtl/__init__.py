"""``bertforge.rtl``: the ground floor. Amaranth components and their frozen
config dataclasses, hardware only (no numpy file I/O, no simulator, no
board); it imports nothing of ``sim``, ``boards`` or ``generators``.

One row per block (the same name is used in every folder):

==============  ===========================================================
block           files here
==============  ===========================================================
systolic        ``systolic.py`` (``SystolicArray``, ``SystolicConfig``),
                ``systolic_pe.py`` (one PE class per dataflow),
                ``arith.py`` (the PE's number format: one class per format)
gemm            ``gemm.py`` (``GemmEngine``), ``tile_scheduler.py``
                (commands -> chunk descriptors), ``serial_engine.py``
                (``SerialGemmEngine``, the small-FPGA engine of
                ``GemmConfig(serial=True)``; ``gemm_engine``: a config's
                engine)
sparse          ``sparse.py`` (``SparseArray``: N:M structured sparsity)
sparse_engine   ``sparse_engine.py`` (``SparseEngine``)
butterfly       ``butterfly.py`` (``ButterflyEngine``: butterfly layers, FFT)
softmax         ``softmax.py`` (``Softmax``)
layernorm       ``layernorm.py`` (``LayerNorm``), ``rsqrt.py``
gelu            ``gelu.py`` (``Gelu``)
encoder         ``encoder.py`` (``EncoderTop``: GEMM engine + the three units)
axi             ``axi.py`` (``AxiMaster``: the engines' memory streams on
                AXI4), ``axi_regs.py`` (``AxiLiteRegisters``), ``axi_regmap.py``
                (the register map compiled from the SystemRDL file),
                ``axi_top.py`` (``AxiGemmTop``: an engine or the encoder top
                with AXI4, AXI4-Lite, ``irq`` and the program fetcher)
==============  ===========================================================

Shared by every block:

- the GEMM engines' stages (dense and sparse), one file each:
  ``loader.py`` (``Loader``, ``Job``), ``accumulator.py``
  (``Accumulator``), ``requantizer.py`` (``Requantizer``), ``writer.py``
  (``Writer``), ``staged_engine.py`` (``StagedEngine``: the stages
  connected), and ``engine.py`` (what they share: request layouts,
  ``fan_out``, ``outstanding``, operand queues).
- ``stream.py``: ``Queue`` (the only FIFO) and the pipeline helpers
  (``register``, ``stage``, ``delay``, ``tree``, ``clamp``).
- ``payload.py``: the one payload codec (one value of any ``data.Layout``
  <-> bits; its numpy side, many beats column-wise, is
  ``sim/payload_np.py``: nothing here imports numpy).
- ``params.py``: parameter checks; ``errors.py``: ``BertforgeError``, the
  root of every user-facing error.
- ``fixed.py``: the ``Q(int_bits, frac_bits)`` fixed-point formats.
- ``host_link.py``, ``uart.py``: the board side of the host link (the board
  tops themselves are in ``boards``).
"""
