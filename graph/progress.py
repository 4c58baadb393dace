"""Terminal progress from the graph's stream: node updates and the nodes' custom events.

One line per event (readable in a log file too) plus, on a terminal, a bar while a round evaluates:
round, candidates evaluated, best so far against the baseline, and an ETA from the budget.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tools.dispatch import table_wins

# Routes not worth a line of their own (the events already say it).
USUAL_NEXT = {"diagnose": "propose", "propose": "critic", "critic": "evaluate", "evaluate": "diagnose"}


def versus_baseline(baseline_us: float | None, best_us: float | None, interpreted: bool) -> str:
    """How the best compares with the baseline, without a speed claim from interpreted timings."""
    if interpreted:
        return "interpreted timings: ranks only"
    if not baseline_us or not best_us:
        return "-"
    return f"{baseline_us / best_us:.2f}x the baseline"


def _duration(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class ProgressView:
    """Feed it ``(mode, chunk)`` pairs from ``graph.stream(..., stream_mode=["updates", "custom"])``.

    Everything it prints comes from the events themselves (the run's totals, its ETA, whether timings
    are interpreted), so a resumed run reads the same as one that never stopped."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(highlight=False)
        self.baseline_us: float | None = None
        self.best_us: float | None = None
        self.interpreted = False
        self._bar: Progress | None = None
        self._task_id: Any = None

    # -- stream ------------------------------------------------------------------------------------
    def handle(self, mode: str, chunk: Any) -> None:
        if mode == "custom" and isinstance(chunk, dict):
            getattr(self, f"_on_{chunk.get('event')}", lambda _: None)(chunk)
        elif mode == "updates" and isinstance(chunk, dict):
            for node, update in chunk.items():
                route = update.get("route") if isinstance(update, dict) else None
                if route and node != "setup" and USUAL_NEXT.get(node) != route["to"]:
                    self.console.print(f"  {node} -> [bold]{route['to']}[/bold]: {route['reason']}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    # -- events ------------------------------------------------------------------------------------
    def _on_baseline(self, e: dict[str, Any]) -> None:
        if e["status"] == "evaluating":
            self.console.print(f"[bold]setup[/bold]: evaluating the baseline on {e['device']} ...")
            return
        if e["status"] == "first_kernel":
            self.console.print("[bold]setup[/bold]: no baseline kernel: making torch.compile's Triton a candidate ...")
            return
        self.baseline_us = self.best_us = e["geomean_us"]
        self.interpreted = e["device"] == "cpu"
        note = " (Triton interpreter: ranks only)" if e["device"] == "cpu" else ""
        self.console.print(f"[bold]setup[/bold]: baseline {e['geomean_us']:.2f} us geomean{note}")

    def _on_memory(self, e: dict[str, Any]) -> None:
        self.console.print(f"[bold]setup[/bold]: {e['message']}")

    def _on_diagnosis(self, e: dict[str, Any]) -> None:
        self.console.print(f"[bold]round {e['round']}[/bold] diagnose: {e['summary']}")

    def _on_proposed(self, e: dict[str, Any]) -> None:
        self.console.print(f"[bold]round {e['round']}[/bold] propose ({e['mode']}): {e['count']} proposal(s)")

    def _on_critic(self, e: dict[str, Any]) -> None:
        self.console.print(
            f"[bold]round {e['round']}[/bold] critic: {e['approved']} approved, {e['rejected']} rejected"
        )

    def _on_candidate(self, e: dict[str, Any]) -> None:
        if self.console.is_terminal:
            if self._bar is None:
                self._bar = Progress(
                    TextColumn("  evaluating"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=self.console,
                    transient=True,
                )
                self._bar.start()
                self._task_id = self._bar.add_task("eval", total=e["total"])
            self._bar.update(self._task_id, completed=e["done"], total=e["total"])
        self.console.print(candidate_line(e))

    def _on_round(self, e: dict[str, Any]) -> None:
        self.close()
        self.best_us = e["best_us"]
        self.baseline_us = e.get("baseline_us", self.baseline_us)
        self.interpreted = e.get("interpreted", self.interpreted)
        speed = versus_baseline(self.baseline_us, self.best_us, self.interpreted)
        # The per-bucket table (each shape's fastest config) is what export hands back when it beats
        # the best by more than tools.dispatch's threshold.
        table_us = e.get("table_us")
        table = ""
        if table_us and self.best_us and table_wins(table_us, self.best_us):
            table = f", per-shape table {table_us:.2f} us ({versus_baseline(self.baseline_us, table_us, self.interpreted)})"
        cached = f" ({e['cache_hits']} from the validation cache)" if e.get("cache_hits") else ""
        eta = f", ETA {_duration(e['eta_s'])}" if e.get("eta_s") is not None else ""
        self.console.print(
            f"[bold]round {e['round']}[/bold] done: {e['passed']}/{e['evaluated']} passed, best "
            f"{self.best_us:.2f} us ({speed}){table}, {e['evaluated_total']} of {e['budget_candidates']} "
            f"candidates evaluated{cached}{eta}"
        )


def candidate_line(e: dict[str, Any]) -> str:
    """``#4 persistent.py {...}: pass 62617.99 us [3/8]``: numbered as the trail and the report number it."""
    what = f"{e['geomean_us']:.2f} us" if e.get("geomean_us") else f"({e.get('error_type')})"
    source = {"cache": " (validation cache)", "results": " (finished before the resume)"}.get(e.get("source"), "")
    return f"  #{e['n']} {e['module']} {e['config']}: {e['verdict']} {what}{source} [{e['done']}/{e['total']}]"
