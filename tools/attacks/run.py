"""Run the attack scripts of ``tools/attacks/`` and print HOLDS or FAILS for each, then a table by
category (issue 33).

    python tools/attacks/run.py                    # every category
    python tools/attacks/run.py readers hostile    # some categories (module names)
    python tools/attacks/run.py -k fifo            # attacks whose name contains "fifo"

Each attack runs in its own process under a time limit (a hang is a failure), in a fresh temporary
folder. Exit status: 0 when every attack held, 1 otherwise."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))


def categories() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.py") if not p.stem.startswith("_") and p.stem != "run")


def attacks_of(category: str) -> list[str]:
    module = importlib.import_module(f"tools.attacks.{category}")
    return [name for name in vars(module) if name.startswith("attack_") and callable(getattr(module, name))]


def run_one(category: str, name: str, timeout: float) -> tuple[bool, str, float]:
    """One attack in a child process (this script with ``--one``); a hang or a crash fails."""
    started = time.monotonic()
    try:
        child = subprocess.run([sys.executable, __file__, "--one", f"{category}:{name}"], capture_output=True,
                               text=True, timeout=timeout, cwd=HERE.parents[1], errors="replace")
    except subprocess.TimeoutExpired:
        return False, f"hung past {timeout:.0f} s", time.monotonic() - started
    elapsed = time.monotonic() - started
    lines = [line for line in child.stdout.splitlines() if line.startswith(("HOLDS", "FAILS"))]
    if child.returncode == 0 and lines and lines[-1].startswith("HOLDS"):
        return True, "", elapsed
    reason = lines[-1][6:] if lines else f"exit {child.returncode}: {child.stderr.strip()[-400:]}"
    return False, reason, elapsed


def one(target: str) -> int:
    from tools.attacks._harness import Fails

    category, name = target.split(":")
    attack = getattr(importlib.import_module(f"tools.attacks.{category}"), name)
    with tempfile.TemporaryDirectory(prefix="ck-attack-") as work:
        try:
            attack(Path(work))
        except (Fails, AssertionError) as failure:
            print("FAILS", " ".join(str(failure).split())[:600])
            return 1
    print("HOLDS")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("categories", nargs="*", help="module names under tools/attacks (default: all)")
    parser.add_argument("-k", default="", help="run attacks whose name contains this")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per attack (default 240)")
    parser.add_argument("--json", type=Path, help="write every result to this file")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return one(args.one)
    chosen = args.categories or categories()
    unknown = sorted(set(chosen) - set(categories()))
    if unknown:
        parser.error(f"unknown categories {unknown}; known: {categories()}")
    results = []
    for category in chosen:
        for name in attacks_of(category):
            if args.k not in name:
                continue
            held, reason, seconds = run_one(category, name, args.timeout)
            results.append({"category": category, "attack": name[7:], "held": held, "reason": reason,
                            "seconds": round(seconds, 1)})
            print(f"{'HOLDS' if held else 'FAILS'}  {category}:{name[7:]}  ({seconds:.1f} s)"
                  + (f"  {reason}" if reason else ""), flush=True)
    print("\n| category | tried | held | failed |\n|---|---|---|---|")
    for category in chosen:
        rows = [r for r in results if r["category"] == category]
        if rows:
            held = sum(r["held"] for r in rows)
            print(f"| {category} | {len(rows)} | {held} | {len(rows) - held} |")
    total_held = sum(r["held"] for r in results)
    print(f"| all | {len(results)} | {total_held} | {len(results) - total_held} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if total_held == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
