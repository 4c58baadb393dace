"""A launcher's Triton launches replayed without Triton's per-call dispatch.

A launcher (Python that allocates its outputs and calls ``kernel[grid](...)``) does the same thing every
time it is called with inputs of the same signature: shapes, strides, dtypes, pointer alignment and the
values of its other arguments. ``Replayed(launcher)`` records what the launcher does on its first calls
at a signature: every tensor it allocates, and every call it makes into Triton's launcher of a compiled
kernel. Once two recordings agree, a call at that signature allocates the same tensors and calls those
compiled kernels directly, with the new inputs' and allocations' addresses in place of the recorded
ones: Triton's argument binding, specialization and cache lookup (most of a launch's host time) are
skipped. Triton chose the compiled kernel from the same signature, so it is the kernel it would choose.

A signature stays on the launcher itself when a recording cannot account for what it saw: a torch op other
than an allocation or a view, a kernel launched outside Triton's JIT path, two inputs sharing memory, an
argument the replay cannot re-create (a tensor descriptor, an address passed as an integer). So do calls
under torch.compile's tracing, calls while a Triton launch hook is set (profilers), and CPU tensors
(Triton's interpreter). The launcher must be a function of its inputs: Python state it reads that the
signature does not show (a counter, a random seed drawn in Python) is frozen at what the recordings saw.

Needs only torch and triton; tools/export.py copies this file into every exported module.
"""

import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

AGREEING_RECORDINGS = 2  # identical recordings before a signature is replayed
MAX_RECORDINGS = 4  # after this many without agreement a signature stays on its launcher
_ALLOCATING = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
_FILLING = {"zeros": 0, "zeros_like": 0, "new_zeros": 0, "ones": 1, "ones_like": 1, "new_ones": 1}
_PRIMITIVE = (int, float, bool, str, bytes, type(None))
_HEAD = 9  # gridX, gridY, gridZ, stream, function, kernel metadata, launch metadata, enter hook, exit hook
_ONE_RECORDING = threading.Lock()  # the recording patches Triton's classes: one at a time


class _Pointer:
    """An address where Triton's launcher expects a tensor (it reads only ``data_ptr()``): a view at an
    offset into an input or an allocation."""

    __slots__ = ("address",)

    def __init__(self, address):
        self.address = address

    def data_ptr(self):
        return self.address


class TritonBackend:
    """What a replay needs from Triton: the launcher class of compiled kernels, the current device and
    stream as Triton reads them, and the launch hooks."""

    device_type = "cuda"

    def __init__(self):
        from triton.runtime import driver
        from triton.runtime.jit import JITFunction

        self.active = driver.active
        self.launcher_class = self.active.launcher_cls
        self.jit_class = JITFunction
        try:
            from triton import knobs

            self._hooks = knobs.runtime
        except ImportError:  # Triton before 3.4 keeps the hooks on CompiledKernel
            from triton.compiler.compiler import CompiledKernel

            self._hooks = CompiledKernel

    def current_device(self):
        return self.active.get_current_device()

    def current_stream(self, device):
        return self.active.get_current_stream(device)

    def hooks(self):
        return self._hooks.launch_enter_hook, self._hooks.launch_exit_hook


def _active(hook):
    return hook is not None and bool(getattr(hook, "calls", True))


def signature(inputs):
    """What a launcher's behaviour may depend on: per tensor its shape, strides, dtype, device and
    16-byte alignment (Triton specializes on it); every other argument by type and value."""
    return tuple(
        (t.shape, t.stride(), t.dtype, t.get_device(), t.data_ptr() & 15) if isinstance(t, torch.Tensor) else (type(t), t)
        for t in inputs
    )


class _Recording(TorchDispatchMode):
    """One call of a launcher: the tensors it allocated and the launches it made (torch ops seen here)."""

    def __init__(self):
        super().__init__()
        self.made = []  # (tensor, fill value or None), in allocation order
        self.launches = []  # (launcher object, its arguments)
        self.jit_runs = 0
        self.refused = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._overloadpacket.__name__
        if name in _ALLOCATING or name in _FILLING:
            self.made.append((out, _FILLING.get(name)))
        elif not func.is_view and not self.refused:
            self.refused = f"the launcher runs aten.{name}"
        return out


def _record(launcher, inputs, backend):
    """(the launcher's outputs, the recording of that call) with Triton's JIT and launcher classes patched
    for this thread only."""
    recording, me = _Recording(), threading.get_ident()
    jit, launcher_class = backend.jit_class, backend.launcher_class
    original_run, original_call = jit.run, launcher_class.__call__

    def run(self, *args, **kwargs):
        if threading.get_ident() == me and not kwargs.get("warmup"):
            recording.jit_runs += 1
        return original_run(self, *args, **kwargs)

    def call(self, *args, **kwargs):
        if threading.get_ident() == me:
            recording.launches.append((self, args))
            if kwargs:
                recording.refused = "Triton's launcher called with keywords"
        return original_call(self, *args, **kwargs)

    jit.run, launcher_class.__call__ = run, call
    try:
        with recording:
            outputs = launcher(*inputs)
    finally:
        jit.run, launcher_class.__call__ = original_run, original_call
    return outputs, recording


class _Sources:
    """Where each tensor of a recording comes from: kind 0 an input, 1 an allocation of the call,
    2 a tensor the launcher keeps (a module-level buffer); by storage."""

    def __init__(self, inputs, made):
        self.by_storage = {}
        self.ranges = []
        for kind, tensors in ((0, inputs), (1, [t for t, _ in made])):
            for i, t in enumerate(tensors):
                if not isinstance(t, torch.Tensor):
                    continue
                storage = t.untyped_storage()
                base = storage.data_ptr()
                if base in self.by_storage:
                    raise _Unreplayable("two inputs or allocations share memory")
                self.by_storage[base] = (kind, i, t)
                self.ranges.append((base, base + storage.nbytes()))

    def role(self, t):
        """(kind, index or the kept tensor, byte offset from the source's data_ptr)."""
        found = self.by_storage.get(t.untyped_storage().data_ptr())
        if found is None:
            return 2, t, 0
        kind, i, source = found
        offset = t.data_ptr() - source.data_ptr()
        if offset < 0:
            raise _Unreplayable("a view before its input's first element")
        return kind, i, offset

    def inside(self, value):
        return any(low <= value < high for low, high in self.ranges)


class _Unreplayable(Exception):
    pass


class _Plan:
    """A signature's launches, ready to replay: allocations, then each launch with its tensor slots filled
    in, then the outputs rebuilt from the inputs and allocations."""

    def __init__(self, recording, inputs, outputs, backend, device, stream):
        if recording.refused:
            raise _Unreplayable(recording.refused)
        if not recording.launches or recording.jit_runs != len(recording.launches):
            raise _Unreplayable("a launch outside Triton's JIT path, or none")
        self.backend, self.device = backend, device
        sources = _Sources(inputs, recording.made)
        self.allocs = [(tuple(t.shape), t.stride(), t.dtype, t.device, fill) for t, fill in recording.made]
        self.launches = [self._launch(obj, args, sources, stream) for obj, args in recording.launches]
        self.outputs = self._output(outputs, sources)

    def _launch(self, obj, args, sources, stream):
        enter, exit = self.backend.hooks()
        if len(args) < _HEAD or args[3] != stream or args[7] is not enter or args[8] is not exit:
            raise _Unreplayable("Triton's launcher takes arguments this replay does not know")
        template, slots = list(args), []
        for pos, value in enumerate(args[_HEAD:], start=_HEAD):
            if isinstance(value, torch.Tensor):
                slots.append((pos, *sources.role(value)))
            elif not _plain(value) or (isinstance(value, int) and sources.inside(value)):
                raise _Unreplayable(f"argument {pos - _HEAD} of a launch cannot be re-created")
        for pos in (0, 1, 2, 4, 5):
            if not _plain(args[pos]):
                raise _Unreplayable("Triton's launcher takes arguments this replay does not know")
        return obj, template, slots

    def _output(self, value, sources):
        if isinstance(value, torch.Tensor):
            kind, index, offset = sources.role(value)
            if kind == 2:
                raise _Unreplayable("an output the call did not allocate")
            source = sources.by_storage[value.untyped_storage().data_ptr()][2]
            if value is source:
                return ("same", kind, index)
            if value.dtype != source.dtype:
                raise _Unreplayable("an output viewed as another dtype")
            view = (tuple(value.shape), value.stride(), value.storage_offset() - source.storage_offset())
            return ("view", kind, index, view)
        if isinstance(value, tuple | list):
            return (type(value), [self._output(v, sources) for v in value])
        if _plain(value):
            return ("const", value)
        raise _Unreplayable(f"an output of type {type(value).__name__}")

    def describe(self):
        """What two recordings must share to be replayed: allocations, launches, outputs."""
        launches = []
        for obj, template, slots in self.launches:
            filled = [s[:2] + ((s[2].data_ptr(),) if s[1] == 2 else (s[2],)) + s[3:] for s in slots]
            constants = tuple(v for pos, v in enumerate(template) if pos not in {s[0] for s in slots} | {3, 6, 7, 8})
            launches.append((id(obj), constants, tuple(filled)))
        return self.allocs, launches, repr(self.outputs)

    def run(self, inputs):
        """The launches on these inputs, or None where the replay must not run (a hook set, another device)."""
        backend = self.backend
        enter, exit = backend.hooks()
        if _active(enter) or _active(exit):
            return None
        device = backend.current_device()
        if device != self.device:
            return None
        made = []
        for size, stride, dtype, where, fill in self.allocs:
            t = torch.empty_strided(size, stride, dtype=dtype, device=where)
            if fill is not None:
                t.fill_(fill)
            made.append(t)
        stream = backend.current_stream(device)
        sources = (inputs, made)
        for obj, template, slots in self.launches:
            args = template.copy()
            args[3], args[7], args[8] = stream, enter, exit
            for pos, kind, index, offset in slots:
                t = index if kind == 2 else sources[kind][index]
                args[pos] = _Pointer(t.data_ptr() + offset) if offset else t
            obj(*args)
        return _rebuild(self.outputs, sources)


def _plain(value):
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return isinstance(value, _PRIMITIVE)


def _rebuild(spec, sources):
    tag = spec[0]
    if tag == "same":
        return sources[spec[1]][spec[2]]
    if tag == "view":
        size, stride, offset = spec[3]
        source = sources[spec[1]][spec[2]]
        return source.as_strided(size, stride, source.storage_offset() + offset)
    if tag == "const":
        return spec[1]
    return tag(_rebuild(s, sources) for s in spec[1])


class Replayed:
    """``launcher`` with its launches replayed once two recordings at a signature agree (see the module's
    docstring); ``replaying()`` says how many signatures replay. ``backend`` is Triton's by default."""

    def __init__(self, launcher, backend=None):
        self.launcher = launcher
        self._backend = backend
        self._off = False
        self._plans = {}  # signature -> _Plan (replayed), a list of recordings' plans, or False (never)
        self._lock = threading.Lock()

    def __call__(self, *inputs):
        if self._off or torch.compiler.is_compiling():
            return self.launcher(*inputs)
        try:
            key = signature(inputs)
            plan = self._plans.get(key)
        except TypeError:  # an argument that cannot be hashed: nothing to key a replay on
            return self.launcher(*inputs)
        if plan.__class__ is _Plan:
            outputs = plan.run(inputs)
            if outputs is not None:
                return outputs
            return self.launcher(*inputs)
        if plan is False:
            return self.launcher(*inputs)
        return self._learn(key, inputs)

    def replaying(self):
        return sum(1 for p in self._plans.values() if p.__class__ is _Plan)

    def _backend_or_none(self):
        if self._backend is None:
            try:
                self._backend = TritonBackend()
            except Exception:  # no GPU driver (CPU, Triton's interpreter): the launcher runs as it is
                self._off = True
        return self._backend

    def _learn(self, key, inputs):
        backend = self._backend_or_none()
        device_type = getattr(backend, "device_type", None)
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        if backend is None or not tensors or any(t.device.type != device_type for t in tensors):
            return self.launcher(*inputs)
        if not _ONE_RECORDING.acquire(blocking=False):
            return self.launcher(*inputs)
        try:
            device = backend.current_device()
            stream = backend.current_stream(device)
            outputs, recording = _record(self.launcher, inputs, backend)
        finally:
            _ONE_RECORDING.release()
        try:
            plan = _Plan(recording, inputs, outputs, backend, device, stream)
        except Exception:  # _Unreplayable, or anything else it cannot read: the call itself has run
            plan = None
        self._remember(key, plan)
        return outputs

    def _remember(self, key, plan):
        with self._lock:
            seen = self._plans.get(key)
            seen = seen if isinstance(seen, list) else []
            seen.append(plan)
            recent = seen[-AGREEING_RECORDINGS:]
            if len(recent) == AGREEING_RECORDINGS and None not in recent:
                described = {repr(p.describe()) for p in recent}
                if len(described) == 1:
                    self._plans[key] = plan
                    return
            self._plans[key] = False if len(seen) >= MAX_RECORDINGS else seen
