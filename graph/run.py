"""Optimize a task's kernel: ``python -m graph.run TASK [options]``.

Exit status: 0 finished (report written), 3 paused for a human decision (--non-interactive, or no
terminal; resume with --resume RUN_DIR --answer TEXT), 2 bad input (task, settings, SPEC, answer;
an answer is checked before it is taken, so a refused one leaves the question open), 4 the Dask
cluster went away (resume with --resume RUN_DIR, on another cluster or locally). With
--unattended the run never asks: the unattended policy (loop/unattended.py) answers every pause and
the report lists each with its answer.
A run folder holds checkpoints.sqlite (every finished step), candidates/, results/, log.jsonl,
report.md, report.json and progress.png; --resume continues a paused or killed run from its last
finished step, and --answer stop ends any unfinished run with a report.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command
from rich.console import Console

from graph.builder import builder
from graph.progress import ProgressView, versus_baseline
from loop.records import Pause, Stop
from loop.settings import SettingsError, load_settings, parse_assignments
from loop.state import RunState, plain
from loop.unattended import evaluated_so_far
from nodes.agents import AgentSpecError, build_agents
from nodes.answers import AnswerError, parse_answer
from nodes.audit import audit
from nodes.runtime import RunContext, run_task
from tools.run_folder import CHECKPOINTS, RunFolder
from tools.task import TaskError, load_task

THREAD = {"configurable": {"thread_id": "run"}}
EXIT_DONE, EXIT_BAD_INPUT, EXIT_PAUSED, EXIT_CLUSTER_LOST = 0, 2, 3, 4


class BadInput(Exception):
    """Wrong task, settings, SPEC, answer or run folder: exit 2 with this message."""


@contextmanager
def open_graph(run_dir: Path) -> Iterator[CompiledStateGraph]:
    """The graph compiled with the run folder's SqliteSaver."""
    with SqliteSaver.from_conn_string(str(run_dir / CHECKPOINTS)) as saver:
        yield builder.compile(checkpointer=saver)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m graph.run", description=__doc__.split("\n\n")[0])
    p.add_argument("task", nargs="?", help="task folder, its task.json, or a PyTorch module in KernelBench's format (.py)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="for a KernelBench-format .py: the dtype its task is imported in")  # fmt: skip
    p.add_argument("--cluster", default=None, metavar="SPEC",
                   help="evaluate on Dask: local:N (N workers here, one per GPU) or tcp://HOST:PORT")  # fmt: skip
    p.add_argument("--model", default="expert", help="SPEC of the diagnoser and proposer (default: expert)")
    p.add_argument("--critic-model", default=None, help="SPEC of the critic (default: --model)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--rounds", type=int, default=None, help="round budget (overrides the task's)")
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    p.add_argument(
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting of configs/default.yaml, e.g. --set routing.stall_rounds=2",
    )
    p.add_argument(
        "--no-memory",
        action="store_true",
        help="neither read nor write the case library and validation cache (same as --set memory.enabled=false)",
    )
    p.add_argument("--run-dir", default=None, help="run folder (default: runs/<task>-<time>)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue a paused or killed run")
    p.add_argument("--answer", default=None, help="answer to the pending question (with --resume)")
    p.add_argument("--non-interactive", action="store_true", help="never ask: exit 3 at a question")
    p.add_argument(
        "--unattended",
        action="store_true",
        help="never ask: the policy answers every pause (continue, or stop once converged); exit 0",
    )
    return p.parse_args(argv)


# -- starting and resuming ---------------------------------------------------------------------------
def new_run(args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    if not args.task:
        raise BadInput("a TASK (folder or task.json) is required unless --resume is given")
    if args.answer:
        raise BadInput("--answer needs --resume RUN_DIR")
    if args.task.endswith(".py") and Path(args.task).is_file():
        return new_problem_run(args)
    task = load_task(args.task)
    overrides = parse_assignments(args.assignments)
    if args.rounds is not None:
        if args.rounds < 1:
            raise BadInput("--rounds must be >= 1")
        overrides.setdefault("budget", {})["rounds"] = args.rounds
    if args.no_memory:
        overrides.setdefault("memory", {})["enabled"] = False
    settings = load_settings(task, overrides)
    try:  # a SPEC that cannot be served fails here, before the baseline is evaluated
        build_agents(args.model, args.critic_model, settings.model_dump())
    except (ValueError, ImportError) as exc:
        raise BadInput(f"--model {args.model} / --critic-model {args.critic_model}: {exc}") from None
    run_dir = Path(args.run_dir).resolve() if args.run_dir else RunFolder.default_root(task.name)
    if (run_dir / CHECKPOINTS).exists():
        raise BadInput(f"{run_dir} already holds a run; continue it with --resume {run_dir}")
    run_dir.mkdir(parents=True, exist_ok=True)
    inputs = {
        "task": str(Path(args.task).resolve()),
        "device": args.device,
        "model": args.model,
        "critic_model": args.critic_model,
        "seed": args.seed,
        "overrides": overrides,
    }  # the run folder travels in the RunContext, never in the state: a copy of it resumes as itself
    return run_dir, inputs


def new_problem_run(args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """A KernelBench-format module: imported into the run folder as a task (no baseline kernel: the run
    starts from torch.compile's), then started like any task."""
    from tools.kernelbench import ProblemError, import_problem

    problem = Path(args.task)
    run_dir = Path(args.run_dir).resolve() if args.run_dir else RunFolder.default_root(problem.stem)
    if (run_dir / CHECKPOINTS).exists():
        raise BadInput(f"{run_dir} already holds a run; continue it with --resume {run_dir}")
    try:
        imported = import_problem(problem, run_dir / "imported", args.dtype)
    except ProblemError as exc:
        raise BadInput(str(exc)) from None
    args.task, args.run_dir = str(imported.folder), str(run_dir)
    return new_run(args)


def pending_question(app: CompiledStateGraph) -> dict[str, Any] | None:
    interrupts = app.get_state(THREAD).interrupts
    return interrupts[0].value if interrupts else None


def checked(answer: str, app: CompiledStateGraph) -> dict[str, Any]:
    """The answer parsed against the run as it stands; AnswerError (exit 2) says why it cannot be taken."""
    state = RunState.model_validate(app.get_state(THREAD).values)
    return parse_answer(answer, state.search_spaces, state.attempts, run_task(state, state.run_dir))


def validated(answer: str, app: CompiledStateGraph) -> str:
    checked(answer, app)
    return answer


def show_question(console: Console, question: dict[str, Any]) -> None:
    s = question["summary"]
    best = s["best"]
    console.print(f"\n[bold yellow]{question['question']}[/bold yellow]")
    speed = versus_baseline(s["baseline_us"], best["geomean_us"], bool(best.get("interpreted")))
    console.print(
        f"  best so far: #{best['n']} {best['module']} {best['config']}: {best['geomean_us']:.2f} us ({speed}; "
        f"baseline {s['baseline_us']:.2f} us)"
    )
    for e in s["last_errors"][-3:]:
        console.print(
            f"  failed #{e['n']} {e['module']} {e['config']}: {e['error_type']}: {e['message'][:160]}"
        )
    if question.get("error"):
        console.print(f"  [red]{question['error']}[/red]")
    console.print("  choices:")
    for choice in question["choices"]:
        console.print(f"    {choice}")


def ask(console: Console, app: CompiledStateGraph) -> str | None:
    """Prompt until the answer parses; None at end of input."""
    while True:
        try:
            answer = console.input("[bold]answer> [/bold]").strip()
        except EOFError:
            return None
        try:
            return validated(answer, app)
        except AnswerError as exc:
            console.print(f"[red]{exc}[/red]")


def drive(
    app: CompiledStateGraph, payload: Any, args: argparse.Namespace, console: Console, run_dir: Path
) -> int:
    """Stream the graph until it finishes or pauses; at a pause ask (terminal) or exit 3."""
    interactive = not args.non_interactive and sys.stdin.isatty()
    view = ProgressView(console)
    while True:
        try:
            for mode, chunk in app.stream(
                payload,
                THREAD,
                # where the folder is now (it may have moved or been copied), where candidates are
                # evaluated, and whether anyone answers
                context=RunContext(run_dir=str(run_dir), cluster=args.cluster, unattended=args.unattended),
                stream_mode=["updates", "custom"],
                durability="sync",
            ):
                view.handle(mode, chunk)
        finally:
            view.close()
        question = pending_question(app)
        if question is None:
            break
        show_question(console, question)
        answer = ask(console, app) if interactive else None
        if answer is None:
            console.print(
                f"\npaused; the report so far is in {run_dir}/report.md. Continue with:\n"
                f"  python -m graph.run --resume {run_dir} --answer 'continue'"
            )
            return EXIT_PAUSED
        payload = Command(resume=answer)
    state = app.get_state(THREAD)
    if state.next:
        raise RuntimeError(f"the graph stopped before {state.next} without a question")
    report = RunFolder(run_dir).report()
    speed = versus_baseline(report["baseline"]["geomean_us"], report["best"]["geomean_us"],
                            report["device"]["interpreted"])  # fmt: skip
    console.print(
        f"\n[bold]{report['status']}[/bold]: {report['reason']}; best {report['best']['geomean_us']:.2f} us "
        f"({speed}). Report: {run_dir}/report.md"
    )
    answered = [p for p in report.get("pauses", []) if p["by"] == "policy"]
    if answered:
        console.print(f"{len(answered)} pause(s) answered by the unattended policy (listed in the report)")
    if report.get("note"):
        console.print(report["note"])
    return EXIT_DONE


def resume(args: argparse.Namespace, console: Console) -> int:
    run_dir = Path(args.resume).resolve()
    if not (run_dir / CHECKPOINTS).exists():
        raise BadInput(f"{run_dir} holds no run ({CHECKPOINTS} missing)")
    with open_graph(run_dir) as app:
        state = app.get_state(THREAD)
        if not state.values:
            raise BadInput(f"{run_dir}: the checkpoint holds no state")
        parsed = checked(args.answer, app) if args.answer is not None else None  # before anything is written
        question = pending_question(app)
        if question is not None:
            if parsed is not None:
                payload: Any = Command(resume=args.answer)
            elif args.unattended:
                payload = None  # the human node runs again and the policy answers
            else:
                show_question(console, question)
                answer = ask(console, app) if not args.non_interactive and sys.stdin.isatty() else None
                if answer is None:
                    return EXIT_PAUSED
                payload = Command(resume=answer)
        elif state.next:
            resume_interrupted(app, state, parsed, run_dir, console)
            payload = None
        else:
            return finished(run_dir, parsed, console)
        return drive(app, payload, args, console, run_dir)


def resume_interrupted(
    app: CompiledStateGraph, state: Any, parsed: dict[str, Any] | None, run_dir: Path, console: Console
) -> None:
    """A run stopped mid-step (killed, not waiting at a question): the trail says so; it resumes at the
    step it was in, or, answered ``stop``, goes straight to its report."""
    at = state.next[0]
    action = parsed["action"] if parsed else "continue"
    if action not in ("continue", "stop"):
        raise BadInput(
            f"the run was stopped during {at}, not at a question, so it takes no {action!r}: resume it "
            "(no --answer, or --answer continue) and answer its next question, or --answer stop"
        )
    values = RunState.model_validate(state.values)
    audit(RunFolder(run_dir), "resume", f"the run was stopped during {at} and resumed (finished steps and "
          "results are kept)", round=values.rounds_done, key=f"resume at {at} {time.time():.3f}")  # fmt: skip
    if action == "continue":
        console.print(f"resuming at {at} (finished steps and results are kept)")
        return
    why = f"the run was stopped during {at}"
    update = {
        "stop": Stop(status="stopped_by_human", reason=f"the human chose to stop ({why})"),
        "human": parsed,
        "pauses": [Pause(round=values.rounds_done, why=why, answer="stop", by="human",
                         evaluated=evaluated_so_far(values.attempts))],
    }  # fmt: skip
    app.update_state(THREAD, Command(goto="report", update=plain(update)), as_node=at)
    console.print(f"stopping: {why}; writing the report")


def finished(run_dir: Path, parsed: dict[str, Any] | None, console: Console) -> int:
    """A finished run takes no answer but ``stop`` (it has stopped already)."""
    status = RunFolder(run_dir).report().get("status", "finished")
    if parsed is not None and parsed["action"] != "stop":
        raise BadInput(f"{run_dir} has finished ({status}): there is no question to answer")
    console.print(f"{run_dir} has finished ({status}); see {run_dir}/report.md")
    return EXIT_DONE


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(highlight=False, soft_wrap=True)
    from tools.cluster import ClusterLost, parse_cluster

    try:
        if args.cluster:
            try:
                parse_cluster(args.cluster)
            except ValueError as exc:
                raise BadInput(str(exc)) from None
        if args.resume:
            return resume(args, console)
        run_dir, inputs = new_run(args)
        with open_graph(run_dir) as app:
            return drive(app, inputs, args, console, run_dir)
    except (BadInput, TaskError, SettingsError, AgentSpecError, AnswerError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return EXIT_BAD_INPUT
    except ClusterLost as exc:
        folder = args.resume or args.run_dir or "RUN_DIR"
        console.print(f"[red]stopped:[/red] {exc}\n  continue with python -m graph.run --resume {folder} "
                      "[--cluster SPEC]  (finished steps and results are kept)")  # fmt: skip
        return EXIT_CLUSTER_LOST


if __name__ == "__main__":
    sys.exit(main())
