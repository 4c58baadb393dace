"""What every node does around its decision, in one place: the clock, the task, the run folder, the
audit line, the progress event and a plain update.

A node is written as ``def name(state: RunState, step: Step) -> update | Command`` and wrapped with
``@node("name")``: the wrapper hands it a ``Step``, adds the node's active seconds to the update
(``active_s``, which the minutes budget counts) and dumps the update to plain JSON for the checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cached_property
from typing import Any, get_type_hints

from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime
from langgraph.types import Command

from loop.records import Decision
from loop.state import RunInput, RunState, plain
from nodes.audit import audit
from nodes.runtime import Agents, RunContext, agents_for, context_of, folder_of, run_task
from tools.run_folder import RunFolder
from tools.task import Task

Update = dict[str, Any]
AFTER_A_ROUND = ("human", "report")


class Step:
    """One run of one node."""

    def __init__(self, node: str, state: RunInput, context: RunContext):
        self.node, self.state, self.context = node, state, context
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @cached_property
    def run(self) -> RunState:
        if not isinstance(self.state, RunState):
            raise TypeError(f"{self.node} runs before the run is set up")
        return self.state

    @cached_property
    def task(self) -> Task:
        """The task as the run sees it now (the human may have changed its space)."""
        return run_task(self.run, self.folder.root)

    @cached_property
    def folder(self) -> RunFolder:
        """The run folder where this process finds it (setup, which makes it, sets it)."""
        return folder_of(self.run, self.context)

    @property
    def agents(self) -> Agents:
        return agents_for(self.run, self.context)

    @property
    def round(self) -> int:
        """The round a line of the trail belongs to: the one being prepared or evaluated; for the report
        and a pause, which come after a round, the last one evaluated."""
        if not isinstance(self.state, RunState):
            return 0
        return self.state.rounds_done if self.node in AFTER_A_ROUND else self.state.round

    def audit(self, message: str, *, key: str | None = None, **fields: Any) -> None:
        """One line in the audit trail (once per round, node and key)."""
        audit(self.folder, self.node, message, round=self.round, key=key, **fields)

    def emit(self, event: str, **fields: Any) -> None:
        """A progress event on the graph's custom stream (the CLI's terminal view)."""
        get_stream_writer()(plain({"event": event, **fields}))

    def go(
        self, decision: Decision, update: Update, *, key: str | None = None, said: str | None = None
    ) -> Command:
        """Follow ``decision``: its line in the trail (``said``, by default "-> to: reason"), the route
        and the run's end, when it ends, in the update."""
        self.audit(said or f"-> {decision.to}: {decision.reason}", key=key)
        ends = {"stop": decision.stop} if decision.stop is not None else {}
        return Command(goto=decision.to, update={**update, "route": decision, **ends})


Decide = Callable[[Any, Step], Update | Command]


def node(name: str) -> Callable[[Decide], Callable[..., Update | Command]]:
    """Wrap a node's decision into the LangGraph node ``(state, runtime)`` (see the module's doc)."""

    def wrap(decide: Decide) -> Callable[..., Update | Command]:
        def run(state: Any, runtime: Runtime[RunContext]) -> Update | Command:
            step = Step(name, state, context_of(runtime))
            out = decide(state, step)
            if isinstance(out, Command):
                return Command(goto=out.goto, update=plain({**out.update, "active_s": step.elapsed()}))
            return plain({**out, "active_s": step.elapsed()})

        hints = get_type_hints(decide)  # LangGraph reads the state type and the routes from these
        run.__annotations__ = {
            "state": hints["state"],
            "runtime": Runtime[RunContext],
            "return": hints["return"],
        }
        run.__name__ = run.__qualname__ = name
        run.__doc__, run.__module__ = decide.__doc__, decide.__module__
        return run

    return wrap
