"""Baseline numbers for every example task, measured through the evaluator, beside torch eager and
torch.compile of the reference and the device's copy bandwidth, all in one run.

    python bench/evaluator_bench.py --out bench/results [--tasks add_rmsnorm,softmax] [--throughput 24]

Writes evaluator_baselines.json and evaluator_baselines.md (date, GPU, versions). With --throughput N
it also pushes N add_rmsnorm configs through static → compile → correctness → timing and reports
candidates per minute.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import triton  # noqa: E402

from tools.backend import JudgeClient  # noqa: E402
from tools.candidate import Candidate  # noqa: E402
from tools.evaluate import EvalSettings, Evaluator, _default_parallel  # noqa: E402
from tools.task import bytes_moved, load_task, torch_dtype  # noqa: E402
from tools.timing import TimingSettings, copy_bandwidth_gbps, time_fn  # noqa: E402


def torch_rows(task, settings: TimingSettings, copy_gbps: float) -> list[dict]:
    """Eager and torch.compile of the reference at every workload shape, timed like candidates."""
    # torch's default: static first, then one dynamic-shape recompile (what a user gets)
    compiled = torch.compile(task.reference)
    rows = []
    for shape, dtype in task.workload("cuda"):
        inputs = task.make_inputs(dict(shape), torch_dtype(dtype), "cuda", 0)
        row = {"shape": shape, "dtype": dtype}
        for label, fn in (("eager", task.reference), ("compile", compiled)):
            try:
                out = fn(*inputs)
                out = out if isinstance(out, tuple) else (out,)
                timed = time_fn(lambda fn=fn, inputs=inputs: fn(*inputs), settings)
                gbps = bytes_moved(task, inputs, out) / (timed.median_us * 1e-6) / 1e9
                row[label] = {
                    "median_us": timed.median_us,
                    "spread": timed.spread,
                    "gbps": gbps,
                    "roofline_pct": 100 * gbps / copy_gbps,
                    "method": timed.method,
                }
            except Exception as exc:  # report, do not hide: a failing torch.compile is a finding
                row[label] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        rows.append(row)
        del inputs
    torch.cuda.empty_cache()
    return rows


def baseline_rows(task, evaluator: Evaluator) -> tuple[list[dict], dict, list[dict]]:
    """The baseline evaluated twice in one run: its numbers, resources and the repeatability."""
    cand = Candidate(source=task.baseline_source, config=task.default_config(), module=task.baseline_name)
    first, second = evaluator.evaluate_many([cand, cand])
    for r in (first, second):
        if not r.passed:
            raise SystemExit(f"{task.name}: baseline failed: {r.error_type}: {r.message}\n{r.log[-3000:]}")
    repeat = []
    for a, b in zip(first.metrics.per_shape, second.metrics.per_shape, strict=True):
        repeat.append(
            {
                "shape": a.shape,
                "dtype": a.dtype,
                "first_us": a.median_us,
                "second_us": b.median_us,
                "diff_pct": 100 * abs(a.median_us - b.median_us) / min(a.median_us, b.median_us),
            }
        )
    return [r.model_dump() for r in first.metrics.per_shape], first.resources, repeat



class CpuSampler:
    """Busy CPU cores, once a second, from /proc/stat (empty where it cannot be read)."""

    def __init__(self) -> None:
        self.busy: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _ticks() -> tuple[int, int] | None:
        try:
            fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields) - idle, sum(fields)

    def _run(self) -> None:
        last, cores = self._ticks(), os.cpu_count() or 1
        while last is not None and not self._stop.wait(1.0):
            now = self._ticks()
            if now is None or now[1] == last[1]:
                continue
            self.busy.append(round(cores * (now[0] - last[0]) / (now[1] - last[1]), 2))
            last = now

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

def throughput(
    n: int, workdir: Path, variant: str = "", task_path: str = "tasks/add_rmsnorm", cluster: str | None = None
) -> dict:
    """N configs of one task (a seeded shuffle of every module's space) through every stage.
    ``variant`` = "PARALLEL/WARMUP_MS/REP_MS", then optionally "/overlap" (the judge times each candidate as
    it passes, ``overlap_timing``), "/grouped" (checked, then timed, in groups), "/early" (in groups, each
    timed once its group is closed, ``early_timing``), "/launchers" (``prebuilt_launchers``) or "/wN" (groups of at most
    N, ``max_waiting``); empty: the evaluator's
    defaults), so two settings can be
    compared on the same batch in the same run; ``cluster`` ("local:N", a scheduler address) judges the
    batch on a Dask cluster instead of this machine's judge."""
    import itertools

    task = load_task(REPO / task_path)
    rng = random.Random(0)
    pool = []
    for module in task.module_names:
        space = task.search_space(module)
        keys = list(space)
        for values in itertools.product(*(space[k] for k in keys)):
            pool.append(
                Candidate(
                    source=task.source(module), config=dict(zip(keys, values, strict=True)), module=module
                )
            )
    rng.shuffle(pool)
    batch = pool[:n]
    where = (cluster or "local").replace(":", "_").replace("/", "_")
    settings = EvalSettings(workdir=str(workdir / f"throughput-{variant.replace('/', '_') or 'default'}-{where}"))
    settings.cluster = cluster or None
    if variant:
        parallel, warmup, rep, *mode = variant.split("/")
        settings.parallel = int(parallel)
        settings.timing = TimingSettings(warmup_ms=float(warmup), rep_ms=float(rep))
        if "overlap" in mode or "grouped" in mode or "early" in mode:
            settings.overlap_timing = "overlap" in mode
            settings.early_timing = "early" in mode
        settings.prebuilt_launchers = "launchers" in mode
        for m in mode:
            if m.startswith("w"):
                settings.max_waiting = int(m[1:])
    started = time.perf_counter()
    arrived: dict[int, float] = {}

    def progress(i: int, r) -> None:  # what a killed run still shows
        arrived[i] = time.perf_counter() - started
        seconds = {k: round(v, 1) for k, v in r.stage_seconds.items()}
        print(f"  {arrived[i]:6.1f} s  #{i} {r.verdict} {r.error_type or ''} {seconds}", flush=True)

    with CpuSampler() as cpu, Evaluator(task, "cuda", settings) as evaluator:
        results = evaluator.evaluate_many(batch, on_result=progress)
        judge = getattr(evaluator.backend, "judge", None)  # a local judge: where its start went
        startup = {"judge_ready_s": judge.ready.get("started_in_s"), "judge_setup_s": judge.ready.get("setup_s"),
                   "zygote_ready_s": judge.last_done.get("zygote_ready_s"),
                   "zygote_warm_s": judge.last_done.get("zygote_warm_s")} if judge else {}  # fmt: skip
    wall = time.perf_counter() - started
    verdicts: dict[str, int] = {}
    stages: dict[str, list[float]] = {}
    for r in results:
        key = "pass" if r.passed else f"{r.stage}:{r.error_type}"
        verdicts[key] = verdicts.get(key, 0) + 1
        for stage, sec in r.stage_seconds.items():
            stages.setdefault(stage, []).append(sec)
    return {
        "task": task.name,
        "candidates": len(batch),
        "cluster": cluster or None,
        "wall_s": wall,
        "per_minute": 60 * len(batch) / wall,
        "verdicts": verdicts,
        # a batch is checked and timed in groups (tools.judge): when the results came is where the time went
        "first_result_s": min(arrived.values(), default=None),
        "startup": startup,
        # per candidate, inside its worker: mean and max seconds of each stage
        "stage_seconds": {k: {"mean": statistics.mean(v), "max": max(v)} for k, v in sorted(stages.items())},
        # checking cost: compile + correctness of each checked candidate, less its waits for another's timed run
        "checking_s": _mean_max([_checking_s(r.stage_seconds) for r in results if "correctness" in r.stage_seconds]),
        "parallel_check_workers": settings.parallel or _default_parallel("cuda"),
        "timing_settings": {"warmup_ms": settings.timing.warmup_ms, "rep_ms": settings.timing.rep_ms},
        "overlap_timing": settings.overlap_timing,
        "early_timing": settings.early_timing,
        "max_waiting": settings.max_waiting,
        "prebuilt_launchers": settings.prebuilt_launchers,
        # the batch in order: verdict, geomean and judging worker, so two backends compare candidate by candidate
        "results": [{"config": c.config, "module": c.module, "verdict": r.verdict, "error_type": r.error_type,
                     "geomean_us": r.metrics.geomean_us, "worker": r.worker, "arrived_s": arrived.get(i),
                     "stage_seconds": r.stage_seconds}
                    for i, (c, r) in enumerate(zip(batch, results, strict=True))],  # fmt: skip
        # the machine's CPU cores busy, each second of the batch: whether checking waits on the CPUs
        "cpu_busy_cores": cpu.busy,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def _per_shape(resources: dict, shape: dict, key: str) -> str:
    """The worst value over the kernels launched at this shape (Triton specializes per shape)."""
    values = [
        k[key] for k in resources.get("kernels", []) if k.get("shape") == shape and k.get(key) is not None
    ]
    return str(max(values)) if values else "-"


def markdown(report: dict) -> str:
    lines = [
        "# Evaluator baselines on the GPU",
        "",
        f"- date: {report['date']}",
        f"- GPU: {report['gpu']}; torch {report['torch']}; triton {report['triton']}",
        f"- copy bandwidth measured in this run: {report['copy_gbps']:.0f} GB/s (bytes read + written)",
        "- times: one launch() captured in a CUDA graph, its replay timed by tools.timing.bench_ms (a clean L2 flush before each replay); median of 3 medians",
        "",
    ]
    for name, t in report["tasks"].items():
        lines += [
            f"## {name}",
            "",
            "| shape | dtype | baseline us | GB/s | % copy | regs | spills "
            "| eager us | eager % | compile us | compile % | repeat diff % |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        res = t["resources"]
        for row, tr, rep in zip(t["baseline"], t["torch"], t["repeatability"], strict=True):
            e, c = tr.get("eager", {}), tr.get("compile", {})

            def fmt(d: dict, key: str, spec: str = ".1f") -> str:
                return format(d[key], spec) if key in d else d.get("error", "-")[:30]

            lines.append(
                f"| {json.dumps(row['shape'])} | {row['dtype']} | {row['median_us']:.1f} | {row['gbps']:.0f} | "
                f"{row['roofline_pct']:.1f} | {_per_shape(res, row['shape'], 'n_regs')} | {_per_shape(res, row['shape'], 'n_spills')} | {fmt(e, 'median_us')} | "
                f"{fmt(e, 'roofline_pct')} | {fmt(c, 'median_us')} | {fmt(c, 'roofline_pct')} | {rep['diff_pct']:.2f} |"
            )
        lines.append("")
    if "throughput" in report:
        lines += [
            "## Throughput",
            "",
            f"The same {report['throughput']['task']} configs through static → compile → correctness → timing, once per setting "
            "(check workers in parallel / timing warmup ms / rep ms). Stage seconds are per candidate (mean), as "
            "the judge saw them; in brackets the part spent waiting for the worker's replies / for the judge's "
            "own CUDA stream (the rest is the judge's copies and comparisons).",
            "",
            "| setting | candidates | wall s | per minute | verdicts | first result s | judge ready / zygote ready s "
            "| startup | compile | correctness (worker / sync) | checking, less GPU waits | timing (worker / sync) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for tp in report.get("throughput_variants", [report["throughput"]]):
            ts = tp.get("timing_settings", {})
            st = tp.get("stage_seconds", {})

            def mean(stage: str, st: dict = st) -> str:
                return f"{st[stage]['mean']:.1f}" if stage in st else "-"

            lines.append(
                f"| {tp['parallel_check_workers']}/{ts.get('warmup_ms', '-')}/{ts.get('rep_ms', '-')}"
                f"{'/overlap' if tp.get('overlap_timing') else '/early' if tp.get('early_timing') else '/grouped'}"
                f"{'/w' + str(tp['max_waiting']) if 'max_waiting' in tp else ''}"
                f"{'/launchers' if tp.get('prebuilt_launchers') else ''} "
                f"| {tp['candidates']} | {tp['wall_s']:.1f} | **{tp['per_minute']:.1f}** | {tp['verdicts']} "
                f"| {_fmt_s(tp.get('first_result_s'))} | {_fmt_s(tp.get('startup', {}).get('judge_ready_s'))} / "
                f"{_fmt_s(tp.get('startup', {}).get('zygote_ready_s'))} | {mean('startup')} | "
                f"{mean('compile')} | {mean('correctness')} ({mean('correctness_worker')} / {mean('correctness_sync')}) | "
                f"{_fmt_s((tp.get('checking_s') or {}).get('mean'))} | "
                f"{mean('timing')} ({mean('timing_worker')} / {mean('timing_sync')}) |"
            )
        lines += ["", *_against_first(report.get("throughput_variants", [])), ""]
    return "\n".join(lines)


def _against_first(variants: list[dict]) -> list[str]:
    """Each later variant's timings against the first's, candidate by candidate (the same configs): the
    geomean of the ratios and their range, over the candidates that passed in both."""
    lines = []
    for i, tp in enumerate(variants[1:], start=2):
        ratios = [b["geomean_us"] / a["geomean_us"] for a, b in zip(variants[0]["results"], tp["results"], strict=False)
                  if a.get("geomean_us") and b.get("geomean_us")]  # fmt: skip
        if ratios:
            geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            lines.append(f"- variant {i} against variant 1, candidate by candidate ({len(ratios)} timed in both): "
                         f"geomean {geo:.3f} ({min(ratios):.3f}-{max(ratios):.3f})")  # fmt: skip
    return lines


def _checking_s(seconds: dict[str, float]) -> float:
    """One candidate's checking seconds: compile and correctness, without the GPU gate's waits."""
    stages = ("compile", "correctness")
    return sum(seconds.get(s, 0.0) - seconds.get(f"{s}_gate", 0.0) for s in stages)


def _mean_max(values: list[float]) -> dict[str, float] | None:
    return {"mean": statistics.mean(values), "max": max(values)} if values else None


def _fmt_s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--tasks", default="add_rmsnorm,softmax,gqa_decode")
    parser.add_argument("--throughput", type=int, default=0)
    parser.add_argument("--throughput-task", default="tasks/add_rmsnorm", help="task folder, relative to the repository")
    parser.add_argument(
        "--throughput-variants",
        default="",
        help="comma-separated PARALLEL/WARMUP_MS/REP_MS[/overlap|/grouped][/wN] settings to compare on the same batch",
    )
    parser.add_argument(
        "--throughput-clusters",
        default="",
        help="comma-separated backends for the same batch: 'local' (this machine's judge), 'local:N', an address",
    )
    parser.add_argument(
        "--no-torch", action="store_true", help="skip torch eager / torch.compile (baseline + repeatability)"
    )
    parser.add_argument("--workdir", default="/tmp/ka-bench")
    parser.add_argument(
        "--judge-profile",
        default="",
        help="folder: each local judge runs under bench/judge_sampler.py and leaves its profile there",
    )
    parser.add_argument(
        "--worker-profile",
        default="",
        help="folder: every check worker runs under cProfile and leaves its profile there (bench/worker_site)",
    )
    parser.add_argument("--check-timeout", type=float, default=240.0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.worker_profile:  # read by bench/worker_site/sitecustomize.py in the zygote the judge starts
        Path(args.worker_profile).mkdir(parents=True, exist_ok=True)
        os.environ["KA_WORKER_PROFILE"] = str(Path(args.worker_profile).resolve())
        site = str(REPO / "bench" / "worker_site")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))
    settings = TimingSettings()
    copy_gbps = copy_bandwidth_gbps(settings)
    report: dict = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_gbps": copy_gbps,
        "tasks": {},
    }
    for name in [t for t in args.tasks.split(",") if t]:
        task = load_task(REPO / "tasks" / name)
        started = time.perf_counter()
        with Evaluator(
            task,
            "cuda",
            EvalSettings.for_task(task, workdir=f"{args.workdir}/{name}", check_timeout_s=args.check_timeout),
        ) as evaluator:
            rows, resources, repeat = baseline_rows(task, evaluator)
        torch_timings = [{} for _ in rows] if args.no_torch else torch_rows(task, settings, copy_gbps)
        report["tasks"][name] = {
            "baseline": rows,
            "resources": resources,
            "repeatability": repeat,
            "torch": torch_timings,
            "seconds": time.perf_counter() - started,
        }
        print(f"{name}: done in {time.perf_counter() - started:.0f} s", flush=True)
        (out / "evaluator_baselines.json").write_text(json.dumps(report, indent=2, default=str))
    if args.throughput:
        variants = [v for v in args.throughput_variants.split(",") if v] or [""]
        clusters = [c for c in args.throughput_clusters.split(",") if c] or ["local"]
        report["throughput_variants"] = []
        for variant, cluster in itertools.product(variants, clusters):
            if args.judge_profile:
                name = f"{Path(args.throughput_task).name}-{variant.replace('/', '_') or 'default'}.json"
                Path(args.judge_profile).mkdir(parents=True, exist_ok=True)
                profile = str(Path(args.judge_profile).resolve() / name)
                JudgeClient.COMMAND = [sys.executable, "-P", "-m", "bench.judge_sampler", profile]
            measured = throughput(args.throughput, Path(args.workdir), variant, args.throughput_task,
                                  None if cluster == "local" else cluster)  # fmt: skip
            print(json.dumps(measured), flush=True)
            report["throughput_variants"].append(measured)
            (out / "evaluator_baselines.json").write_text(json.dumps(report, indent=2, default=str))
        report["throughput"] = max(report["throughput_variants"], key=lambda t: t["per_minute"])
    (out / "evaluator_baselines.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "evaluator_baselines.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
