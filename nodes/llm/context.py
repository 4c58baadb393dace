"""Prompt assembly: the AgentContext as sections of text, fitted into a token budget.

Each section has renderings from most to least detailed (the last may be empty: dropped) and a
priority. While the prompt is over budget (tokens estimated as chars / 4) the lowest-priority section
that can still shrink steps down one rendering; the history shrinks oldest-first. What was shortened
is listed at the end of the prompt, and the proposer may ask for it in full ("summarize first, expand
on request").
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

from loop.roles import AgentContext, Proposal

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
# How many of the newest attempts keep their full detail before older ones are shortened.
DETAILED_ATTEMPTS = 3


def estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def load_prompt(name: str, **values: Any) -> str:
    """nodes/prompts/NAME.md with ``$placeholders`` filled (JSON braces need no escaping)."""
    text = (PROMPTS_DIR / f"{name}.md").read_text()
    return Template(text).safe_substitute({k: str(v) for k, v in values.items()}).strip()


@dataclass
class Section:
    key: str
    title: str
    variants: list[str]
    priority: int
    losses: list[str] = field(default_factory=list)  # what each shorter rendering leaves out
    level: int = 0

    @property
    def text(self) -> str:
        body = self.variants[self.level]
        return f"## {self.title}\n{body}" if body else ""

    def can_shrink(self) -> bool:
        return self.level < len(self.variants) - 1

    def loss(self) -> str:
        if not self.level:
            return ""
        return self.losses[self.level - 1] if self.level - 1 < len(self.losses) else "shortened"


@dataclass
class Prompt:
    text: str
    trimmed: dict[str, str]  # section key -> what was left out
    tokens: int


def fit(sections: list[Section], budget: int, expanded: set[str] | None = None) -> Prompt:
    """Shrink sections (lowest priority first, ``expanded`` ones last) until the text fits ``budget``."""
    expanded = expanded or set()
    live = [s for s in sections if s.variants and any(s.variants)]

    def total() -> int:
        return estimate_tokens("\n\n".join(s.text for s in live if s.text))

    while total() > budget:
        shrinkable = [s for s in live if s.can_shrink()]
        if not shrinkable:
            break
        victim = min(shrinkable, key=lambda s: (s.key in expanded, s.priority, -s.level))
        victim.level += 1
    trimmed = {s.key: s.loss() for s in live if s.level}
    text = "\n\n".join(s.text for s in live if s.text)
    if trimmed:
        notes = "; ".join(f"{key} ({what})" for key, what in trimmed.items())
        text += f"\n\n## Shortened to fit the prompt budget\n{notes}"
    return Prompt(text=text, trimmed=trimmed, tokens=estimate_tokens(text))


# --------------------------------------------------------------------------------------------
# small renderers


def config_text(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def shape_text(shape: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} us" if value < 100 else f"{value:,.0f} us"


def _pct_delta(value: float, ref: float) -> str:
    return f"{(value - ref) / ref * 100:+.1f}%" if ref else "?"


def _shape_key(row: dict[str, Any]) -> str:
    return json.dumps(row.get("shape"), sort_keys=True) + str(row.get("dtype", ""))


def _numeric(resources: dict[str, Any] | None) -> dict[str, float]:
    return {
        k: v for k, v in (resources or {}).items() if isinstance(v, int | float) and not isinstance(v, bool)
    }


def attempt_line(a: dict[str, Any], best: dict[str, Any] | None, detailed: bool, rationale: bool) -> str:
    """One attempt: outcome, then (detailed) per-shape time deltas and resource deltas vs the best."""
    head = f"#{a.get('n')} r{a.get('round')} {a.get('module')} {config_text(a.get('config') or {})}"
    head += f" [{a.get('origin')}]" if a.get("origin") else ""
    if a.get("verdict") != "pass":
        line = f"{head}: FAIL {a.get('error_type')} at {a.get('stage')}"
        if detailed and a.get("message"):
            line += f": {str(a['message'])[:200]}"
    else:
        line = f"{head}: pass {_us(a.get('geomean_us'))}"
        if best and best.get("geomean_us") and a.get("n") != best.get("n"):
            line += f" ({_pct_delta(a['geomean_us'], best['geomean_us'])} vs best #{best.get('n')})"
        if detailed and best:
            ref = {_shape_key(r): r.get("median_us") for r in best.get("per_shape") or []}
            deltas = [
                f"{shape_text(r.get('shape') or {})} {_pct_delta(r['median_us'], ref[_shape_key(r)])}"
                for r in a.get("per_shape") or []
                if r.get("median_us") and ref.get(_shape_key(r))
            ]
            if deltas and a.get("n") != best.get("n"):
                line += "; per shape vs best: " + ", ".join(deltas)
            mine, theirs = _numeric(a.get("resources")), _numeric(best.get("resources"))
            res = [
                f"{k} {v:g}" + (f" ({v - theirs[k]:+g})" if k in theirs and v != theirs[k] else "")
                for k, v in mine.items()
            ]
            if res:
                line += "; resources: " + ", ".join(res)
    if detailed and rationale and a.get("rationale"):
        line += f"\n    why: {str(a['rationale'])[:200]}"
    return line


def history_variants(ctx: AgentContext, rationale: bool) -> tuple[list[str], list[str]]:
    """Renderings of the history, oldest attempts shortened, then dropped, first."""
    attempts = ctx.history
    if not attempts:
        return [], []
    note = ""
    if any(a.get("interpreted") for a in attempts):
        note = "(times from the CPU interpreter are not speed claims; compare them only with each other)\n"

    def render(n_detailed: int, n_compact: int) -> str:
        shown = attempts[-(n_detailed + n_compact) :] if n_detailed + n_compact else []
        hidden = len(attempts) - len(shown)
        lines = [f"({hidden} older attempt(s) not shown)"] if hidden else []
        for i, a in enumerate(shown):
            detailed = i >= len(shown) - n_detailed
            lines.append(attempt_line(a, ctx.best, detailed, rationale))
        return note + "\n".join(lines)

    n = len(attempts)
    plans = [(n, 0), (min(DETAILED_ATTEMPTS, n), n - min(DETAILED_ATTEMPTS, n))]
    k = (n - DETAILED_ATTEMPTS) * 3 // 4
    while k >= 5:  # shrink the summarized tail in small steps: the history takes what room there is
        plans.append((min(DETAILED_ATTEMPTS, n), k))
        k = k * 3 // 4
    plans += [(min(DETAILED_ATTEMPTS, n), 0), (1, 0), (0, 0)]
    variants, losses, seen = [], [], set()
    for detailed, compact in plans:
        text = render(detailed, compact) if detailed + compact else ""
        if text in seen:
            continue
        seen.add(text)
        variants.append(text)
        dropped = n - detailed - compact
        if not text:
            losses.append("dropped")
        elif dropped:
            losses.append(
                f"the {dropped} oldest attempts not shown, all but the newest {detailed} summarized"
            )
        else:
            losses.append(f"all but the newest {detailed} attempts summarized")
    return variants, losses[1:]


def failure_variants(ctx: AgentContext, full_log: bool, budget: int) -> tuple[list[str], list[str]]:
    """The last failure: what failed, the first mismatch, and the compiler/runtime log."""
    f = ctx.last_failure
    if not f:
        return [], []
    head = (
        f"#{f.get('n')} {f.get('module')} {config_text(f.get('config') or {})}: "
        f"{f.get('error_type')} at stage {f.get('stage')}: {f.get('message', '')}"
    )
    details = f.get("details") or {}
    if details.get("index") is not None or details.get("got") is not None:
        head += (
            f"\nfirst mismatch: shape {details.get('shape')} output {details.get('output')} "
            f"index {details.get('index')}: got {details.get('got')}, expected {details.get('expected')}"
        )
    log = str(f.get("log") or "")
    if not log:
        return [head], []
    lines = log.splitlines()
    # In fix mode the log goes in whole unless it alone would take over the prompt.
    cap_chars = budget * 4 * 6 // 10
    full = log if len(log) <= cap_chars else _head_tail(lines, cap_chars)
    variants = [f"{head}\nlog:\n{full}"] if full_log else []
    tail = "\n".join(lines[-40:])
    variants += [f"{head}\nlog (last {min(40, len(lines))} of {len(lines)} lines):\n{tail}", head]
    return variants, ["log shortened to its last 40 lines", "log left out"][-(len(variants) - 1) :]


def _head_tail(lines: list[str], cap_chars: int) -> str:
    head, tail, size = [], [], 0
    for i in range(len(lines)):
        j = len(lines) - 1 - i
        line = lines[j]
        if size + len(line) > cap_chars * 2 // 3:
            break
        tail.insert(0, line)
        size += len(line) + 1
    for line in lines[: len(lines) - len(tail)]:
        if size + len(line) > cap_chars:
            break
        head.append(line)
        size += len(line) + 1
    omitted = len(lines) - len(head) - len(tail)
    return "\n".join([*head, f"... ({omitted} lines omitted) ...", *tail])


def task_text(ctx: AgentContext) -> str:
    lines = [f"{ctx.task_name}: {ctx.description}"]
    forbid = ctx.constraints.get("forbid") or []
    if forbid:
        lines.append(f"Forbidden constructs: {', '.join(forbid)}")
    if ctx.constraints.get("notes"):
        lines.append(f"Notes: {ctx.constraints['notes']}")
    if ctx.shapes:
        lines.append("Timed shapes: " + "; ".join(shape_text(s) for s in ctx.shapes))
    lines.append("Search spaces (a config picks one listed value for every key of its module's space):")
    for module, space in ctx.search_spaces.items():
        keys = "; ".join(f"{k} in {v}" for k, v in space.items())
        lines.append(f"  {module}: {keys}")
    if ctx.device_limits:
        lines.append("Device limits: " + ", ".join(f"{k}={v}" for k, v in ctx.device_limits.items()))
    return "\n".join(lines)


def best_text(ctx: AgentContext) -> str:
    best = ctx.best
    if not best:
        return ""
    line = f"#{best.get('n')} {best.get('module')} {config_text(best.get('config') or {})}: {_us(best.get('geomean_us'))}"
    baseline = next((a for a in ctx.history if a.get("origin") == "baseline" and a.get("geomean_us")), None)
    if baseline and best.get("geomean_us") and baseline.get("n") != best.get("n"):
        line += f" (baseline {_us(baseline['geomean_us'])}, speedup {baseline['geomean_us'] / best['geomean_us']:.2f}x)"
    if best.get("interpreted"):
        line += " [CPU interpreter: not a speed claim]"
    rows = [
        f"  {shape_text(r.get('shape') or {})} {r.get('dtype', '')}: {_us(r.get('median_us'))}"
        + (f", {r['roofline_pct']:.0f}% of the copy roofline" if r.get("roofline_pct") else "")
        + (f", {r['ceiling_pct']:.0f}% of a same-size copy" if r.get("ceiling_pct") else "")
        for r in best.get("per_shape") or []
    ]
    return "\n".join([line, *rows])


def snapshot_text(ctx: AgentContext) -> str:
    if ctx.snapshot_text:
        return ctx.snapshot_text
    if ctx.snapshot:
        from profiles.render import render_snapshot

        return render_snapshot(ctx.snapshot)
    return ""


def summary_of(source: str) -> str:
    from profiles.source_summary import summarize_source

    try:
        return summarize_source(source)
    except SyntaxError:
        return "(the source does not parse)"


def best_module(ctx: AgentContext) -> str:
    module = (ctx.best or {}).get("module") or ctx.baseline_module
    return module if module in ctx.module_sources else ctx.baseline_module


def best_source(ctx: AgentContext) -> str:
    return ctx.module_sources.get(best_module(ctx)) or ctx.baseline_source


def evaluated_text(ctx: AgentContext, limit: int = 40) -> str:
    """module + config of every evaluated attempt, newest first (a compact do-not-repeat list)."""
    seen: list[str] = []
    for a in reversed(ctx.history):
        line = f"{a.get('module')} {config_text(a.get('config') or {})}"
        if line not in seen:
            seen.append(line)
    more = f"\n(+{len(seen) - limit} more)" if len(seen) > limit else ""
    return "\n".join(seen[:limit]) + more


def untried_text(ctx: AgentContext, limit: int = 8, max_points: int = 20000) -> str:
    """How much of the search space is left, with a deterministic sample of untried points."""
    import itertools
    import random

    from tools.candidate import candidate_identity

    evaluated = set(ctx.evaluated)
    untried, total = [], 0
    for module, space in ctx.search_spaces.items():
        source = ctx.module_sources.get(module)
        if source is None or not space:
            continue
        keys = list(space)
        for values in itertools.islice(itertools.product(*(space[k] for k in keys)), max_points):
            total += 1
            config = dict(zip(keys, values, strict=True))
            if candidate_identity(source, config) not in evaluated:
                untried.append(f"{module} {config_text(config)}")
    if not total:
        return ""
    sample = random.Random(ctx.seed * 1000 + ctx.round).sample(untried, min(limit, len(untried)))
    head = f"{len(untried)} of {total} configs of the search space not evaluated yet"
    return head + (", for example:\n" + "\n".join(sample) if sample else "")


def diagnosis_text(ctx: AgentContext) -> str:
    d = ctx.diagnosis
    if d is None:
        return ""
    evidence = "\n".join(f"- {e}" for e in d.evidence)
    return f"{d.bottleneck} (confidence {d.confidence:.2f}) {d.summary}\n{evidence}".strip()


def cases_variants(ctx: AgentContext) -> tuple[list[str], list[str]]:
    cases = ctx.retrieved_cases
    if not cases:
        return [], []

    def line(c: dict[str, Any], long: bool) -> str:
        score = f"[score {c['score']:.2f}] " if isinstance(c.get("score"), int | float) else ""
        text = str(c.get("summary") or json.dumps(c, default=str)[:300])
        if long and c.get("rationale"):
            text += f" — {str(c['rationale'])[:200]}"
        return score + text

    full = "\n".join(line(c, True) for c in cases)
    short = "\n".join(line(c, False) for c in cases[:2])
    return [full, short, ""], ["only the top 2, without rationale", "dropped"]


def source_diff(old: str, new: str, name: str) -> str:
    """A unified diff when it is shorter than the new source, else the new source."""
    diff = "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{name}", "b/new", n=2
        )
    )
    return f"diff against {name}:\n{diff}" if diff and len(diff) < len(new) else f"new source:\n{new}"


def proposal_text(p: Proposal, module_source: str | None, with_rationale: bool) -> str:
    lines = [f"module {p.module}, config {config_text(p.config)}"]
    if p.source is not None:
        lines.append(source_diff(module_source or "", p.source, p.module))
    if with_rationale and p.rationale:
        lines.append(f"rationale: {p.rationale}")
    if p.expected_effect:
        lines.append(f"expected effect: {p.expected_effect}")
    if p.risks:
        lines.append(f"risks: {p.risks}")
    if p.answers:
        lines.append("answers to earlier objections:\n" + "\n".join(f"- {a}" for a in p.answers))
    return "\n".join(lines)
