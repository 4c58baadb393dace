"""What each config key does inside the kernel, read from the module's source (its AST).

A constexpr that sizes a block (``tl.arange(0, BLOCK_N)``, a shape given to ``tl.zeros``/``tl.full``/
``tl.reshape``/``tl.broadcast_to``, a block pointer's or descriptor's ``block_shape``) is a tile
dimension: the program holds that many elements at once. One that bounds a loop (``range(ROWS)``,
``tl.range(0, ROWS)``, ``tl.static_range(ROWS)``) is a loop count: the program walks that many steps and
holds one step's tile at a time, so it never multiplies the tile. Names are followed through local
assignments (``BLOCK: tl.constexpr = ROWS * BLOCK_N``) and into the ``@triton.jit`` helpers a kernel
calls; a config key reaches a kernel through ``launch()``'s ``kernel[grid](..., KEY=KEY)``.

Two readings share this analysis. For the tile a program holds (the critic's resource estimate), a
name counts whatever it passes through (``next_power_of_2(BLOCK)`` still grows with BLOCK). For the
keys that must be powers of two (``block_size_keys``, the human's answers), a value counts only through
arithmetic and ``min``/``max``/``int``: any call, e.g. ``triton.next_power_of_2(N)``, makes a new
number, so whatever feeds it may take any value.

Read from the source with ``ast``; nothing is imported or run.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Literal

KernelRole = Literal["tile", "loop", "other"]
Follow = Callable[[ast.AST | None], set[str]]  # the names a value is computed from

# call name -> (positions, keywords) of its arguments that give a block shape
SHAPE_ARGUMENTS: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
    "arange": ((0, 1), ("start", "end")),
    "zeros": ((0,), ("shape",)),
    "full": ((0,), ("shape",)),
    "reshape": ((1,), ("shape",)),
    "view": ((1,), ("shape",)),
    "broadcast_to": ((1,), ("shape",)),
    "make_block_ptr": ((5,), ("block_shape",)),
    "make_tensor_descriptor": ((3,), ("block_shape",)),
}
LOOPS = {"range", "static_range"}
# Calls a value stays "the same number" through (min(BLOCK, 1024) is still BLOCK's size).
PASS_THROUGH = {"min", "max", "int"}


def _call_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def _names(node: ast.AST | None) -> set[str]:
    """Every name in ``node``: what a value is computed from, through anything."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node is not None else set()


def _names_through_arithmetic(node: ast.AST | None) -> set[str]:
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
    if isinstance(node, ast.Call) and _call_name(node) in PASS_THROUGH:
        return set().union(*(_names_through_arithmetic(a) for a in node.args))
    return set()


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any(_call_name(d) == "jit" for d in fn.decorator_list)


def _constexprs(fn: ast.FunctionDef) -> list[str]:
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    return [a.arg for a in args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)]


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]


def _shape_args(call: ast.Call) -> list[ast.expr]:
    positions, keywords = SHAPE_ARGUMENTS[_call_name(call)]
    picked = [call.args[i] for i in positions if i < len(call.args)]
    return picked + [k.value for k in call.keywords if k.arg in keywords]


def _loop_bounds(node: ast.For) -> list[ast.expr]:
    """The stop of ``for .. in range(stop)`` / ``range(start, stop[, step])`` (tl.range, static_range)."""
    it = node.iter
    if not isinstance(it, ast.Call) or _call_name(it) not in LOOPS or not it.args:
        return []
    return [it.args[0] if len(it.args) == 1 else it.args[1]]


class _Kernel:
    """Uses of the names of one function: which sized a block, which bounded a loop; ``follow`` says
    what a value is computed from."""

    def __init__(self, fn: ast.FunctionDef, follow: Follow = _names):
        self.fn = fn
        self.params = _params(fn)
        self.derived: dict[str, set[str]] = {}  # local name -> the names its value was computed from
        self.tile: set[str] = set()
        self.loop: set[str] = set()
        self.calls: list[ast.Call] = []
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for name in _names(t):
                        self.derived.setdefault(name, set()).update(follow(node.value))
            elif isinstance(node, ast.Call) and _call_name(node) in SHAPE_ARGUMENTS:
                for arg in _shape_args(node):
                    self.tile |= follow(arg)
            elif isinstance(node, ast.Call):
                self.calls.append(node)
            if isinstance(node, ast.For):
                for bound in _loop_bounds(node):
                    self.loop |= follow(bound)

    def sources(self, names: set[str]) -> set[str]:
        """``names`` and every name they were computed from, through local assignments."""
        seen, todo = set(), list(names)
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(self.derived.get(name, ()))
        return seen


def kernel_param_roles(tree: ast.Module, follow: Follow = _names) -> dict[str, dict[str, KernelRole]]:
    """jit function name -> {constexpr parameter: role}, helpers' uses folded into their callers."""
    kernels = {
        fn.name: _Kernel(fn, follow)
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef) and _is_jit(fn)
    }
    tile = {name: k.sources(k.tile) for name, k in kernels.items()}
    loop = {name: k.sources(k.loop) for name, k in kernels.items()}
    for _ in range(len(kernels)):  # a helper's parameter roles reach the names its callers pass
        for name, k in kernels.items():
            for call in k.calls:
                callee = kernels.get(_call_name(call))
                if callee is None:
                    continue
                for param, value in _bound_arguments(call, callee.params):
                    names = k.sources(follow(value))
                    if param in tile[callee.fn.name]:
                        tile[name] |= names
                    if param in loop[callee.fn.name]:
                        loop[name] |= names
    roles: dict[str, dict[str, KernelRole]] = {}
    for name, k in kernels.items():
        roles[name] = {
            p: "tile" if p in tile[name] else "loop" if p in loop[name] else "other"
            for p in _constexprs(k.fn)
        }
    return roles


def _bound_arguments(call: ast.Call, params: list[str]) -> list[tuple[str, ast.expr]]:
    bound = [
        (params[i], a) for i, a in enumerate(call.args) if i < len(params) and not isinstance(a, ast.Starred)
    ]
    return bound + [(k.arg, k.value) for k in call.keywords if k.arg in params]


def launched_roles(source: str, follow: Follow = _names) -> dict[str, dict[str, KernelRole]] | None:
    """For each kernel ``launch()`` launches (``kernel[grid](...)``): {launch() parameter: its role in
    that kernel}, a parameter that reaches none of its constexprs being ``other``. None when the source
    does not parse or has no ``launch()`` launching a jit kernel."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    launch = next((f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "launch"), None)
    kernels = kernel_param_roles(tree, follow)
    functions = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
    if launch is None or not kernels:
        return None
    keys = set(_params(launch))
    local = _Kernel(launch, follow)  # launch()'s own assignments: BLOCK = BLOCK_N passes BLOCK_N on
    launched: dict[str, dict[str, KernelRole]] = {}
    for node in ast.walk(launch):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
            continue
        kernel = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
        if kernel not in kernels:
            continue
        roles = launched.setdefault(kernel, dict.fromkeys(keys, "other"))
        for param, value in _bound_arguments(node, _params(functions[kernel])):
            role = kernels[kernel].get(param)
            for key in local.sources(follow(value)) & keys:
                if role == "tile" or (role == "loop" and roles[key] != "tile"):
                    roles[key] = role
    return launched or None


def tile_key_sets(source: str) -> list[set[str]] | None:
    """Per launched kernel, the launch() parameters that size its blocks (see ``launched_roles``)."""
    launched = launched_roles(source)
    if launched is None:
        return None
    return [{key for key, role in roles.items() if role == "tile"} for roles in launched.values()]


def block_size_keys(source: str) -> set[str]:
    """The keyword parameters of ``launch()`` whose value sizes a block in a kernel it launches, through
    arithmetic alone: each must be a power of two, since Triton's blocks are. A loop count
    (``for i in range(ROWS)``) or a grid size is not. A module that does not parse sizes nothing (the
    evaluator reports its syntax error)."""
    launched = launched_roles(source, _names_through_arithmetic) or {}
    return {key for roles in launched.values() for key, role in roles.items() if role == "tile"}
