"""Roofline plot of a benchmark-suite JSON: achieved GB/s per shape for every method, against the copy
bandwidth measured in the same run.

    python bench/plot.py SUITE.json --out roofline.png
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.anchors import ANCHORS  # noqa: E402

# Plot order and labels of the methods the suite times: ours, then the anchors.
METHODS: dict[str, str] = {
    "best": "our best",
    "baseline": "baseline",
    "eager": "torch eager",
    "compile": "torch.compile static",
    "max_autotune": "torch.compile max-autotune static",
    "compile_dynamic": "torch.compile dynamic",
    **{name: anchor.label for name, anchor in ANCHORS.items()},
}
STYLE = {  # color, marker, line width: ours stands out
    "best": ("tab:green", "o", 2.4),
    "baseline": ("tab:gray", "s", 1.2),
    "eager": ("tab:blue", ".", 1.0),
    "compile": ("tab:orange", "^", 1.0),
    "max_autotune": ("tab:purple", "v", 1.0),
    "compile_dynamic": ("tab:olive", "<", 1.0),
    "sdpa": ("tab:brown", "D", 1.0),
}
LIBRARY_STYLE = ("tab:pink", "P", 1.2)  # the Liger anchors (a task has one of them)


def shape_label(shape: dict[str, int], dtype: str, dtypes: int) -> str:
    dims = " ".join(f"{k}={v}" for k, v in shape.items())
    return f"{dims}\n{dtype}" if dtypes > 1 else dims


def plot_roofline(report: dict[str, Any], path: str | Path) -> Path:
    """One panel per task: GB/s per shape (ordered by bytes moved) for each method, the measured copy
    bandwidth as the ceiling. Log scale: small shapes sit orders of magnitude below the roofline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = {name: t for name, t in report["tasks"].items() if t.get("rows")}
    if not tasks:
        raise ValueError("the report has no timed rows to plot")
    fig, axes = plt.subplots(len(tasks), 1, figsize=(10, 4.2 * len(tasks)), squeeze=False)
    for ax, (name, t) in zip(axes[:, 0], tasks.items(), strict=True):
        rows = sorted(t["rows"], key=lambda r: (r.get("bytes") or 0, json.dumps(r["shape"])))
        x = list(range(len(rows)))
        dtypes = len({r["dtype"] for r in rows})
        for method, label in METHODS.items():
            points = [
                (i, r["methods"][method]["gbps"])
                for i, r in enumerate(rows)
                if (r["methods"].get(method) or {}).get("gbps")
            ]
            if not points:
                continue
            color, marker, width = STYLE.get(method, LIBRARY_STYLE)
            ax.plot(*zip(*points, strict=True), marker=marker, linewidth=width, color=color, label=label)
        copy = t.get("copy_gbps")
        if copy:
            ax.axhline(
                copy, color="tab:red", linestyle="--", label=f"copy bandwidth {copy:.0f} GB/s (measured)"
            )
        ax.set_yscale("log")
        ax.set_xticks(x, [shape_label(r["shape"], r["dtype"], dtypes) for r in rows], fontsize=7, rotation=30)
        ax.set_ylabel("achieved GB/s")
        gpu = t.get("gpu", "")
        ax.set_title(f"{name}: achieved bandwidth per shape ({gpu})", fontsize=10)
        ax.grid(True, which="major", axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
        top = max(
            [copy or 0] + [p for r in rows for m in r["methods"].values() if (p := (m or {}).get("gbps"))]
        )
        ax.set_ylim(top=10 ** math.ceil(math.log10(top * 1.5)) if top else None)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite_json")
    parser.add_argument("--out", default=None, help="PNG path (default: roofline.png beside the JSON)")
    args = parser.parse_args()
    source = Path(args.suite_json)
    out = Path(args.out) if args.out else source.with_name("roofline.png")
    print(plot_roofline(json.loads(source.read_text()), out))


if __name__ == "__main__":
    main()
