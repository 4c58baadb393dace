"""Summarize first, expand on request: a structural view of a Triton module, and its hottest loop's asm.

``summarize_source`` reads the module's AST (nothing is imported or run): each ``@triton.jit`` kernel
with its constexpr tunables, loops and their trip expressions, loads/stores and whether they are
masked, reductions, ``tl.dot``, atomics, and how ``launch`` calls it (grid and launch options).
``hot_loop_asm`` pulls the innermost loop body out of PTX or SASS text, for when the summary is not
enough.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

REDUCTIONS = {"sum", "max", "min", "argmax", "argmin", "reduce", "cumsum", "cumprod", "xor_sum"}
REDUCTIONS |= {"associative_scan", "histogram"}
DOTS = {"dot", "dot_scaled"}
MAX_LINES_PER_KERNEL = 40


def _short(node: ast.AST, limit: int = 48) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _call_name(call: ast.Call) -> tuple[str, str]:
    """('tl', 'load') for tl.load(...), ('', 'foo') for foo(...), ('x', 'sum') for x.sum(...)."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return ast.unparse(func.value), func.attr
    if isinstance(func, ast.Name):
        return "", func.id
    return "", ""


def _is_kernel(fn: ast.FunctionDef) -> bool:
    for deco in fn.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if ast.unparse(target).split(".")[-1] == "jit":
            return True
    return False


def _autotune(fn: ast.FunctionDef) -> str | None:
    for deco in fn.decorator_list:
        if isinstance(deco, ast.Call) and ast.unparse(deco.func).endswith("autotune"):
            kw = {k.arg: k.value for k in deco.keywords}
            configs = kw.get("configs")
            count = f"{len(configs.elts)} configs" if isinstance(configs, ast.List) else "configs"
            key = f", key={_short(kw['key'])}" if "key" in kw else ""
            return f"autotuned over {count}{key}"
    return None


def _arg(call: ast.Call, name: str, position: int) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return call.args[position] if len(call.args) > position else None


@dataclass
class _KernelWalk:
    lines: list[str] = field(default_factory=list)
    program_axes: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=lambda: {"dot": 0, "atomic": 0, "reduction": 0})

    def add(self, depth: int, text: str, node: ast.AST) -> None:
        self.lines.append(f"{'  ' * (depth + 1)}{text}  [line {node.lineno}]")

    def call(self, call: ast.Call, depth: int) -> None:
        owner, name = _call_name(call)
        if owner in ("tl", "triton.language") and name in ("load", "store"):
            mask = _arg(call, "mask", 1 if name == "load" else 2)
            bounds = _arg(call, "boundary_check", 99)
            how = (
                f"masked ({_short(mask, 32)})"
                if mask is not None
                else "boundary_check"
                if bounds is not None
                else "UNMASKED"
            )
            self.add(depth, f"{name} {_short(call.args[0]) if call.args else '?'}  {how}", call)
        elif owner in ("tl", "triton.language") and name.startswith("atomic_"):
            self.counts["atomic"] += 1
            mask = "masked" if _arg(call, "mask", 2) is not None else "unmasked"
            target = _short(call.args[0]) if call.args else "?"
            self.add(depth, f"{name} {target}  {mask}", call)
        elif name in DOTS and (owner in ("tl", "triton.language")):
            self.counts["dot"] += 1
            args = ", ".join(_short(a, 24) for a in call.args[:3])
            self.add(depth, f"tl.{name}({args})", call)
        elif name in REDUCTIONS and owner:
            self.counts["reduction"] += 1
            axis = _arg(call, "axis", 1 if owner in ("tl", "triton.language") else 0)
            what = _short(call.args[0], 24) if owner in ("tl", "triton.language") and call.args else owner
            self.add(depth, f"reduce {name}({what}, axis={_short(axis) if axis else 'None'})", call)
        elif owner in ("tl", "triton.language") and name == "program_id":
            axis = _arg(call, "axis", 0)
            self.program_axes.add(_short(axis) if axis is not None else "0")
        elif owner in ("tl", "triton.language") and name == "debug_barrier":
            self.add(depth, "tl.debug_barrier()", call)

    def expressions(self, node: ast.AST, depth: int) -> None:
        calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
        for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
            self.call(call, depth)

    def body(self, stmts: list[ast.stmt], depth: int) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.For):
                self.add(depth, f"loop for {_short(stmt.target, 20)} in {_short(stmt.iter, 60)}", stmt)
                self.expressions(stmt.iter, depth)
                self.body(stmt.body, depth + 1)
            elif isinstance(stmt, ast.While):
                self.add(depth, f"loop while {_short(stmt.test, 60)}", stmt)
                self.body(stmt.body, depth + 1)
            elif isinstance(stmt, ast.If):
                self.expressions(stmt.test, depth)
                self.body(stmt.body, depth)
                self.body(stmt.orelse, depth)
            elif isinstance(stmt, ast.With):
                self.body(stmt.body, depth)
            elif isinstance(stmt, ast.FunctionDef | ast.ClassDef):
                continue
            else:
                self.expressions(stmt, depth)


def _kernel_summary(fn: ast.FunctionDef) -> list[str]:
    params, constexprs = [], []
    for arg in fn.args.args:
        annotation = ast.unparse(arg.annotation) if arg.annotation else ""
        (constexprs if "constexpr" in annotation else params).append(arg.arg)
    end = getattr(fn, "end_lineno", fn.lineno)
    out = [f"kernel {fn.name} (lines {fn.lineno}-{end})"]
    tuned = _autotune(fn)
    if tuned:
        out.append(f"  {tuned}")
    out.append(f"  params: {', '.join(params) or '-'}")
    out.append(f"  constexpr tunables: {', '.join(constexprs) or '-'}")
    walk = _KernelWalk()
    walk.body(fn.body, 0)
    if walk.program_axes:
        out.append(f"  program_id axes: {', '.join(sorted(walk.program_axes))}")
    body = walk.lines
    if len(body) > MAX_LINES_PER_KERNEL:
        body = body[:MAX_LINES_PER_KERNEL] + [f"  ... ({len(walk.lines) - MAX_LINES_PER_KERNEL} more)"]
    out += body
    c = walk.counts
    out.append(f"  totals: {c['dot']} tl.dot, {c['reduction']} reductions, {c['atomic']} atomics")
    return out


def _assignments(fn: ast.FunctionDef) -> dict[str, tuple[int, ast.AST]]:
    found: dict[str, list[tuple[int, ast.AST]]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append((node.lineno, node.value))
    return {name: sorted(values, key=lambda v: v[0]) for name, values in found.items()}  # type: ignore[misc]


def _launches(tree: ast.Module, kernels: set[str]) -> list[str]:
    out = []
    for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and not _is_kernel(n)]:
        assigned = _assignments(fn)
        for call in [n for n in ast.walk(fn) if isinstance(n, ast.Call)]:
            func = call.func
            if not (isinstance(func, ast.Subscript) and ast.unparse(func.value) in kernels):
                continue
            grid = func.slice
            line = (
                f"launch in {fn.name}() [line {call.lineno}]: {ast.unparse(func.value)}[{_short(grid, 80)}]"
            )
            if isinstance(grid, ast.Name) and grid.id in assigned:
                before = [v for line_no, v in assigned[grid.id] if line_no <= call.lineno]  # type: ignore[attr-defined]
                if before:
                    line += f" where {grid.id} = {_short(before[-1], 80)}"
            options = ", ".join(f"{k.arg}={_short(k.value, 24)}" for k in call.keywords if k.arg)
            out.append(line + (f"; {options}" if options else ""))
    return out


def summarize_source(source: str) -> str:
    """Structural summary of a Triton module (kernels, loops, memory ops, reductions, dots, atomics, grid)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"cannot summarize: syntax error at line {exc.lineno}: {exc.msg}"
    kernels = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _is_kernel(n)]
    if not kernels:
        return "no @triton.jit kernel in this module"
    lines: list[str] = []
    launch_fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "launch"), None)
    head = f"module: {len(kernels)} kernel(s)"
    if launch_fn is not None:
        head += f"; launch({_short(launch_fn.args, 70)})"
    lines.append(head)
    for fn in kernels:
        lines += _kernel_summary(fn)
    launches = _launches(tree, {k.name for k in kernels})
    lines += launches or ["no kernel[grid](...) launch found"]
    return "\n".join(lines)


# -- hot loop of PTX / SASS --------------------------------------------------------------------------

_PTX_LABEL = re.compile(r"^\s*(\$?[A-Za-z_][\w$]*):")
_PTX_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$?[A-Za-z_][\w$]*)\s*;")
_SASS_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_SASS_LABEL_BRANCH = re.compile(r"\bBRA\b[^;]*?`\((\.L_x_\d+)\)")
_SASS_ADDRESS = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/")
_SASS_ADDRESS_BRANCH = re.compile(r"\bBRA\s+(?:\S+\s+)?(0x[0-9a-f]+)\s*;")
_ENCODING = re.compile(r"\s*/\*\s*0x[0-9a-f]{16}\s*\*/\s*$")
_NOISE = re.compile(r"^\s*(\.loc\b|//|$|/\*\s*0x[0-9a-f]{16}\s*\*/\s*$|\.pragma\b)")


def _loops(lines: list[str]) -> list[tuple[int, int]]:
    positions: dict[str, int] = {}
    for i, line in enumerate(lines):
        for pattern in (_PTX_LABEL, _SASS_LABEL):
            match = pattern.match(line)
            if match:
                positions[match.group(1)] = i
        address = _SASS_ADDRESS.match(line)
        if address:
            positions[f"0x{int(address.group(1), 16):x}"] = i
    loops = []
    for i, line in enumerate(lines):
        for pattern in (_PTX_BRANCH, _SASS_LABEL_BRANCH, _SASS_ADDRESS_BRANCH):
            match = pattern.search(line)
            if not match:
                continue
            target = match.group(1)
            if target.startswith("0x"):
                target = f"0x{int(target, 16):x}"
            j = positions.get(target)
            if j is not None and j <= i:
                loops.append((j, i))
    return loops


def hot_loop_asm(ptx_or_sass: str, max_lines: int = 60) -> str:
    """The innermost (most deeply nested) loop body of PTX or SASS text, at most ``max_lines`` lines."""
    lines = ptx_or_sass.splitlines()
    loops = sorted(set(_loops(lines)))
    if not loops:
        return "no loop found (no backward branch in this code)"

    def contains(outer: tuple[int, int], inner: tuple[int, int]) -> bool:
        return outer != inner and outer[0] <= inner[0] and inner[1] <= outer[1]

    innermost = [loop for loop in loops if not any(contains(loop, other) for other in loops)]
    best = max(innermost, key=lambda loop: (sum(contains(o, loop) for o in loops), loop[1] - loop[0]))
    depth = 1 + sum(contains(o, best) for o in loops)
    body = [_ENCODING.sub("", line) for line in lines[best[0] : best[1] + 1] if not _NOISE.match(line)]
    head = (
        f"innermost loop: lines {best[0] + 1}-{best[1] + 1} of the listing, nesting depth {depth}, "
        f"{len(body)} lines ({len(loops)} loops in total)"
    )
    if len(body) > max_lines:
        body = body[: max_lines - 1] + [f"... ({len(body) - max_lines + 1} more lines)"]
    return "\n".join([head, *body])
