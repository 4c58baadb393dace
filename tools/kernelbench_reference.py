"""A KernelBench-format problem as a task's reference: ``reference(*inputs)`` and ``make_inputs``.

``python -m tools.kernelbench`` copies this file into each task folder as reference.py, with ``SPEC``
filled in, beside problem.py (the problem's own source). It needs only torch.

The task's inputs are the forward's tensors followed by the Model's parameters and buffers, so a
candidate's ``launch(*inputs)`` sees the weights. The reference runs the Model's own forward on those
tensors with ``torch.func.functional_call``; non-tensor forward arguments are constants of the task.
A shape sets the problem's size constants (module globals) before anything reads them. A shape the
task does not list (a shape drawn near the workload) that the problem rejects, such as channels that
are not a multiple of the groups, is moved dim by dim to the nearest size it accepts (within 8). A
problem imported at its own size (no dims) makes its own size for every shape.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

# Written by the importer:
#   problem: file name of the problem beside this file; sha256: its digest (an edit is an error)
#   dims: the size constants a shape sets; fixed: the other module constants, as imported
#   forward: one entry per forward argument: "tensor", or ["constant", value]
#   state: the Model's parameter and buffer names, in input order
#   shapes: every shape the task lists (to recognize inputs made in another process)
#   model_seed: the seed the Model's weights are drawn under
SPEC: dict[str, Any] = {}

_SHAPE_OF: dict[tuple, dict[str, int]] = {}
_SKELETONS: dict[tuple, torch.nn.Module] = {}
_WEIGHTS: dict[tuple, dict[str, torch.Tensor]] = {}  # the last shape's CPU weights (drawing them is slow)
_PROBLEM: list[ModuleType] = []
# The problem's sizes are module globals and its inputs are drawn from the global RNG: one shape at a time
# (the judge makes a run's input sets in several threads at once).
_ONE_AT_A_TIME = threading.RLock()


class ProblemChanged(RuntimeError):
    """problem.py differs from the file the task was imported from."""


# -- the problem module ------------------------------------------------------------------------------
def load_problem(path: Path, name: str, sha256: str | None = None) -> ModuleType:
    """Import the problem file under a private name; with ``sha256``, refuse an edited file."""
    source = path.read_bytes()
    if sha256 is not None and hashlib.sha256(source).hexdigest() != sha256:
        raise ProblemChanged(f"{path.name} changed since the task was imported; import it again")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # torch.compile looks a forward's globals up through sys.modules
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def set_sizes(problem: ModuleType, sizes: dict[str, Any]) -> None:
    """Set the problem's module constants (read by get_inputs, get_init_inputs and forward)."""
    for name, value in sizes.items():
        setattr(problem, name, value)


def _every_cuda_device() -> list[int]:
    """torch.manual_seed seeds every CUDA device too: fork them all, so no draw leaks into their state."""
    return list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []


def build_model(problem: ModuleType, seed: int, device: str | torch.device = "cpu") -> torch.nn.Module:
    """Model(*get_init_inputs()) with its weights drawn under ``seed``, in eval mode, on ``device``."""
    with torch.random.fork_rng(devices=_every_cuda_device()), torch.device(device):
        torch.manual_seed(seed)
        model = problem.Model(*problem.get_init_inputs())
    return model.eval()


def forward_items(problem: ModuleType, device: str | torch.device, seed: int) -> list[Any]:
    """get_inputs() under ``seed``, its tensors created on ``device``."""
    device = torch.device(device)
    cuda = _every_cuda_device() or ([device.index or 0] if device.type == "cuda" else [])
    with torch.random.fork_rng(devices=cuda), device:
        torch.manual_seed(seed)
        items = problem.get_inputs()
    if not isinstance(items, list | tuple):
        raise TypeError(f"get_inputs() returned a {type(items).__name__}, not a list")
    return list(items)


def state_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The Model's parameters then buffers, by name (shared tensors once)."""
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


def cast(tensor: torch.Tensor, dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """Floating tensors to the task dtype; integer and boolean ones keep theirs."""
    target = dtype if tensor.is_floating_point() else tensor.dtype
    return tensor.detach().to(device=device, dtype=target).contiguous()


# -- the task's two functions --------------------------------------------------------------------------
def make_inputs(
    shape: dict[str, int], dtype: torch.dtype | str, device: str | torch.device, seed: int
) -> tuple[torch.Tensor, ...]:
    """The forward's tensors (get_inputs under ``seed``, on ``device``), then the Model's parameters and
    buffers (drawn under the task's fixed model seed on the CPU, then moved), floating ones in ``dtype``."""
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    with _ONE_AT_A_TIME:
        problem = _problem()
        sizes = _accepted(problem, shape)
        set_sizes(problem, sizes)
        items = forward_items(problem, device, seed)
        tensors = [cast(t, dtype, device) for t in _forward_tensors(items, shape)]
        state = _weights(problem, sizes)
        tensors += [cast(state[name], dtype, device) for name in SPEC["state"]]
        _SHAPE_OF[_signature(tensors)] = {d: sizes[d] for d in SPEC["dims"]} or dict(SPEC["shapes"][0])
    return tuple(tensors)


def reference(*inputs: torch.Tensor) -> Any:
    """The Model's forward on these inputs (its weights among them); its output as the Model returns it."""
    with _ONE_AT_A_TIME:
        return _reference(inputs)


def _reference(inputs: tuple[torch.Tensor, ...]) -> Any:
    model = _skeleton_for(inputs)
    n = sum(1 for kind in SPEC["forward"] if kind == "tensor")
    tensors = iter(inputs[:n])
    args = [next(tensors) if kind == "tensor" else kind[1] for kind in SPEC["forward"]]
    weights = dict(zip(SPEC["state"], inputs[n:], strict=True))
    return torch.func.functional_call(model, weights, tuple(args), strict=True)


# -- helpers -------------------------------------------------------------------------------------------
def _problem() -> ModuleType:
    if not _PROBLEM:
        here = Path(__file__).resolve().parent
        name = f"_ka_problem_{SPEC['sha256'][:12]}"
        _PROBLEM.append(load_problem(here / SPEC["problem"], name, SPEC["sha256"]))
    return _PROBLEM[0]


def _weights(problem: ModuleType, sizes: dict[str, Any]) -> dict[str, torch.Tensor]:
    key = tuple(sorted(sizes.items()))
    if key not in _WEIGHTS:
        _WEIGHTS.clear()
        _WEIGHTS[key] = state_tensors(build_model(problem, SPEC["model_seed"]))
    return _WEIGHTS[key]


def _sizes(shape: dict[str, int]) -> dict[str, Any]:
    """The module constants for ``shape``: the fixed ones as imported, the dims from the shape."""
    dims = SPEC["dims"]
    missing = [d for d in dims if d not in shape]
    if missing:
        raise ValueError(f"shape {shape} lacks {', '.join(missing)} (this task's dims: {', '.join(dims)})")
    return {**SPEC["fixed"], **{d: int(shape[d]) for d in dims}}


def _accepted(problem: ModuleType, shape: dict[str, int]) -> dict[str, Any]:
    """The sizes for ``shape``; an unlisted shape the problem rejects moved to the nearest it accepts."""
    sizes = _sizes(shape)
    if {d: sizes[d] for d in SPEC["dims"]} in SPEC["shapes"] or _builds(problem, sizes):
        return sizes
    for dim in SPEC["dims"]:
        for step in (s * sign for s in range(1, 9) for sign in (-1, 1)):
            trial = {**sizes, dim: sizes[dim] + step}
            if trial[dim] >= 1 and _builds(problem, trial):
                return trial
    raise ValueError(f"the problem accepts no size near {shape} (each dim moved by up to 8)")


def _builds(problem: ModuleType, sizes: dict[str, Any]) -> bool:
    """Whether get_inputs() and the Model build at these sizes (on the meta device, nothing allocated)."""
    set_sizes(problem, sizes)
    try:
        _forward_tensors(forward_items(problem, "meta", 0), sizes)
        build_model(problem, SPEC["model_seed"], device="meta")
    except Exception:
        return False
    return True


def _forward_tensors(items: Sequence[Any], shape: dict[str, int]) -> list[torch.Tensor]:
    """The tensors among get_inputs()'s items; a non-tensor item must equal the task's constant."""
    if len(items) != len(SPEC["forward"]):
        raise ValueError(f"get_inputs() gave {len(items)} items at {shape}, {len(SPEC['forward'])} at import")
    tensors = []
    for i, (item, kind) in enumerate(zip(items, SPEC["forward"], strict=True)):
        if kind == "tensor":
            if not isinstance(item, torch.Tensor):
                raise TypeError(
                    f"forward argument #{i} is a {type(item).__name__} at {shape}, a tensor at import"
                )
            tensors.append(item)
        elif item != kind[1]:
            raise ValueError(
                f"forward argument #{i} is {item!r} at {shape} but the task fixes it at {kind[1]!r}"
            )
    return tensors


def _signature(tensors: Sequence[torch.Tensor]) -> tuple:
    return tuple(tuple(t.shape) for t in tensors)


@torch.compiler.disable
def _skeleton_for(inputs: Sequence[torch.Tensor]) -> torch.nn.Module:
    """The Model built (on the meta device) for the shape these inputs were made at, its size constants
    set. Outside torch.compile's graph: it reads and writes module state."""
    shape = _shape_of(_signature(inputs))
    sizes = _sizes(shape)
    set_sizes(_problem(), sizes)
    key = tuple(sorted(sizes.items()))
    if key not in _SKELETONS:
        _SKELETONS[key] = build_model(_problem(), SPEC["model_seed"], device="meta")
    return _SKELETONS[key]


def _shape_of(signature: tuple) -> dict[str, int]:
    """The shape inputs of this signature were made at: made here, one of the task's listed shapes, or
    read off the tensors' sizes (inputs made in another process, at a shape the task does not list)."""
    if signature not in _SHAPE_OF:
        for shape in SPEC["shapes"]:
            _SHAPE_OF.setdefault(_meta_signature(shape), dict(shape))
    if signature not in _SHAPE_OF:
        inferred = _read_shape(signature)
        if inferred is None:
            raise ValueError(
                f"inputs of shapes {list(signature)} match none of the task's shapes; use make_inputs"
            )
        _SHAPE_OF[signature] = inferred
    return _SHAPE_OF[signature]


def _read_shape(signature: tuple) -> dict[str, int] | None:
    """The shape whose inputs have these sizes: each dim read where it moves a tensor's size one for one
    (found by moving it by one from the first listed shape), checked by building the inputs at it."""
    base = dict(SPEC["shapes"][0])
    base_signature = _flat(_meta_signature(base))
    flat = _flat(signature)
    if not SPEC["dims"] or len(flat) != len(base_signature):
        return None
    shape = dict(base)
    for dim in SPEC["dims"]:
        axis = _axis_of(dim, base, base_signature)
        if axis is None:
            return None
        shape[dim] = base[dim] + flat[axis] - base_signature[axis]
    try:
        return shape if _meta_signature(shape) == signature else None
    except Exception:
        return None


def _axis_of(dim: str, base: dict[str, int], base_signature: list[int]) -> int | None:
    """A tensor size that moves one for one with ``dim`` (a problem may refuse a move up, or down, or
    accept only multiples: channels in groups of 8)."""
    for step in (s * sign for s in range(1, 9) for sign in (1, -1)):
        try:
            moved = _flat(_meta_signature({**base, dim: base[dim] + step}))
        except Exception:
            continue
        axes = [i for i, (a, b) in enumerate(zip(base_signature, moved, strict=False)) if b - a == step]
        if axes and len(moved) == len(base_signature):
            return axes[0]
    return None


def _flat(signature: tuple) -> list[int]:
    return [size for sizes in signature for size in sizes]


def _meta_signature(shape: dict[str, int]) -> tuple:
    problem = _problem()
    set_sizes(problem, _sizes(shape))
    items = forward_items(problem, "meta", 0)
    model = build_model(problem, SPEC["model_seed"], device="meta")
    state = state_tensors(model)
    return _signature([*_forward_tensors(items, shape), *(state[n] for n in SPEC["state"])])
