"""Run-time refusals inside a candidate worker while candidate code runs (its import and ``launch()``):
no setting or deleting attributes on modules and types it does not own, no reaching frames, the
garbage collector's object lists or tracers, however the candidate gets to them.

This is defense in depth: the judge never trusts what a worker reports. It keeps the worker's own
driver code (the timing loop, the output copies) as the judge wrote it.

How a refusal is decided: an audit hook (which cannot be removed) sees frame, gc and attribute events;
module attribute writes go through ``FrozenModule.__setattr__``. Either asks who is responsible: the
innermost Python frame outside a few pass-through helpers (inspect, typing, functools, dataclasses...),
which libraries use on their own behalf too (Triton's ``@jit`` reads a kernel's ``__code__`` and
``__globals__`` through inspect). When that frame is the candidate's code, the act is refused and
recorded, so a refusal the candidate swallows still fails it. Writes that bypass ``__setattr__``
(a module's ``__dict__``) are caught by ``changed_modules`` between stages.
"""

from __future__ import annotations

import sys
import threading
import types
from contextlib import contextmanager
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
FRAME_TYPES = (types.FrameType, types.TracebackType, types.GeneratorType, types.CoroutineType,
               types.AsyncGeneratorType)  # fmt: skip


class Lockdown:
    """One per worker process: ``install`` once, then ``active()`` around candidate code."""

    def __init__(self) -> None:
        self.candidate = ""
        self.violations: list[str] = []
        self._active = False
        self._inside = threading.local()

    # -- set up ---------------------------------------------------------------------------------
    def install(self, candidate_module: str) -> None:
        self.candidate = candidate_module
        for module in list(sys.modules.values()):
            if type(module) is types.ModuleType:
                module.__class__ = FrozenModule
        sys.addaudithook(self._hook)

    @contextmanager
    def active(self) -> Any:
        previous, self._active = self._active, True
        try:
            yield
        finally:
            self._active = previous

    def refusal(self) -> str:
        """The first refused act since the last call (cleared), or ""."""
        first = self.violations[0] if self.violations else ""
        self.violations.clear()
        return first

    # -- deciding -------------------------------------------------------------------------------
    def _responsible_is_candidate(self, depth: int) -> bool:
        frame = sys._getframe(depth)
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if name == self.candidate:
                return True
            if name.split(".")[0] not in PASS_THROUGH and name not in PASS_THROUGH:
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
        if not self._active or getattr(self._inside, "busy", False):
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

    def module_write(self, module: types.ModuleType, name: str, verb: str) -> None:
        if not self._active or getattr(self._inside, "busy", False) or module.__name__ == self.candidate:
            return
        self._inside.busy = True
        try:
            refused = self._responsible_is_candidate(3)
        finally:
            self._inside.busy = False
        if refused:
            self._refuse(f"{verb} {module.__name__}.{name}")


LOCKDOWN = Lockdown()


class FrozenModule(types.ModuleType):
    """A module whose attributes the candidate cannot set or delete (everyone else still can)."""

    def __setattr__(self, name: str, value: Any) -> None:
        LOCKDOWN.module_write(self, name, "setting")
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        LOCKDOWN.module_write(self, name, "deleting")
        super().__delattr__(name)


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
