"""``python -m memory.cases list | search TEXT | show ID | export FILE | import FILE``

The store is ``$KERNEL_AGENT_HOME/cases`` (default ``~/.cache/kernel-agent/cases``) or ``--store``.
Exit 0: done; 1: memory is unavailable here; 2: bad input (unknown id, unreadable file, bad option).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.table import Table

from memory import open_case_library
from memory.cases.model import Case, read_cases
from memory.console import console
from memory.home import default_case_store

out = console()
err = console(stderr=True)


class BadInput(Exception):
    """Exit 2 with this message."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m memory.cases", description="Inspect the case library.")
    parser.add_argument("--store", type=Path, help="case store folder (default: $KERNEL_AGENT_HOME/cases)")
    sub = parser.add_subparsers(dest="command", required=True)

    def filters(p: argparse.ArgumentParser) -> None:
        p.add_argument("--task", help="only cases of this task name")
        p.add_argument("--op-family", help="only this op family (normalization, attention, ...)")
        p.add_argument("--bottleneck", help="only cases diagnosed with this bottleneck")
        outcome = p.add_mutually_exclusive_group()
        outcome.add_argument("--kept", action="store_true", help="only kept (improving) cases")
        outcome.add_argument("--failures", action="store_true", help="only failed candidates")
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p = sub.add_parser("list", help="newest cases first")
    p.add_argument("--limit", type=int, default=20)
    filters(p)
    p = sub.add_parser("search", help="cases most similar to a text")
    p.add_argument("text")
    p.add_argument("-k", type=int, default=5, help="how many (default 5)")
    filters(p)
    p = sub.add_parser("show", help="one case in full (id or a unique prefix of it or of its identity)")
    p.add_argument("id")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("export", help="write every case to a JSON-lines file")
    p.add_argument("file", type=Path)
    p = sub.add_parser("import", help="add the cases of a JSON-lines file (duplicates are skipped)")
    p.add_argument("file", type=Path)
    return parser


def _where(args: argparse.Namespace) -> dict[str, Any] | None:
    where: dict[str, Any] = {}
    if args.task:
        where["task_name"] = args.task
    if args.op_family:
        where["op_family"] = args.op_family
    if args.bottleneck:
        where["bottleneck"] = args.bottleneck
    if args.kept:
        where["kept"] = True
    if args.failures:
        where["verdict"] = "fail"
    return where or None


def _outcome(case: Case) -> str:
    if case.failed:
        return f"[red]fail[/] {case.outcome.error_type or ''}"
    speed = f"{case.outcome.speedup:.2f}x" if case.outcome.speedup is not None else "pass"
    return f"[green]{speed}[/]" + (" kept" if case.kept else "")


def _table(cases: list[Case], scores: list[float] | None = None) -> Table:
    table = Table()
    if scores is not None:
        table.add_column("score", justify="right")
    table.add_column("id", no_wrap=True)
    table.add_column("op family")
    table.add_column("bottleneck")
    table.add_column("change", overflow="fold")
    table.add_column("outcome")
    for i, case in enumerate(cases):
        config = " ".join(f"{k}={v}" for k, v in case.change.config.items())
        change = f"{case.change.module} {config}" + (" +source" if case.change.new_source else "")
        row = [case.id, case.task.op_family, case.snapshot.bottleneck or "-", change, _outcome(case)]
        table.add_row(*([f"{scores[i]:.3f}"] if scores is not None else []), *row)
    return table


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def run(args: argparse.Namespace) -> int:
    store = args.store or default_case_store()
    needs_model = args.command in ("search", "import")
    incoming: list[Case] = []
    if args.command == "import":
        # Checked before the model loads: a bad file is rejected at once.
        if not args.file.is_file():
            raise BadInput(f"import: no such file {args.file}")
        try:
            incoming = read_cases(args.file)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadInput(f"import: {exc}") from None
    if args.command == "export" and not args.file.parent.is_dir():
        raise BadInput(f"export: folder {args.file.parent} does not exist")
    library, reason = open_case_library(store, lazy_model=not needs_model)
    if library is None:
        err.print(reason)
        return 1

    if args.command == "list":
        if args.limit < 1:
            raise BadInput("list: --limit must be at least 1")
        cases = library.list(limit=args.limit, where=_where(args))
        if args.json:
            _print_json([c.model_dump(mode="json") for c in cases])
        elif not cases:
            out.print(f"no cases in {store}")
        else:
            out.print(_table(cases))
            out.print(f"{len(cases)} of {library.count()} cases in {store}")
    elif args.command == "search":
        if args.k < 1:
            raise BadInput("search: -k must be at least 1")
        hits = library.search(args.text, k=args.k, where=_where(args))
        if args.json:
            _print_json([{"score": round(s, 4), "case": c.model_dump(mode="json")} for c, s in hits])
        elif not hits:
            out.print(f"no cases in {store}")
        else:
            out.print(_table([c for c, _ in hits], [s for _, s in hits]))
    elif args.command == "show":
        case = library.get(args.id)
        if case is None:
            matches = library.find(args.id)
            if not matches:
                raise BadInput(f"show: no case {args.id!r} in {store}")
            if len(matches) > 1:
                listed = ", ".join(sorted(c.id for c in matches)[:5])
                raise BadInput(
                    f"show: {args.id!r} matches {len(matches)} cases ({listed}); give more of the id"
                )
            case = matches[0]
        if args.json:
            _print_json(case.model_dump(mode="json"))
        else:
            out.print(f"[bold]{case.id}[/]  {case.headline()}")
            out.print(json.dumps(case.model_dump(mode="json"), indent=2))
    elif args.command == "export":
        n = library.export(args.file)
        out.print(f"exported {n} cases to {args.file}")
    elif args.command == "import":
        before = library.count()
        n = library.add(incoming)
        out.print(f"imported {n} new cases from {args.file} ({before + n} in the store)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return run(args)
    except BadInput as exc:
        err.print(f"error: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
