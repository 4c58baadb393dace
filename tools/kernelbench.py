"""Import KernelBench-format problems as tasks of this repository.

    python -m tools.kernelbench PROBLEM.py [more files or folders] --out DIR [--dtype float32|bfloat16]

A problem is a Python file with ``class Model(nn.Module)``, ``get_inputs()``, ``get_init_inputs()``
and module-level size constants. Each becomes DIR/<file stem>/ with task.json, reference.py (see
tools/kernelbench_reference.py) and problem.py, a copy of the file. The task has no baseline kernel.

What the importer derives, all by running the problem on the meta device (nothing is allocated):
- dims: the integer constants that change the shape of an input, a parameter or a buffer when changed;
  the others (a reduction dim, a group count) stay as written. shapes[0] is the problem's own size,
  then x0.5 and x2 on the batch-like dim (the leading dim of the first input, in no weight);
- cpu_shapes small enough for the Triton interpreter, check_shapes with odd sizes and ones;
- the dims that size the Model (its init inputs, a weight's shape), which the judge's hidden shapes
  keep at the first shape's size (``settings.evaluator.hidden_fixed_dims``): a hidden shape draws new input sizes
  for the same model, as torch.compile's own code holds for (it specializes a LayerNorm's width);
- flops from torch's FlopCounterMode (matmul, attention), a tolerance per dtype (looser when the
  forward multiplies matrices), a description from the docstring and the forward's source.
A problem whose sizes cannot be set is imported at its own size only, and says so. A file that is not
a problem is named with what it lacks (exit 2); the other files are still imported.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import inspect
import json
import math
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from tools import kernelbench_reference as runtime

MODEL_SEED = 0
CPU_ELEMENTS = 4096  # inputs + weights + outputs of a cpu shape: the interpreter runs ~0.25 ms a program
CHECK_ELEMENTS = 16384
MAX_SHAPE_BYTES = 8 * 2**30  # a scaled shape stays within what an H200 holds beside eager's temporaries
TOLERANCE = {  # (rtol, atol) by dtype and whether the forward multiplies matrices
    ("float32", False): (1e-4, 1e-4),
    ("float32", True): (1e-2, 1e-2),  # a Triton tl.dot may use TF32
    ("bfloat16", False): (2e-2, 2e-2),  # eager rounds every intermediate to bf16, a fused kernel does not
    ("bfloat16", True): (3e-2, 3e-2),
}
CONSTANT_TYPES = (int, float, bool, str, type(None))


class ProblemError(ValueError):
    """The file is not a KernelBench-format problem; the message names the file and what is missing."""


@dataclass
class Problem:
    path: Path
    module: ModuleType
    constants: dict[str, Any]  # module-level constants (numbers, strings), in source order


@dataclass
class TensorInfo:
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class Probe:
    """What the problem builds at one set of sizes (on the meta device)."""

    inputs: list[TensorInfo]  # the forward's tensors
    forward: list[Any]  # per forward argument: "tensor" or ["constant", value]
    state: dict[str, TensorInfo]  # parameters then buffers
    outputs: list[TensorInfo] | None  # None: the forward does not run on the meta device
    flops: int | None

    @property
    def signature(self) -> tuple:
        return tuple(t.shape for t in [*self.inputs, *self.state.values()])

    def numel(self) -> int:
        return sum(t.numel for t in [*self.inputs, *self.state.values(), *(self.outputs or [])])

    def nbytes(self, dtype: torch.dtype) -> int:
        """Bytes of every tensor, floating ones in the task's dtype."""
        tensors = [*self.inputs, *self.state.values(), *(self.outputs or [])]
        return sum(t.numel * (dtype if t.dtype.is_floating_point else t.dtype).itemsize for t in tensors)


# -- reading a problem -----------------------------------------------------------------------------------
def read_problem(path: Path) -> Problem:
    """Parse and import the file; ProblemError names the missing piece."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as exc:
        raise ProblemError(f"{path}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{path}: cannot be read: {exc}") from None
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    for name, kind in (("Model", "class Model(nn.Module)"), ("get_inputs", "def get_inputs()"),
                       ("get_init_inputs", "def get_init_inputs()")):  # fmt: skip
        if name not in (classes if name == "Model" else functions):
            raise ProblemError(
                f"{path}: no {kind}; a KernelBench problem defines Model, get_inputs and get_init_inputs"
            )
    try:
        module = runtime.load_problem(
            path, f"_ka_import_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
        )
    except Exception as exc:
        raise ProblemError(f"{path}: importing it raised {_one_line(exc)}") from None
    if not (isinstance(module.Model, type) and issubclass(module.Model, torch.nn.Module)):
        raise ProblemError(f"{path}: Model is not a torch.nn.Module subclass")
    names = [
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    ]
    constants = {
        n: getattr(module, n)
        for n in dict.fromkeys(names)
        if isinstance(getattr(module, n, None), CONSTANT_TYPES)
    }
    return Problem(path, module, constants)


def probe(problem: Problem, sizes: dict[str, Any], run_forward: bool = True) -> Probe:
    """Build the problem at ``sizes`` on the meta device; ProblemError says which step failed."""
    runtime.set_sizes(problem.module, sizes)
    where = f"{problem.path} at {_label(sizes)}"
    try:
        items = runtime.forward_items(problem.module, "meta", 0)
    except Exception as exc:
        raise ProblemError(f"{where}: get_inputs() raised {_one_line(exc)}") from None
    forward = [_forward_kind(problem, i, item) for i, item in enumerate(items)]
    tensors = [item for item in items if isinstance(item, torch.Tensor)]
    if not tensors:
        raise ProblemError(f"{problem.path}: get_inputs() returns no tensor")
    try:
        model = runtime.build_model(problem.module, MODEL_SEED, device="meta")
    except Exception as exc:
        raise ProblemError(f"{where}: Model(*get_init_inputs()) raised {_one_line(exc)}") from None
    _no_plain_tensors(problem, model)
    state = {n: TensorInfo(tuple(t.shape), t.dtype) for n, t in runtime.state_tensors(model).items()}
    outputs, flops = _run_meta(problem, model, items) if run_forward else (None, None)
    return Probe([TensorInfo(tuple(t.shape), t.dtype) for t in tensors], forward, state, outputs, flops)


def _forward_kind(problem: Problem, index: int, item: Any) -> Any:
    if isinstance(item, torch.Tensor):
        return "tensor"
    if not _is_constant(item):
        raise ProblemError(
            f"{problem.path}: forward argument #{index} is a {type(item).__name__}; a non-tensor argument "
            "must be a number, string, boolean, None or a list/tuple of them (it becomes a task constant)"
        )
    return ["constant", item]


def _is_constant(value: Any) -> bool:
    if isinstance(value, list | tuple):
        return all(_is_constant(v) for v in value)
    return isinstance(value, CONSTANT_TYPES)


def _no_plain_tensors(problem: Problem, model: torch.nn.Module) -> None:
    """The reference swaps in the inputs' weights: a tensor attribute that is neither would be left behind."""
    for name, module in model.named_modules():
        for attr, value in vars(module).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                where = f"{name}.{attr}" if name else attr
                raise ProblemError(
                    f"{problem.path}: Model keeps the tensor {where} outside its parameters and buffers; "
                    "register it with register_buffer"
                )


def _run_meta(
    problem: Problem, model: torch.nn.Module, items: list
) -> tuple[list[TensorInfo] | None, int | None]:
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            out = model(*items)
    except Exception:  # an op without a meta kernel: outputs and flops are unknown, sizes still import
        return None, None
    outputs = out if isinstance(out, list | tuple) else [out]
    if not all(isinstance(t, torch.Tensor) for t in outputs):
        raise ProblemError(f"{problem.path}: forward must return a tensor or a tuple of tensors")
    return [TensorInfo(tuple(t.shape), t.dtype) for t in outputs], counter.get_total_flops()


# -- sizes ------------------------------------------------------------------------------------------------
def find_dims(problem: Problem) -> list[str]:
    """Integer constants that change an input's, a parameter's or a buffer's shape when doubled."""
    ints = {n: v for n, v in problem.constants.items() if type(v) is int}
    base = probe(problem, problem.constants, run_forward=False).signature
    dims = []
    for name, value in ints.items():
        try:
            moved = probe(problem, {**problem.constants, name: 2 * value if value else 1}, run_forward=False)
        except ProblemError:
            continue  # not a free size (e.g. it must divide another constant)
        if moved.signature != base:
            dims.append(name)
    runtime.set_sizes(problem.module, problem.constants)
    return dims


def model_dims(problem: Problem, dims: list[str]) -> list[str]:
    """The dims that size the Model (its init inputs or a weight's shape) rather than only its inputs."""
    def built(sizes: dict[str, Any]) -> tuple:
        runtime.set_sizes(problem.module, sizes)
        return repr(problem.module.get_init_inputs()), [t.shape for t in probe(problem, sizes, False).state.values()]

    base = built(problem.constants)
    found = [d for d in dims if built({**problem.constants, d: 2 * problem.constants[d] or 1}) != base]
    runtime.set_sizes(problem.module, problem.constants)
    return found


def batch_dim(problem: Problem, dims: list[str]) -> str | None:
    """The dim to scale: the first that moves the leading size of the first input and no weight."""
    base = probe(problem, problem.constants, run_forward=False)
    free = []
    for name in dims:
        moved = probe(problem, {**problem.constants, name: 2 * problem.constants[name]}, run_forward=False)
        if [t.shape for t in moved.state.values()] == [t.shape for t in base.state.values()]:
            free.append(name)
            if moved.inputs[0].shape[:1] != base.inputs[0].shape[:1]:
                return name
    return (free or dims or [None])[0]


class ShapeChecker:
    """Which sizes the problem accepts (it builds and runs on the meta device), remembered."""

    def __init__(self, problem: Problem, dims: list[str], runs_on_meta: bool):
        self.problem, self.dims, self.runs_on_meta = problem, dims, runs_on_meta
        self.seen: dict[tuple, Probe | None] = {}

    def __call__(self, shape: dict[str, int]) -> Probe | None:
        key = tuple(shape[d] for d in self.dims)
        if key not in self.seen:
            try:
                found = probe(self.problem, {**self.problem.constants, **shape}, self.runs_on_meta)
                ok = found.outputs is not None or not self.runs_on_meta
                self.seen[key] = found if ok else None
            except ProblemError:
                self.seen[key] = None
        return self.seen[key]


def scaled_shapes(
    own: dict[str, int], batch: str | None, valid: ShapeChecker, dtype: torch.dtype
) -> list[dict]:
    shapes = [own]
    for factor in (0.5, 2):
        if batch is None:
            break
        shape = {**own, batch: max(1, int(own[batch] * factor))}
        found = valid(shape)
        if shape not in shapes and found is not None and found.nbytes(dtype) <= MAX_SHAPE_BYTES:
            shapes.append(shape)
    return shapes


def shrink(own: dict[str, int], valid: ShapeChecker, budget: int) -> dict[str, int] | None:
    """Halve the largest dims until the shape's tensors hold at most ``budget`` elements."""
    shape, frozen = dict(own), set()
    while (found := valid(shape)) is not None and found.numel() > budget:
        movable = [d for d in shape if d not in frozen and shape[d] > 1]
        if not movable:
            return None
        dim = max(movable, key=lambda d: shape[d])
        smaller = {**shape, dim: shape[dim] // 2}
        if valid(smaller) is None:
            frozen.add(dim)
        else:
            shape = smaller
    return shape if found is not None else None


def odd(shape: dict[str, int], valid: ShapeChecker) -> dict[str, int] | None:
    """Every dim made odd (an even size plus one), or as many dims as the problem allows."""
    whole = {d: v + 1 if v % 2 == 0 else v for d, v in shape.items()}
    if valid(whole) is not None:
        return whole
    some = dict(shape)
    for d in shape:
        trial = {**some, d: whole[d]}
        if valid(trial) is not None:
            some = trial
    return some if some != shape else None


def check_shapes(small: dict[str, int], batch: str | None, valid: ShapeChecker) -> list[dict[str, int]]:
    ones = {d: 1 for d in small}
    seventeen = {d: 17 if v >= 17 else (v + 1 if v % 2 == 0 else v) for d, v in small.items()}
    candidates = [ones, {**small, batch: 1} if batch else None, seventeen, odd(small, valid)]
    shapes = []
    for shape in candidates:
        found = valid(shape) if shape is not None else None
        if found is not None and found.numel() <= CHECK_ELEMENTS and shape not in shapes and shape != small:
            shapes.append(shape)
    return shapes


# -- the task ---------------------------------------------------------------------------------------------
@dataclass
class Imported:
    name: str
    folder: Path
    spec: dict[str, Any]
    notes: list[str]


@dataclass
class Workload:
    shapes: list[dict[str, int]]  # the problem's own size first
    cpu: list[dict[str, int]]
    checks: list[dict[str, int]]
    flops: list[int | None]  # per entry of shapes


def import_problem(path: Path, out: Path, dtype: str) -> Imported:
    """Read, probe and write one problem as DIR/<stem>; ProblemError names what is wrong."""
    problem = read_problem(path)
    own = probe(problem, problem.constants)
    dims = find_dims(problem)
    notes = [] if dims else [
        "its sizes cannot be set (no integer constant changes an input's shape), so it is imported "
        "at its own size only"
    ]  # fmt: skip
    work = workload(problem, own, dims, getattr(torch, dtype))
    spec = task_spec(path, dtype, work, describe(problem, own, dims, notes, dtype), dims)
    if fixed := model_dims(problem, dims):  # Inductor, too, specializes a Model's sizes
        spec["settings"]["evaluator"] = {"hidden_fixed_dims": fixed}
    folder = out / path.stem
    write_task(folder, problem, own, dims, spec)
    return Imported(path.stem, folder, spec, notes)


def workload(problem: Problem, own: Probe, dims: list[str], dtype: torch.dtype) -> Workload:
    """The timed shapes (own size, batch x0.5 and x2), cpu and check shapes, and flops per timed shape."""
    valid = ShapeChecker(problem, dims, runs_on_meta=own.outputs is not None)
    if not dims:
        size = {f"dim{i}": n for i, n in enumerate(own.inputs[0].shape)} or {"dim0": 1}
        cpu = [size] if own.numel() <= CPU_ELEMENTS else []
        return Workload([size], cpu, [], [own.flops or None])
    size = {d: problem.constants[d] for d in dims}
    batch = batch_dim(problem, dims)
    shapes = scaled_shapes(size, batch, valid, dtype)
    small = shrink(size, valid, CPU_ELEMENTS)
    cpu = [s for s in [small, odd(small, valid) if small else None] if s is not None]
    checks = [s for s in check_shapes(small, batch, valid) if s not in cpu] if small else []
    flops = [
        (found.flops or None) if (found := valid(s)) is not None else None for s in shapes
    ]  # 0: none counted
    return Workload(shapes, cpu, checks, flops)


def task_spec(path: Path, dtype: str, work: Workload, description: str, dims: list[str]) -> dict[str, Any]:
    rtol, atol = TOLERANCE[(dtype, any(work.flops))]
    spec = {
        "name": path.stem,
        "description": description,
        "reference": "reference.py",
        "inputs": "reference.py:make_inputs",
        "dtype": dtype,
        "shapes": work.shapes,
        "check_shapes": work.checks,
        "cpu_shapes": work.cpu,
        "tolerance": {"rtol": rtol, "atol": atol},
        "constraints": {
            "forbid": [],
            "notes": "Outputs must match the Model's forward; the inputs end with its weights.",
        },
        "settings": {
            "kernelbench": {
                "source": path.name,
                "own_shape": work.shapes[0],
                "dims": dims,
                "flops": work.flops,  # per entry of shapes (task.json's flops is one number for every shape)
            }
        },
    }
    if len(work.shapes) == 1 and work.flops[0]:
        spec["flops"] = work.flops[0]
    return spec


def write_task(folder: Path, problem: Problem, own: Probe, dims: list[str], spec: dict[str, Any]) -> None:
    source = problem.path.read_bytes()
    listed = spec["shapes"] + spec["check_shapes"] + spec["cpu_shapes"]
    ref_spec = {
        "problem": "problem.py",
        "sha256": hashlib.sha256(source).hexdigest(),
        "dims": dims,
        "fixed": {n: v for n, v in problem.constants.items() if n not in dims},
        "forward": own.forward,
        "state": list(own.state),
        "shapes": list({json.dumps(s, sort_keys=True): s for s in listed}.values()),
        "model_seed": MODEL_SEED,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "problem.py").write_bytes(source)
    (folder / "reference.py").write_text(reference_source(ref_spec))
    (folder / "task.json").write_text(json.dumps(spec, indent=2) + "\n")


def reference_source(ref_spec: dict[str, Any]) -> str:
    """tools/kernelbench_reference.py with SPEC filled in."""
    template = Path(runtime.__file__).read_text()
    line = "SPEC: dict[str, Any] = {}\n"
    assert template.count(line) == 1, "the reference template's SPEC line moved"
    return template.replace(line, f"SPEC: dict[str, Any] = {ref_spec!r}\n")


def describe(problem: Problem, own: Probe, dims: list[str], notes: list[str], dtype: str) -> str:
    doc = inspect.getdoc(problem.module.Model) or "(no docstring)"
    names = _forward_names(problem)
    args = []
    tensors = iter(own.inputs)
    for i, kind in enumerate(own.forward):
        label = names[i] if i < len(names) else f"arg{i}"
        if kind == "tensor":
            t = next(tensors)
            args.append(f"{label} {list(t.shape)} {_dtype_name(t.dtype, dtype)}")
    weights = [f"{n} {list(t.shape)}" for n, t in own.state.items()]
    constants = [
        f"{names[i] if i < len(names) else f'arg{i}'} = {k[1]!r}"
        for i, k in enumerate(own.forward)
        if k != "tensor"
    ]
    fixed = [f"{n} = {v!r}" for n, v in problem.constants.items() if n not in dims]
    parts = [
        f"{doc.strip()} (KernelBench-format problem {problem.path.name}.)",
        f"Inputs in order: {', '.join(args)}"
        + (f"; then the Model's weights: {', '.join(weights)}" if weights else "")
        + ".",
    ]
    if own.outputs is not None:
        parts.append(
            "Outputs: "
            + ", ".join(f"{list(t.shape)} {_dtype_name(t.dtype, dtype)}" for t in own.outputs)
            + "."
        )
    if constants:
        parts.append(f"Non-tensor forward arguments, constants of the task: {', '.join(constants)}.")
    if dims:
        parts.append(
            f"Sizes set by the shape: {', '.join(dims)}"
            + (f"; fixed: {', '.join(fixed)}" if fixed else "")
            + "."
        )
    parts += [f"Note: {n}." for n in notes]
    parts.append(
        "Forward:\n" + textwrap.dedent(inspect.getsource(problem.module.Model.forward)).strip()[:1500]
    )
    return "\n".join(parts)


def _forward_names(problem: Problem) -> list[str]:
    params = list(inspect.signature(problem.module.Model.forward).parameters)
    return params[1:]


def _dtype_name(found: torch.dtype, task: str) -> str:
    return task if found.is_floating_point else str(found).removeprefix("torch.")


def _label(sizes: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items() if type(v) is int) or "its own sizes"


def _one_line(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:300]}"


# -- command line -----------------------------------------------------------------------------------------
def problem_files(paths: list[str]) -> tuple[list[Path], list[str]]:
    """Files named, and the .py files in folders named (sorted); errors for paths that do not exist."""
    files, errors = [], []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
            files += found
            if not found:
                errors.append(f"{path}: a folder without problem files (*.py)")
        elif path.is_file():
            files.append(path)
        else:
            errors.append(f"{path}: no such file or folder")
    return files, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.kernelbench", description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="+", help="problem files, or folders of them")
    parser.add_argument("--out", required=True, help="folder that receives one task folder per problem")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args(argv)
    files, errors = problem_files(args.problems)
    out = Path(args.out)
    for path in files:
        try:
            done = import_problem(path, out, args.dtype)
        except ProblemError as exc:
            errors.append(str(exc))
            continue
        for note in done.notes:
            print(f"note: {path}: {note}", file=sys.stderr)
        shapes = "; ".join(_label(s) for s in done.spec["shapes"])
        print(f"{done.name}: {done.folder} (shapes: {shapes})")
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
