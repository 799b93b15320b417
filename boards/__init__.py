"""``bertforge.boards``: FPGA boards. Stands on ``sim`` and ``rtl`` (never
imports ``generators``); the host-side modules a user runs against a real
board (``host.py`` and the ``*_host.py``, ``protocol.py``, ``build.py``,
``targets.py``, ``uartbone.py``, ``soc_host.py``) never import cocotb, only the board testbenches (``*_board_tb.py``,
``uart_model.py``) do.

One row per block with a board top (``X_top.py``: the block behind the UART
host link with block RAMs; ``X_host.py``: the host side, operand packing
for its memories and ``bertforge run`` over a serial port; ``X_board_tb.py``:
cocotb testbench of the whole top over a bit-level UART in Verilator):

==============  ===========================================================
block           files here
==============  ===========================================================
systolic        ``systolic_top.py`` (also the shared host-link plumbing),
                ``systolic_host.py``, ``systolic_board_tb.py``
gemm            ``gemm_top.py``, ``gemm_host.py``, ``gemm_board_tb.py`` (also
                the sparse_engine block's: one top for either engine)
sparse          ``sparse_top.py``, ``sparse_host.py``, ``sparse_board_tb.py``
butterfly       ``butterfly_top.py``, ``butterfly_host.py``,
                ``butterfly_board_tb.py``
norm            ``norm_top.py`` (one top for softmax, layernorm or GELU),
                ``norm_host.py``, ``norm_board_tb.py``
axi             ``driver.py`` (the host driver of the AXI tops: ``load``,
                ``run``, ``wait``, ``counters`` over any register/memory
                backend; ``DevMem``, the ``/dev/mem`` one),
                ``devmem_fake.py`` (a file and a thread standing in for a
                board's ``/dev/mem``, for the docs' example),
                ``axi_board_tb.py`` (cocotbext-axi testbench of
                the AXI top, through the driver), ``ooc_build.py``
                (out-of-context ECP5 builds of tops with more ports than
                pins: ``bench axi``)
==============  ===========================================================

Shared: ``targets.py`` (supported boards: amaranth-boards platforms, the
YoWASP toolchain), ``clocking.py`` (PLLs), ``build.py`` (yosys + nextpnr +
packer, reports, RTLIL hash), ``protocol.py`` (the framed host protocol,
CRC-8), ``host.py`` (what the designs' host sides share),
``uart_model.py`` (cocotb UART model for the board testbenches).

The SoC (LiteX, LiteDRAM and Migen are imported here only): ``soc.py``
(the LiteX SoC around an AXI accelerator: no CPU, UARTBone, LiteDRAM's SDR
controller, the accelerator's AXI4 master on its own LiteDRAM port),
``soc_map.py`` (its one map: bus regions, CSRs, the accelerator's
registers, the SDRAM init sequence; JSON, C header, markdown),
``soc_sim.py`` (the same SoC for Verilator: LiteDRAM's SDRAM PHY model
with its DFI timing checker, UARTBone's UART as ports; its SDRAM's back
door), ``soc_board_tb.py`` (its cocotb testbench: the UART pins bit by
bit, the host code below in a bridged thread), ``uartbone.py`` (LiteX's
UARTBone frames and a bus over any byte transport: a serial port or the
testbench's UART; no cocotb), ``soc_host.py`` (the host's side: LiteDRAM's
SDRAM init as LiteX's BIOS runs it, the driver's backend on the SoC, the
irq CSR), ``soc_shims.py``
(LiteX's tool names on the YoWASP tools; relative source
paths), ``soc_build.py`` (gateware, map, shims, then LiteX's build script;
the report).
"""
