"""The bertforge command line: generate, sim, demo, presets, config files
and the one-line errors for bad input."""

import json

import numpy as np
import pytest

from bertforge.generators.cli import main
from cli_helpers import assert_one_line_error, npy_flags, run_cli


def test_generate_is_byte_identical_from_any_directory(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "y" / "deeper").mkdir(parents=True)
    args = ["generate", "systolic", "--rows", "3", "--cols", "5", "--dataflow", "ws"]
    first = run_cli(*args, "-o", str(tmp_path / "one"), cwd=tmp_path / "x")
    second = run_cli(*args, "-o", "../../two", cwd=tmp_path / "y" / "deeper")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    one = (tmp_path / "one" / "systolic_3x5_ws.v").read_bytes()
    two = (tmp_path / "two" / "systolic_3x5_ws.v").read_bytes()
    assert one == two
    assert b"module systolic_3x5_ws(" in one
    sidecar = json.loads((tmp_path / "one" / "systolic_3x5_ws.json").read_text())
    assert sidecar["config"] == {"rows": 3, "cols": 5, "dataflow": "ws", "width": 8, "acc_width": 32}
    ports = {p["name"]: (p["direction"], p["width"]) for p in sidecar["ports"]}
    assert ports["a__payload"] == ("input", 3 * 8 + 1)
    assert ports["b__payload"] == ("input", 5 * 8)
    assert ports["c__payload"] == ("output", 5 * 32 + 1)
    assert ports["c__ready"] == ("input", 1)
    assert not list((tmp_path / "one").glob("*.tmp"))


@pytest.mark.parametrize("args, message", [
    (["generate", "systolic", "--rows", "0", "-o", "o"], "rows must be a positive integer, not 0"),
    (["generate", "systolic", "--dataflow", "xy", "-o", "o"], "dataflow must be 'os' or 'ws', not 'xy'"),
    (["generate", "systolic", "--width", "7", "-o", "o"], "width must be 8 or 16, not 7"),
    (["generate", "systolic", "--rows", "two", "-o", "o"], "argument --rows: invalid int value: 'two'"),
    (["generate", "systolic", "--preset", "huge", "-o", "o"], "no systolic preset named 'huge'"),
    (["generate", "nonsense", "-o", "o"], "argument BLOCK: invalid choice: 'nonsense'"),
    (["sim", "systolic", "--tiles", "2"], "--k is required"),
    (["sim", "systolic", "--k", "0"], "argument --k: must be a positive integer, not 0"),
    (["sim", "systolic", "--k", "4", "--stall", "1.5"], "argument --stall: must be in [0, 1)"),
    (["sim", "systolic", "--a", "missing.npy", "--b", "missing.npy", "--out", "c.npy"],
     "A file missing.npy does not exist"),
    (["sim", "systolic", "--a", "x.npy"], "--a, --b and --out go together"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    assert_one_line_error(run_cli(*args, cwd=tmp_path), message)
    assert not (tmp_path / "o").exists()


def test_config_file_and_preset(tmp_path, capsys):
    toml = tmp_path / "array.toml"
    toml.write_text('[systolic]\nrows = 2\ncols = 7\ndataflow = "ws"\n')
    assert main(["generate", "systolic", "--config", str(toml), "--cols", "6", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "systolic_2x6_ws.v").exists()
    assert main(["generate", "systolic", "--preset", "ws-8x8", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "systolic_8x8_ws.v").exists()


@pytest.mark.parametrize("text, message", [
    ("rows = [", "is not valid TOML"),
    ("[systolic]\nrowz = 3\n", "unknown systolic field 'rowz'"),
    ("[systolic]\nrows = \"3\"\n", "rows must be an integer, not '3'"),
])
def test_bad_config_file(text, message, tmp_path, capsys):
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    assert main(["generate", "systolic", "--config", str(toml), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert main(["generate", "systolic", "--config", str(tmp_path / "none.toml"), "-o", "o"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_shipped_example_configs_load(capsys, tmp_path):
    from pathlib import Path
    import bertforge.generators as generators
    configs = sorted((Path(generators.__file__).parent / "configs").glob("systolic_*.toml"))
    assert configs
    for path in configs:
        assert main(["generate", "systolic", "--config", str(path), "-o", str(tmp_path)]) == 0


def test_sim_json_keys(capsys):
    assert main(["sim", "systolic", "--rows", "2", "--cols", "3", "--dataflow", "os",
                 "--k", "5", "--tiles", "3", "--seed", "7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["match"] is True
    assert out["cycles"] == out["model_cycles"]
    assert out["ideal_cycles"] == 15
    assert out["utilization"] == pytest.approx(15 / out["cycles"])
    assert out["k"] == 5 and out["tiles"] == 3


@pytest.mark.parametrize("dataflow, a_shape, b_shape, dtype", [
    ("os", (2, 9), (9, 3), np.int8), ("ws", (9, 2), (2, 3), np.int16)])
def test_sim_user_matrices(dataflow, a_shape, b_shape, dtype, tmp_path, capsys):
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, a_shape, dtype=dtype)
    b = rng.integers(info.min, info.max + 1, b_shape, dtype=dtype)
    a[0, 0], b[0, 0] = info.min, info.min
    width = str(np.iinfo(dtype).bits)
    assert main(["sim", "systolic", "--rows", "2", "--cols", "3", "--dataflow", dataflow,
                 "--width", width, *npy_flags(tmp_path, a=a, b=b), "--json"]) == 0
    c = np.load(tmp_path / "c.npy")
    assert c.dtype == np.int32
    assert np.array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("a, b, message", [
    (np.zeros((3, 4), np.int8), np.zeros((4, 3), np.int8),
     "A is 3 x 4 and B is 4 x 3; a OS 2x3 array takes A as 2 x K and B as K x 3"),
    (np.zeros((2, 4), np.float32), np.zeros((4, 3), np.int8), "holds float32 values"),
    (np.full((2, 4), 300), np.zeros((4, 3), np.int8), "int8 values must lie in [-128, 127]"),
    (np.zeros((2, 4, 1), np.int8), np.zeros((4, 3), np.int8), "it must have 2 dimensions"),
    ("garbage", np.zeros((4, 3), np.int8), "is not a .npy file"),
])
def test_sim_rejects_bad_matrices(a, b, message, tmp_path, capsys):
    if isinstance(a, str):
        (tmp_path / "a.npy").write_text(a)
    else:
        np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    code = main(["sim", "systolic", "--rows", "2", "--cols", "3", "--a", str(tmp_path / "a.npy"),
                 "--b", str(tmp_path / "b.npy"), "--out", str(tmp_path / "c.npy")])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "c.npy").exists()


def test_presets_lists_every_block(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "systolic:" in out and "ws-16x16" in out


def test_demo(tmp_path):
    result = run_cli("demo", "-o", str(tmp_path / "demo"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "demo passed" in result.stdout
    assert "matches the numpy golden model" in result.stdout
    assert (tmp_path / "demo" / "systolic_4x4_os.v").exists()
