"""Compile and correctness of one candidate, every comparison made in the judge."""

from __future__ import annotations

from typing import Any

import torch

from tools.compare import compare, same_bits
from tools.judge_settings import FRESH_SEED, Verdict
from tools.references import Entry
from tools.results import merge_launch_resources
from tools.session import Session


class Checks:
    """Compile + correctness of one candidate, every comparison made here."""

    def __init__(self, session: Session):
        self.s = session
        self.judge = session.judge
        self.task = session.judge.task
        self.count = 0

    def compile(self) -> None:
        judge, s = self.judge, self.s
        shape, dtype = judge.compile_pair()
        entry = judge.entry(shape, dtype, 0, "compile")
        if judge.overlapping:
            reply = s.compile_only(entry, shape)
        else:
            with s.on_gpu():
                _, reply = s.call(entry, "compile", shape)
        kernels = []
        for k in reply.get("kernels", []):
            if not any(seen["name"] == k["name"] for seen in kernels):
                kernels.append(k)
        limits = judge.limits
        for k in kernels:
            regs, warps, shared = k.get("n_regs"), k.get("num_warps"), k.get("shared_bytes")
            if regs is not None and warps is not None and regs * 32 * warps > limits["registers_per_sm"]:
                raise Verdict("compile", "resource_limit", f"{k['name']}: {regs} registers x {32 * warps} threads "
                              f"exceeds {limits['registers_per_sm']} per SM", details={"kernel": k})  # fmt: skip
            if shared is not None and shared > limits["shared_bytes_per_block"]:
                raise Verdict("compile", "resource_limit", f"{k['name']}: {shared} bytes of shared memory exceeds "
                              f"{limits['shared_bytes_per_block']}", details={"kernel": k})  # fmt: skip
        s.resources = _resources(kernels)
        if judge.timing_beside_checks:
            self.compile_the_rest((shape, dtype))

    def compile_the_rest(self, compiled: tuple[dict, str]) -> None:
        """Every other shape's specializations compiled where nothing runs on the GPU, so that the checks
        which do (under the gate) hold it for their kernels only. A failure here is left to that shape's
        own check, which says it as it always has."""
        for shape, dtype in self.judge.check_pairs():
            if (shape, dtype) == compiled:
                continue
            try:
                self.s.compile_only(self.judge.entry(shape, dtype, 0, "compile"), shape)
            except Verdict:
                return

    def correctness(self) -> None:
        for shape, dtype in self.judge.check_pairs():
            for seed in range(self.judge.settings.seeds):
                with self.s.on_gpu():
                    self.one(shape, dtype, seed)
                self.count += 1

    def one(self, shape: dict, dtype: str, seed: int) -> None:
        """One shape, dtype and seed through every fence: poisoned outputs, inputs unchanged, a second call
        identical to the first, fresh values in the same buffers."""
        judge, s = self.judge, self.s
        where = {"shape": shape, "dtype": dtype, "seed": seed}
        entry = judge.entry(shape, dtype, seed, "correctness")
        out, _ = s.call(entry, "correctness", shape)
        self.values(out, entry, where)
        self.inputs_unchanged(entry, where)
        if seed == 0:
            again, _ = s.call(entry, "correctness", shape)
            if not same_bits(out, again):
                raise Verdict("correctness", "nondeterministic", "two calls on the same inputs returned different bits",
                              details=where)  # fmt: skip
        fresh = judge.entry(shape, dtype, seed + FRESH_SEED, "correctness")
        out_new, _ = s.call(fresh, "correctness", shape)  # the same buffers: the layout is the shape's
        if self.problem(out_new, fresh) is not None:
            if self.problem(out_new, entry) is None:
                raise Verdict("correctness", "stale_output", "after new values were written into the same input "
                              "buffers, launch() returned the old result (cached by address?)", details=where)  # fmt: skip
            self.values(out_new, fresh, {**where, "fresh_values": True})

    def problem(self, got: tuple, entry: Entry) -> tuple | None:
        rtol, atol = self.task.tolerance(entry.dtype)
        for i, (g, e) in enumerate(zip(got, entry.expected, strict=True)):
            found = compare(g, e, rtol, atol, self.task.row_scaled)
            if found is not None:
                return found[0], i, found[1]
        return None

    def values(self, got: tuple, entry: Entry, where: dict) -> None:
        problem = self.problem(got, entry)
        if problem is None:
            return
        kind, output, details = problem
        if kind == "nan":  # NaN where the reference is finite: our poison, or computed? Again with another poison.
            marker = _marker(got[output].dtype)
            again, _ = self.s.call(entry, "correctness", where["shape"], poison=marker)
            pos = 0
            for d, size in zip(details["index"], got[output].shape, strict=True):
                pos = pos * size + d
            if float(again[output].reshape(-1)[pos]) == marker:
                unwritten = int((again[output] == marker).sum())
                raise Verdict("correctness", "unwritten_output",
                              f"output {output} element {details['index']} was never written "
                              f"({unwritten} of {got[output].numel()} elements unwritten) at {where['shape']}",
                              details={**where, "output": output, **details, "count": unwritten})  # fmt: skip
        raise Verdict("correctness", kind,
                      f"output {output} differs at {details['index']}: got {details['got']}, expected "
                      f"{details['expected']} ({details['count']} of {details['numel']} elements {details['what']}) "
                      f"at {where['shape']} {where['dtype']}", details={**where, "output": output, **details})  # fmt: skip

    def inputs_unchanged(self, entry: Entry, where: dict) -> None:
        """After the first call of ``entry``: its region was compared whole after the call; only a change
        is looked for input by input, to say where."""
        if self.s.inputs_intact:
            return
        now = self.s.inputs_now(entry)
        for i, (after, before) in enumerate(zip(now, entry.inputs, strict=True)):
            before = before.to(after.device)
            if not torch.equal(after, before):
                diff = (after != before).reshape(-1).nonzero()
                index = [int(v) for v in torch.unravel_index(diff[0, 0].cpu(), after.shape)] if len(diff) else []
                raise Verdict("correctness", "input_modified", f"launch() modified input {i} (first changed element at {index})",
                              details={**where, "input": i, "index": index})  # fmt: skip

    def interpreted_times(self) -> list[dict]:
        """Wall time of five interpreted calls per CPU shape (ranks only), each call's outputs checked; the
        kernels launched at those shapes join the resources, as a GPU's timed shapes do. ``spread`` is
        median/min over the calls: the noise of a busy CPU, which loop.ties holds rankings against."""
        rows: list[dict] = []
        timed: list[dict] = []
        for shape, dtype in self.task.workload("cpu"):
            entry = self.judge.entry(shape, dtype, 0, "correctness")
            samples = []
            # Five calls, so load that comes and goes while they run shows in the spread (median/min,
            # which one stray call does not move). Load that lasts a whole candidate does not show here.
            for _ in range(5):
                out, reply = self.s.call(entry, "correctness", shape)
                self.values(out, entry, {"shape": shape, "dtype": dtype, "seed": 0})
                samples.append(reply["wall_us"])
                kernels = reply.get("kernels", [])
            samples.sort()
            median = samples[len(samples) // 2]
            rows.append({"shape": shape, "dtype": dtype, "median_us": median, "min_us": samples[0],
                         "spread": median / samples[0], "method": "interpreter"})  # fmt: skip
            timed.extend(kernels)
        self.s.resources["kernels"] = merge_launch_resources(timed, self.s.resources.get("kernels", []))
        return rows


def _marker(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).max) if dtype.is_floating_point else 0.0


def _resources(kernels: list[dict]) -> dict[str, Any]:
    def worst(key: str) -> Any:
        values = [k.get(key) for k in kernels if k.get(key) is not None]
        return max(values) if values else None

    return {"n_regs": worst("n_regs"), "n_spills": worst("n_spills"), "shared_bytes": worst("shared_bytes"),
            "num_warps": worst("num_warps"), "kernels": kernels}  # fmt: skip


