"""ncu CSV parsing, snapshots and classification, on real H200 reports (tests/fixtures/ncu)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from profiles.classify import LABELS, classify, load_thresholds
from profiles.ncu_csv import NcuParseError, parse_ncu_csv, parse_value, read_ncu_csv
from profiles.render import render_snapshot
from profiles.snapshot import build_snapshot, snapshots_from_csv

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "ncu"
EXPECTED = json.loads((FIXTURES / "expected_labels.json").read_text())


def _expected(name: str) -> dict:
    entry = EXPECTED[name]
    return {"label": entry, "evidence": []} if isinstance(entry, str) else entry


def _pairs() -> list[str]:
    """Stems with both a raw and a details report listed in expected_labels.json."""
    stems = {n[: -len("_raw.csv")] for n in EXPECTED if n.endswith("_raw.csv")}
    return sorted(s for s in stems if f"{s}_details.csv" in EXPECTED)


def test_every_fixture_csv_is_listed_with_a_label() -> None:
    on_disk = {p.name for p in FIXTURES.glob("*.csv")}
    assert on_disk, "no ncu fixtures found"
    assert on_disk <= set(EXPECTED), f"CSV files without an expected label: {sorted(on_disk - set(EXPECTED))}"
    assert {_expected(n)["label"] for n in EXPECTED} <= set(LABELS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_gets_the_label_its_readme_names_and_says_why(name: str) -> None:
    snaps = snapshots_from_csv(FIXTURES / name)
    assert len(snaps) == 1, "each fixture profiles one launch"
    snap, expected = snaps[0], _expected(name)
    assert snap["bottleneck"] == expected["label"], snap["evidence"]
    assert 0 < snap["confidence"] <= 1
    for fragment in expected.get("evidence", []):
        assert any(fragment in line for line in snap["evidence"]), (fragment, snap["evidence"])
    assert snap["source"] == "ncu" and snap["duration_us"] > 0


@pytest.mark.parametrize("stem", _pairs())
def test_raw_and_details_pages_agree(stem: str) -> None:
    raw = snapshots_from_csv(FIXTURES / f"{stem}_raw.csv")[0]
    details = snapshots_from_csv(FIXTURES / f"{stem}_details.csv")[0]
    assert raw["bottleneck"] == details["bottleneck"]
    assert (raw["kernel"], raw["grid"], raw["block"]) == (
        details["kernel"],
        details["grid"],
        details["block"],
    )
    # Two separate ncu runs of the same kernel: the shared headline numbers agree closely.
    for key in ("dram_pct", "sm_pct", "l2_pct", "achieved_occupancy_pct"):
        assert raw["metrics"][key] == pytest.approx(details["metrics"][key], abs=3.0), key
    assert raw["metrics"]["top_stalls"][0][0] == details["metrics"]["top_stalls"][0][0]


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n.endswith("_details.csv")))
def test_a_details_page_of_the_sections_alone_gets_the_same_label(name: str, tmp_path: Path) -> None:
    """Without the metrics tools/ncu.py requests by name (--metrics), a details page lists the top stall
    only, in rule text, and no atomic counter: each fixture must still get its label."""
    lines = (FIXTURES / name).read_text().splitlines(keepends=True)
    sections_only = tmp_path / name
    sections_only.write_text("".join(line for line in lines if "Command line profiler metrics" not in line))
    snap = snapshots_from_csv(sections_only)[0]
    assert snap["bottleneck"] == _expected(name)["label"], snap["evidence"]


def test_snapshot_fields_of_the_add_rmsnorm_report() -> None:
    snap = snapshots_from_csv(FIXTURES / "h200_add_rmsnorm_16384x8192_raw.csv")[0]
    m = snap["metrics"]
    assert (snap["kernel"], snap["grid"], snap["block"]) == ("add_rmsnorm", [16384, 1, 1], [256, 1, 1])
    assert snap["duration_us"] == pytest.approx(256.8)
    assert m["dram_pct"] == pytest.approx(84.86)
    assert m["registers_per_thread"] == 59 and m["spill_requests"] == 0
    assert m["theoretical_occupancy_pct"] == 50 and m["occupancy_limiter"] == "registers"
    assert m["waves_per_sm"] == pytest.approx(31.03)
    assert m["l2_hit_pct"] == pytest.approx(51.47) and m["l1_hit_pct"] == pytest.approx(19.84)
    # long_scoreboard: 16.95 of 34.98 warp cycles per issued instruction.
    assert m["top_stalls"][0] == ["long_scoreboard", pytest.approx(48.5, abs=0.1)]
    assert m["shared_bytes"] == 32  # static 0 + dynamic 32 (the driver's 1 KiB reserve is not the kernel's)


def test_details_page_reads_stall_and_pipe_from_ncu_rules() -> None:
    snap = snapshots_from_csv(FIXTURES / "h200_matmul_bf16_8192_tensor_bound_details.csv")[0]
    assert snap["metrics"]["tensor_pipe_pct"] == 83.0
    assert snap["metrics"]["top_stalls"] == [["barrier", 35.2]]
    assert snap["metrics"]["occupancy_limiter"] == "registers+shared_mem"


# -- parser edge cases -------------------------------------------------------------------------------

HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    '"Block Size","Grid Size","Device","CC"'
)
IDENT = '"{id}","1","python","h","{name}","1","7","(128, 1, 1)","{grid}","0","9.0"'


def _raw(rows: list[str], extra_cols: str, units: str) -> str:
    lines = [HEADER + "," + extra_cols, '"","","","","","","","","","",""' + "," + units]
    return "\n".join(lines + rows) + "\n"


def test_prof_lines_anywhere_and_program_output_are_skipped() -> None:
    cols = '"gpu__time_duration.sum","gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"'
    text = "\n".join(
        [
            "==PROF== Connected to process 1",
            "hello from the program",
            HEADER + "," + cols,
            "==WARNING== something mid-table",
            '"","","","","","","","","","",""' + ',"ns","%"',
            "==PROF== Profiling kernel: 0%....50%....100% - 20 passes",
            IDENT.format(id=0, name="k", grid="(8, 1, 1)") + ',"2,464","0.60"',
            "another program line",
            "==ERROR== trailing noise",
            IDENT.format(id=1, name="k", grid="(65,536, 1, 1)") + ',"1,234,567","no data"',
            "==PROF== Disconnected from process 1",
        ]
    )
    launches = parse_ncu_csv(text)
    assert [launch.id for launch in launches] == [0, 1]
    assert launches[0].number("gpu__time_duration.sum") == 2464.0
    assert launches[0].units["gpu__time_duration.sum"] == "ns"
    assert launches[1].grid == (65536, 1, 1)
    assert launches[1].number("gpu__time_duration.sum") == 1234567.0
    assert launches[1].value("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed") is None


@pytest.mark.parametrize(
    ("cell", "value"),
    [
        ("3,198,669,940.66", 3198669940.66),
        ("0", 0.0),
        ("-1.5e3", -1500.0),
        ("no data", None),
        ("n/a", None),
        ("", None),
        ("PolicySpread", "PolicySpread"),
        ("12,34", "12,34"),  # not a thousands separator: kept as text rather than misread
    ],
)
def test_parse_value(cell: str, value: object) -> None:
    assert parse_value(cell) == value


def test_details_page_quoted_commas_and_multiline_rule_text() -> None:
    head = HEADER + ',"Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type",'
    head += '"Rule Description","Estimated Speedup Type","Estimated Speedup"'
    ident = IDENT.format(id=3, name="kern", grid="(132, 1, 1)")
    text = "\n".join(
        [
            "==PROF== Connected to process 9",
            head,
            ident + ',"GPU Speed Of Light Throughput","Duration","us","1,002.50",',
            ident + ',"GPU Speed Of Light Throughput","DRAM Throughput","%","no data",',
            ident + ',"Launch Statistics","# SMs","SM","132",',
            ident + ',"WarpStateStats","","","","CPIStall","OPT","On average, each warp of this workload '
            "spends 2.0 cycles being stalled waiting on a memory barrier.\nThis stall type represents "
            'about 40.0% of the total average of 5.0 cycles between issuing two instructions.","global","40"',
            "==PROF== Disconnected from process 9",
        ]
    )
    (launch,) = parse_ncu_csv(text)
    assert launch.page == "details" and launch.kernel == "kern" and launch.id == 3
    assert launch.number("gpu_speed_of_light_throughput.duration") == 1002.5
    assert launch.value("gpu_speed_of_light_throughput.dram_throughput") is None
    assert launch.number("launch_statistics.sms") == 132
    assert launch.rules[0].speedup == 40.0 and "\n" in launch.rules[0].description
    snap = build_snapshot(launch)
    assert snap["duration_us"] == 1002.5  # the unit was "us", not ns
    assert snap["metrics"]["top_stalls"] == [["membar", 40.0]]
    assert snap["metrics"]["dram_pct"] is None


def test_not_an_ncu_csv_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.csv"
    bogus.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(NcuParseError, match="no ncu CSV header"):
        read_ncu_csv(bogus)
    empty_report = tmp_path / "empty.csv"
    empty_report.write_text("==PROF== Connected\n" + HEADER + "\n==PROF== Disconnected\n")
    with pytest.raises(NcuParseError, match="no profiled launch"):
        read_ncu_csv(empty_report)


# -- classifier rules on synthetic metric sets (each threshold from configs/profiles.yaml) ----------


def _metrics(**values: object) -> dict:
    base = {"grid_blocks": 16384, "threads_per_block": 256, "sm_count": 132, "top_stalls": []}
    return base | values


def test_spills_win_over_everything_when_they_are_in_the_hot_path() -> None:
    verdict = classify(_metrics(spill_requests=16384 * 8 * 10, dram_pct=80.0, registers_per_thread=255))
    assert verdict.label == "register_spills"
    assert "10.0 per warp" in verdict.evidence[0]
    # A couple of spill requests per launch are not the bottleneck.
    assert classify(_metrics(spill_requests=12, dram_pct=80.0)).label == "memory_bound"


def test_dram_near_the_h200_ceiling_is_memory_bound_but_far_below_is_not() -> None:
    t = load_thresholds()
    at = classify(_metrics(dram_pct=float(t["memory_bound"]["dram_min_pct"]), sm_pct=10.0))
    below = classify(_metrics(dram_pct=t["memory_bound"]["dram_min_pct"] - 1.0, sm_pct=10.0))
    assert at.label == "memory_bound" and below.label != "memory_bound"


def test_wasted_sectors_are_an_access_pattern_problem_even_with_busy_dram() -> None:
    verdict = classify(
        _metrics(
            dram_pct=70.0,
            l2_pct=90.0,
            l1_pct=80.0,
            global_load_efficiency_pct=12.5,
            sectors_per_load_request=32.0,
        )
    )
    assert verdict.label == "memory_access_pattern"
    assert "12.5% of each 32-byte sector" in verdict.evidence[0]


def test_busy_caches_with_idle_dram_without_sector_counters() -> None:
    verdict = classify(_metrics(dram_pct=20.0, l2_pct=85.0, l1_pct=40.0, sm_pct=30.0))
    assert verdict.label == "memory_access_pattern" and verdict.confidence < 0.7


def test_membar_stalls_or_busy_l2_atomics_are_contention() -> None:
    assert classify(_metrics(dram_pct=5.0, top_stalls=[["membar", 55.0]])).label == "contention"
    assert classify(_metrics(dram_pct=5.0, l2_atomic_pct=70.0)).label == "contention"


def test_a_wait_far_beyond_a_memory_round_trip_with_idle_memory_is_contention() -> None:
    idle = _metrics(dram_pct=0.4, l1_pct=0.6, l2_pct=1.8, sm_pct=0.2, achieved_occupancy_pct=97.0)
    verdict = classify(idle | {"warp_cycles_per_issue": 20768.0})
    assert verdict.label == "contention" and verdict.confidence < 0.75
    assert any("20,768 cycles per issued instruction" in line for line in verdict.evidence)
    assert classify(idle | {"warp_cycles_per_issue": 800.0}).label == "latency_bound"  # one round trip
    busy = idle | {"dram_pct": 60.0, "warp_cycles_per_issue": 20768.0}  # queued on DRAM, not on an address
    assert classify(busy).label != "contention"


def test_too_few_warps_with_enough_blocks_is_low_parallelism() -> None:
    m = _metrics(grid_blocks=256, waves_per_sm=0.12, achieved_occupancy_pct=6.0, dram_pct=9.0, sm_pct=3.0)
    assert classify(m).label == "low_parallelism"
    # The same small grid with DRAM busy is not idle: it is memory-bound.
    assert classify(m | {"dram_pct": 80.0}).label == "memory_bound"


def test_nothing_saturated_is_latency_bound_with_the_stall_named() -> None:
    verdict = classify(
        _metrics(dram_pct=30.0, sm_pct=25.0, l1_pct=20.0, l2_pct=30.0, top_stalls=[["wait", 40.0]])
    )
    assert verdict.label == "latency_bound"
    assert any("wait 40%" in line for line in verdict.evidence)


def test_thresholds_come_from_the_config_and_can_be_overridden() -> None:
    m = _metrics(dram_pct=60.0, sm_pct=10.0)
    assert classify(m).label != "memory_bound"
    assert (
        classify(m, load_thresholds(overrides={"memory_bound": {"dram_min_pct": 55}})).label == "memory_bound"
    )


# -- rendering and the CLI -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_render_is_compact_and_leads_with_the_verdict(name: str) -> None:
    snap = snapshots_from_csv(FIXTURES / name)[0]
    text = render_snapshot(snap)
    assert len(text) <= 1500
    assert f"bottleneck: {snap['bottleneck']}" in text.splitlines()[1]
    assert snap["evidence"][0] in text


def test_render_bound_holds_for_an_oversized_snapshot() -> None:
    snap = snapshots_from_csv(FIXTURES / "h200_add_rmsnorm_16384x8192_raw.csv")[0]
    snap["evidence"] = [f"evidence line {i} " + "x" * 100 for i in range(40)]
    text = render_snapshot(snap)
    assert len(text) <= 1500 and "throughput: DRAM" in text  # evidence trimmed, numbers kept


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "profiles.snapshot", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_json_prints_one_snapshot_per_launch() -> None:
    out = _cli(str(FIXTURES / "h200_rmsnorm_8rows_launch_bound_raw.csv"), "--json")
    assert out.returncode == 0, out.stderr
    snaps = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(snaps) == 1 and snaps[0]["bottleneck"] == "low_parallelism" and snaps[0]["source"] == "ncu"


def test_cli_text_and_refusal_of_a_non_ncu_file(tmp_path: Path) -> None:
    out = _cli(str(FIXTURES / "h200_matmul_bf16_8192_tensor_bound_details.csv"))
    assert out.returncode == 0 and "bottleneck: compute_bound" in out.stdout
    bogus = tmp_path / "notes.csv"
    bogus.write_text("name,value\nx,1\n")
    out = _cli(str(bogus))
    assert out.returncode == 2 and "no ncu CSV header" in out.stderr
    out = _cli(str(tmp_path / "missing.csv"))
    assert out.returncode == 2 and "cannot read" in out.stderr
