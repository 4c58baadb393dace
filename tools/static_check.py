"""Static checks on a candidate's source: the cheapest stage, run before any process is spawned.

Rejects syntax errors, imports outside the allow-list, the task's forbidden constructs, escapes
(exec/eval/open, dunder access, streams/events/timers), and modules without a ``@triton.jit``
kernel that ``launch`` really launches.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

ALLOWED_IMPORTS = frozenset({"triton", "torch", "math", "functools", "typing", "__future__", "dataclasses"})

# torch.<name>(...) calls a candidate may make: allocation and metadata, never compute.
ALLOWED_TORCH_CALLS = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "zeros",
        "zeros_like",
        "full",
        "ones",
        "device",
        "dtype",
        "Size",
        "finfo",
        "iinfo",
        "is_tensor",
        "get_device",
    }
)
# torch.<name> a candidate may mention at all: the calls above, dtypes, and torch.Tensor/torch.cuda
# (whose dangerous members are in FORBIDDEN_ATTRS). Everything else (hub, serialization, jit, utils,
# distributed, ...) can read or write files, open sockets or compute.
ALLOWED_TORCH_ATTRS = ALLOWED_TORCH_CALLS | frozenset(
    {
        "Tensor",
        "cuda",
        "float32",
        "float",
        "float16",
        "half",
        "bfloat16",
        "float64",
        "double",
        "int8",
        "uint8",
        "int16",
        "int32",
        "int",
        "int64",
        "long",
        "bool",
        "float8_e4m3fn",
        "float8_e5m2",
        "contiguous_format",
    }
)
# triton.<name> a candidate may use: the kernel language and its decorators. triton.runtime, .compiler,
# .backends, .knobs and friends build and load native code (compile_module_from_src runs any C).
ALLOWED_TRITON_ATTRS = frozenset(
    {
        "jit",
        "autotune",
        "heuristics",
        "Config",
        "cdiv",
        "next_power_of_2",
        "language",
        "constexpr_function",
        "reinterpret",
        "set_allocator",  # device-side TMA descriptors (tl.make_tensor_descriptor) need it
        "__version__",
    }
)
# Modules under triton a candidate may import besides triton.language (host-side TMA descriptors).
ALLOWED_TRITON_MODULES = ("triton.language", "triton.tools.tensor_descriptor")
FORBIDDEN_NAMES = frozenset(
    {
        "exec",
        "eval",
        "compile",
        "__import__",
        "open",
        "globals",
        "locals",
        "vars",
        "breakpoint",
        "input",
        "setattr",
        "getattr",
        "delattr",
        "memoryview",
    }
)
FORBIDDEN_ATTRS = frozenset(
    {
        "Stream",
        "Event",
        "stream",
        "set_stream",
        "synchronize",
        "CUDAGraph",
        "graph",
        "do_bench",
        "do_bench_cudagraph",
        # asking whether a graph is being captured is how a kernel would behave differently while timed
        "is_current_stream_capturing",
        "graph_pool_handle",
        "testing",
        "_C",
        "ops",
        "library",
        "autograd",
        "nn",
        "linalg",
        "fft",
        "__class__",
        "__subclasses__",
        "__dict__",
        "__globals__",
        "__code__",
        "__builtins__",
        "__bases__",
        "__mro__",
        "__torch_dispatch__",
        "__torch_function__",
        "data_ptr_cache",
        "tolist",
        "item",
        "numpy",
        "cpu",
        # native code and the launch machinery: a compiled kernel's handle can launch on any stream,
        # unrecorded; the runtime builds and loads C; os/sys/subprocess are reachable through modules
        "runtime",
        "build",
        "driver",
        "knobs",
        "compiler",
        "backends",
        "warmup",
        "run",
        "os",
        "sys",
        "subprocess",
        "ctypes",
        "importlib",
        "builtins",
        "__loader__",
        "__spec__",
    }
)


@dataclass
class StaticReport:
    ok: bool
    error_type: str | None = None
    message: str = ""
    log: str = ""
    kernels: list[str] = field(default_factory=list)
    launched: list[str] = field(default_factory=list)


def dotted_name(node: ast.AST) -> str:
    """``a.b.c`` for an attribute chain (``tl.constexpr``); the attributes alone when it does not start at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _is_jit_decorator(dec: ast.AST) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    name = dotted_name(target)
    return name.split(".")[-1] in {"jit", "autotune", "heuristics"}


def _fail(error_type: str, message: str, node: ast.AST | None = None, source: str = "") -> StaticReport:
    log = message
    if node is not None and hasattr(node, "lineno"):
        line = source.splitlines()[node.lineno - 1] if source else ""
        log = f"line {node.lineno}: {message}\n    {line.strip()}"
        message = f"line {node.lineno}: {message}"
    return StaticReport(ok=False, error_type=error_type, message=message, log=log)


def check_source(source: str, forbid: list[str] | None = None) -> StaticReport:
    """Check a candidate's source text. ``forbid`` holds the task's forbidden constructs (e.g. 'tl.dot')."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        text = (exc.text or "").rstrip()
        caret = " " * max((exc.offset or 1) - 1, 0) + "^"
        log = f'File "candidate.py", line {exc.lineno}\n    {text}\n    {caret}\nSyntaxError: {exc.msg}'
        return StaticReport(False, "syntax_error", f"line {exc.lineno}: {exc.msg}", log)

    forbid = list(forbid or [])
    kernels: list[str] = []
    functions: dict[str, ast.FunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            functions[node.name] = node
            if any(_is_jit_decorator(d) for d in node.decorator_list):
                kernels.append(node.name)

    # what each launchable name may launch: a kernel itself, or an alias choosing among kernels
    launchable = {k: {k} for k in kernels} | _kernel_aliases(tree, set(kernels))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.split(".")[0] not in ALLOWED_IMPORTS:
                    allowed = ", ".join(sorted(ALLOWED_IMPORTS - {"__future__"}))
                    return _fail(
                        "forbidden_construct", f"import of {name!r} (allowed: {allowed})", node, source
                    )
                if name.startswith("triton.testing") or name.startswith("torch.cuda"):
                    return _fail("forbidden_construct", f"import of {name!r}", node, source)
                if name.startswith("triton.") and not name.startswith(ALLOWED_TRITON_MODULES):
                    return _fail(
                        "forbidden_construct", f"import of {name!r} (only triton.language)", node, source
                    )
            if isinstance(node, ast.ImportFrom) and node.module == "triton":
                for alias in node.names:
                    if alias.name not in ALLOWED_TRITON_ATTRS:
                        return _fail(
                            "forbidden_construct",
                            f"from triton import {alias.name} (kernel language only)",
                            node,
                            source,
                        )
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            return _fail("forbidden_construct", f"use of {node.id}()", node, source)
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRS:
            return _fail("forbidden_construct", f"use of .{node.attr}", node, source)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            return _fail("forbidden_construct", "global/nonlocal state in a candidate", node, source)
        elif isinstance(node, ast.Try):
            return _fail(
                "forbidden_construct",
                "try/except in a candidate (a fallback path hides failures)",
                node,
                source,
            )
        elif isinstance(node, ast.ClassDef):
            return _fail(
                "forbidden_construct", "class definitions (tensor subclasses, lazy results)", node, source
            )
        elif isinstance(node, ast.Call):
            if any(k.arg == "stream" for k in node.keywords):
                return _fail(
                    "forbidden_construct", "a launch on an explicit stream (escapes the timing)", node, source
                )
            if isinstance(node.func, ast.Subscript) and not (
                isinstance(node.func.value, ast.Name) and node.func.value.id in launchable
            ):
                return _fail(
                    "forbidden_construct",
                    "launches are kernel[grid](...) on a @triton.jit function of this module",
                    node,
                    source,
                )
            name = dotted_name(node.func)
            if (
                name.startswith("torch.")
                and name.count(".") == 1
                and name.split(".")[1] not in ALLOWED_TORCH_CALLS
            ):
                return _fail(
                    "forbidden_construct",
                    f"{name}() computes with torch; only allocation is allowed",
                    node,
                    source,
                )
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "triton"
            and node.attr not in ALLOWED_TRITON_ATTRS
        ):
            return _fail(
                "forbidden_construct", f"triton.{node.attr} is not available to candidates", node, source
            )
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "torch"
            and node.attr not in ALLOWED_TORCH_ATTRS
        ):
            return _fail(
                "forbidden_construct", f"torch.{node.attr} is not available to candidates", node, source
            )
        if isinstance(node, ast.Attribute | ast.Name):
            text = dotted_name(node)
            for construct in forbid:
                if _matches(text, construct):
                    return _fail("forbidden_construct", f"{construct} is forbidden by the task", node, source)

    if not kernels:
        return StaticReport(False, "no_kernel_launched", "no @triton.jit kernel is defined")
    launch = functions.get("launch")
    if launch is None:
        return StaticReport(False, "no_kernel_launched", "no launch(*inputs, **config) function is defined")

    launched = _launched_kernels(launch, functions, launchable)
    if not launched:
        return StaticReport(
            False,
            "no_kernel_launched",
            f"launch() never launches a kernel (defined: {', '.join(kernels)}; expected kernel[grid](...))",
        )
    return StaticReport(True, kernels=kernels, launched=sorted(launched))


def _matches(text: str, construct: str) -> bool:
    """'tl.dot' also matches 'triton.language.dot'."""
    if not text:
        return False
    if text == construct:
        return True
    head, _, last = construct.rpartition(".")
    return head in {"tl", "triton.language"} and text in {f"tl.{last}", f"triton.language.{last}"}


def _kernel_choice(node: ast.AST, kernels: set[str]) -> set[str] | None:
    """The kernels an expression names: a kernel, or `a if cond else b` over kernels; else None."""
    if isinstance(node, ast.Name) and node.id in kernels:
        return {node.id}
    if isinstance(node, ast.IfExp):
        body, orelse = _kernel_choice(node.body, kernels), _kernel_choice(node.orelse, kernels)
        return body | orelse if body is not None and orelse is not None else None
    return None


def _kernel_aliases(tree: ast.AST, kernels: set[str]) -> dict[str, set[str]]:
    """Names only ever assigned a choice of the module's kernels (`kernel = k_even if ... else k_any`)."""
    found: dict[str, set[str]] = {}
    spoiled: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            choice = _kernel_choice(node.value, kernels) if node.value is not None else None
            for target in targets:
                if not isinstance(target, ast.Name):
                    continue
                if choice is None or isinstance(node, ast.AugAssign):
                    spoiled.add(target.id)
                else:
                    found.setdefault(target.id, set()).update(choice)
        elif isinstance(node, ast.arg):  # a parameter of that name can be bound to anything
            spoiled.add(node.arg)
    return {name: ks for name, ks in found.items() if name not in spoiled and name not in kernels}


def _launched_kernels(
    fn: ast.FunctionDef, functions: dict[str, ast.FunctionDef], launchable: dict[str, set[str]]
) -> set[str]:
    """Kernels launched as name[grid](...) (a kernel or an alias of kernels) from fn or the plain
    helpers it calls."""
    seen: set[str] = set()
    launched: set[str] = set()
    todo = [fn]
    while todo:
        current = todo.pop()
        if current.name in seen:
            continue
        seen.add(current.name)
        for node in ast.walk(current):
            if isinstance(node, ast.Call):
                func = node.func
                if (
                    isinstance(func, ast.Subscript)
                    and isinstance(func.value, ast.Name)
                    and func.value.id in launchable
                ):
                    launched.update(launchable[func.value.id])
                elif isinstance(func, ast.Name) and func.id in functions and func.id not in launchable:
                    todo.append(functions[func.id])
    return launched
