"""``bertforge analyze``: where a BERT layer's cycles go on a design."""

import sys
from pathlib import Path

from .cli_common import positive_int
from .workload import MODELS

__all__ = ["add_parser", "run_analyze"]

DEFAULT_HW = Path(__file__).parent / "configs" / "default.toml"


def add_parser(commands):
    sub = commands.add_parser("analyze", help="cycle breakdown of a BERT layer on a hardware config")
    sub.add_argument("--model", default="bert-base", choices=sorted(MODELS))
    sub.add_argument("--seq", type=positive_int, default=128, help="sequence length (default 128)")
    sub.add_argument("--batch", type=positive_int, default=1)
    sub.add_argument("--training", action="store_true", help="add the backward pass")
    sub.add_argument("--hw", metavar="FILE.toml", default=str(DEFAULT_HW),
                     help="hardware config (default generators/configs/default.toml)")
    sub.add_argument("--compare", metavar="FILE2.toml", help="a second hardware config, side by side")
    sub.add_argument("--out", metavar="DIR", default="analysis",
                     help="where analysis.json, analysis.csv and breakdown.png go (default analysis)")


def run_analyze(args):
    from .analyze import analyze, format_table, load_hardware, write_outputs
    results = []
    for path in [args.hw] + ([args.compare] if args.compare else []):
        hw = load_hardware(path)
        results.append(analyze(args.model, args.seq, hw, batch=args.batch, training=args.training))
    for result in results:
        print(format_table(result))
        print()
    write_outputs(results, args.out)
    print(f"wrote {args.out}/analysis.json, analysis.csv and breakdown.png", file=sys.stderr)
    return 0
