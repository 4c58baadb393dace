"""Run-time refusals inside a candidate worker wherever candidate code runs (its import, ``launch()``, and
any thread, signal handler or finalizer it sets up): no setting or deleting attributes on modules, types
and functions it does not own, no reaching frames, foreign globals, the garbage collector's object lists
or tracers, however the candidate gets to them; no thread started, no signal handler installed.

This is defense in depth: the judge never trusts what a worker reports. It keeps the worker's own
driver code (the timing loop, the output copies) as the judge wrote it.

Three layers:
- the candidate's own module is compiled instrumented (``import_candidate``): a guard runs before every
  attribute write or delete, every read of an introspection attribute (``__globals__``, ``f_back``...)
  and every use of ``setattr``/``getattr``/``vars``/``eval``... (Python raises no audit event for a
  write to a type or a module, nor for reading a function's ``__globals__``);
- an audit hook (which cannot be removed) sees frame, gc, tracer and ctypes events raised anywhere; it
  charges an event to the innermost frame outside a few pass-through helpers (inspect, typing,
  functools, dataclasses...), which libraries also use on their own behalf (Triton's ``@jit`` reads a
  kernel's ``__code__`` through inspect). When that frame is the candidate's, the act is refused;
- ``changed_modules``: a watched module's global replaced by any other path (a library writing a
  module's ``__dict__`` for the candidate) is named between stages.
A refusal is recorded as it happens, so one the candidate swallows still fails it.
"""

from __future__ import annotations

import ast
import functools
import signal
import sys
import threading
import types
from contextlib import suppress
from pathlib import Path
from typing import Any

from tools.sandbox import SandboxViolation

# Helpers that act for whoever called them: an event inside them is charged to their caller.
PASS_THROUGH = frozenset(
    {"inspect", "typing", "typing_extensions", "functools", "dataclasses", "contextlib", "abc",
     "operator", "copy", "copyreg", "weakref", "collections", "types", "reprlib", "traceback",
     "linecache", "dis", "ast", "tools.lockdown"}
)  # fmt: skip
FRAME_EVENTS = frozenset(
    {"sys._getframe", "sys._getframemodulename", "sys._current_frames", "sys._current_exceptions",
     "sys.settrace", "sys.setprofile", "sys._settraceallthreads", "sys._setprofileallthreads",
     "threading.settrace", "threading.setprofile", "gc.get_objects", "gc.get_referrers",
     "gc.get_referents", "code.__new__", "function.__new__", "marshal.loads", "marshal.load",
     "pickle.find_class", "sys.addaudithook"}
)  # fmt: skip
# threading and its pools start threads for their caller: a thread they start is the candidate's doing
THREAD_STARTERS = frozenset({"threading", "concurrent"})
FRAME_TYPES = (types.FrameType, types.TracebackType, types.GeneratorType, types.CoroutineType,
               types.AsyncGeneratorType)  # fmt: skip


class Lockdown:
    """One per worker process, ``install``-ed before the candidate is imported. Its refusals hold
    wherever candidate code runs, not only in the worker's calls of it (import, ``launch()``): in a
    thread, a signal handler or a finalizer it set up, candidate code would otherwise run outside them."""

    def __init__(self) -> None:
        self.candidate = ""
        self.violations: list[str] = []
        self._inside = threading.local()
        self._handlers: dict[int, Any] = {}

    # -- set up ---------------------------------------------------------------------------------
    def install(self, candidate_module: str) -> None:
        self.candidate = candidate_module
        self._handlers = _signal_handlers()
        self._guard_thread_starts()
        sys.addaudithook(self._hook)

    def _guard_thread_starts(self) -> None:
        """Starting a thread from candidate code refused: Python raises no audit event for it (3.11,
        3.12), and a thread started with ``_thread`` is not one that threading lists."""
        import _thread

        for name in ("start_new_thread", "start_new", "start_joinable_thread"):
            real = getattr(_thread, name, None)
            if real is None:
                continue

            def guarded(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
                busy, self._inside.busy = getattr(self._inside, "busy", False), True  # its own frame walk
                try:
                    refuse = self._responsible_is_candidate(2, also=THREAD_STARTERS)
                finally:
                    self._inside.busy = busy
                if refuse:
                    self._refuse("starting a thread (its code would run outside the worker's calls)")
                return _real(*args, **kwargs)

            setattr(_thread, name, guarded)

    def refusal(self) -> str:
        """The first refused act since the last call (cleared), or "". A signal handler the candidate
        installed counts: it would run candidate code wherever the worker happens to be."""
        changed = [sig for sig, handler in _signal_handlers().items()
                   if handler is not self._handlers.get(sig) and self._runs_candidate_code(handler)]  # fmt: skip
        if changed:
            self.violations.append(f"the candidate installed a handler for {signal.Signals(changed[0]).name}")
            signal.signal(changed[0], self._handlers.get(changed[0], signal.SIG_DFL))
        first = self.violations[0] if self.violations else ""
        self.violations.clear()
        return first

    # -- deciding -------------------------------------------------------------------------------
    def _runs_candidate_code(self, handler: Any) -> bool:
        """Whether calling ``handler`` runs the candidate's code (a library may set its own handlers)."""
        while isinstance(handler, functools.partial) or hasattr(handler, "__func__"):
            handler = handler.func if isinstance(handler, functools.partial) else handler.__func__
        return getattr(handler, "__module__", None) == self.candidate

    def _responsible_is_candidate(self, depth: int, also: frozenset[str] = frozenset()) -> bool:
        frame = sys._getframe(depth)
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if name == self.candidate:
                return True
            top = name.split(".")[0]
            if top not in PASS_THROUGH and name not in PASS_THROUGH and top not in also:
                return False
            frame = frame.f_back
        return False

    def _owned(self, obj: Any) -> bool:
        if isinstance(obj, types.ModuleType):
            return obj.__name__ == self.candidate
        return getattr(obj, "__module__", None) == self.candidate

    def _what(self, event: str, args: tuple) -> str:
        """What this event does that a candidate may not, or "" when it is allowed."""
        if event in FRAME_EVENTS:
            return f"{event}()"
        if event == "object.__getattr__" and args:
            target, name = args[0], args[1] if len(args) > 1 else "?"
            if isinstance(target, FRAME_TYPES):
                return f"reading {type(target).__name__}.{name} (frame introspection)"
            if not self._owned(target):
                return f"reading {getattr(target, '__qualname__', type(target).__name__)}.{name}"
        if event in {"object.__setattr__", "object.__delattr__"} and args and not self._owned(args[0]):
            verb = "setting" if event == "object.__setattr__" else "deleting"
            owner = getattr(args[0], "__qualname__", None) or type(args[0]).__name__
            return f"{verb} {owner}.{args[1]}"
        if event.startswith("ctypes."):
            return f"{event} (native memory access)"
        return ""

    def _hook(self, event: str, args: tuple) -> None:
        if getattr(self._inside, "busy", False):
            return
        self._inside.busy = True
        try:
            what = self._what(event, args)
            if what and self._responsible_is_candidate(2):
                self._refuse(what)
        finally:
            self._inside.busy = False

    def _refuse(self, what: str) -> None:
        message = f"the candidate tried {what}: refused while candidate code runs"
        self.violations.append(message)
        raise SandboxViolation(message)

def _signal_handlers() -> dict[int, Any]:
    handlers = {}
    for sig in signal.valid_signals():
        with suppress(OSError, ValueError):
            handlers[int(sig)] = signal.getsignal(sig)
    return handlers


LOCKDOWN = Lockdown()

# -- what the candidate may have changed by other paths ------------------------------------------------
WATCHED_PREFIXES = ("torch", "triton", "tools", "builtins", "time", "math", "json", "os", "sys", "threading",
                    "functools", "statistics", "select")  # fmt: skip
# Module globals that libraries rewrite themselves while they run (caches, lazy state).
_VOLATILE = frozenset({"__warningregistry__", "_initialized", "_queued_calls", "_is_in_bad_fork",
                       "_lazy_seed_tracker", "_tls", "_cached_device_count"})  # fmt: skip


def module_snapshot() -> dict[str, dict[str, int]]:
    """The identity of every global of the watched modules."""
    snap = {}
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(WATCHED_PREFIXES) or name == LOCKDOWN.candidate:
            continue
        try:
            snap[name] = {k: id(v) for k, v in vars(module).items() if k not in _VOLATILE}
        except TypeError:
            continue
    return snap


def changed_modules(before: dict[str, dict[str, int]]) -> list[str]:
    """Globals of watched modules that now hold another object than in ``before`` (new modules and new
    names are imports and caches; a replaced object is a patch)."""
    changed = []
    for name, names in before.items():
        module = sys.modules.get(name)
        if module is None:
            continue
        now = vars(module)
        for key, ident in names.items():
            if key in now and id(now[key]) != ident and not _replaced_by_library(now[key]):
                changed.append(f"{name}.{key}")
    return changed


def _replaced_by_library(value: Any) -> bool:
    """Caches libraries refresh on their own (plain data, not code)."""
    return isinstance(value, int | float | str | bytes | bool | type(None) | dict | list | tuple | set)


# -- the candidate's own code, instrumented ----------------------------------------------------------------
# Attribute writes on a type do not raise an audit event and a function's __globals__ is read without
# one, so the candidate's module is compiled with a guard in front of every attribute write or delete,
# every read of an introspection attribute, and every use of the builtins that reach the same places.
INTROSPECTION = frozenset(
    {"__globals__", "__closure__", "__code__", "__dict__", "__builtins__", "__self__", "__wrapped__",
     "__subclasses__", "__class__", "__bases__", "__mro__", "__base__", "__func__", "__defaults__",
     "__kwdefaults__", "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "gi_frame", "cr_frame",
     "ag_frame", "tb_frame", "tb_next", "__traceback__", "__context__", "__cause__"}
)  # fmt: skip
GUARDED_BUILTINS = frozenset({"setattr", "delattr", "getattr", "vars", "globals", "locals", "eval", "exec",
                              "compile", "__import__", "breakpoint"})  # fmt: skip  (files: the sandbox hook)
GUARD_NAME = "__ka_guard__"


class _Guard:
    """What the instrumented candidate calls: refuses on foreign modules, types and functions."""

    def foreign(self, obj: Any) -> bool:
        if isinstance(obj, types.ModuleType):
            return obj.__name__ != LOCKDOWN.candidate
        if isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType | types.MethodType):
            return getattr(obj, "__module__", None) != LOCKDOWN.candidate
        return False

    def store(self, obj: Any, name: str) -> None:
        if self.foreign(obj):
            LOCKDOWN._refuse(f"setting {_label(obj)}.{name}")

    def delete(self, obj: Any, name: str) -> None:
        if self.foreign(obj):
            LOCKDOWN._refuse(f"deleting {_label(obj)}.{name}")

    def read(self, obj: Any, name: str) -> Any:
        if name in INTROSPECTION and not LOCKDOWN._owned(obj):
            LOCKDOWN._refuse(f"reading {_label(obj)}.{name} (introspection)")
        return getattr(obj, name)

    def builtin(self, name: str) -> Any:
        """A guarded stand-in for one of GUARDED_BUILTINS."""
        import builtins

        real = getattr(builtins, name)

        def guarded(*args: Any, **kwargs: Any) -> Any:
            target = args[0] if args else None
            attr = args[1] if len(args) > 1 else None
            if name == "setattr":
                self.store(target, attr)
            elif name == "delattr":
                self.delete(target, attr)
            elif name == "getattr" and isinstance(attr, str):
                self.read(target, attr)
            elif name == "vars" and (not args or self.foreign(target)):
                LOCKDOWN._refuse(f"vars({_label(target)})")
            elif name not in {"setattr", "delattr", "getattr", "vars"}:
                LOCKDOWN._refuse(f"{name}()")
            return real(*args, **kwargs)

        return guarded


def _label(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__


GUARD = _Guard()


class _Instrument(ast.NodeTransformer):
    """Inserts the guard calls; leaves @triton.jit kernels alone (Triton compiles them from the file)."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        if any(_names_jit(d) for d in node.decorator_list):
            return node
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load) and node.attr in INTROSPECTION:
            return ast.copy_location(_guard_call("read", node.value, node.attr), node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == GUARD_NAME and not isinstance(node.ctx, ast.Load):
            raise SyntaxError(f"line {node.lineno}: {GUARD_NAME} is reserved")
        if isinstance(node.ctx, ast.Load) and node.id in GUARDED_BUILTINS:
            call = ast.Call(func=ast.Attribute(value=ast.Name(GUARD_NAME, ast.Load()), attr="builtin", ctx=ast.Load()),
                            args=[ast.Constant(node.id)], keywords=[])  # fmt: skip
            return ast.copy_location(call, node)
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for field_name in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field_name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                setattr(node, field_name, _guarded_block(block))
        return node


def _names_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute | ast.Name) and (getattr(target, "attr", None) or getattr(target, "id", "")) in {
        "jit", "autotune", "heuristics"}  # fmt: skip


def _guard_call(kind: str, target: ast.expr, attr: str) -> ast.Call:
    return ast.Call(func=ast.Attribute(value=ast.Name(GUARD_NAME, ast.Load()), attr=kind, ctx=ast.Load()),
                    args=[target, ast.Constant(attr)], keywords=[])  # fmt: skip


def _written_attributes(stmt: ast.stmt) -> list[tuple[str, ast.Attribute]]:
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, ast.AugAssign | ast.AnnAssign):
        targets = [stmt.target]
    elif isinstance(stmt, ast.Delete):
        targets = list(stmt.targets)
    elif isinstance(stmt, ast.For | ast.AsyncFor):
        targets = [stmt.target]
    elif isinstance(stmt, ast.With | ast.AsyncWith):
        targets = [item.optional_vars for item in stmt.items if item.optional_vars is not None]
    found = []
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
                found.append(("delete" if isinstance(node.ctx, ast.Del) else "store", node))
    return found


def _guarded_block(block: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for stmt in block:
        for kind, node in _written_attributes(stmt):
            check = ast.Expr(_guard_call(kind, _as_load(node.value), node.attr))
            out.append(ast.fix_missing_locations(ast.copy_location(check, stmt)))
        out.append(stmt)
    return out


def _as_load(node: ast.expr) -> ast.expr:
    import copy

    clone = copy.deepcopy(node)
    for sub in ast.walk(clone):
        if hasattr(sub, "ctx"):
            sub.ctx = ast.Load()
    return clone


def instrumented(source: str, filename: str) -> types.CodeType:
    """The candidate's module compiled with the guards in place (same line numbers)."""
    tree = _Instrument().visit(ast.parse(source, filename))
    ast.fix_missing_locations(tree)
    return compile(tree, filename, "exec")


def import_candidate(path: Path, module_name: str) -> types.ModuleType:
    """Import the candidate's file, instrumented, as ``module_name``."""
    source = path.read_text()
    code = instrumented(source, str(path))
    module = types.ModuleType(module_name)
    module.__file__ = str(path)
    vars(module)[GUARD_NAME] = GUARD
    sys.modules[module_name] = module
    try:
        exec(code, vars(module))  # noqa: S102 - the candidate, under the lockdown and the import guard
    except BaseException:
        del sys.modules[module_name]
        raise
    return module
