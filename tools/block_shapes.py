"""Which of a module's launch() keywords size a block: a value that reaches ``tl.arange`` (or the shape
of ``tl.zeros`` / ``tl.full``) in one of its kernels, directly or through arithmetic, must be a power
of two, since Triton's blocks are. A loop count (``for i in range(ROWS)``) or a grid size is not.

Read from the source with ``ast``; nothing is imported or run.
"""

from __future__ import annotations

import ast

# tl functions whose arguments are block sizes: tl.arange(start, end), tl.zeros(shape), tl.full(shape).
SIZING_CALLS = {"arange": None, "zeros": 0, "full": 0}
# Calls a value stays "the same number" through (min(BLOCK, 1024) is still BLOCK's size).
PASS_THROUGH = {"min", "max", "int"}


def block_size_keys(source: str) -> set[str]:
    """The keyword parameters of ``launch()`` whose value sizes a block in a ``@triton.jit`` kernel.
    A module that does not parse sizes nothing (the evaluator reports its syntax error)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    kernels = {name: f for name, f in functions.items() if _is_jit(f)}
    sizing = _sizing_params(kernels)
    launch = functions.get("launch")
    if launch is None:
        return set()
    wanted: set[str] = set()
    for call in ast.walk(launch):
        name = _launched(call)
        if name in kernels:
            for param, value in _bound_args(call, kernels[name]):
                if param in sizing[name]:
                    wanted |= _names_through_arithmetic(value)
    params = {a.arg for a in (*launch.args.args, *launch.args.kwonlyargs)}
    return _back_through_assignments(launch, wanted) & params


def _is_jit(fn: ast.FunctionDef) -> bool:
    for deco in fn.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if ast.unparse(target).split(".")[-1] == "jit":
            return True
    return False


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]


def _callee(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _launched(node: ast.AST) -> str | None:
    """``kernel`` for ``kernel[grid](...)``, None for anything else."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
        value = node.func.value
        return value.id if isinstance(value, ast.Name) else None
    return None


def _bound_args(call: ast.Call, fn: ast.FunctionDef) -> list[tuple[str, ast.AST]]:
    """(parameter, argument expression) of a call, positional and keyword."""
    params = _params(fn)
    bound = list(zip(params, call.args, strict=False))
    bound += [(k.arg, k.value) for k in call.keywords if k.arg in params]
    return bound


def _names_through_arithmetic(node: ast.AST) -> set[str]:
    """Names whose value flows into ``node`` through arithmetic (not through other calls, whose result
    is a new number, e.g. triton.next_power_of_2(N))."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.BinOp):
        return _names_through_arithmetic(node.left) | _names_through_arithmetic(node.right)
    if isinstance(node, ast.UnaryOp):
        return _names_through_arithmetic(node.operand)
    if isinstance(node, ast.IfExp):
        return _names_through_arithmetic(node.body) | _names_through_arithmetic(node.orelse)
    if isinstance(node, ast.List | ast.Tuple):
        return set().union(*(_names_through_arithmetic(e) for e in node.elts))
    if isinstance(node, ast.Call) and _callee(node) in PASS_THROUGH:
        return set().union(*(_names_through_arithmetic(a) for a in node.args))
    return set()


def _back_through_assignments(fn: ast.FunctionDef, names: set[str]) -> set[str]:
    """``names`` plus every name they are computed from by arithmetic inside ``fn``, to a fixpoint."""
    assigned: list[tuple[str, ast.AST]] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            assigned += [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif (
            isinstance(node, ast.AnnAssign | ast.AugAssign)
            and isinstance(node.target, ast.Name)
            and node.value is not None
        ):
            assigned.append((node.target.id, node.value))
    found = set(names)
    while True:
        more = set().union(*(_names_through_arithmetic(v) for t, v in assigned if t in found)) - found
        if not more:
            return found
        found |= more


def _sizing_params(kernels: dict[str, ast.FunctionDef]) -> dict[str, set[str]]:
    """Per jit function, the parameters that size a block in it or in a jit function it calls."""
    sizing = {name: set() for name in kernels}
    changed = True
    while changed:
        changed = False
        for name, fn in kernels.items():
            used: set[str] = set()
            for call in ast.walk(fn):
                if not isinstance(call, ast.Call):
                    continue
                callee = _callee(call)
                if callee in SIZING_CALLS and isinstance(call.func, ast.Attribute):
                    position = SIZING_CALLS[callee]
                    args = call.args if position is None else call.args[position : position + 1]
                    for arg in args:
                        used |= _names_through_arithmetic(arg)
                elif callee in kernels and not isinstance(call.func, ast.Attribute):
                    for param, value in _bound_args(call, kernels[callee]):
                        if param in sizing[callee]:
                            used |= _names_through_arithmetic(value)
            found = _back_through_assignments(fn, used) & set(_params(fn))
            if not found <= sizing[name]:
                sizing[name] |= found
                changed = True
    return sizing
