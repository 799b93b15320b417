"""``bertforge mutate BLOCK``: mutation testing of a block's emitted Verilog.

    bertforge mutate gelu [--count 50] [--seed 1] [--design NAME] [--module M ...] [--alone]
                          [--depth 20] [--tests tests/test_gelu_verilator.py ...] [-k EXPR] [--out DIR]
                          [--no-proofs] [--proof-timeout 600]

1. The block's own Verilator tests (``tests/test_<block>_verilator.py`` of
   the source tree, or ``--tests``) run once on the original, recording the
   designs they simulate (``BERTFORGE_RECORD``); they must pass. ``-k``
   selects tests as pytest's ``-k`` does (the tests that simulate the
   design mutated: the others would only repeat the original's runs). The design
   mutated is ``--design`` (a top-level name, or its start) or the one they
   run most often.
2. yosys ``mutate -list`` samples ``--count`` mutants (``--seed``), of the
   cells of the modules ``--module`` names only when given (yosys module
   patterns: ``gemm_2x2_os_axi.regs``, the AXI top's register file;
   ``gemm_2x2_os_axi.master*``, its master and the master's queues);
   mutant 0 is the design rewritten by yosys with no mutation, which must
   pass (a check of the flow; status ``passed``). ``--alone`` (a large
   design: the encoder's yosys rewrite takes 3 minutes) reads only the
   modules ``--module`` names, the others as blackboxes, and substitutes
   their rewritten text in the original Verilog
   (:func:`bertforge.sim.mutate.split`); no equivalence check then
   (``--eq-timeout 0``: its miter needs the whole design).
3. Each mutant is checked against the original by a bounded formal
   equivalence check (:func:`bertforge.sim.mutate.equivalent`); equivalent
   ones are dropped.
4. The tests run again with the mutant substituted for the original
   (``BERTFORGE_MUTANT``): a failing test kills it. A run past the
   timeout kills it too (a mutant that hangs the tests): the largest of
   120 s, 10 times the original's run and 3 times mutant 0's (which builds
   a model, as every mutant's run does). A run past it is run once more
   with 3 times the time before it counts (a loaded machine slows a
   mutant that does not hang): only a second timeout kills
   (``killed_by`` ``timeout``; ``retried`` in its entry).
5. The block's proofs (those of ``bertforge prove BLOCK``, stated for the
   config of the design mutated, read from its Verilog header) run against
   each mutant the tests leave (and mutant 0, which must pass them): the
   spec instantiates the mutant's Verilog module
   (:class:`~bertforge.sim.formal.VerilogDesign`) and SymbiYosys reads it
   beside the spec. A failed proof kills the mutant (``killed by proof
   NAME``; the proofs stop at the first), else it survived. Properties
   that read signals inside the design (:attr:`~bertforge.sim.formal.Proof.internal`)
   are left out and named. A design that holds the block's component
   one level below its top (the GEMM engine in ``gemm_2x2_os_harness``)
   meets the proofs on that module: each mutant's copy of it, under a top
   with the component's ports (:func:`bertforge.sim.mutate.inside`,
   ``proof.v`` of the mutant's directory). A design with no such module
   (the AXI top for ``axi``) or a block without proofs (the sparse
   engine) has none: one line says so and the mutants are tested only.
   ``--no-proofs`` skips this step;
   ``--proof-timeout`` bounds each proof (past it: ``error``, not a kill).

A run into a directory that holds the ``mutate.json`` of an earlier run of
the same design, seed, count, depth and tests keeps the mutants it decided
(a run cut short resumes); a survivor it holds without proof results gets
its proofs run (an earlier run's survivors, run against the proofs).

Writes ``DIR/mutate.json`` (after every mutant) and ``DIR/mutate.md``: each
mutant's mode, cell, source lines of the original Verilog, status
(killed by which test or proof, survived, equivalent), seconds, and each
proof's status and seconds; the score is killed / (killed + survived).
Exit code 0.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

__all__ = ["add_parser", "run_mutate"]

_ROOT = Path(__file__).resolve().parents[1]


def add_parser(commands):
    from .blocks import BLOCKS
    sub = commands.add_parser("mutate", help="mutation testing: do the block's own tests kill "
                                             "mutants of its Verilog (yosys mutate, SymbiYosys)?")
    sub.add_argument("block", choices=sorted(BLOCKS), metavar="BLOCK", help="the block")
    sub.add_argument("--count", type=int, default=50, help="mutants to sample (default 50)")
    sub.add_argument("--seed", type=int, default=1, help="yosys's sampling seed (default 1)")
    sub.add_argument("--design", help="the design to mutate: a top-level name (or its start) "
                                      "that the tests simulate (default: the one run most)")
    sub.add_argument("--module", nargs="+", default=[], metavar="M",
                     help="sample mutants of these modules of the design only (yosys patterns: "
                          "TOP.sub, TOP.sub*)")
    sub.add_argument("--alone", action="store_true",
                     help="read and rewrite only the --module modules (the rest of the design as "
                          "blackboxes, kept as it is): a large design's mutants in seconds; needs "
                          "--eq-timeout 0")
    sub.add_argument("--depth", type=int, default=20,
                     help="cycles of the bounded equivalence check (default 20)")
    sub.add_argument("--eq-timeout", type=float, default=120.0,
                     help="seconds for one equivalence check; past them the mutant is "
                          "'unknown' and tested (default 120; 0 skips the check)")
    sub.add_argument("--tests", nargs="+", metavar="FILE",
                     help="test files (default: tests/test_BLOCK_verilator.py)")
    sub.add_argument("-k", dest="select", default=None, metavar="EXPR",
                     help="only the tests that pytest's -k EXPR selects")
    sub.add_argument("--out", default=None, help="result directory (default mutate-BLOCK)")
    sub.add_argument("--no-proofs", dest="proofs", action="store_false",
                     help="do not run the block's proofs against the mutants the tests leave")
    sub.add_argument("--proof-timeout", type=float, default=600.0, metavar="S",
                     help="seconds for one proof on one mutant; past them it is an error, not "
                          "a kill (default 600)")


def _pytest(tests, env_extra, timeout, select=None):
    env = dict(os.environ, **env_extra)
    env.pop("PYTEST_ADDOPTS", None)
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-x", "-rf", "-p", "no:xdist", "-p", "no:cacheprovider",
         *(["-k", select] if select else []), *map(str, tests)], cwd=_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
        code = process.returncode
    except subprocess.TimeoutExpired:
        import signal
        os.killpg(process.pid, signal.SIGKILL)
        output, code = process.communicate()[0] + "\nTIMEOUT", "timeout"
    failed = [line.split(" - ")[0].replace("FAILED ", "") for line in output.splitlines()
              if line.startswith("FAILED ")]
    return code, failed, time.monotonic() - start, output


def _test_mutant(tests, env_extra, timeout, select=None):
    """:func:`_pytest`, and once more with 3 times ``timeout`` if it timed
    out (a loaded machine, not a hang); ``(code, failed, seconds, output,
    retried)``, the seconds of both runs."""
    code, failed, seconds, output = _pytest(tests, env_extra, timeout, select)
    if code != "timeout":
        return code, failed, seconds, output, False
    code, failed, more, output = _pytest(tests, env_extra, 3 * timeout, select)
    return code, failed, seconds + more, output, True


def _table(document):
    rows = ["| # | mode | cell | Verilog lines | status | killed by | s | proofs (s) |",
            "|---|---|---|---|---|---|---|---|"]
    for m in document["mutants"]:
        proofs = ", ".join(f"{name} {r['status']}" for name, r in m.get("proofs", {}).items())
        if proofs:
            proofs += f" ({m['proof_seconds']:.0f})"
        rows.append(f"| {m['index']} | {m['mode']} | `{m['cell']}` {m.get('port', '')}"
                    f"{'[' + m['portbit'] + ']' if m.get('portbit') else ''} | "
                    f"{','.join(map(str, m['lines']))} | {m['status']} | "
                    f"{m.get('killed_by', '')} | {m['seconds']:.0f} | "
                    f"{proofs} |")
    s = document["summary"]
    return "\n".join([
        f"{document['block']} ({document['design']}"
        f"{', modules ' + ' '.join(document['modules']) if document.get('modules') else ''}"
        f"): {s['mutants']} mutants, {s['killed']} killed"
        f"{f' ({n} by a proof)' if (n := s.get('killed_by_proof')) else ''}, "
        f"{s['survived']} survived, {s['equivalent']} equivalent; score {s['score']}; "
        f"{s['seconds']:.0f} s ({s['seconds_per_mutant']:.0f} s per mutant)", "", *rows])


def _summary(mutants):
    """Counts, score and the seconds spent on the mutants (their own sum, so
    that a resumed run counts the mutants of the earlier one too)."""
    counts = Counter(m["status"] for m in mutants if m["index"] > 0)
    seconds = sum(m["seconds"] + m.get("proof_seconds", 0) for m in mutants if m["index"] > 0)
    killed, survived = counts["killed"], counts["survived"]
    done = sum(counts.values())
    by_proof = sum(1 for m in mutants if m.get("killed_by", "").startswith("proof "))
    return {"mutants": done, "killed": killed, "killed_by_proof": by_proof, "survived": survived,
            "equivalent": counts["equivalent"],
            "score": round(killed / (killed + survived), 3) if killed + survived else None,
            "seconds": round(seconds, 1), "seconds_per_mutant": round(seconds / max(done, 1), 1)}


def _saved(document, entry, out, say, total):
    """Add ``entry`` to the report, write ``mutate.json`` and say how it ended."""
    document["mutants"].append(entry)
    document["summary"] = _summary(document["mutants"])
    (out / "mutate.json").write_text(json.dumps(document, indent=1) + "\n")
    proved = (f"; proofs {entry['proof_seconds']:.0f} s" if "proof_seconds" in entry else "")
    say(f"mutant {entry['index']}/{total - 1} {entry['mode']} {entry['cell']}: {entry['status']}"
        f"{' by ' + entry['killed_by'] if entry.get('killed_by', '').startswith('proof') else ''}"
        f" ({entry['seconds']:.0f} s{proved})")


def _previous(path, document):
    """The mutants (by command) of an earlier run into the same directory
    with the same design, seed, count, depth and tests: a run cut short
    resumes where it stopped."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    same = all(old.get(key) == document.get(key)
               for key in ("design", "seed", "count", "depth", "tests", "select", "modules", "alone"))
    return {m["command"]: m for m in old.get("mutants", []) if m["index"] > 0} if same else {}


def _design_proofs(block, verilog_path, top):
    """``(proofs, internal, reason, verilog)``: the block's proofs (``bertforge prove``'s)
    stated for the config of the design ``top`` (read from the header of
    its emitted Verilog, ``// config: {...}``) with a module of the
    Verilog as their design (:class:`~bertforge.sim.formal.VerilogDesign`):
    ``top`` itself when it is the block's component, else the component's
    module one level below it (the GEMM engine in its harness:
    :func:`bertforge.sim.mutate.inside`); ``internal``: the names of those
    that read signals inside the design, left out; ``reason``: why there
    are none; ``verilog(mutant, directory)``: the Verilog file the proofs
    read for a mutant's."""
    from bertforge.rtl.errors import BertforgeError
    from bertforge.sim import mutate
    from bertforge.sim.formal import VerilogDesign
    if not block.proofs:
        return [], [], f"the block {block.name} has no proofs", None
    if block.config is None or block.component is None:
        return [], [], (f"the block {block.name} has no component config (its proofs are of "
                        f"fixed designs)"), None
    head = verilog_path.read_text()[:4096].splitlines()
    config = None
    if len(head) > 1 and head[0].startswith("// Generated by bertforge") and \
            head[1].startswith("// config: "):
        try:
            config = block.config(**json.loads(head[1].removeprefix("// config: ")))
        except (TypeError, ValueError, BertforgeError):    # another kind of config
            config = None
    if config is None:
        return [], [], f"{top} has no {block.name} config in its header", None
    if config.name == top:
        module, verilog = top, (lambda mutant, directory: mutant)
    else:
        found = mutate.inside(verilog_path, top, block.component(config))
        if found is None:
            return [], [], (f"no module of {top} is a {block.name} component (the proofs are "
                            f"stated on the component's ports)"), None
        module = mutate.PROOF_TOP
        verilog = lambda mutant, directory: mutate.proof_verilog(   # noqa: E731
            mutant, found[0], found[1], Path(directory) / "proof.v")
    proofs = block.proofs(make=lambda config: VerilogDesign(block.component(config), module),
                          config=config)
    return ([p for p in proofs if not p.internal],
            [f"{p.name} [{p.config}]" for p in proofs if p.internal], None, verilog)


def _prove_mutant(entry, proofs, mutant, work, timeout):
    """Run ``proofs`` (of one config) against the Verilog ``mutant`` (in ``work/proofs``),
    stopping at the first that fails: ``entry["proofs"]`` (name -> status,
    seconds), ``entry["proof_seconds"]``; the failed proof's name, or None."""
    from bertforge.sim.formal import run_proof
    entry["proofs"], failed = {}, None
    for proof in proofs:
        result = run_proof(proof, work / "proofs", verilog=mutant, timeout=timeout)
        entry["proofs"][proof.name] = {"status": result.status,
                                       "seconds": round(result.seconds, 1)}
        if result.status == "failed":
            failed = proof.name
            break
    entry["proof_seconds"] = round(sum(r["seconds"] for r in entry["proofs"].values()), 1)
    return failed


def run_mutate(args):
    from .cli_common import CliError
    from bertforge.sim import cache, mutate, runner
    from bertforge.sim.formal import FormalError
    if args.count < 1:
        raise CliError(f"--count must be at least 1, not {args.count}")
    if args.depth < 1:
        raise CliError(f"--depth must be at least 1, not {args.depth}")
    if args.alone and not args.module:
        raise CliError("--alone needs --module (the modules read alone)")
    if args.alone and args.eq_timeout > 0:
        raise CliError("--alone checks no equivalence (its miter needs the whole design): "
                       "give --eq-timeout 0")
    if args.proof_timeout <= 0:
        raise CliError(f"--proof-timeout must be positive, not {args.proof_timeout}")
    tests = [Path(t) for t in args.tests] if args.tests else [
        _ROOT / "tests" / f"test_{args.block}_verilator.py"]
    for test in tests:
        if not (test if test.is_absolute() else _ROOT / test).exists():
            raise CliError(f"no test file {test} (mutate runs from a source tree)")
    tests = [(t if t.is_absolute() else _ROOT / t).resolve() for t in tests]
    out = Path(args.out or f"mutate-{args.block}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    record = out / "designs"
    shutil.rmtree(record, ignore_errors=True)
    say = lambda text: print(f"bertforge: {text}", file=sys.stderr, flush=True)  # noqa: E731
    say(f"running {', '.join(t.name for t in tests)} on the original design...")
    code, failed, base_seconds, output = _pytest(tests, {"BERTFORGE_RECORD": str(record)}, None,
                                                 args.select)
    if code != 0:
        (out / "baseline.log").write_text(output)
        raise CliError(f"the tests fail on the original design ({', '.join(failed) or code}); "
                       f"log: {out / 'baseline.log'}")
    runs = Counter((record / "runs.txt").read_text().split()) if (record / "runs.txt").exists() else {}
    if not runs:
        raise CliError(f"the tests {', '.join(t.name for t in tests)} simulate no design")
    names = [name for name, _ in runs.most_common()
             if not args.design or name.startswith(args.design)]
    if not names:
        raise CliError(f"the tests simulate no design named {args.design!r} (they run: "
                       f"{', '.join(sorted(name.rsplit('-', 1)[0] for name in runs))})")
    chosen = names[0]
    top, digest = chosen[:-2].rsplit("-", 1)
    original = out / "original.v"
    shutil.copyfile(record / chosen, original)
    say(f"mutating {top} (run {runs[chosen]} times by the tests; tests took {base_seconds:.0f} s)")
    listed = mutate.mutations(original, top, args.count, args.seed, out / "work", args.module,
                              alone=args.alone)
    if not listed:
        raise CliError(f"yosys finds no cell to mutate in {top}"
                       + (f" modules {' '.join(args.module)}" if args.module else ""))
    sampled = [dict(mutate.NONE)] + listed
    from .blocks import BLOCKS
    proofs = []
    if args.proofs:
        proofs, internal, reason, verilog = _design_proofs(BLOCKS[args.block], original, top)
        if reason:
            say(f"no proofs for {top}: {reason}; the mutants are tested only")
        else:
            say(f"the survivors of the tests meet {len(proofs)} proofs of "
                f"{args.block} [{proofs[0].config}] on their Verilog: "
                f"{', '.join(p.name for p in proofs)}"
                + (f" (not run, they read signals inside the design: {', '.join(internal)})"
                   if internal else ""))
    document = {"block": args.block, "design": top, "count": args.count, "seed": args.seed,
                "depth": args.depth, "tests": [t.name for t in tests], "select": args.select,
                **({"modules": args.module} if args.module else {}),
                **({"alone": True} if args.alone else {}),
                "baseline_seconds": round(base_seconds, 1), "mutants": []}
    timeout = max(120.0, 10 * base_seconds)
    alone = args.module if args.alone else ()    # the modules rewritten alone
    done = _previous(out / "mutate.json", document)
    for index, mutation in enumerate(sampled):
        work = out / "work" / f"m{index:03d}"
        if mutation["command"] in done:         # a run cut short is resumed
            entry = dict(done[mutation["command"]], index=index)
            if proofs and entry["status"] == "survived" and "proofs" not in entry:
                mutant = work / "mutant.v"
                if not mutant.exists():
                    work.mkdir(parents=True, exist_ok=True)
                    mutate.write_mutant(original, top, mutation, mutant, work, alone)
                failed = _prove_mutant(entry, proofs, verilog(mutant, work), work,
                                       args.proof_timeout)
                if failed:
                    entry.update(status="killed", killed_by=f"proof {failed}")
                _saved(document, entry, out, say, len(sampled))
            else:
                document["mutants"].append(entry)
            continue
        mark = time.monotonic()
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        entry = {"index": index, **{k: mutation.get(k, "") for k in
                                    ("mode", "module", "cell", "port", "portbit", "wire", "src",
                                     "command")}, "lines": mutation.get("lines", [])}
        if index > 0 and args.eq_timeout <= 0:
            entry["equivalence"] = "skipped"
        elif index > 0:
            try:
                entry["equivalence"], entry["equivalence_seconds"] = mutate.equivalent(
                    original, top, mutation, work / "eq", depth=args.depth, timeout=args.eq_timeout)
            except FormalError as error:     # e.g. yosys cannot build the miter: test the mutant
                entry["equivalence"], entry["equivalence_error"] = "unknown", str(error)
        if entry.get("equivalence") == "equivalent":
            entry["status"] = "equivalent"
        else:
            mutant = work / "mutant.v"
            mutate.write_mutant(original, top, mutation, mutant, work, alone)
            (work / "original.sha256").write_text(digest + "\n")
            scratch = work / "tmp"      # the failed runs' work directories land here
            scratch.mkdir()
            code, failed, seconds, output, retried = _test_mutant(
                tests, {"BERTFORGE_MUTANT": str(work), "TMPDIR": str(scratch)}, timeout,
                args.select)
            if retried:
                entry["retried"] = True
            if index == 0:      # a mutant's run builds its model: allow 3 times mutant 0's
                timeout = max(timeout, 3 * seconds)
            shutil.rmtree(scratch, ignore_errors=True)
            text = mutant.read_text()
            for variant in ("", "x=unique"):       # the mutant's models are of no further use
                directory = runner._build_dir(text, top, False, variant)
                if directory.exists():
                    cache.invalidate(directory)
            if index == 0 and code != 0:
                (out / "none.log").write_text(output)
                raise CliError(f"the tests fail on the design rewritten by yosys without a "
                               f"mutation; log: {out / 'none.log'}")
            entry["status"] = ("passed" if index == 0 else "survived") if code == 0 else "killed"
            if code != 0:
                entry["killed_by"] = failed[0] if failed else str(code)
            if code == 0 and index > 0:
                (work / "tests.log").write_text(output)
        entry["seconds"] = round(time.monotonic() - mark, 1)
        if proofs and entry["status"] in ("passed", "survived"):
            failed = _prove_mutant(entry, proofs, verilog(mutant, work), work,
                                   args.proof_timeout)
            if failed and index == 0:
                raise CliError(f"the proof {failed} fails on the design rewritten by yosys "
                               f"without a mutation; see {work / 'proofs'}")
            if failed:
                entry.update(status="killed", killed_by=f"proof {failed}")
        if index > 0:
            shutil.rmtree(work / "eq" / "sby", ignore_errors=True)
        _saved(document, entry, out, say, len(sampled))
    document["summary"] = _summary(document["mutants"])
    (out / "mutate.json").write_text(json.dumps(document, indent=1) + "\n")
    text = _table(document)
    (out / "mutate.md").write_text(text + "\n")
    print(text)
    return 0
