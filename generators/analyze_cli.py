"""``bertforge analyze``: where a BERT layer's cycles go on a design."""

import sys
from pathlib import Path

from .cli_common import CliError, bounded_int
from .workload import MODELS, OPTIMIZERS, PRECISIONS

__all__ = ["add_parser", "run_analyze"]

#: Most tokens (sequence x batch) ``analyze`` takes: every row of every unit
#: is costed, so 16384 tokens take seconds and a million minutes (BERT's
#: longest sequence is 512).
MAX_TOKENS = 16384
DEFAULT_HW = Path(__file__).parent / "configs" / "default.toml"


def add_parser(commands):
    sub = commands.add_parser("analyze", help="cycle breakdown of a BERT layer on a hardware config")
    sub.add_argument("--model", default="bert-base", choices=sorted(MODELS))
    why = "the analysis costs every row of every unit"
    sub.add_argument("--seq", type=bounded_int(MAX_TOKENS, why), default=128,
                     help=f"sequence length (default 128; seq x batch at most {MAX_TOKENS})")
    sub.add_argument("--batch", type=bounded_int(MAX_TOKENS, why), default=1,
                     help="batch size (default 1)")
    sub.add_argument("--training", action="store_true",
                     help="add the backward pass and the optimizer step, and int8 inference on the "
                          "same hardware as a reference")
    sub.add_argument("--precision", choices=PRECISIONS, default="int8",
                     help="the GEMM engine's number format; bytes per element follow (default int8)")
    sub.add_argument("--optimizer", choices=OPTIMIZERS, default="adam",
                     help="optimizer of the training step (default adam)")
    sub.add_argument("--hw", metavar="FILE.toml", default=str(DEFAULT_HW),
                     help="hardware config (default generators/configs/default.toml)")
    sub.add_argument("--compare", metavar="FILE2.toml", help="a second hardware config, side by side")
    sub.add_argument("--out", metavar="DIR", default="analysis",
                     help="where analysis.json, analysis.csv, breakdown.png and roofline.png go (default analysis)")


def run_analyze(args):
    if args.seq * args.batch > MAX_TOKENS:
        raise CliError(f"--seq x --batch must be at most {MAX_TOKENS} (the analysis costs every "
                       f"row of every unit), not {args.seq * args.batch}")
    from .analyze import analyze, format_table, load_hardware, write_outputs
    results = []
    for path in [args.hw] + ([args.compare] if args.compare else []):
        hw = load_hardware(path)
        if args.training:   # the reference the study charts training against
            results.append(analyze(args.model, args.seq, hw, batch=args.batch))
        results.append(analyze(args.model, args.seq, hw, batch=args.batch, training=args.training,
                               precision=args.precision, optimizer=args.optimizer))
    for result in results:
        print(format_table(result))
        print()
    write_outputs(results, args.out)
    print(f"wrote {args.out}/analysis.json, analysis.csv, breakdown.png and roofline.png", file=sys.stderr)
    return 0
