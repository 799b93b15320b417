"""Encoder models: the program's operations are the workload's, the integer
golden layer is close to the float layer, and ``analyze``'s prediction is the
unit cycle models plus the adapter fill."""

import numpy as np
import pytest

from bertforge.generators.analyze import analyze, load_hardware
from bertforge.generators.encoder_sim import TINY_HW
from bertforge.generators.workload import encoder_layer
from bertforge.sim.encoder_cycles import operation_gap
from bertforge.sim.encoder_golden import cosine, encoder_float, encoder_golden, random_layer
from bertforge.sim.encoder_run import OPERATIONS, encoder_program
from bertforge.sim.layernorm_cycles import layernorm_cycles
from bertforge.sim.softmax_cycles import softmax_cycles

from helpers import tiny_encoder_config as tiny_config


def test_program_operations_are_the_workload_operations():
    ops = encoder_layer("tiny", 32)
    rows = analyze("tiny", 32, load_hardware(TINY_HW), transpose=True)["operations"]
    assert [(r["operation"], r["class"]) for r in rows] == OPERATIONS
    assert [(op.name, op.kind) for op in ops] == OPERATIONS
    # the k projection is X Wk (tokens x H x H) stored transposed: no transposing commands
    k = next(r for r in rows if r["operation"] == "k projection")
    assert k["shape"] == "32x64x64"
    config = tiny_config()
    layer = random_layer(config, 32)
    _, commands, _, groups, _ = encoder_program(config, layer)
    assert config.gemm.transpose_c
    kt = commands[groups[1][0]]["gemm"]
    assert (kt["m"], kt["k"], kt["n"], kt["transpose_c"], kt["c_stride"]) == (32, 64, 64, 1, 32)
    # one command per GEMM of each operation, one per elementwise operation
    assert [len(g) for g in groups] == [op.count if op.kind == "gemm" else 1 for op in ops]
    assert len(commands) == sum(len(g) for g in groups)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_integer_layer_is_close_to_the_float_layer(seed):
    layer = random_layer(tiny_config(), 32, seed=seed)
    out = encoder_golden(tiny_config(), layer)["out"] * layer.scales["out"]
    reference = encoder_float(layer)
    assert cosine(out, reference) >= 0.99
    assert np.abs(out - reference).max() < 8 * layer.scales["out"]


def test_prediction_adds_the_adapter_fill_to_the_unit_models():
    hw = load_hardware(TINY_HW)
    rows = {r["operation"]: r["cycles"] for r in analyze("tiny", 32, hw)["operations"]}
    lat = hw.mem_latency
    assert rows["softmax"] == softmax_cycles(hw.softmax, [32] * 64) + operation_gap("softmax", lat)
    assert rows["residual + layernorm 1"] == (layernorm_cycles(hw.layernorm, [64] * 32)
                                              + operation_gap("layernorm", lat, layernorm=hw.layernorm,
                                                              length=64))
