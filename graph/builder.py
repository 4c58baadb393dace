"""The state machine, wired: setup -> diagnose -> propose -> critic -> evaluate -> (routes) ... -> report.

Deciding nodes return ``Command[Literal[...]]`` so the drawn graph (Mermaid, Studio) shows every edge;
the routes themselves are decided in loop/routes.py. ``graph`` is compiled without a checkpointer
(Studio brings its own); the CLI compiles ``builder`` with a SqliteSaver.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from loop.state import RunInput, RunState
from nodes.critic import critic
from nodes.diagnose import diagnose
from nodes.evaluate import evaluate
from nodes.human import human
from nodes.propose import propose
from nodes.reflect import reflect
from nodes.report import report
from nodes.runtime import RunContext
from nodes.setup import setup


def build() -> StateGraph:
    g = StateGraph(RunState, context_schema=RunContext, input_schema=RunInput)
    g.add_node("setup", setup)
    g.add_node("diagnose", diagnose)
    g.add_node("propose", propose)
    g.add_node("critic", critic)
    g.add_node("evaluate", evaluate)
    g.add_node("reflect", reflect)
    g.add_node("human", human)
    g.add_node("report", report)
    g.add_edge(START, "setup")
    g.add_edge("setup", "diagnose")
    g.add_edge("diagnose", "propose")
    g.add_edge("reflect", "propose")
    g.add_edge("report", END)
    return g


builder = build()
graph = builder.compile()
