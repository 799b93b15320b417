"""The register map of the AXI4-Lite register file, compiled from
``generators/regs/bertforge.rdl`` by :mod:`bertforge.generators.regs`.

Generated: do not edit (``python -m bertforge.generators.regs`` rewrites it;
a test checks that it is up to date)."""

__all__ = ["REGISTERS"]

REGISTERS = (
    {'name': 'ID', 'offset': 0, 'fields': ({'name': 'magic', 'lsb': 0, 'width': 32, 'kind': 'const', 'reset': 1111902001},)},
    {'name': 'VERSION', 'offset': 4, 'fields': ({'name': 'minor', 'lsb': 0, 'width': 8, 'kind': 'const', 'reset': 0}, {'name': 'major', 'lsb': 8, 'width': 8, 'kind': 'const', 'reset': 1})},
    {'name': 'CONFIG0', 'offset': 8, 'fields': ({'name': 'rows', 'lsb': 0, 'width': 8, 'kind': 'r', 'reset': 0}, {'name': 'cols', 'lsb': 8, 'width': 8, 'kind': 'r', 'reset': 0}, {'name': 'dataflow', 'lsb': 16, 'width': 1, 'kind': 'r', 'reset': 0}, {'name': 'bf16', 'lsb': 17, 'width': 1, 'kind': 'r', 'reset': 0}, {'name': 'width', 'lsb': 18, 'width': 6, 'kind': 'r', 'reset': 0}, {'name': 'acc_width', 'lsb': 24, 'width': 6, 'kind': 'r', 'reset': 0})},
    {'name': 'CONFIG1', 'offset': 12, 'fields': ({'name': 'mem_width', 'lsb': 0, 'width': 10, 'kind': 'r', 'reset': 0}, {'name': 'addr_width', 'lsb': 10, 'width': 6, 'kind': 'r', 'reset': 0}, {'name': 'lanes', 'lsb': 16, 'width': 8, 'kind': 'r', 'reset': 0}, {'name': 'units', 'lsb': 24, 'width': 4, 'kind': 'r', 'reset': 0})},
    {'name': 'CTRL', 'offset': 16, 'fields': ({'name': 'start', 'lsb': 0, 'width': 1, 'kind': 'pulse', 'reset': 0}, {'name': 'abort', 'lsb': 1, 'width': 1, 'kind': 'pulse', 'reset': 0})},
    {'name': 'STATUS', 'offset': 20, 'fields': ({'name': 'busy', 'lsb': 0, 'width': 1, 'kind': 'r', 'reset': 0}, {'name': 'done', 'lsb': 1, 'width': 1, 'kind': 'r', 'reset': 0}, {'name': 'error', 'lsb': 2, 'width': 1, 'kind': 'r', 'reset': 0}, {'name': 'error_code', 'lsb': 8, 'width': 4, 'kind': 'r', 'reset': 0})},
    {'name': 'PROG_BASE_LO', 'offset': 24, 'fields': ({'name': 'addr', 'lsb': 0, 'width': 32, 'kind': 'rw', 'reset': 0},)},
    {'name': 'PROG_BASE_HI', 'offset': 28, 'fields': ({'name': 'addr', 'lsb': 0, 'width': 32, 'kind': 'rw', 'reset': 0},)},
    {'name': 'PROG_LEN', 'offset': 32, 'fields': ({'name': 'count', 'lsb': 0, 'width': 16, 'kind': 'rw', 'reset': 0},)},
    {'name': 'PC', 'offset': 36, 'fields': ({'name': 'count', 'lsb': 0, 'width': 16, 'kind': 'r', 'reset': 0},)},
    {'name': 'IRQ_ENABLE', 'offset': 40, 'fields': ({'name': 'done', 'lsb': 0, 'width': 1, 'kind': 'rw', 'reset': 0}, {'name': 'error', 'lsb': 1, 'width': 1, 'kind': 'rw', 'reset': 0})},
    {'name': 'IRQ_STATUS', 'offset': 44, 'fields': ({'name': 'done', 'lsb': 0, 'width': 1, 'kind': 'w1c', 'reset': 0}, {'name': 'error', 'lsb': 1, 'width': 1, 'kind': 'w1c', 'reset': 0})},
    {'name': 'CYCLES', 'offset': 64, 'fields': ({'name': 'count', 'lsb': 0, 'width': 32, 'kind': 'r', 'reset': 0},)},
    {'name': 'BUSY_GEMM', 'offset': 68, 'fields': ({'name': 'count', 'lsb': 0, 'width': 32, 'kind': 'r', 'reset': 0},)},
    {'name': 'BUSY_SOFTMAX', 'offset': 72, 'fields': ({'name': 'count', 'lsb': 0, 'width': 32, 'kind': 'r', 'reset': 0},)},
    {'name': 'BUSY_LAYERNORM', 'offset': 76, 'fields': ({'name': 'count', 'lsb': 0, 'width': 32, 'kind': 'r', 'reset': 0},)},
    {'name': 'BUSY_GELU', 'offset': 80, 'fields': ({'name': 'count', 'lsb': 0, 'width': 32, 'kind': 'r', 'reset': 0},)},
    {'name': 'BYTES_READ', 'offset': 84, 'fields': ({'name': 'count', 'lsb': 0, 'width': 32, 'kind': 'r', 'reset': 0},)},
    {'name': 'BYTES_WRITTEN', 'offset': 88, 'fields': ({'name': 'count', 'lsb': 0, 'width': 32, 'kind': 'r', 'reset': 0},)},
    {'name': 'MEM_WAIT', 'offset': 92, 'fields': ({'name': 'count', 'lsb': 0, 'width': 32, 'kind': 'r', 'reset': 0},)},
)
