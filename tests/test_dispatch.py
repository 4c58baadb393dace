"""Multi-shape objective: the best single config by geomean, the best config per shape bucket, and
when the table is worth it. Per-shape numbers are explicit: the baseline's are the add_rmsnorm
timings measured on the H200 (bench/results); the other candidates scale them per shape."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tools.dispatch import TimedCandidate, bucket_ranges, choose_dispatch, main, render_markdown

REPO = Path(__file__).resolve().parent.parent
MEASURED = json.loads((REPO / "bench" / "results" / "evaluator_baselines_h200.json").read_text())
ROWS = MEASURED["tasks"]["add_rmsnorm"]["baseline"]  # M in 1..16384, N in 4096, 8192


def cand(name: str, factor, **config) -> TimedCandidate:
    """The measured rows, each shape's time multiplied by factor(shape)."""
    rows = [{**r, "median_us": r["median_us"] * factor(r["shape"]), "min_us": r["min_us"] * factor(r["shape"])}
            for r in ROWS]  # fmt: skip
    return TimedCandidate(identity=name, module=f"{name}.py", config=config, per_shape=rows)


BASE = cand("base", lambda s: 1.0, ROWS=1)
LARGE = cand("large", lambda s: 0.8 if s["M"] >= 4096 else 1.15, ROWS=4)  # wins only at large M
SMALL = cand("small", lambda s: 0.9 if s["M"] <= 32 else 1.3, ROWS=1)  # wins only at small M


def test_the_single_config_is_the_geomean_winner_and_the_table_picks_per_bucket():
    report = choose_dispatch([BASE, LARGE, SMALL], bucket_dims=["M"])
    geomeans = {
        c.identity: math.exp(sum(math.log(r.median_us) for r in c.per_shape) / len(c.per_shape))
        for c in (BASE, LARGE, SMALL)
    }
    assert report.single.identity == min(geomeans, key=geomeans.get)
    assert report.single.geomean_us == pytest.approx(min(geomeans.values()))
    picks = {b.key["M"]: b.choice.identity for b in report.table}
    assert picks == {1: "small", 32: "small", 256: "base", 4096: "large", 16384: "large"}
    assert all(len(b.shapes) == 2 for b in report.table)  # N=4096 and N=8192 in each M bucket
    assert report.table_geomean_us < report.single.geomean_us
    assert report.table_wins and report.gain > 0.02 and "the table wins" in report.message


def test_a_table_within_the_threshold_is_not_worth_it():
    near = cand("near", lambda s: 0.99 if s["M"] >= 4096 else 1.01, ROWS=2)
    report = choose_dispatch([BASE, near], bucket_dims=["M"])
    assert 0 <= report.gain < 0.02 and not report.table_wins
    assert "one config is enough" in report.message
    assert choose_dispatch([BASE, near], bucket_dims=["M"], threshold=0.001).table_wins is (
        len({b.choice.identity for b in report.table}) > 1
    )


def test_default_buckets_are_every_varying_dim_and_each_shape_gets_its_own():
    report = choose_dispatch([BASE, LARGE, SMALL])
    assert report.bucket_dims == ["M", "N"] and len(report.table) == len(ROWS)


def test_a_candidate_missing_a_shape_is_left_out_and_the_single_config_can_be_pinned():
    partial = TimedCandidate(identity="partial", module="p.py", config={}, per_shape=BASE.per_shape[:-1])
    report = choose_dispatch([BASE, LARGE, partial], bucket_dims=["M"], single_identity="base")
    assert report.candidates == 2 and report.single.identity == "base"
    assert all(b.choice.identity != "partial" for b in report.table)
    with pytest.raises(ValueError, match="partial"):
        choose_dispatch([BASE, partial], single_identity="partial")
    with pytest.raises(ValueError, match="not a shape dim"):
        choose_dispatch([BASE], bucket_dims=["K"])


def test_dtypes_get_their_own_buckets():
    def two_dtypes(c: TimedCandidate, bf16_factor: float) -> TimedCandidate:
        extra = [
            r.model_copy(update={"dtype": "float32", "median_us": r.median_us * bf16_factor})
            for r in c.per_shape
        ]
        return c.model_copy(update={"per_shape": [*c.per_shape, *extra]})  # fmt: skip

    report = choose_dispatch([two_dtypes(BASE, 2.0), two_dtypes(LARGE, 2.5)], bucket_dims=["M"])
    assert {b.dtype for b in report.table} == {"bfloat16", "float32"} and len(report.table) == 10


def test_ranges_and_the_markdown_table_name_each_bucket():
    report = choose_dispatch([BASE, LARGE, SMALL], bucket_dims=["M"])
    assert bucket_ranges(report) == [
        "M < 6",
        "6 <= M < 91",
        "91 <= M < 1024",
        "1024 <= M < 8192",
        "M >= 8192",
    ]
    text = render_markdown(report)
    assert "| M >= 8192 | bfloat16 |" in text and "large.py" in text and '{"ROWS": 4}' in text


def test_the_cli_reads_a_run_folder(tmp_path, capsys):
    from tools.candidate import Candidate
    from tools.results import EvalResult
    from tools.run_folder import RunFolder

    folder = RunFolder(tmp_path)
    for c in (BASE, LARGE, SMALL):
        cand_ = Candidate(source=f"# {c.identity}\n", config=c.config, module=c.module)
        folder.write_candidate(cand_)
        result = EvalResult(verdict="pass", stage="done", metrics={"per_shape": c.per_shape})
        folder.save_result(cand_.identity, result)
    assert main([str(tmp_path), "--bucket-dims", "M", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["table_wins"] and report["candidates"] == 3
    assert main([str(tmp_path / "missing")]) == 2


def test_one_geomean_with_none_for_no_values():
    """tools.dispatch.geomean is the one definition; geomean_or_none adds None for no values, which the
    evaluator (no timed shape), the watchdog (no shape in common) and the suite (no row timed by both)
    need. None of them keeps its own copy."""
    import bench.suite
    import tools.evaluate
    import tools.watchdog
    from tools.dispatch import geomean, geomean_or_none

    assert geomean_or_none([]) is None and geomean_or_none(iter(())) is None
    assert geomean_or_none([2.0, 8.0]) == geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean_or_none(v for v in (1.0, 9.0)) == pytest.approx(3.0)
    for module in (tools.evaluate, tools.watchdog, bench.suite):
        assert not hasattr(module, "_geomean"), module.__name__
