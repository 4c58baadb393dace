"""Where check workers spend their time: the profiles ``bench/evaluator_bench.py --worker-profile DIR`` left.

    python3 bench/worker_profile.py DIR [--top 40]

Prints the workers' wall and CPU seconds (their own, and their children's: ptxas and the C compiler), then
the functions that took the most cumulative and own time, summed over every worker.
"""

from __future__ import annotations

import argparse
import io
import json
import pstats
import statistics
from pathlib import Path


def summary(folder: Path, top: int) -> str:
    infos = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json")) if p.stat().st_size]
    profiles = [str(p) for p in sorted(folder.glob("*.prof")) if p.stat().st_size]
    if not infos or not profiles:
        raise SystemExit(f"{folder}: no worker profiles")
    lines = [f"# {len(infos)} workers: means over workers (max)"]
    for key in ("wall_s", "cpu_s", "children_cpu_s"):
        values = [i[key] for i in infos]
        lines.append(f"{key}: {statistics.mean(values):.2f} ({max(values):.2f}); sum {sum(values):.1f}")
    stats = pstats.Stats(profiles[0], stream=(out := io.StringIO()))
    for path in profiles[1:]:
        stats.add(path)
    for order in ("cumulative", "tottime"):
        out.write(f"\n## by {order} (seconds summed over the {len(profiles)} workers)\n")
        stats.sort_stats(order).print_stats(top)
    return "\n".join(lines) + "\n" + out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    print(summary(args.folder, args.top))


if __name__ == "__main__":
    main()
