"""Export the winner as one standalone module: kernel source + launcher (+ the dispatch table when it
wins), importable with only torch and triton installed.

    python -m tools.export TASK --best RUN_DIR|report.json|results/ID.json --out kernel.py
    python -m tools.export TASK --candidate FILE.py --config JSON --out kernel.py
        [--dispatch auto|always|never] [--bucket-dims M] [--threshold 0.02] [--verify cpu|cuda]

The module's ``launch(*inputs)`` runs the exported config, or the config the table picks for the
inputs' shape; ``launch(*inputs, **config)`` runs any config of the search space on the single
config's source, so the module is itself a candidate the evaluator accepts (a module with
``launch(*inputs, **config)``: docs/CONTRACTS.md).
Sources are merged as written: imports hoisted, each ``launch`` renamed ``_launch_<tag>``, and any
other top-level name two sources share suffixed with the later one's tag.

``--dispatch auto`` emits the table when it beats one config by more than the threshold on real GPU
timings; interpreted (CPU) timings rank candidates but never justify a table.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from tools.candidate import HOST_SIDE_MARKER
from tools.dispatch import (
    THRESHOLD,
    DispatchReport,
    TimedCandidate,
    choose_dispatch,
    geomean,
    load_run,
)
from tools.run_folder import KERNEL, RESULTS, RunFolder
from tools.task import Task, TaskError, load_task, torch_dtype

# The replay of a launcher's launches (tools/fast_launch.py), copied into every module.
FAST_LAUNCH = (Path(__file__).resolve().parent / "fast_launch.py").read_text()


class ExportError(ValueError):
    """The winner cannot be exported; the message says why."""


class Entry(BaseModel):
    """One source in the module: its tag (a Python identifier) and where it came from."""

    tag: str
    source: str
    module: str
    identity: str


class ExportSummary(BaseModel):
    task: str
    module: str
    config: dict[str, Any]
    geomean_us: float | None
    dispatch: Literal["table", "single"]
    sources: list[str]
    reason: str


# -- merging sources -------------------------------------------------------------------------------------
def _bound_by_import(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.asname or a.name.split(".")[0] for a in node.names]
    return [a.asname or a.name for a in node.names]


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


# Names the generated part of the module defines; a source's own names are renamed around them.
RESERVED = frozenset(
    {"launch", "launcher_for", "choose", "CONFIG", "DEFAULT", "DISPATCH", "SHAPE_DIMS", "DTYPE_INPUT",
     "_dims", "_pick", "_LAUNCHERS", "_BOUND", "_dispatch", "_HOT"}
    | _top_level_names(ast.parse(FAST_LAUNCH))
)  # fmt: skip


class _References(ast.NodeVisitor):
    """Every ast.Name that refers to a module-level name of ``names`` (not shadowed inside a function)."""

    def __init__(self, names: set[str]):
        self.names = names
        self.shadowed: list[set[str]] = []
        self.hits: list[ast.Name] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for expr in [*node.decorator_list, *node.args.defaults, *filter(None, node.args.kw_defaults)]:
            self.visit(expr)
        args = node.args
        local = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        local |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        local |= {
            n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del)
        }
        self.shadowed.append(local)
        for stmt in node.body:
            self.visit(stmt)
        self.shadowed.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.names and not any(node.id in s for s in self.shadowed):
            self.hits.append(node)


def _split_source(source: str, renames: dict[str, str]) -> tuple[list[ast.stmt], str, str]:
    """(top-level imports, docstring, body with the imports and docstring removed and names renamed)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    edits: dict[int, list[tuple[int, int, str]]] = {}  # line -> [(start byte, end byte, text)]
    refs = _References(set(renames))
    refs.visit(tree)
    for name in refs.hits:
        edits.setdefault(name.lineno, []).append((name.col_offset, name.end_col_offset, renames[name.id]))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name in renames:
            line = lines[node.lineno - 1]
            found = re.match(r"(\s*(?:async\s+)?(?:def|class)\s+)(\w+)", line)
            if not found or found.group(2) != node.name:
                raise ExportError(f"cannot locate the definition of {node.name} on line {node.lineno}")
            start = len(found.group(1).encode())
            edits.setdefault(node.lineno, []).append((start, start + len(node.name), renames[node.name]))
    for number, changes in edits.items():
        raw = lines[number - 1].encode()
        for start, end, text in sorted(changes, reverse=True):
            raw = raw[:start] + text.encode() + raw[end:]
        lines[number - 1] = raw.decode()

    drop: set[int] = set()
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    for node in imports:
        drop |= set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    doc = ""
    first = tree.body[0] if tree.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        doc = first.value.value
        drop |= set(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    body = "\n".join(line for i, line in enumerate(lines, 1) if i not in drop)
    return imports, doc, _tidy(body)


def _tidy(text: str) -> str:
    return re.sub(r"\n{3,}", "\n\n\n", text.strip("\n")) + "\n"


def merge_sources(
    entries: list[Entry], needs: tuple[str, ...] = ()
) -> tuple[str, dict[str, str], dict[str, str]]:
    """(hoisted imports, tag -> renamed body with a header comment, tag -> its launch function name).

    ``needs``: the import statements the generated code needs (e.g. ``import math`` for the table)."""
    futures: list[str] = []
    imports: list[str] = []
    bound: dict[str, str] = {}
    taken: set[str] = set(RESERVED)
    bodies: dict[str, str] = {}
    launchers: dict[str, str] = {}
    for entry in entries:
        tree = ast.parse(entry.source)
        if "launch" not in _top_level_names(tree):
            raise ExportError(f"{entry.module} defines no launch()")
        renames: dict[str, str] = {}
        for name in sorted(_top_level_names(tree)):
            new = f"_launch_{entry.tag}" if name == "launch" else name
            while new in taken or (new != name and new in _top_level_names(tree)):
                new = f"{new}_{entry.tag}" if name != "launch" else f"{new}_"
            if new != name:
                renames[name] = new
            taken.add(new)
        launchers[entry.tag] = renames["launch"]
        nodes, doc, body = _split_source(entry.source, renames)
        for node in nodes:
            text = ast.unparse(node)
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                futures += [text] if text not in futures else []
                continue
            for name in _bound_by_import(node):
                if bound.setdefault(name, text) != text:
                    raise ExportError(
                        f"{entry.module}: '{text}' binds {name} differently from '{bound[name]}'"
                    )
                if name in taken:
                    raise ExportError(f"{entry.module}: the import {name!r} clashes with a definition")
            imports += [text] if text not in imports else []
        header = [f"# {'-' * 98}", f"# from {entry.module} (candidate {entry.identity})"]
        header += [f"# {line}".rstrip() for line in doc.strip().splitlines()]
        bodies[entry.tag] = "\n".join(header) + "\n\n" + body
    for text in needs:
        for name in _bound_by_import(ast.parse(text).body[0]):
            if bound.setdefault(name, text) != text:
                raise ExportError(f"a source binds {name} to something other than '{text}'")
        imports += [text] if text not in imports else []
    head = futures + [""] * bool(futures) + _isort_layout(imports)
    return "\n".join(head) + "\n", bodies, launchers


def _isort_layout(imports: list[str]) -> list[str]:
    """isort's layout: standard library, a blank line, then third-party (torch, triton)."""
    stdlib = sorted(t for t in imports if _top_module(t) in sys.stdlib_module_names)
    third = sorted(t for t in imports if t not in stdlib)
    return stdlib + [""] * bool(stdlib and third) + third


def _top_module(statement: str) -> str:
    """'import triton.language as tl' -> 'triton'; 'from math import inf' -> 'math'."""
    return statement.split()[1].split(".")[0]


# -- where the shape dims live in the inputs -----------------------------------------------------------
def probe_layout(task: Task, dims: list[str]) -> tuple[dict[str, tuple[int, int]], int | None]:
    """(dim -> (input index, axis), index of the input whose dtype tells the dtype or None).

    Found by building the task's inputs on the CPU at its small shapes: the first (input, axis) whose
    size equals the dim at every probe shape."""
    probes = []
    for shape in [*task.cpu_shapes, *task.spec.check_shapes]:
        if shape not in probes:
            probes.append(shape)
    made = [
        (shape, dtype, task.make_inputs(dict(shape), torch_dtype(dtype), "cpu", 0))
        for shape in probes
        for dtype in task.dtypes
    ]
    layout: dict[str, tuple[int, int]] = {}
    for dim in dims:
        n = len(made[0][2])
        spots = [(i, a) for i in range(n) for a in range(made[0][2][i].dim())]
        for i, axis in spots:
            if all(
                len(inputs) == n and inputs[i].dim() > axis and inputs[i].shape[axis] == shape[dim]
                for shape, _, inputs in made
            ):
                layout[dim] = (i, axis)
                break
        else:
            raise ExportError(f"no input axis matches the shape dim {dim} at every small shape of the task")
    dtype_input = None
    if len(task.dtypes) > 1:
        n = len(made[0][2])
        dtype_input = next(
            (
                i
                for i in range(n)
                if all(str(inputs[i].dtype).removeprefix("torch.") == dtype for _, dtype, inputs in made)
            ),
            None,
        )
        if dtype_input is None:
            raise ExportError("no input carries the task's dtype at every small shape")
    return layout, dtype_input


# -- the module text -------------------------------------------------------------------------------------
def _tag(module: str, identity: str, used: set[str]) -> str:
    tag = re.sub(r"\W", "_", Path(module).stem) or "kernel"
    tag = f"k_{tag}" if tag[0].isdigit() else tag
    if tag in used:
        tag = f"{tag}_{identity[:6]}"
    used.add(tag)
    return tag


def _literal(value: Any) -> str:
    """Python source for a JSON-like value, strings in double quotes."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        inner = ", ".join(_literal(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})" if isinstance(value, tuple) else f"[{inner}]"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def render_module(
    task: Task,
    default: tuple[Entry, dict[str, Any]],
    table: list[tuple[dict[str, int], str, Entry, dict[str, Any]]] | None,
    note: str,
) -> str:
    """The module text. ``default`` = (entry, config); ``table`` rows = (bucket key, dtype, entry, config)."""
    entries = [default[0]] + [e for _, _, e, _ in table or [] if e.tag != default[0].tag]
    unique = list({e.tag: e for e in entries}.values())
    imports, bodies, launchers = merge_sources(unique, ("import functools", *(["import math"] if table else [])))
    parts = [
        _module_doc(task, default[0], bool(table), note) + imports.rstrip("\n"),
        *(bodies[e.tag] for e in unique),
    ]  # one blank line after the imports (isort)
    default_launcher = launchers[default[0].tag]
    if table:
        layout = probe_layout(task, list(table[0][0]))
        parts.append(_table_part(default, table, unique, launchers, layout))
        key = _key_expression(*layout)
        parts.append(
            "def _dispatch(*inputs):\n"
            f"    bound = _BOUND.get({key})\n    if bound is None:\n        bound = launcher_for(*inputs)\n"
            "    return bound(*inputs)\n\n\n"
            "_HOT = _dispatch  # what launch(*inputs) runs; the host side below wraps it\n"
        )
    else:
        parts.append(
            f"{SEPARATOR}# The exported config ({default[0].module}), bound to its launcher once.\n"
            f"CONFIG = {_literal(default[1])}\n"
            f"_BOUND = functools.partial({default_launcher}, **CONFIG)\n\n\n"
            "def launcher_for(*inputs):\n"
            '    """The launcher ``launch(*inputs)`` calls: the kernel\'s own with CONFIG bound in."""\n'
            "    return _BOUND\n\n\n"
            "_HOT = _BOUND  # what launch(*inputs) runs; the host side below wraps it\n"
        )
    parts += [_launch_part(default_launcher, bool(table)), _host_side(imports.splitlines())]
    return _tidy("\n\n".join(parts))


def _host_side(imported: list[str]) -> str:
    """The replay of the launches, after the marker that ends the candidate part (tools/candidate.py);
    ``imported``: the candidate part's import lines."""
    nodes, _, body = _split_source(FAST_LAUNCH, {})
    imports = [text for text in map(ast.unparse, nodes) if text not in imported]
    return (
        f"{HOST_SIDE_MARKER}\n# The replay of launch(*inputs)'s launches (kernel-agent's tools/fast_launch.py); "
        "see the docstring's host\n# cost. Given as a candidate, the module ends at the line above.\n"
        + "\n".join(_isort_layout(imports))
        + "\n\n"
        + body
        + "\n\n_HOT = Replayed(_HOT)\n"
    )


SEPARATOR = f"# {'-' * 98}\n"


def _module_doc(task: Task, default_entry: Entry, table: bool, note: str) -> str:
    """The module's docstring: what it is, how to call it, its host cost, and how to run it without a
    GPU, in a CUDA graph and under torch.compile."""
    description = task.spec.description.split(". ")[0].rstrip(".")
    picks = "the config the table picks for these shapes" if table else "the exported config"
    cost = (
        "the config for a shape and dtype is chosen on the first call there and bound to its launcher"
        if table
        else "the config is bound to the kernel's own launcher once, at import"
    ) + (
        "; once two calls at a signature (the inputs' shapes, strides, dtypes and alignment, the other "
        "arguments' values) have done the same, later calls there allocate the same outputs and launch the "
        "same compiled kernels directly, without Triton's per-call dispatch (``Replayed`` below says when "
        "a call stays on the launcher)."
    )
    paragraphs = [
        f"Exported by kernel-agent (python -m tools.export). {note}",
        f"Needs only torch and triton. Host cost: {cost} ``launcher_for(*inputs)`` returns that bound "
        "launcher, to call it directly.",
        "Without a GPU: set TRITON_INTERPRET=1 in the environment before triton is first imported "
        "(``TRITON_INTERPRET=1 python app.py``: Triton reads it when kernels are defined) and pass CPU "
        "tensors; the kernels then run in Triton's interpreter, correct but slow (small shapes only).",
        "In a CUDA graph: call ``launch(*inputs)`` once outside the capture (Triton compiles the kernels), "
        "then capture one call per shape. The config is chosen at capture time; a replay reruns the "
        "captured kernels on the same input and output buffers:",
    ]
    graph = (
        "    graph = torch.cuda.CUDAGraph()\n"
        "    with torch.cuda.graph(graph):\n"
        "        outputs = launch(*inputs)\n"
        "    graph.replay()   # after refilling the inputs in place; outputs holds the results\n"
    )
    compiled = (
        "Under torch.compile: ``torch.compiler.disable(launch)`` keeps the call out of the graph (a graph "
        "break; it then runs eagerly, as here). Dynamo also traces Python code that launches Triton "
        "kernels (PyTorch >= 2.3), so ``launch`` can be called inside a compiled function as it is. To "
        "give the op a schema other PyTorch subsystems understand, wrap it in ``torch.library.custom_op`` "
        "(opaque to the compiler; it needs a fake implementation giving the outputs' shapes). In "
        "Triton's interpreter only the disabled form works: Dynamo cannot trace interpreted kernels."
    )
    fill = lambda paragraph: textwrap.fill(paragraph, width=100)
    return (
        f'"""{task.name}: {description}.\n\n{fill(paragraphs[0])}\n\n'
        f"    from {task.name}_kernel import launch   # or whatever this file is named\n"
        f"    outputs = launch(*inputs)              # {picks}\n"
        "    outputs = launch(*inputs, **config)    # any config of the search space, on "
        f"{default_entry.module}\n\n"
        + "\n\n".join(fill(p) for p in paragraphs[1:])
        + f"\n\n{graph}\n{fill(compiled)}\n"
        + '"""\n\n'
    )


def _table_part(
    default: tuple[Entry, dict[str, Any]],
    table: list[tuple[dict[str, int], str, Entry, dict[str, Any]]],
    unique: list[Entry],
    launchers: dict[str, str],
    layout_and_dtype_input: tuple[dict[str, tuple[int, int]], int | None],
) -> str:
    """The dispatch table, the rule that picks a row, and the per-shape cache of bound launchers."""
    dims = list(table[0][0])
    layout, dtype_input = layout_and_dtype_input
    default_entry, default_config = default
    rows = "\n".join(
        f'    {{"when": {_literal(key)}, "dtype": "{dtype}", "source": "{entry.tag}", "config": {_literal(cfg)}}},'
        for key, dtype, entry, cfg in table
    )
    by_tag = "".join(f'    "{e.tag}": {launchers[e.tag]},\n' for e in unique)
    return (
        f"{SEPARATOR}# Dispatch table, chosen offline from per-shape timings: a call takes the row nearest to its\n"
        f"# shape (log2 distance over {', '.join(dims)}){' among the rows of its dtype' if dtype_input is not None else ''}.\n"
        f"SHAPE_DIMS = {_literal(layout)}  # dim -> (input index, axis)\n"
        f"DTYPE_INPUT = {dtype_input}  # the input whose dtype selects the rows (None: one dtype)\n"
        f'DEFAULT = ("{default_entry.tag}", {_literal(default_config)})  # the best single config\n'
        f"DISPATCH = [\n{rows}\n]\n"
        f"_LAUNCHERS = {{\n{by_tag}}}\n"
        "_BOUND = {}  # (input shapes, dtype) -> the chosen launcher with its config bound in\n\n\n"
        "def _dims(*inputs):\n"
        "    return tuple((dim, inputs[i].shape[axis]) for dim, (i, axis) in SHAPE_DIMS.items())\n\n\n"
        "def _pick(dims, dtype):\n"
        "    best, best_distance = -1, math.inf\n"
        "    for n, row in enumerate(DISPATCH):\n"
        '        if DTYPE_INPUT is not None and row["dtype"] != dtype:\n'
        "            continue\n"
        '        distance = sum((math.log2(max(size, 1)) - math.log2(row["when"][dim])) ** 2 for dim, size in dims)\n'
        "        if distance < best_distance:\n"
        "            best, best_distance = n, distance\n"
        "    return best\n\n\n"
        "def choose(*inputs):\n"
        '    """(source tag, config) the table picks for these inputs."""\n'
        '    dtype = str(inputs[DTYPE_INPUT].dtype).removeprefix("torch.") if DTYPE_INPUT is not None else ""\n'
        "    n = _pick(_dims(*inputs), dtype)\n"
        "    if n < 0:\n"
        "        return DEFAULT[0], dict(DEFAULT[1])\n"
        '    return DISPATCH[n]["source"], dict(DISPATCH[n]["config"])\n\n\n'
        "def launcher_for(*inputs):\n"
        '    """The launcher ``launch(*inputs)`` calls for these inputs, with the chosen config bound in\n'
        '    (chosen on the first call at their shapes and dtype, then cached)."""\n'
        f"    key = {_key_expression(layout, dtype_input)}\n"
        "    bound = _BOUND.get(key)\n"
        "    if bound is None:\n"
        "        source, config = choose(*inputs)\n"
        "        bound = _BOUND[key] = functools.partial(_LAUNCHERS[source], **config)\n"
        "    return bound\n"
    )


def _key_expression(layout: dict[str, tuple[int, int]], dtype_input: int | None) -> str:
    """Python source for the cache key of a call: the shapes of the inputs the dims are read from, and
    the dtype that selects the rows; the same inputs give the same choice."""
    shapes = [f"inputs[{i}].shape" for i in sorted({i for i, _ in layout.values()})]
    dtype = [f"inputs[{dtype_input}].dtype"] if dtype_input is not None else []
    return "(" + ", ".join(shapes + dtype) + ("," if len(shapes + dtype) == 1 else "") + ")"


def _launch_part(default_launcher: str, table: bool) -> str:
    """``launch``: a given config on the default source, else the replayed launcher (the hot path)."""
    doc = (
        "Run the kernel with the config the table picks, or with ``config`` (every key) on the\n"
        "    single config's source when given."
        if table
        else "Run the kernel with the exported config, or with ``config`` (every key) when given."
    )
    chosen = "the launcher the table picks" if table else "the launcher with CONFIG bound in"
    return (
        f"{SEPARATOR}# The hot path: {chosen}, its launches replayed once two calls at a signature agree.\n"
        "def launch(*inputs, **config):\n"
        f'    """{doc}"""\n'
        "    if config:\n"
        f"        return {default_launcher}(*inputs, **config)\n"
        "    return _HOT(*inputs)\n"
    )


# -- from a run or a candidate ---------------------------------------------------------------------------
def _describe(c: TimedCandidate, device: str) -> str:
    times = [r.median_us for r in c.per_shape if r.median_us > 0]
    if not times:
        return f"no timings on {device}"
    mean = geomean(times)
    claim = " (interpreter wall time: a ranking, not a speed claim)" if c.interpreted else ""
    return f"{mean:.2f} us geomean over {len(times)} shapes on {device}{claim}"


def build_export(
    task: Task,
    candidates: list[TimedCandidate],
    dispatch: Literal["auto", "always", "never"] = "auto",
    bucket_dims: list[str] | None = None,
    threshold: float = THRESHOLD,
    pinned: str | None = None,
    provenance: str = "",
    device: str = "an unknown device",
) -> tuple[str, ExportSummary, DispatchReport]:
    """The module text for timed candidates (each with its ``source_path``): the best single config,
    or the per-bucket table when ``dispatch`` asks for it or (auto) it wins on real timings."""
    report = choose_dispatch(candidates, bucket_dims, threshold, pinned if len(candidates) > 1 else None)
    by_id = {c.identity: c for c in candidates}
    single = by_id[report.single.identity]
    used: set[str] = set()
    entries: dict[str, Entry] = {}

    def entry(c: TimedCandidate) -> Entry:
        if c.identity not in entries:
            source = Path(c.source_path or "").read_text()
            same = next((e for e in entries.values() if e.source == source), None)
            entries[c.identity] = same or Entry(
                tag=_tag(c.module, c.identity, used), source=source, module=c.module, identity=c.identity
            )
        return entries[c.identity]

    default = (entry(single), single.config)
    use_table = dispatch == "always" or (dispatch == "auto" and report.table_wins and not report.interpreted)
    if use_table and len({b.choice.identity for b in report.table}) > 1:
        table = [(b.key, b.dtype, entry(by_id[b.choice.identity]), b.choice.config) for b in report.table]
        note = (
            f"Per-shape table over {', '.join(report.bucket_dims)}: {report.table_geomean_us:.2f} us geomean "
            f"against {report.single.geomean_us:.2f} us for one config ({100 * report.gain:+.1f}%), "
            f"measured on {device}{' (interpreted: a ranking only)' if report.interpreted else ''}{provenance}."
        )
        reason = report.message
    else:
        table = None
        note = f"Config {single.module} {json.dumps(single.config)}: {_describe(single, device)}{provenance}."
        reason = "one candidate given" if len(candidates) == 1 else report.message
        if dispatch == "auto" and report.table_wins and report.interpreted:
            reason += "; no table from interpreted timings"
    text = render_module(task, default, table, note)
    summary = ExportSummary(
        task=task.name,
        module=single.module,
        config=single.config,
        geomean_us=report.single.geomean_us,
        dispatch="table" if table else "single",
        sources=sorted({e.module for e in entries.values()}),
        reason=reason,
    )
    return text, summary, report


def export_run(
    task: Task,
    best: str | Path,
    dispatch: Literal["auto", "always", "never"] = "auto",
    bucket_dims: list[str] | None = None,
    threshold: float = THRESHOLD,
    pinned_best: str | None = None,
) -> tuple[str, ExportSummary, DispatchReport]:
    """The module text for a run folder, its report.json, or one results/<identity>.json.
    ``pinned_best``: the run's best identity when the caller knows it (else report.json's)."""
    path = Path(best)
    if path.is_file() and path.parent.name == RESULTS:
        folder, only = RunFolder(path.parent.parent), path.stem
    elif path.is_file():
        folder, only = RunFolder(path.parent), None
    else:
        folder, only = RunFolder(path), None
    candidates = load_run(folder.root)
    if only is not None:
        candidates = [c for c in candidates if c.identity == only]
    if not candidates:
        raise ExportError(f"{best}: no passing candidate with timings and source found")
    pinned = only or pinned_best or folder.best_identity()
    result = folder.load_result(pinned or candidates[0].identity)
    return build_export(
        task,
        candidates,
        dispatch,
        bucket_dims,
        threshold,
        pinned,
        provenance=f"; run {folder.root.name}",
        device=result.device.name if result is not None else "an unknown device",
    )


def export_candidate(
    task: Task, source: str, config: dict[str, Any], module: str
) -> tuple[str, ExportSummary]:
    """The module text for one candidate file and config (no timings, no table)."""
    problems = task.config_problems(config, module)
    if problems:
        raise ExportError("config outside the task's search space: " + "; ".join(problems))
    entry = Entry(tag=_tag(module, "", set()), source=source, module=module, identity="given")
    text = render_module(task, (entry, config), None, f"Config given on the command line ({module}).")
    summary = ExportSummary(
        task=task.name,
        module=module,
        config=config,
        geomean_us=None,
        dispatch="single",
        sources=[module],
        reason="one candidate given",
    )
    return text, summary


def export_to_run(
    task: Task, run_dir: str | Path, filename: str = KERNEL, best: str | None = None
) -> dict[str, Any]:
    """Report-time hook: the run's winner (``best``, the state's best identity) as RUN_DIR/kernel.py.
    Returns what the report shows: {path, dispatch, module, config, reason, markdown (single config vs
    table)}, or {path: None, reason} when the run has nothing exportable."""
    from tools.dispatch import render_markdown

    try:
        text, summary, report = export_run(task, run_dir, pinned_best=best)
    except (ExportError, ValueError, OSError) as exc:
        return {"path": None, "reason": str(exc)}
    RunFolder(run_dir).write(filename, text)
    return {"path": filename, **summary.model_dump(), "markdown": render_markdown(report)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("task", help="task folder or its task.json")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--best", help="a run folder, its report.json, or one results/<identity>.json")
    which.add_argument("--candidate", help="a candidate module (.py); needs --config")
    parser.add_argument("--config", default=None, help="JSON object (with --candidate)")
    parser.add_argument("--module", default=None, help="the task module whose search space --config is in")
    parser.add_argument("--out", required=True, help="the module to write, e.g. kernel.py")
    parser.add_argument("--dispatch", choices=["auto", "always", "never"], default="auto")
    parser.add_argument("--bucket-dims", default=None, help="comma-separated shape dims, e.g. M")
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    parser.add_argument("--verify", choices=["cpu", "cuda"], default=None, help="run the evaluator on it")
    args = parser.parse_args(argv)
    try:
        task = load_task(args.task)
        if args.candidate:
            candidate = Path(args.candidate)
            module = args.module or (
                candidate.name if candidate.name in task.module_names else task.baseline_name
            )
            config = json.loads(args.config) if args.config else task.default_config(module)
            text, summary = export_candidate(task, candidate.read_text(), config, module)
        else:
            dims = [d for d in args.bucket_dims.split(",") if d] if args.bucket_dims is not None else None
            text, summary, report = export_run(task, args.best, args.dispatch, dims, args.threshold)
    except (TaskError, ExportError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    Path(args.out).write_text(text)
    print(f"wrote {args.out}: {summary.dispatch} ({summary.reason})")
    if args.verify:
        from tools.evaluate import evaluate

        result = evaluate(task, text, summary.config, device=args.verify, module=summary.module)
        print(
            f"evaluator on {args.verify}: {result.verdict} {result.error_type or ''} {result.message}".rstrip()
        )
        return 0 if result.passed else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
