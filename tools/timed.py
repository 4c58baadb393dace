"""Timing that is checked: every timed replay's outputs judged, the replay verified with fresh values, and
a win re-measured in fresh workers against the judge's own wall clock."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from tools import staging
from tools.compare import check_described, compare, sample_positions, samples_close, scale_at, unravel
from tools.judge_settings import FRESH_SEED, SAMPLES_PER_OUTPUT, JudgeSettings, Verdict
from tools.references import Entry
from tools.session import Session
from tools.timing import poison_value

if TYPE_CHECKING:
    from tools.judge import Judge


class Timing:
    def __init__(self, session: Session):
        self.s = session
        self.judge = session.judge
        self.task = session.judge.task
        self.rng = torch.Generator().manual_seed(int(session.job["identity"][:8], 16))

    def samples(self, expected: tuple[torch.Tensor, ...]) -> tuple[list[torch.Tensor], list[dict]]:
        """Positions checked in every timed replay: per output, flat and per dimension."""
        flats = [sample_positions(e.numel(), SAMPLES_PER_OUTPUT, self.rng) for e in expected]
        return flats, [{"flat": f.tolist(), "index": unravel(f, tuple(e.shape))} for f, e in zip(flats, expected, strict=True)]

    def capture(self, shape: dict, dtype: str) -> tuple[Entry, dict]:
        entry = self.judge.entry(shape, dtype, 0, "timing")
        specs = self.s.load(entry)
        cap = self.s.ask("capture", inputs=[sp.to_json() for sp in specs], shape=shape, stage="timing")
        structural = check_described(cap["outputs"], entry.expected, self.judge.device)
        if structural is not None:
            raise Verdict("timing", structural.error_type, "under CUDA-graph capture " + structural.message)
        return entry, cap

    def bench(self, entry: Entry, shape: dict, repeats: int, rotate: Entry | None = None) -> list[float]:
        """``repeats`` checked benches; each timed replay's poison count and samples judged here."""
        flats, samples = self.samples(entry.expected)
        t = self.judge.settings.timing
        log_at = self.judge.layout().log_at
        reply = self.s.ask("bench", samples=samples, repeats=repeats, warmup_ms=t.warmup_ms, rep_ms=t.rep_ms,
                           log_at=log_at, rotate=rotate is not None, stage="timing")  # fmt: skip
        self.check_log(reply, flats, [entry, rotate or entry], shape)
        return reply["medians_us"]

    def check_log(self, reply: dict, flats: list[torch.Tensor], sets: list[Entry], shape: dict) -> None:
        """Every timed replay of every bench: its poison count and its sampled values against the expected
        outputs of the input set it was given (``sets`` alternate run by run)."""
        assert self.s.arena is not None
        log = staging.view(self.s.arena.buffer, staging.Spec.from_json(reply["log"])).clone()
        log = log.reshape(-1, len(flats), int(reply["width"]))
        run_in_bench = torch.cat([torch.arange(n) for n in reply["runs"]]).to(log.device)
        which = run_in_bench % 2  # the input set each timed run had
        rtol, atol = self.task.tolerance(sets[0].dtype)
        total = log.shape[0]
        for j, flat in enumerate(flats):
            counts = torch.tensor([_poison_count(entry.expected[j]) for entry in sets], device=log.device)
            bad_count = log[:, j, 0].to(torch.long) != counts[which]
            wanted = torch.stack([entry.expected[j].reshape(-1)[flat.to(entry.expected[j].device)].to(log.device, torch.float64)
                                  for entry in sets])  # fmt: skip
            scale = torch.stack([scale_at(entry.expected[j], flat, self.task.row_scaled).to(log.device) for entry in sets])
            got = log[:, j, 1 : 1 + flat.numel()]
            e, sc = wanted[which], scale[which]
            close = samples_close(got, e, sc, rtol, atol)
            bad_value = ~close.all(dim=1)
            flags = torch.stack([bad_count.any(), bad_value.any()]).tolist()
            if flags[0]:
                run = int(bad_count.nonzero()[0, 0])
                raise Verdict("timing", "unwritten_output",
                              f"timed replay {run + 1} of {total} at {shape} left {int(log[run, j, 0])} elements of output {j} "
                              "unwritten: the kernel skips work in some calls (by call count, warm-up or capture)",
                              details={"shape": shape, "run": run, "output": j})  # fmt: skip
            if flags[1]:
                run = int(bad_value.nonzero()[0, 0])
                k = int((~close[run]).nonzero()[0, 0])
                index = [int(i) for i in torch.unravel_index(flat[k], tuple(sets[0].expected[j].shape))] if sets[0].expected[j].dim() else []
                raise Verdict("timing", "mismatch",
                              f"timed replay {run + 1} of {total} at {shape} returned a wrong output {j} at {index} (got "
                              f"{float(got[run, k])}, expected {float(e[run, k])}): the kernel behaves differently across "
                              "calls or under graph capture", details={"shape": shape, "run": run, "output": j, "index": index})  # fmt: skip

    def verify(self, shape: dict, dtype: str) -> None:
        """Fresh values into the captured buffers, one replay, its own outputs compared in full."""
        fresh = self.judge.entry(shape, dtype, FRESH_SEED, "timing")
        specs = self.s.load(fresh)
        places = self.s.places(fresh.expected)
        reply = self.s.ask("verify", inputs=[sp.to_json() for sp in specs], places=places, stage="timing")
        assert self.s.arena is not None and places is not None
        if not reply["copied"]:
            raise Verdict("timing", "runtime_error", "the replay's outputs could not be handed back to the judge")
        got = tuple(staging.view(self.s.arena.buffer, staging.Spec.from_json(p)).clone() for p in places)
        rtol, atol = self.task.tolerance(fresh.dtype)
        for i, (g, e) in enumerate(zip(got, fresh.expected, strict=True)):
            found = compare(g, e, rtol, atol, self.task.row_scaled)
            if found is not None:
                kind, details = found
                raise Verdict("timing", "stale_output" if kind == "mismatch" else "unwritten_output",
                              f"the timed CUDA-graph replay, given fresh values in its input buffers, returned a wrong "
                              f"output {i} at {details['index']} at {shape} (got {details['got']}, expected "
                              f"{details['expected']}): what was timed is not what was checked",
                              details={"shape": shape, "output": i, **details})  # fmt: skip

    def run(self) -> tuple[dict[str, Any], list[dict]]:
        """Every workload shape: capture, three checked benches, the replay verified, each shape with the GPU
        to itself. (metrics, kernels)."""
        judge = self.judge
        rows, kernels = [], []
        for shape, dtype in self.task.workload("cuda"):
            with judge.alone_on_gpu():
                entry, cap = self.capture(shape, dtype)
                medians = self.bench(entry, shape, max(judge.settings.timing.repeats, 3))
                self.verify(shape, dtype)
                self.s.ask("release")
            kernels.extend(cap.get("kernels", []))
            rows.append(judge.row(shape, dtype, entry, medians, cap["method"]))
        return {"per_shape": rows, "copy_gbps": judge.copy_gbps, "runs": max(judge.settings.timing.repeats, 3)}, kernels


def _poison_count(expected: torch.Tensor) -> int:
    value = poison_value(expected.dtype)
    if value is None:
        return 0
    if isinstance(value, float):
        return int(torch.isnan(expected).sum())
    return int((expected == value).sum())




class Retime:
    """Candidates that passed, each in a fresh worker (only the candidate and the driver in it), timed
    with their repeats interleaved on this GPU, and every one cross-checked where the worker cannot
    reach: the judge's own wall clock over K replays, and the same replays on inputs that change
    between calls (a cache by content or data kept in the L2 across the flush is faster only on
    repeated inputs)."""

    def __init__(self, judge: Judge, jobs: list[dict[str, Any]]):
        self.judge = judge
        self.sessions = {job["key"]: Session(judge, job) for job in jobs}
        self.results: dict[int, dict[str, Any]] = {}
        self.rows: dict[int, list[dict]] = {key: [] for key in self.sessions}
        self.kernels: dict[int, list[dict]] = {key: [] for key in self.sessions}
        self.confirm: dict[int, list[dict]] = {key: [] for key in self.sessions}
        self.methods: dict[int, str] = {}

    def fail(self, key: int, verdict: Verdict) -> None:
        self.results[key] = {**verdict.fields, "stage": "timing"}
        self.sessions.pop(key).close()

    def live(self) -> list[tuple[int, Session]]:
        return list(self.sessions.items())

    def run(self) -> dict[int, dict[str, Any]]:
        judge = self.judge
        for key, session in self.live():
            try:
                session.stage = "timing"
                session.open(judge.settings.check_timeout_s)
                session.deadline = time.monotonic() + judge.settings.timing_timeout_s
            except Verdict as verdict:
                self.fail(key, verdict)
        for shape, dtype in judge.task.workload("cuda"):
            self.shape(shape, dtype)
        for key, session in self.live():
            problem = session.close()
            if problem:
                self.results[key] = Verdict("timing", "forbidden_construct", problem).fields
                continue
            metrics = {"per_shape": self.rows[key], "copy_gbps": judge.copy_gbps, "runs": judge.settings.timing.repeats}
            self.results[key] = {"verdict": "pass", "stage": "timing", "metrics": metrics, "grids": self.kernels[key],
                                 "device": judge.info, "details": {"confirm": self.confirm[key]}}  # fmt: skip
        return self.results

    def shape(self, shape: dict, dtype: str) -> None:
        judge = self.judge
        timings: dict[int, Timing] = {}
        for key, session in self.live():
            try:
                timing = Timing(session)
                entry, cap = timing.capture(shape, dtype)
                timings[key] = timing
                self.kernels[key].extend(cap.get("kernels", []))
                self.methods[key] = cap["method"]
            except Verdict as verdict:
                self.fail(key, verdict)
        entry = judge.entry(shape, dtype, 0, "timing")
        medians: dict[int, list[float]] = {key: [] for key in timings}
        for r in range(max(judge.settings.timing.repeats, 3)):
            order = list(timings) if r % 2 == 0 else list(timings)[::-1]
            for key in order:
                if key in self.sessions:
                    self.guarded(key, lambda t=timings[key], m=medians[key]: m.extend(t.bench(entry, shape, 1)))
        for key, timing in timings.items():
            if key in self.sessions:
                self.guarded(key, lambda t=timing, k=key: self.cross_check(k, t, shape, dtype, entry, medians[k]))

    def guarded(self, key: int, step: Any) -> None:
        try:
            step()
        except Verdict as verdict:
            self.fail(key, verdict)

    def cross_check(self, key: int, timing: Timing, shape: dict, dtype: str, entry: Entry, medians: list[float]) -> None:
        judge, s = self.judge, timing.s
        settings = judge.settings
        static = sorted(medians)[len(medians) // 2]
        other = judge.entry(shape, dtype, 1, "timing")
        specs = s.load(other)
        s.ask("alternate", inputs=[sp.to_json() for sp in specs], stage="timing")
        rotating = timing.bench(entry, shape, 1, rotate=other)[0]
        wall = judge.wall_clock_us(s, static)
        writeback = judge.writeback_us(entry)
        problem = confirm_problem(shape, static, rotating, wall, settings, writeback)
        if problem is not None:
            raise problem
        timing.verify(shape, dtype)
        s.ask("release")
        self.rows[key].append(judge.row(shape, dtype, entry, medians, self.methods[key]))
        self.confirm[key].append({"shape": shape, "dtype": dtype, "events_us": static, "rotating_us": rotating,
                                  "wall_us": wall, "writeback_us": writeback})  # fmt: skip


def confirm_problem(
    shape: dict, static: float, rotating: float, wall: float, settings: JudgeSettings, writeback_us: float = 0.0
) -> Verdict | None:
    """What the re-measure of a win found wrong, or None. ``static``: the worker's event median on
    repeated inputs; ``rotating``: on inputs that change between calls; ``wall``: the judge's own clock
    per call over K replays. The wall clock also pays for writing the kernel's dirty outputs back during
    the next flush, which the events leave out by design: up to ``writeback_us`` more is allowed."""
    if rotating > static * settings.confirm_content_ratio and rotating - static > settings.confirm_band_us:
        return Verdict("timing", "stale_output",
                       f"at {shape} the kernel takes {static:.1f} us on the inputs of its previous call and "
                       f"{rotating:.1f} us when they change between calls: a cache by content, or data kept in "
                       "the L2 across the flush", details={"shape": shape, "static_us": static, "rotating_us": rotating})  # fmt: skip
    band = max(settings.confirm_band * static, settings.confirm_band_us)
    if wall - static > band + writeback_us or static - wall > band:
        return Verdict("timing", "suspicious_speedup",
                       f"at {shape} the judge's wall clock over the replays says {wall:.1f} us per call, the "
                       f"worker's own events said {static:.1f} us: the timing was not measured honestly",
                       details={"shape": shape, "wall_us": wall, "events_us": static, "held": "roofline"})  # fmt: skip
    return None


