"""Multi-shape objective: the best single config (geomean over the shapes) against the best config per
shape bucket, chosen offline from measured per-shape timings (like autotune's key, decided once).

    python -m tools.dispatch RUN_DIR [--bucket-dims M,N] [--threshold 0.02] [--json]

A bucket is one value of the bucket dims (default: every dim that varies across the shapes) and one
dtype; the table's choice for a bucket is the candidate with the lowest geomean over the bucket's
shapes. At run time a call takes the bucket nearest to its shape in log2 distance. The table is worth
its dispatch code only when it beats the single config by more than ``threshold`` (default 2%).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tools.results import ShapeTiming
from tools.run_folder import RunFolder

THRESHOLD = 0.02

ShapeKey = tuple[str, str]  # (shape as sorted JSON, dtype)


class TimedCandidate(BaseModel):
    """One passing candidate and its per-shape timings."""

    identity: str
    module: str
    config: dict[str, Any]
    per_shape: list[ShapeTiming]
    interpreted: bool = False
    source_path: str | None = Field(default=None, description="its source file, when read from a run folder")


class Choice(BaseModel):
    identity: str
    module: str
    config: dict[str, Any]
    geomean_us: float


class Bucket(BaseModel):
    key: dict[str, int] = Field(description="values of the bucket dims")
    dtype: str
    shapes: list[dict[str, int]]
    choice: Choice = Field(description="the best candidate over this bucket's shapes")
    single_us: float = Field(description="the single config's geomean over the same shapes")


class DispatchReport(BaseModel):
    bucket_dims: list[str]
    single: Choice
    table: list[Bucket]
    table_geomean_us: float
    gain: float = Field(description="single geomean / table geomean - 1")
    threshold: float
    table_wins: bool
    interpreted: bool
    candidates: int
    message: str


def shape_key(shape: dict[str, int], dtype: str) -> ShapeKey:
    return json.dumps(shape, sort_keys=True), dtype


def shape_label(shape: dict[str, int]) -> str:
    """A shape in words: 'M=8192 N=32768'."""
    return " ".join(f"{k}={v}" for k, v in shape.items())


def geomean(values: Iterable[float]) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def geomean_or_none(values: Iterable[float]) -> float | None:
    """``geomean``, or None when there are no values (nothing timed, no shape in common)."""
    values = list(values)
    return geomean(values) if values else None


def table_wins(table_us: float, single_us: float, threshold: float = THRESHOLD) -> bool:
    """Whether a per-bucket table at ``table_us`` beats one config at ``single_us`` by enough to ship."""
    return single_us / table_us - 1 > threshold


def _times(c: TimedCandidate) -> dict[ShapeKey, float]:
    return {shape_key(r.shape, r.dtype): r.median_us for r in c.per_shape if r.median_us > 0}


def choose_dispatch(
    candidates: list[TimedCandidate],
    bucket_dims: list[str] | None = None,
    threshold: float = THRESHOLD,
    single_identity: str | None = None,
) -> DispatchReport:
    """The best single config and the best per-bucket table over the shapes every candidate timed.

    ``single_identity`` pins the single config (e.g. the run's best after the watchdog) instead of
    the lowest geomean. Candidates missing a shape are left out; ties go to the earlier identity."""
    timed = [(c, _times(c)) for c in candidates]
    keys = sorted({k for _, t in timed for k in t})
    eligible = sorted(
        [(c, t) for c, t in timed if all(k in t for k in keys)],
        key=lambda ct: (geomean(ct[1].values()), ct[0].identity),
    )
    if not eligible:
        raise ValueError("no candidate has timings at every shape")
    if single_identity is not None:
        pinned = [ct for ct in eligible if ct[0].identity == single_identity]
        if not pinned:
            raise ValueError(f"candidate {single_identity} has no timings at every shape")
        single_c, single_t = pinned[0]
    else:
        single_c, single_t = eligible[0]
    shapes = [(json.loads(s), dtype) for s, dtype in keys]
    if bucket_dims is None:
        dims = list(shapes[0][0])
        bucket_dims = [d for d in dims if len({s[d] for s, _ in shapes}) > 1]
    unknown = [d for d in bucket_dims if d not in shapes[0][0]]
    if unknown:
        raise ValueError(f"bucket dim {unknown[0]!r} is not a shape dim ({', '.join(shapes[0][0])})")

    groups: dict[tuple[str, str], list[ShapeKey]] = {}
    for (shape, dtype), key in zip(shapes, keys, strict=True):
        bucket = json.dumps({d: shape[d] for d in bucket_dims}, sort_keys=True)
        groups.setdefault((bucket, dtype), []).append(key)
    table, table_times = [], []
    for (bucket, dtype), members in groups.items():
        best_c, best_t = min(eligible, key=lambda ct: (geomean(ct[1][k] for k in members), ct[0].identity))
        table_times += [best_t[k] for k in members]
        table.append(
            Bucket(
                key=json.loads(bucket),
                dtype=dtype,
                shapes=[json.loads(k[0]) for k in members],
                choice=_choice(best_c, [best_t[k] for k in members]),
                single_us=geomean(single_t[k] for k in members),
            )
        )
    table.sort(key=lambda b: (b.dtype, [b.key[d] for d in bucket_dims]))
    table_us = geomean(table_times)
    single = _choice(single_c, list(single_t.values()))
    gain = single.geomean_us / table_us - 1
    distinct = len({b.choice.identity for b in table})
    wins = table_wins(table_us, single.geomean_us, threshold) and distinct > 1
    interpreted = any(c.interpreted for c, _ in eligible)
    message = (
        f"per-bucket table over {', '.join(bucket_dims) or 'no dim'} ({len(table)} buckets, "
        f"{distinct} distinct configs): {table_us:.2f} us geomean vs {single.geomean_us:.2f} us for one config "
        f"({100 * gain:+.1f}%); "
        + ("the table wins" if wins else f"one config is enough (threshold {100 * threshold:g}%)")
        + (" [interpreted timings: a ranking only]" if interpreted else "")
    )
    return DispatchReport(
        bucket_dims=bucket_dims,
        single=single,
        table=table,
        table_geomean_us=table_us,
        gain=gain,
        threshold=threshold,
        table_wins=wins,
        interpreted=interpreted,
        candidates=len(eligible),
        message=message,
    )


def _choice(c: TimedCandidate, times: list[float]) -> Choice:
    return Choice(identity=c.identity, module=c.module, config=c.config, geomean_us=geomean(times))


def bucket_ranges(report: DispatchReport) -> list[str]:
    """Human-readable range of each bucket (one bucket dim: boundaries at geometric midpoints)."""
    if len(report.bucket_dims) != 1:
        return [", ".join(f"{d}={b.key[d]}" for d in report.bucket_dims) or "all" for b in report.table]
    (dim,) = report.bucket_dims
    out = []
    for b in report.table:
        values = sorted({o.key[dim] for o in report.table if o.dtype == b.dtype})
        i = values.index(b.key[dim])
        low = math.sqrt(values[i - 1] * values[i]) if i > 0 else None
        high = math.sqrt(values[i] * values[i + 1]) if i + 1 < len(values) else None
        if low is None and high is None:
            out.append(f"any {dim}")
        elif low is None:
            out.append(f"{dim} < {high:.0f}")
        elif high is None:
            out.append(f"{dim} >= {low:.0f}")
        else:
            out.append(f"{low:.0f} <= {dim} < {high:.0f}")
    return out


def render_markdown(report: DispatchReport) -> str:
    lines = [
        "## Dispatch: one config vs a per-shape table",
        "",
        f"- {report.message}",
        f"- one config: {report.single.module} `{json.dumps(report.single.config)}` "
        f"({report.single.identity}), {report.single.geomean_us:.2f} us geomean",
        "",
        "| bucket | dtype | shapes | choice | config | us (geomean) | one config us |",
        "|---|---|---|---|---|---|---|",
    ]
    for b, where in zip(report.table, bucket_ranges(report), strict=True):
        shapes = "; ".join(shape_label(s) for s in b.shapes)
        lines.append(
            f"| {where} | {b.dtype} | {shapes} | {b.choice.module} | `{json.dumps(b.choice.config)}` | "
            f"{b.choice.geomean_us:.2f} | {b.single_us:.2f} |"
        )
    return "\n".join(lines) + "\n"


# -- a run folder ------------------------------------------------------------------------------------
def load_run(run_dir: str | Path) -> list[TimedCandidate]:
    """Every passing candidate of a run folder with its per-shape timings, its record and its source."""
    folder = RunFolder(run_dir)
    out = []
    for identity, result in folder.results():
        source = folder.path(folder.candidate_file(identity))
        record = folder.candidate_record(identity)
        if not result.passed or not result.metrics.per_shape or not source.exists() or not record:
            continue
        out.append(
            TimedCandidate(
                identity=identity,
                module=record.get("module", ""),
                config=record.get("config", {}),
                per_shape=result.metrics.per_shape,
                interpreted=result.device.interpreted,
                source_path=str(source),
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.dispatch", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a run folder (results/ and candidates/)")
    parser.add_argument("--bucket-dims", default=None, help="comma-separated shape dims, e.g. M")
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    candidates = load_run(args.run_dir)
    dims = [d for d in args.bucket_dims.split(",") if d] if args.bucket_dims is not None else None
    try:
        report = choose_dispatch(candidates, dims, args.threshold, RunFolder(args.run_dir).best_identity())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.model_dump_json(indent=2) if args.json else render_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
