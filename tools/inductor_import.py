"""Inductor's generated code as a standalone candidate: torch.compile's own Triton, searchable.

Input: captures of ``torch._inductor.utils.run_and_get_code(torch.compile(reference, dynamic=False),
*inputs)`` (python -m tools.inductor_capture writes them), one per shape. Each holds the wrapper
module (kernels inside ``async_compile.triton('name', '''...''')``, a ``call(args)`` that allocates
buffers and launches them), which task input each ``call`` argument is, and the config each kernel
ran with. Output: one module in the candidate format: the kernels as plain ``@triton.jit`` functions
(Inductor's decorators dropped, its ``triton_helpers`` copied in from tools.inductor_helpers,
libdevice from ``triton.language.extra``), and ``launch(*inputs, **config)`` built from the wrapper's
calls.

Both per shape and general. With dynamic=False Inductor writes each size and stride into the kernel
(``xnumel = 4096`` overrides the argument, ``tl.load(in_ptr0 + (x0 + 4096*x1))``), so such a kernel
is right only at its captured shape, and no literal can be told apart from a size: these kernels are
kept per shape, and ``launch`` picks them by the inputs' shapes, strides and dtypes, so every captured
shape runs exactly torch.compile's kernel. Any other shape (the evaluator checks shapes drawn near the
workload that nobody knows in advance) runs the general capture, made with dynamic=True: sizes are
arguments there, ``launch`` computes them from the inputs, and it first checks the shape guards
Inductor's kernels hold under and the wrapper's size asserts (a size Inductor kept fixed, like a
LayerNorm's width, stays fixed; other values are refused with a ValueError). Without a general
capture, other shapes are refused.

The search space scales Inductor's own choices: ``XBLOCK_SCALE``, ``YBLOCK_SCALE``, ``R0_BLOCK_SCALE``
(block sizes) and ``WARPS_SCALE`` (num_warps), each in [1, 0.5, 2, 4]; 1 everywhere is exactly
torch.compile's kernel. A scaled block stays a power of 2 within the axis's cap, and divides the axis
length where Inductor dropped that axis's mask (the kernel would read past the end otherwise). Block
sizes Inductor fixed in the body (persistent reductions' R0_BLOCK, templates' tiles under a fixed
grid) are not scaled.

A template whose fp32 ``tl.dot`` Inductor keeps in full precision (``ALLOW_TF32 = False``: torch's
default for fp32 matmuls) runs it as FMA loops, at about half of cuBLAS's SGEMM on an H200. Such a module
gets one more key, ``DOT_TF32X3`` in [0, 1]: 1 runs the dot as three TF32 tensor-core products (Triton's
``input_precision="tf32x3"``: the operands split into a high and a low TF32 part, all but the low x low
product summed), fp32-level accuracy on the tensor cores; 0 is Inductor's own. Plain TF32 (a 10-bit
mantissa) is not offered: it would trade the reference's precision for speed behind the user's back.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tools import inductor_helpers
from tools.static_check import dotted_name

SCALES = [1, 0.5, 2, 4]
WARPS_KEY = "WARPS_SCALE"
DOT_KEY = "DOT_TF32X3"
FULL_PRECISION_DOT = ("allow_tf32", "ALLOW_TF32")  # Inductor's template: tl.dot(a, b, allow_tf32=ALLOW_TF32)
# per block constexpr: (its axis' numel argument, the mask line that shows the axis is masked, cap)
BLOCKS = {
    "XBLOCK": ("xnumel", "xmask = xindex < xnumel", 4096),
    "YBLOCK": ("ynumel", "ymask = yindex < ynumel", 1024),
    "ZBLOCK": ("znumel", "zmask = zindex < znumel", 1024),
    "R0_BLOCK": ("r0_numel", "r0_mask = r0_index < r0_numel", 16384),
    "R1_BLOCK": ("r1_numel", "r1_mask = r1_index < r1_numel", 16384),
}
PROGRAM_ELEMENTS = 16384  # a scaled tile holds at most this many elements (register pressure)
GRIDS = {"Grid1D": "x", "Grid2D": "xy", "Grid3D": "xyz", "Grid2DWithYZOverflow": "xy", "FixedGrid": ""}
ALLOCATORS = {"empty_strided_cuda", "empty_strided_cpu", "empty_strided_xpu", "empty_strided"}
SKIPPED_CALLS = {"assert_size_stride", "assert_alignment", "torch.cuda.set_device", "args.clear"}


class ConversionError(ValueError):
    """The wrapper holds something a candidate cannot do (a library kernel, an unknown construct)."""


class LaunchConfig(BaseModel):
    kwargs: dict[str, int] = {}
    num_warps: int
    num_stages: int = 1


class Capture(BaseModel):
    """One shape's run_and_get_code output (the fixture format of capture_inductor.py)."""

    shape: dict[str, int]
    dtype: str
    mode: str = "default"
    inputs: list[list[int]]
    strides: list[list[int]]
    # e.g. "torch.float32"; without them launch() keys on shapes and strides only
    input_dtypes: list[str] | None = None
    arg_map: list[int] = []  # static: call(args)[i] is task input arg_map[i]
    # general: call(args)[i] is this input, size or stride (e.g. "L['inputs'][0].size()[1]"), and the
    # shape guards Inductor's kernels hold under, over those sources
    arg_sources: list[str] = []
    guards: list[str] = []
    wrappers: list[str]
    launches: dict[str, LaunchConfig]
    autotuned: bool = False


@dataclass
class Kernel:
    name: str
    tree: ast.FunctionDef
    helpers: list[ast.FunctionDef]  # @triton.jit functions defined beside it in its source
    params: list[str]
    constexprs: list[str]
    body_constants: dict[str, int]  # `R0_BLOCK: tl.constexpr = 1024` and numels like `xnumel = 4096`
    grid_type: str
    source: str

    def masked(self, block: str) -> bool:
        return BLOCKS[block][1] in self.source

    def full_precision_dot(self) -> bool:
        """Its tl.dot runs fp32 in full precision: ``ALLOW_TF32: tl.constexpr = False`` in the body."""
        fixed = any(
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.target.id == FULL_PRECISION_DOT[1]
            and isinstance(stmt.value, ast.Constant)
            and stmt.value.value is False
            for stmt in self.tree.body
        )
        return fixed and any(_is_full_precision_dot(node) for node in ast.walk(self.tree))


def _is_full_precision_dot(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and dotted_name(node.func) == "tl.dot"
        and any(
            k.arg == FULL_PRECISION_DOT[0]
            and isinstance(k.value, ast.Name)
            and k.value.id == FULL_PRECISION_DOT[1]
            for k in node.keywords
        )
    )


@dataclass
class Converted:
    source: str
    search_space: dict[str, list]
    shapes: list[dict[str, int]]
    notes: list[str] = field(default_factory=list)


# -- reading --------------------------------------------------------------------------------------------
def wrapper_kernels(source: str) -> tuple[dict[str, str], ast.FunctionDef]:
    """The kernel sources by name and the ``call`` function of a wrapper module."""
    tree = ast.parse(source)
    kernels, call = {}, None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and dotted_name(node.value.func) == "async_compile.triton"
        ):
            name, text = (a.value for a in node.value.args[:2])
            kernels[name] = text
        elif isinstance(node, ast.FunctionDef) and node.name == "call":
            call = node
        elif isinstance(node, ast.ClassDef):  # torch >= 2.10 wraps call in a Runner class
            call = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "call"), call)
    if call is None:
        raise ConversionError("the wrapper defines no call(args)")
    return kernels, call


def parse_kernel(name: str, source: str) -> Kernel:
    tree = ast.parse(source)
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    kernel = next((f for f in functions if f.name == name), None)
    if kernel is None:
        raise ConversionError(f"{name}: its source defines no function {name}")
    kind = next((dotted_name(d.func) for d in kernel.decorator_list if isinstance(d, ast.Call)), "")
    if kind.startswith("triton_heuristics.") and kind.split(".")[1] not in (
        "pointwise", "reduction", "persistent_reduction", "template",
    ):  # fmt: skip
        raise ConversionError(
            f"{name}: a {kind.split('.')[1]} kernel (only pointwise, reductions, templates)"
        )
    meta = _decorator_dict(kernel, "inductor_meta")
    grid_type = meta.get("grid_type", "Grid1D")
    if grid_type not in GRIDS:
        raise ConversionError(f"{name}: grid type {grid_type} is not supported")
    params = [a.arg for a in kernel.args.args]
    constexprs = [
        a.arg
        for a in kernel.args.args
        if a.annotation is not None and dotted_name(a.annotation) == "tl.constexpr"
    ]
    body_constants = {}
    for stmt in kernel.body:
        target = (
            stmt.target
            if isinstance(stmt, ast.AnnAssign)
            else (stmt.targets[0] if isinstance(stmt, ast.Assign) else None)
        )
        value = stmt.value if isinstance(stmt, ast.AnnAssign | ast.Assign) else None
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and type(value.value) is int:
            body_constants[target.id] = value.value
    helpers = [f for f in functions if f is not kernel]
    return Kernel(name, kernel, helpers, params, constexprs, body_constants, grid_type, source)


def _decorator_dict(fn: ast.FunctionDef, keyword: str) -> dict[str, Any]:
    """The literal entries of a decorator's dict argument (entries that are not literals are skipped)."""
    found: dict[str, Any] = {}
    for dec in fn.decorator_list:
        if not isinstance(dec, ast.Call):
            continue
        for kw in dec.keywords:
            if kw.arg == keyword and isinstance(kw.value, ast.Dict):
                for k, v in zip(kw.value.keys, kw.value.values, strict=True):
                    try:
                        found[ast.literal_eval(k)] = ast.literal_eval(v)
                    except ValueError:
                        continue
    return found


# -- the call(args) body --------------------------------------------------------------------------------
@dataclass
class Launch:
    kernel: str
    args: list[ast.expr]
    extra: list[ast.expr]  # FixedGrid: the grid, after the kernel's arguments


@dataclass
class SizeCheck:
    """An assert_size_stride of the wrapper: what a general kernel assumes of a tensor."""

    name: str
    sizes: str
    strides: str


@dataclass
class Plan:
    """What call(args) does, in order: argument names, then allocations, aliases and launches."""

    args: list[str]
    steps: list[ast.stmt | Launch | SizeCheck]
    outputs: list[ast.expr]


def plan_call(call: ast.FunctionDef, kernels: dict[str, Kernel]) -> Plan:
    args: list[str] = []
    steps: list[ast.stmt | Launch | SizeCheck] = []
    outputs: list[ast.expr] | None = None
    for stmt in _flatten(call.body):
        text = ast.unparse(stmt)
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and stmt.value.id == "args":
            target = stmt.targets[0]
            args = [e.id for e in target.elts] if isinstance(target, ast.Tuple) else [target.id]
        elif _is_size_assert(stmt):
            name, size, stride = stmt.value.args[:3]
            steps.append(SizeCheck(ast.unparse(name), ast.unparse(size), ast.unparse(stride)))
        elif isinstance(stmt, ast.Delete | ast.Pass) or _skipped(stmt):
            continue
        elif (
            isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
        ):
            steps.append(_assignment(stmt, text))
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and _is_run(stmt.value, kernels):
            steps.append(_launch(stmt.value, kernels))
        elif isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Tuple):
            outputs = [_rewrite_expr(e, text) for e in stmt.value.elts]
        else:
            raise ConversionError(f"the wrapper's call does `{text[:120]}`: {_why(stmt)}")
    if outputs is None:
        raise ConversionError("the wrapper's call returns no tuple of outputs")
    return Plan(args, steps, outputs)


def _is_size_assert(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and dotted_name(stmt.value.func) == "assert_size_stride"
        and len(stmt.value.args) >= 3
    )


def _flatten(body: list[ast.stmt]) -> list[ast.stmt]:
    out = []
    for stmt in body:
        out += _flatten(stmt.body) if isinstance(stmt, ast.With) else [stmt]
    return out


def _skipped(stmt: ast.stmt) -> bool:
    value = stmt.value if isinstance(stmt, ast.Expr | ast.Assign) else None
    if not isinstance(value, ast.Call):
        return False
    name = dotted_name(value.func)
    return name in SKIPPED_CALLS or (isinstance(stmt, ast.Assign) and name == "get_raw_stream")


def _is_run(node: ast.Call, kernels: dict[str, Kernel]) -> bool:
    return (
        isinstance(node.func, ast.Attribute)
        and node.func.attr == "run"
        and dotted_name(node.func.value) in kernels
    )


def _why(stmt: ast.stmt) -> str:
    text = ast.unparse(stmt)
    if "extern_kernels." in text or "aten." in text or "torch.ops." in text:
        return "a library kernel (cuBLAS, cuDNN or ATen), not Triton; capture with --gemm triton-gemm for matmuls"
    return "not an allocation, a view or a Triton launch"


def _assignment(stmt: ast.Assign, text: str) -> ast.stmt:
    value = stmt.value
    if isinstance(value, ast.Name) or _is_arithmetic(value) or _is_size_read(value):
        return stmt  # buffer reuse `buf3 = buf1`; a size `xnumel = 8*s21`, `s0 = x_size[1]`, `x.size()`
    if isinstance(value, ast.Call) and dotted_name(value.func) in ALLOCATORS | {"reinterpret_tensor"}:
        return ast.Assign(targets=stmt.targets, value=_rewrite_expr(value, text), lineno=0)
    raise ConversionError(f"the wrapper's call does `{text[:120]}`: {_why(stmt)}")


ARITHMETIC = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Load)


def _is_size_read(node: ast.expr) -> bool:
    """`arg2_1.size()` or `arg2_1_size[1]`: how a general wrapper reads a size off a tensor."""
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Attribute) and node.func.attr == "size" and not node.args
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and isinstance(node.slice, ast.Constant)
    )


def _is_arithmetic(node: ast.expr) -> bool:
    """Integer arithmetic over names and constants (how Inductor computes a size from sizes)."""
    return all(isinstance(n, ARITHMETIC) for n in ast.walk(node))


def _rewrite_expr(node: ast.expr, text: str) -> ast.expr:
    """Allocation and view calls as torch calls a candidate may make; names and constants as they are."""
    if _is_arithmetic(node):
        return node
    if isinstance(node, ast.Call) and dotted_name(node.func) in ALLOCATORS:
        size, stride, dtype = node.args[:3]
        return (
            ast.parse(
                f"torch.empty_strided({ast.unparse(size)}, {ast.unparse(stride)}, dtype={ast.unparse(dtype)}, device=device)"
            )
            .body[0]
            .value
        )
    if isinstance(node, ast.Call) and dotted_name(node.func) == "reinterpret_tensor":
        base, size, stride, offset = node.args[:4]
        return (
            ast.parse(
                f"{ast.unparse(_rewrite_expr(base, text))}.as_strided({ast.unparse(size)}, {ast.unparse(stride)}, {ast.unparse(offset)})"
            )
            .body[0]
            .value
        )
    raise ConversionError(f"the wrapper's call uses `{ast.unparse(node)[:100]}` in `{text[:120]}`")


def _launch(node: ast.Call, kernels: dict[str, Kernel]) -> Launch:
    kernel = kernels[dotted_name(node.func.value)]
    if any(k.arg == "grid" for k in node.keywords):
        raise ConversionError(
            f"{kernel.name}: launched with grid=...: a wrapper older than torch 2.6's launch format"
        )
    runtime = [p for p in kernel.params if p not in kernel.constexprs]
    args = [_rewrite_expr(a, ast.unparse(node)) for a in node.args]
    extra = args[len(runtime) :]
    if len(extra) != (3 if kernel.grid_type == "FixedGrid" else 0):
        raise ConversionError(
            f"{kernel.name}: launched with {len(args)} arguments for {len(runtime)} parameters"
        )
    return Launch(kernel.name, args[: len(runtime)], extra)


# -- writing ----------------------------------------------------------------------------------------------
class _KernelRewriter(ast.NodeTransformer):
    """Inductor's runtime names in a kernel body replaced by what a candidate may use."""

    def __init__(self, renames: dict[str, str], portable_math: bool):
        self.renames, self.portable_math = renames, portable_math
        self.helpers: set[str] = set()

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id in self.renames:
            return ast.copy_location(ast.Name(self.renames[node.id], node.ctx), node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        owner = dotted_name(node.value)
        if owner == "triton_helpers":
            name = f"inductor_{node.attr}"
            if name not in HELPERS:
                raise ConversionError(f"triton_helpers.{node.attr} has no stand-in in tools.inductor_helpers")
            self.helpers.add(name)
            return ast.copy_location(ast.Name(name, ast.Load()), node)
        if owner == "tl_math":
            return ast.copy_location(ast.parse(f"tl.math.{node.attr}").body[0].value, node)
        if owner == "libdevice" and self.portable_math:
            return ast.copy_location(self._portable(node.attr), node)
        return self.generic_visit(node)

    def _portable(self, name: str) -> ast.expr:
        if name in inductor_helpers.LIBDEVICE_IN_TL:
            return ast.parse(f"tl.{name}").body[0].value
        if name in inductor_helpers.LIBDEVICE_PORTABLE:
            self.helpers.add(f"portable_{name}")
            return ast.Name(f"portable_{name}", ast.Load())
        raise ConversionError(f"libdevice.{name} has no portable stand-in for the interpreter")


def _helper_sources() -> dict[str, ast.FunctionDef]:
    tree = ast.parse(Path(inductor_helpers.__file__).read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


HELPERS = _helper_sources()


def _with_dependencies(names: set[str]) -> list[str]:
    """The helpers named and those they call, in the order tools.inductor_helpers defines them."""
    todo, needed = list(names), set()
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        todo += [n.id for n in ast.walk(HELPERS[name]) if isinstance(n, ast.Name) and n.id in HELPERS]
    return [n for n in HELPERS if n in needed]


def kernel_source(
    kernel: Kernel, suffix: str, portable_math: bool, tf32x3: bool = False
) -> tuple[str, set[str]]:
    """The kernel (and its own helpers) as plain @triton.jit functions, names suffixed per shape; with
    tf32x3, its full-precision fp32 dots take their precision from a DOT_PRECISION constexpr."""
    renames = {f.name: f"{f.name}{suffix}" for f in [kernel.tree, *kernel.helpers]}
    rewriter = _KernelRewriter(renames, portable_math)
    parts = []
    for fn in [*kernel.helpers, kernel.tree]:
        fn = rewriter.visit(ast.parse(ast.unparse(fn)).body[0])
        if tf32x3 and fn.name == kernel.name:
            _dot_precision_from_constexpr(fn)
        fn.name = renames[fn.name]
        fn.decorator_list = [ast.parse("triton.jit").body[0].value]
        parts.append(ast.unparse(fn))
    return "\n\n\n".join(parts), rewriter.helpers


def _dot_precision_from_constexpr(fn: ast.FunctionDef) -> None:
    for node in ast.walk(fn):
        if _is_full_precision_dot(node):
            node.keywords = [k for k in node.keywords if k.arg != FULL_PRECISION_DOT[0]]
            node.keywords.append(ast.keyword("input_precision", ast.Name("DOT_PRECISION", ast.Load())))
    fn.args.args.append(ast.arg("DOT_PRECISION", ast.parse("tl.constexpr").body[0].value))


def launch_lines(
    launch: Launch, kernel: Kernel, config: LaunchConfig, suffix: str, tf32x3: bool = False
) -> tuple[list[str], set[str]]:
    """Python lines that pick the scaled blocks and launch the kernel; the scale keys it reads."""
    runtime = [p for p in kernel.params if p not in kernel.constexprs]
    values = dict(zip(runtime, launch.args, strict=True))
    lines, keys, chosen = [], set(), {}
    tunable = kernel.grid_type != "FixedGrid"
    order = sorted(config.kwargs, key=lambda b: not b.startswith("R"))  # reduction blocks first: they cap x
    for block in order:
        base = config.kwargs[block]
        if block not in kernel.constexprs:
            raise ConversionError(
                f"{kernel.name}: its config sets {block}, which is not a constexpr parameter"
            )
        if not tunable or block not in BLOCKS:
            chosen[block] = str(base)
            continue
        numel = _numel(kernel, values, BLOCKS[block][0])
        others = " * ".join(v for b, v in chosen.items() if b in BLOCKS) or "1"
        cap = f"max(1, min({BLOCKS[block][2]}, {PROGRAM_ELEMENTS} // ({others} * {_fixed_tile(kernel)})))"
        var = block.lower()
        lines.append(
            f"{var} = _block({base}, {block}_SCALE, {cap}, {numel}, exact={not kernel.masked(block)})"
        )
        chosen[block] = var
        keys.add(f"{block}_SCALE")
    missing = [c for c in kernel.constexprs if c not in chosen]
    if missing:
        raise ConversionError(f"{kernel.name}: no value recorded for {', '.join(missing)}")
    grid = _grid(kernel, values, chosen, launch.extra)
    call_args = [ast.unparse(a) for a in launch.args] + [f"{b}={v}" for b, v in chosen.items()]
    if tf32x3:
        call_args.append(f"DOT_PRECISION=_dot_precision({DOT_KEY})")
        keys.add(DOT_KEY)
    call_args += [f"num_warps=_warps({config.num_warps}, WARPS_SCALE)", f"num_stages={config.num_stages}"]
    lines.append(f"{kernel.name}{suffix}[{grid}]({', '.join(call_args)})")
    return lines, keys


def _numel(kernel: Kernel, values: dict[str, ast.expr], name: str) -> str:
    """The axis length as Python source: Inductor's literal, or the size expression it passes."""
    if name in kernel.body_constants:
        return str(kernel.body_constants[name])
    value = values.get(name)
    if value is None or not _is_arithmetic(value):
        raise ConversionError(f"{kernel.name}: no length is passed for {name}")
    return ast.unparse(value)


def _fixed_tile(kernel: Kernel) -> int:
    """Elements of the block sizes Inductor fixed in the body (a persistent reduction's R0_BLOCK)."""
    product = 1
    for block in BLOCKS:
        if block in kernel.body_constants and block not in kernel.constexprs:
            product *= kernel.body_constants[block]
    return product


def _grid(kernel: Kernel, values: dict[str, ast.expr], chosen: dict[str, str], extra: list[ast.expr]) -> str:
    if kernel.grid_type == "FixedGrid":
        return "(" + ", ".join(ast.unparse(e) for e in extra) + ")"
    dims = []
    for axis in GRIDS[kernel.grid_type]:
        numel = _numel(kernel, values, f"{axis}numel")
        block = chosen.get(f"{axis.upper()}BLOCK") or kernel.body_constants.get(f"{axis.upper()}BLOCK")
        dims.append(f"triton.cdiv({numel}, {block})" if block else str(numel))
    if kernel.grid_type == "Grid2DWithYZOverflow":
        return f"_yz_overflow({dims[0]}, {dims[1]})"
    return "(" + ", ".join(dims) + ",)"


# -- the module ---------------------------------------------------------------------------------------------
def convert(
    captures: list[Capture], task_name: str, general: Capture | None = None, portable_math: bool = False
) -> Converted:
    """One candidate module: each capture's kernels at its shape, the general kernels (when given)
    for every other shape their guards allow. ConversionError says what cannot be done."""
    if not captures and general is None:
        raise ConversionError("no captures to convert")
    parts = [_convert_one(c, f"_s{i}", portable_math) for i, c in enumerate(captures)]
    if general is not None:
        parts.append(_convert_one(general, "_general", portable_math))
    keys = sorted(set().union(*(part.keys for part in parts))) + [WARPS_KEY]
    helpers = _with_dependencies(set().union(*(part.helpers for part in parts)))
    source = _module(task_name, captures, general, parts, helpers, keys, portable_math)
    notes = [
        f"Inductor's kernels for {len(captures)} shape(s) as torch.compile (dynamic=False) built them"
        + ("; every other shape runs its general (dynamic=True) kernels where their guards hold" if general else
           "; launch() refuses any other shape")
    ]  # fmt: skip
    if not all(c.autotuned for c in [*captures, *([general] if general else [])]):
        notes.append(
            "some configs are Inductor's first candidate, not an autotuned pick (it had one candidate, or no GPU ran the capture)"
        )
    space = {key: [0, 1] if key == DOT_KEY else list(SCALES) for key in keys}
    return Converted(source, space, [c.shape for c in captures], notes)


@dataclass
class _Part:
    kernels: list[str]
    launcher: str  # name of the _launch function
    body: list[str]
    keys: set[str]
    helpers: set[str]
    capture: Capture


def _convert_one(capture: Capture, suffix: str, portable_math: bool) -> _Part:
    if len(capture.wrappers) != 1:
        raise ConversionError(
            f"{capture.shape}: {len(capture.wrappers)} graphs (a graph break); one is needed"
        )
    sources, call = wrapper_kernels(capture.wrappers[0])
    kernels = {name: parse_kernel(name, text) for name, text in sources.items()}
    fp32 = bool(capture.input_dtypes) and all(d == "torch.float32" for d in capture.input_dtypes)
    tf32x3 = {name for name, kernel in kernels.items() if fp32 and kernel.full_precision_dot()}
    texts, helpers = [], set()
    for name, kernel in kernels.items():
        text, used = kernel_source(kernel, suffix, portable_math, name in tf32x3)
        texts.append(text)
        helpers |= used
    plan = plan_call(call, kernels)
    body, keys = _launcher_body(capture, plan, kernels, suffix, tf32x3)
    return _Part(texts, f"_launch{suffix}", body, keys, helpers, capture)


GUARD_NAMES = {"inputs", "max", "min"}  # a guard may clamp a size: max(1, C // 8)
SOURCE = re.compile(r"L\['inputs'\]\[(\d+)\](?:\.(size|stride)\(\)\[(\d+)\])?")


def _binding(source: str) -> str:
    """A graph input's source as an expression of launch()'s inputs (a tensor, a size, a stride)."""
    found = SOURCE.fullmatch(source)
    if found is None:
        raise ConversionError(
            f"graph input {source} is not an input, size or stride of the reference's inputs"
        )
    index, kind, dim = found.groups()
    if kind is None:
        return f"inputs[{index}]"
    return f"inputs[{index}].shape[{dim}]" if kind == "size" else f"inputs[{index}].stride()[{dim}]"


def _guard(text: str) -> str:
    """A shape guard over sources as Python over launch()'s inputs; only arithmetic and comparisons."""
    python = SOURCE.sub(lambda m: _binding(m.group(0)), text)
    tree = ast.parse(python, mode="eval")
    allowed = (*ARITHMETIC, ast.Expression, ast.Compare, ast.cmpop, ast.BoolOp, ast.boolop, ast.Subscript,
               ast.Attribute, ast.Call)  # fmt: skip
    for node in ast.walk(tree):
        if not isinstance(node, allowed) or (isinstance(node, ast.Name) and node.id not in GUARD_NAMES):
            raise ConversionError(f"guard `{text}` is not a condition on the inputs' sizes")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "inputs":
            raise ConversionError(f"guard `{text}` calls inputs")
        if isinstance(node, ast.Attribute) and node.attr not in ("shape", "stride"):
            raise ConversionError(f"guard `{text}` reads .{node.attr}")
    return python


def _launcher_body(
    capture: Capture, plan: Plan, kernels: dict[str, Kernel], suffix: str, tf32x3: set[str]
) -> tuple[list[str], set[str]]:
    general = bool(capture.arg_sources)
    bindings = capture.arg_sources if general else [f"L['inputs'][{i}]" for i in capture.arg_map]
    if len(plan.args) != len(bindings):
        raise ConversionError(
            f"{capture.shape}: call takes {len(plan.args)} arguments, the capture maps {len(bindings)}"
        )
    lines = []
    if general:  # the kernels hold only where Inductor's guards and the wrapper's size asserts hold
        conditions = [_guard(g) for g in capture.guards]
        if conditions:
            lines.append(f"if not ({' and '.join(f'({c})' for c in conditions)}):")
            lines.append(
                f'    raise ValueError(f"inputs {{_signature(inputs, False)}} are outside {_quote(capture.guards)}")'
            )
    lines += [f"{name} = {_binding(source)}" for name, source in zip(plan.args, bindings, strict=True)]
    lines.append("device = inputs[0].device")
    keys: set[str] = set()
    for step in plan.steps:
        if isinstance(step, SizeCheck):
            if general:
                lines += _size_check(step)
        elif isinstance(step, Launch):
            config = capture.launches.get(step.kernel)
            if config is None:
                raise ConversionError(f"{capture.shape}: no launch config recorded for {step.kernel}")
            more, used = launch_lines(step, kernels[step.kernel], config, suffix, step.kernel in tf32x3)
            lines += more
            keys |= used
        else:
            lines.append(ast.unparse(step))
    outputs = [ast.unparse(e) for e in plan.outputs]
    lines.append(f"return {outputs[0]}" if len(outputs) == 1 else f"return {', '.join(outputs)}")
    return lines, keys


def _size_check(step: SizeCheck) -> list[str]:
    t = step.name
    return [
        f"if tuple({t}.shape) != {step.sizes} or tuple({t}.stride()) != {step.strides}:",
        f'    raise ValueError(f"{t} is {{tuple({t}.shape)}}, Inductor\'s general kernels need {step.sizes}")',
    ]


def _quote(guards: list[str]) -> str:
    return " and ".join(guards).replace("{", "{{").replace("}", "}}").replace('"', "'")


def _key(capture: Capture) -> str:
    """The dispatch key of the capture's inputs: (shape, stride[, dtype]) per input, as _signature makes it."""
    dtypes = capture.input_dtypes or [None] * len(capture.inputs)
    key = tuple(
        (tuple(s), tuple(st), *([d] if d else []))
        for s, st, d in zip(capture.inputs, capture.strides, dtypes, strict=True)
    )
    return repr(key)


MODULE_HELPERS = """
def _block(base, scale, cap, numel, exact):
    \"\"\"Inductor's block size times scale (1: Inductor's own), a power of 2 in [1, cap]; exact: it
    divides numel (the kernel has no mask on that axis).\"\"\"
    if scale == 1:
        return base
    value = max(1, min(int(base * scale), max(cap, 1), triton.next_power_of_2(numel)))
    while exact and numel % value:
        value //= 2
    return value


def _warps(base, scale):
    return base if scale == 1 else max(1, min(32, int(base * scale)))


def _dot_precision(tf32x3):
    \"\"\"Inductor's full-precision fp32 dot (0), or three TF32 tensor-core products (1).\"\"\"
    return "tf32x3" if tf32x3 else "ieee"


def _yz_overflow(x, y_blocks):
    \"\"\"Inductor's grid for y past 65535 programs: y split over the grid's y and z.\"\"\"
    split = triton.cdiv(y_blocks, 65535)
    return (x, triton.cdiv(y_blocks, split), split)


def _signature(inputs, with_dtypes):
    if with_dtypes:
        return tuple((tuple(t.shape), tuple(t.stride()), str(t.dtype)) for t in inputs)
    return tuple((tuple(t.shape), tuple(t.stride())) for t in inputs)
"""


def _module(
    task_name: str,
    captures: list[Capture],
    general: Capture | None,
    parts: list[_Part],
    helper_names: list[str],
    keys: list[str],
    portable_math: bool,
) -> str:
    shapes = ", ".join(json.dumps(c.shape) for c in captures)
    modes = "/".join(sorted({p.capture.mode for p in parts}))
    doc = [
        f"Inductor's Triton for {task_name} (torch.compile mode {modes}), as a candidate.",
        "",
        f"Kernels per shape (dynamic=False: sizes and strides are literals in them) for {shapes or 'no shape'};",
        "launch() picks them by the inputs' shapes, strides and dtypes."
        + (
            f" Any other shape runs Inductor's general kernels (dynamic=True, traced at {json.dumps(general.shape)}),"
            " which check Inductor's shape guards first."
            if general
            else " It refuses any other shape."
        ),
        "Config: scale factors on Inductor's own block sizes and warps (1 everywhere is torch.compile's kernel)"
        + (
            f"; {DOT_KEY} 1 runs fp32 dots as three TF32 products (0: Inductor's full precision)."
            if DOT_KEY in keys
            else "."
        ),
    ]
    if portable_math:
        doc.append("libdevice calls are replaced by portable equivalents (for the Triton interpreter).")
    imports = ["import torch", "import triton", "import triton.language as tl"]
    kernels = [k for part in parts for k in part.kernels]
    if not portable_math and any("libdevice." in k for k in kernels):
        imports.append("from triton.language.extra import libdevice")
    blocks = ['"""' + "\n".join(doc) + '\n"""', "\n".join(imports)]
    blocks += [ast.unparse(HELPERS[name]) for name in helper_names]
    blocks += kernels
    blocks.append(MODULE_HELPERS.strip())
    params = ", ".join(keys)
    for part in parts:
        blocks.append(
            f"def {part.launcher}(inputs, {params}):\n" + "\n".join(f"    {line}" for line in part.body)
        )
    with_dtypes = all(c.input_dtypes for c in captures)
    lines = [f"def launch(*inputs, {', '.join(f'{k}={0 if k == DOT_KEY else 1}' for k in keys)}):"]
    if captures:
        lines.append(f"    key = _signature(inputs, {with_dtypes})")
    for part in parts:
        if part.capture is not general:
            lines += [
                f"    if key == {_key(part.capture)}:",
                f"        return {part.launcher}(inputs, {params})",
            ]
    if general is not None:
        lines.append(f"    return _launch_general(inputs, {params})")
    else:
        lines.append(
            '    raise ValueError(f"Inductor\'s kernels were captured at {CAPTURED} only, not for inputs {key}")'
        )
    blocks.append(f"CAPTURED = {[c.shape for c in captures]!r}")
    blocks.append("\n".join(lines))
    return "\n\n\n".join(blocks) + "\n"


def static_problems(source: str) -> str | None:
    """None when the candidate's static checks pass, else their message."""
    from tools.static_check import check_source

    report = check_source(source, forbid=[])
    return None if report.ok else report.message


@dataclass
class Fixture:
    task: str
    captures: list[Capture]
    general: Capture | None
    problems: list[str]  # shapes Inductor failed at, the general capture's failure


def load_fixture(path: str | Path) -> Fixture:
    """A capture file (python -m tools.inductor_capture); failed captures are listed, not loaded."""
    record = json.loads(Path(path).read_text())
    captures, problems = [], []
    for raw in record["captures"]:
        if "error" in raw:
            problems.append(f"{raw['shape']}: {raw['error']}")
        else:
            captures.append(Capture.model_validate(raw))
    raw = record.get("general")
    general = Capture.model_validate(raw) if raw and "error" not in raw else None
    if raw and "error" in raw:
        problems.append(f"general kernels: {raw['error']}")
    return Fixture(record.get("task", Path(path).stem), captures, general, problems)


def convert_file(path: str | Path, portable_math: bool = False) -> Converted:
    """Convert a capture file. A shape Inductor failed at is an error unless general kernels cover it;
    without general kernels the module is per shape only, and its notes say why."""
    fixture = load_fixture(path)
    failed = [p for p in fixture.problems if not p.startswith("general kernels:")]
    if failed and fixture.general is None:
        raise ConversionError(f"{path}: " + "; ".join(failed))
    converted = convert(fixture.captures, fixture.task, fixture.general, portable_math)
    converted.notes += fixture.problems
    return converted


def main(argv: list[str] | None = None) -> int:
    """python -m tools.inductor_import CAPTURE.json --out MODULE.py [--portable-math]: write the candidate,
    print its search space (JSON) and notes; exit 2 when the capture cannot be converted."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m tools.inductor_import", description=main.__doc__)
    parser.add_argument("capture", help="a file written by python -m tools.inductor_capture")
    parser.add_argument("--out", required=True, help="where to write the candidate module")
    parser.add_argument("--portable-math", action="store_true", help="no libdevice (the Triton interpreter)")
    args = parser.parse_args(argv)
    try:
        converted = convert_file(args.capture, portable_math=args.portable_math)
    except (ConversionError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    problem = static_problems(converted.source)
    if problem is not None:
        print(f"error: the converted module fails the static checks: {problem}", file=sys.stderr)
        return 2
    Path(args.out).write_text(converted.source)
    print(json.dumps({"search_space": converted.search_space, "notes": converted.notes}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
