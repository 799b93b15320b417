"""The ``bertforge`` command line.

    bertforge generate systolic --rows 4 --cols 4 --dataflow os -o out
    bertforge sim systolic --rows 4 --cols 4 --dataflow ws --k 64 --tiles 8 --json
    bertforge bench systolic --out bench
    bertforge sweep --spec generators/configs/sweep_models.toml
    bertforge demo
    bertforge presets
    bertforge prove [BLOCK ...] [--depth N] [--out DIR]
    bertforge model fetch all-minilm-l6-v2
    bertforge cache [prune|clear]
    bertforge sim model --checkpoint all-minilm-l6-v2 --text "..." --json
    bertforge docs --out manual

Every block's config fields are flags (``acc_width`` -> ``--acc-width``);
``--preset NAME`` and ``--config FILE.toml`` set them too (flags win). Bad
input ends with one line on stderr and exit code 2; a design whose output
differs from the golden model ends with exit code 1. ``BERTFORGE_DEBUG=1``
shows the traceback instead.

The ``generate``, ``sim`` and ``bench`` sub-commands come from the block
registry (:data:`~bertforge.generators.blocks.BLOCKS`) and run through one
generic driver (:mod:`bertforge.generators.simulate`).
"""

import argparse
import contextlib
import os
import sys

from bertforge.rtl.errors import BertforgeError
from . import analyze_cli, axi_cli, board_cli, cache_cli, coverage_cli, manual, model_sim, mutate_cli, soc_cli, sweep
from .blocks import BLOCKS, PRESETS
from .cli_common import CliError, add_config_flags, add_sim_flags

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise CliError(f"{message} (see: {self.prog} --help)")


def _subcommands(parser, title):
    sub = parser.add_subparsers(dest=title, metavar=title.upper(), parser_class=_Parser)
    sub.required = True
    return sub


_SIM_EXAMPLES = """examples:
  bertforge sim systolic --rows 4 --cols 4 --k 64 --tiles 8 --json
  bertforge sim gemm --m 31 --k 17 --n 29 --gap 0.3 --stall 0.5
  bertforge sim systolic --a A.npy --b B.npy --out C.npy
  bertforge sim BLOCK --help       # a block's flags"""


def build_parser():
    parser = _Parser(prog="bertforge", description=(
        "Generate, simulate and benchmark BERT accelerator hardware (Amaranth -> Verilog)."))
    commands = _subcommands(parser, "command")

    generate = commands.add_parser("generate", help="emit a block as Verilog + JSON sidecar")
    generate_blocks = _subcommands(generate, "block")
    sim = commands.add_parser(
        "sim", help="simulate a block in Verilator against its golden model",
        description="Simulate a block's emitted Verilog in Verilator (cocotb) against its golden "
                    "model and cycle model: random data, or your .npy files.",
        epilog=_SIM_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sim_blocks = _subcommands(sim, "block")
    bench = commands.add_parser("bench", help="benchmark a block; writes bench.json + bench.md")
    bench_blocks = _subcommands(bench, "block")
    for name, block in BLOCKS.items():
        if block.component:
            sub = generate_blocks.add_parser(name, help=f"the {name} block")
            _add_config_args(sub, block)
            sub.add_argument("-o", "--out", required=True, metavar="DIR", help="output directory")
            if name in ("gemm", "encoder"):
                axi_cli.add_bus_args(sub)
        if block.simulates:
            sub = sim_blocks.add_parser(name, help=block.help)
            _add_config_args(sub, block)
            block.add_sim_args(sub)
            add_sim_flags(sub)
            if name in ("gemm", "encoder"):
                axi_cli.add_bus_args(sub)
        if block.bench:
            block.add_bench_args(bench_blocks.add_parser(name, help=block.bench_help))

    model_sim.add_parsers(commands, sim_blocks, bench_blocks)

    demo = commands.add_parser("demo", help="generate, simulate and report a default 4x4 OS array")
    demo.add_argument("-o", "--out", default="bertforge-demo", metavar="DIR",
                      help="where to write the Verilog (default bertforge-demo)")

    commands.add_parser("presets", help="list the named presets of every block")
    provable = [name for name, block in BLOCKS.items() if block.proofs]
    prove = commands.add_parser("prove", help="prove the stream contracts with SymbiYosys "
                                              f"(blocks: {', '.join(provable)})")
    prove.add_argument("blocks", nargs="*", metavar="BLOCK",
                       help="blocks to prove (default: all of them)")
    prove.add_argument("--depth", type=int, metavar="N",
                       help="k-induction, bmc and cover depth instead of each proof's own "
                            "(1..200: MAX_DEPTH in bertforge.sim.formal)")
    prove.add_argument("--out", default="bertforge-proofs", metavar="DIR",
                       help="work directory: designs, logs, counterexample traces "
                            "(default bertforge-proofs)")
    prove.add_argument("--bench", metavar="DIR",
                       help="also write DIR/bench.json and bench.md: one row per property "
                            "(method, result, depth, solver seconds) and the totals")
    board_cli.add_parsers(commands)
    soc_cli.add_parser(commands)
    analyze_cli.add_parser(commands)
    sweep.add_parser(commands)
    manual.add_parser(commands)
    cache_cli.add_parser(commands)
    coverage_cli.add_parser(commands)
    mutate_cli.add_parser(commands)
    return parser


def _add_config_args(sub, block):
    if block.add_config_args:
        block.add_config_args(sub)
    else:
        add_config_flags(sub, block)


def _check_outputs(parser, args):
    """Every ``--out``/``-o`` path is checked before any work starts (a
    ``DIR`` metavar: a directory; else a file)."""
    from .userfiles import check_output
    if getattr(args, "out", None) is None:
        return
    action = _out_action(parser, args)
    directory = action is None or action.metavar in ("DIR", None)
    check_output(args.out, "/".join(action.option_strings) if action else "--out",
                 directory=directory)


def _out_action(parser, args):
    """The ``--out`` action of the sub-command ``args`` chose."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            choice = getattr(args, action.dest, None)
            if choice in action.choices:
                return _out_action(action.choices[choice], args)
        elif action.dest == "out":
            return action
    return None


def cmd_generate(args):
    from .emit import write_design
    from .simulate import block_config
    block = BLOCKS[args.block]
    config = block_config(block, args)
    if axi_cli.wants_axi(args):
        for path in axi_cli.write_axi_design(config, axi_cli.bus_of(config, args), args.out):
            print(f"wrote {path}")
        return 0
    verilog_path, sidecar_path = write_design(config, block.component, args.out)
    print(f"wrote {verilog_path}")
    print(f"wrote {sidecar_path}")
    return 0


def cmd_presets(args):
    for block, presets in PRESETS.items():
        print(f"{block}:")
        for name, config in presets.items():
            fields = ", ".join(f"{k}={v!r}" for k, v in config.to_dict().items())
            print(f"  {name:<12} {fields}")
    return 0


def cmd_prove(args):
    """One line per property (its method: k-induction, bmc to a depth or
    cover within a depth; its solver time; a failure's trace and replay
    script), the count and time per method, the total; exit code 1 when
    any is not proved, bounded or reached."""
    provable = {name: block for name, block in BLOCKS.items() if block.proofs}
    names = args.blocks or list(provable)
    unknown = [name for name in names if name not in provable]
    if unknown:
        raise CliError(f"no proofs for {', '.join(unknown)} (blocks with proofs: "
                       f"{', '.join(provable)})")
    from bertforge.sim.formal import MAX_DEPTH, run_proofs, summary
    if args.depth is not None and args.depth < 1:
        raise CliError(f"--depth must be at least 1, not {args.depth}")
    if args.depth is not None and args.depth > MAX_DEPTH:
        raise CliError(f"--depth must be at most {MAX_DEPTH} (solver time grows steeply with "
                       f"it), not {args.depth:,}")
    from bertforge.sim.longrun import timed
    proofs = [proof for name in names for proof in provable[name].proofs()]
    key = f"prove {' '.join(sorted(names))} depth={args.depth}"
    with timed(key, f"{len(proofs)} proofs", 15 * len(proofs), bar=False):
        results = run_proofs(proofs, args.out, depth=args.depth,
                             report=lambda result: print(result.line(), flush=True))
    for line in summary(results):
        print(line)
    if args.bench:
        from .bench import write_results
        rows = [{"block": r.proof.block, "config": r.proof.config,
                 "property": ", ".join((r.proof.name,) + tuple(r.proof.together)),
                 "method": r.proof.method, "status": r.status, "depth": r.depth,
                 "seconds": round(r.seconds, 1)} for r in results]
        columns = [("block", lambda r: r["block"]), ("config", lambda r: r["config"]),
                   ("property", lambda r: r["property"]), ("method", lambda r: r["method"]),
                   ("result", lambda r: f"{r['status']} ({r['depth']})"),
                   ("s", lambda r: f"{r['seconds']:.1f}")]
        write_results(args.bench, "prove", rows, columns, "bertforge prove", summary(results))
    return 0 if all(result.ok for result in results) else 1


def main(argv=None):
    """The command line (``argv``: default ``sys.argv[1:]``); its exit code.
    Run as the ``bertforge`` command (no ``argv``), its child processes die
    with it (:func:`bertforge.sim.children.guard`)."""
    if argv is not None:
        return _main(argv)
    from bertforge.sim.children import guard
    try:
        with guard():
            return _main(argv)
    except KeyboardInterrupt:     # one that came outside the command's own handling
        return 130


def _main(argv):
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        _check_outputs(parser, args)
        if args.command == "generate":
            return cmd_generate(args)
        if args.command in ("sim", "bench") and args.block == "model":
            return getattr(model_sim, f"run_{args.command}_model")(args)
        if args.command == "model":
            return model_sim.run_fetch(args)
        if args.command == "sim" and axi_cli.wants_axi(args):
            return axi_cli.run_sim_axi(BLOCKS[args.block], args)
        if args.command in ("sim", "bench"):
            from . import simulate
            return getattr(simulate, f"run_{args.command}")(BLOCKS[args.block], args)
        if args.command in ("boards", "build", "flash", "run"):
            return getattr(board_cli, f"run_{args.command}")(args)
        if args.command == "soc" and args.soc_command == "sim":
            from .soc_simulate import run_soc_sim
            return run_soc_sim(args)
        if args.command == "soc" and args.soc_command == "run":
            from .soc_run import run_soc_run
            return run_soc_run(args)
        if args.command == "soc":
            return soc_cli.run_soc(args)
        if args.command == "analyze":
            return analyze_cli.run_analyze(args)
        if args.command == "prove":
            return cmd_prove(args)
        if args.command == "sweep":
            return sweep.run_sweep(args)
        if args.command == "docs":
            return manual.run_docs(args)
        if args.command == "cache":
            return cache_cli.run_cache(args)
        if args.command == "coverage":
            return coverage_cli.run_coverage(args)
        if args.command == "mutate":
            return mutate_cli.run_mutate(args)
        if args.command == "demo":
            from .demo import run_demo
            return run_demo(args.out)
        return cmd_presets(args)
    except BrokenPipeError:     # the reader went away (| head): stop quietly
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (BertforgeError, OSError) as error:
        if os.environ.get("BERTFORGE_DEBUG"):
            raise
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"bertforge: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:
        signum = getattr(interrupt, "signum", None)
        print("bertforge: terminated" if signum else "bertforge: interrupted", file=sys.stderr)
        return 128 + signum if signum else 130


if __name__ == "__main__":
    sys.exit(main())
