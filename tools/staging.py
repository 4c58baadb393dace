"""The staging arena: the only memory a judge and a candidate worker share.

The judge allocates one arena per worker and hands the worker a descriptor; the worker maps it. On a
GPU the arena is CUDA IPC memory allocated from a private memory pool, so the segment the worker maps
holds nothing but this arena (the judge's inputs and expected outputs live in other segments the
worker cannot address). On a CPU it is a file mapped shared by both processes.

Only the judge lays tensors out in the arena (``Layout``): inputs first, each followed by a guard band
of canary bytes, then the region the worker copies outputs into, then the region for timing logs.
Whatever the worker leaves there is data to check, never a verdict.
"""

from __future__ import annotations

import base64
import math
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ALIGN = 512
GUARD_BYTES = 4096  # canary bytes after every input: a store past an input's end lands here
CANARY = 0xA5

_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2,
)}  # fmt: skip


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_of(name: str) -> torch.dtype:
    if name not in _DTYPES:
        raise ValueError(f"unsupported dtype {name!r}")
    return _DTYPES[name]


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class Spec:
    """Where one tensor sits in the arena: byte offset, shape, element strides, dtype."""

    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        """Bytes the tensor's strides span (0 for an empty tensor)."""
        if not self.shape or math.prod(self.shape) == 0:
            return 0 if self.shape else dtype_of(self.dtype).itemsize
        span = 1 + sum((s - 1) * st for s, st in zip(self.shape, self.stride, strict=True))
        return span * dtype_of(self.dtype).itemsize

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "shape": list(self.shape), "stride": list(self.stride), "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Spec:
        return cls(int(data["offset"]), tuple(data["shape"]), tuple(data["stride"]), str(data["dtype"]))


def contiguous_spec(offset: int, shape: tuple[int, ...], dtype: torch.dtype) -> Spec:
    stride, step = [], 1
    for size in reversed(shape):
        stride.append(step)
        step *= max(size, 1)
    return Spec(offset, tuple(shape), tuple(reversed(stride)), dtype_name(dtype))


def view(buffer: torch.Tensor, spec: Spec) -> torch.Tensor:
    """The tensor ``spec`` describes, as a view into the arena's uint8 ``buffer``."""
    if spec.offset % dtype_of(spec.dtype).itemsize or spec.offset < 0 or spec.offset + spec.nbytes > buffer.numel():
        raise ValueError(f"tensor spec outside the arena: {spec}")
    itemsize = dtype_of(spec.dtype).itemsize
    typed = buffer.view(dtype_of(spec.dtype)) if buffer.numel() % itemsize == 0 else None
    if typed is None:
        raise ValueError("arena size is not a multiple of the element size")
    return typed.as_strided(spec.shape, spec.stride, spec.offset // itemsize)


def packed_inputs(tensors: tuple[torch.Tensor, ...]) -> tuple[list[Spec], int]:
    """Where inputs sit at the arena's front, each contiguous and followed by its guard band (to the next
    aligned offset), and the bytes they span."""
    specs, at = [], 0
    for t in tensors:
        specs.append(contiguous_spec(at, tuple(t.shape), t.dtype))
        at += _aligned(t.numel() * t.element_size() + GUARD_BYTES)
    return specs, at


def input_image(tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """The arena's input region as a worker must find it: the inputs packed as ``packed_inputs`` places
    them, canary bytes everywhere else. Returns (the bytes, the inputs as views into them): one copy
    hands a worker its inputs and their guard bands, one comparison checks both afterwards."""
    span = packed_inputs(tensors)[1]
    device = tensors[0].device if tensors else torch.device("cpu")
    image = torch.full((span,), CANARY, dtype=torch.uint8, device=device)
    views = image_views(image, tensors)
    for v, t in zip(views, tensors, strict=True):
        v.copy_(t)
    return image, views


def image_views(image: torch.Tensor, tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The inputs of an input image, as views into it (``tensors`` give their shapes and dtypes)."""
    return tuple(view(image, spec) for spec in packed_inputs(tensors)[0])


@dataclass
class Layout:
    """Inputs at the front (each followed by a guard band), outputs and logs at fixed offsets."""

    inputs_bytes: int
    outputs_bytes: int
    log_bytes: int

    @staticmethod
    def input_span(tensors: tuple[torch.Tensor, ...]) -> int:
        return packed_inputs(tensors)[1]

    @property
    def outputs_at(self) -> int:
        return self.inputs_bytes

    @property
    def log_at(self) -> int:
        return self.inputs_bytes + self.outputs_bytes

    @property
    def size(self) -> int:
        return self.inputs_bytes + self.outputs_bytes + self.log_bytes

    def input_specs(self, tensors: tuple[torch.Tensor, ...]) -> list[Spec]:
        specs, at = packed_inputs(tensors)
        if at > self.inputs_bytes:
            raise ValueError(f"inputs need {at} bytes, the arena holds {self.inputs_bytes}")
        return specs

    def guards(self, specs: list[Spec]) -> list[tuple[int, int]]:
        """(start, end) of each input's guard band: from its last byte up to the next input."""
        bands = []
        for spec in specs:
            start = spec.offset + spec.nbytes
            bands.append((start, spec.offset + _aligned(spec.nbytes + GUARD_BYTES)))
        return bands

    def output_specs(self, shapes: list[tuple[tuple[int, ...], str]]) -> list[Spec] | None:
        """Contiguous places for outputs of these (shape, dtype) in the output region, or None when they
        do not fit (the worker then copies nothing and the judge reports the sizes)."""
        specs, at = [], self.outputs_at
        for shape, dtype in shapes:
            spec = contiguous_spec(at, shape, dtype_of(dtype))
            at += _aligned(spec.nbytes)
            specs.append(spec)
        return specs if at <= self.log_at else None


class Arena:
    """The judge's side: allocates the arena and describes it to the worker that maps it.

    On the GPU an arena is never freed while the judge lives (a worker killed while it mapped one
    never hands its IPC reference back): the judge reuses arenas through ``ArenaPool``."""

    def __init__(self, nbytes: int, device: str, folder: Path):
        self.device = device
        self.nbytes = _aligned(max(nbytes, ALIGN))
        self._pool = None
        self._file: Path | None = None
        if device == "cuda":
            # A private pool: the segment the worker maps holds this arena and nothing of the judge's.
            self._pool = torch.cuda.MemPool()
            with torch.cuda.use_mem_pool(self._pool):
                self.buffer = torch.empty(self.nbytes, dtype=torch.uint8, device="cuda")
        else:
            self._file = folder / "arena.bin"
            with open(self._file, "wb") as f:
                f.truncate(self.nbytes)
            self.buffer = torch.from_file(str(self._file), shared=True, size=self.nbytes, dtype=torch.uint8)

    def descriptor(self) -> dict[str, Any]:
        if self.device == "cuda":
            if not hasattr(self, "_shared"):
                self._shared = base64.b64encode(pickle.dumps(self.buffer.untyped_storage()._share_cuda_())).decode()
            return {"kind": "cuda", "nbytes": self.nbytes, "ipc": self._shared}
        return {"kind": "file", "nbytes": self.nbytes, "path": str(self._file)}

    def broken_guard(self, bands: list[tuple[int, int]]) -> tuple[int, int] | None:
        """(input index, first changed byte after its end) of the first guard band written, or None."""
        if not bands:
            return None
        changed = torch.stack([(self.buffer[s:e] != CANARY).any() for s, e in bands]).tolist()
        for i, hit in enumerate(changed):
            if hit:
                start, end = bands[i]
                first = int((self.buffer[start:end] != CANARY).nonzero()[0, 0])
                return i, first
        return None

    def close(self) -> None:
        self.buffer = torch.empty(0, dtype=torch.uint8)
        self._pool = None
        if self._file is not None:
            self._file.unlink(missing_ok=True)


class ArenaPool:
    """Arenas of one size, handed to one worker at a time and reused after it let go (or died)."""

    def __init__(self, nbytes: int, device: str, folder: Path):
        import threading

        self.nbytes, self.device, self.folder = nbytes, device, folder
        self._free: list[Arena] = []
        self._all: list[Arena] = []
        self._lock = threading.Lock()

    def acquire(self) -> Arena:
        with self._lock:
            if self._free:
                return self._free.pop()
            folder = self.folder / f"arena-{len(self._all)}"
            folder.mkdir(parents=True, exist_ok=True)
            arena = Arena(self.nbytes, self.device, folder)
            self._all.append(arena)
            return arena

    def release(self, arena: Arena) -> None:
        with self._lock:
            self._free.append(arena)

    def close(self) -> None:
        with self._lock:
            for arena in self._all:
                arena.close()
            self._all.clear()
            self._free.clear()


def open_arena(descriptor: dict[str, Any]) -> torch.Tensor:
    """The worker's side: the arena as one uint8 tensor (mapped, not copied)."""
    nbytes = int(descriptor["nbytes"])
    if descriptor["kind"] == "cuda":
        torch.cuda.init()  # an IPC handle can be opened only in an initialized context
        args = pickle.loads(base64.b64decode(descriptor["ipc"]))  # noqa: S301 - written by the judge
        storage = torch.UntypedStorage._new_shared_cuda(*args)
        return torch.empty(0, dtype=torch.uint8, device="cuda").set_(storage, 0, (nbytes,), (1,))
    return torch.from_file(descriptor["path"], shared=True, size=nbytes, dtype=torch.uint8)
