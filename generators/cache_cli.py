"""``bertforge cache``: what the cache holds, ``prune`` and ``clear``.

    bertforge cache            the entries, least recently used first, and the total
    bertforge cache prune      remove least recently used entries down to BERTFORGE_CACHE_MAX
    bertforge cache clear      remove every entry that is not in use
"""

import json
import time

from bertforge.sim import cache

__all__ = ["add_parser", "run_cache"]


def add_parser(commands):
    sub = commands.add_parser("cache", help="show the cache's size and entries; prune or clear it")
    sub.add_argument("action", nargs="?", choices=("show", "prune", "clear"), default="show",
                     help="show (default), prune (down to BERTFORGE_CACHE_MAX) or clear")
    sub.add_argument("--max", metavar="SIZE",
                     help="with prune: the size to prune to (e.g. 1G) instead of BERTFORGE_CACHE_MAX")
    sub.add_argument("--json", action="store_true", help="print the entries as JSON")


def _row(entry):
    return {"kind": entry["kind"], "name": entry["name"], "bytes": entry["size"],
            "last_used": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["used"])),
            "sealed": entry["sealed"]}


def run_cache(args):
    from .cli_common import CliError
    limit = cache.max_bytes()
    if args.max is not None:
        if args.action != "prune":
            raise CliError("--max goes with prune")
        import os
        saved = os.environ.get("BERTFORGE_CACHE_MAX")
        os.environ["BERTFORGE_CACHE_MAX"] = args.max
        try:
            limit = cache.max_bytes()
        finally:
            if saved is None:
                del os.environ["BERTFORGE_CACHE_MAX"]
            else:
                os.environ["BERTFORGE_CACHE_MAX"] = saved
    if args.action == "prune":
        removed = cache.prune(limit if limit is not None else float("inf"))
        kept = []
    elif args.action == "clear":
        removed, kept = cache.clear()
    else:
        removed, kept = [], []
    found = sorted(cache.entries(), key=lambda e: e["used"])
    total = sum(e["size"] for e in found)
    if args.json:
        print(json.dumps({"root": str(cache.root()), "bytes": total, "limit": limit,
                          "entries": [_row(e) for e in found],
                          "removed": [_row(e) for e in removed],
                          "in_use": [_row(e) for e in kept]}, indent=2))
        return 0
    if args.action != "show":
        print(f"removed {len(removed)} entries ({cache.format_size(sum(e['size'] for e in removed))})"
              + (f"; {len(kept)} in use kept" if kept else ""))
    print(f"cache: {cache.root()}  {cache.format_size(total)} in {len(found)} entries "
          f"(limit {'none' if limit is None else cache.format_size(limit)}: BERTFORGE_CACHE_MAX)")
    if args.action == "show":
        for entry in found:
            row = _row(entry)
            mark = "" if entry["sealed"] or entry["kind"] not in cache.EVICTABLE else "  (unsealed)"
            print(f"  {row['last_used']}  {cache.format_size(entry['size']):>9}  "
                  f"{entry['kind']}/{entry['name']}{mark}")
    return 0
