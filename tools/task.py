"""Task loading: task.json -> a validated Task with paths resolved against the task folder.

A task folder holds task.json plus the Python files it names (docs/CONTRACTS.md). Every problem in
the file is reported as ``TaskError`` naming the field, so a user can fix it without reading code.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

DTYPES = ("float32", "float16", "bfloat16")
DEFAULT_TOLERANCE = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2)}
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas")

Shape = dict[str, int]
# A CPU shape derived for a task that names neither cpu_shapes nor check_shapes: the product of its dims
# at most this (the Triton interpreter runs a program's block as NumPy arrays, about 1000x a GPU's time).
CPU_SHAPE_PRODUCT = 1 << 16


class TaskError(ValueError):
    """A task file or folder is wrong; the message names the field and the problem."""


class Tolerance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rtol: float = Field(ge=0)
    atol: float = Field(ge=0)
    # "row": rtol also scales with the RMS of the expected output's row (last dim), for ops whose rows
    # mix large and near-zero values computed together (attention over V with large entries).
    scale: Literal["element", "row"] = "element"


class Constraints(BaseModel):
    model_config = ConfigDict(extra="forbid")
    forbid: list[str] = []
    notes: str = ""


class Target(BaseModel):
    model_config = ConfigDict(extra="forbid")
    speedup: float | None = Field(default=None, gt=0)
    roofline_pct: float | None = Field(default=None, gt=0, le=100)
    # The roofline target is judged at the shapes whose dims are all >= these ({"B": 8}), each against its
    # same-size ceiling. None: every shape. Checked against the shapes by _check_target.
    min_dims: dict[str, Annotated[int, Field(ge=1, strict=True)]] | None = None


def meets_min_dims(shape: Shape, min_dims: dict[str, int] | None) -> bool:
    """True when ``shape`` is one the roofline target is judged at (every shape when min_dims is None)."""
    return all(shape.get(dim, 0) >= size for dim, size in (min_dims or {}).items())


class Budget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rounds: int = Field(default=8, ge=1)
    candidates_per_round: int = Field(default=6, ge=1)
    minutes: float = Field(default=20, gt=0)


class EvaluatorOverrides(BaseModel):
    """What a task (task.json "settings": {"evaluator": {...}}) or a run may set of the evaluator's own
    settings (tools.evaluate.EvalSettings); the graph's settings model uses this one too."""

    model_config = ConfigDict(extra="forbid")
    suspicious_speedup: float = Field(default=10.0, ge=1, strict=True)
    # Dims the judge's hidden shapes keep at the first workload shape's size: sizes that define a model (a
    # LayerNorm's width sizes its weights) rather than its inputs; the listed shapes still vary them.
    hidden_fixed_dims: list[str] = []


def unknown_fixed_dims(names: list[str], shape: dict[str, int]) -> str:
    """Why ``hidden_fixed_dims`` does not fit shapes with these dims ("" when it does)."""
    unknown = sorted(set(names) - set(shape))
    return f"hidden_fixed_dims names {unknown}, not dims of the shapes ({sorted(shape)})" if unknown else ""


def evaluator_overrides(settings: dict[str, Any]) -> dict[str, Any]:
    """The evaluator keys a task's ``settings`` sets, validated; ValueError names the key."""
    try:
        chosen = EvaluatorOverrides.model_validate(settings.get("evaluator", {}))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ValueError(
            f"settings.evaluator{'.' + where if where else ''}: {err['msg']} "
            '(the evaluator reads "suspicious_speedup", a number >= 1, and "hidden_fixed_dims", a list of dims)'
        ) from None
    return chosen.model_dump(exclude_unset=True)


class TaskSpec(BaseModel):
    """task.json exactly as written (each field: docs/CONTRACTS.md), validated."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    reference: str
    inputs: str
    # None: no baseline kernel (a task imported from a PyTorch module); speedups are then measured
    # against the reference itself, eager and under torch.compile.
    baseline: str | None = None
    dtype: str | list[str]
    shapes: list[Shape] = Field(min_length=1)
    check_shapes: list[Shape] = []
    # Small shapes for CPU runs under the Triton interpreter (correctness only, no speed claims).
    cpu_shapes: list[Shape] = []
    tolerance: Tolerance | None = None
    search_space: dict[str, Any] = {}
    constraints: Constraints = Constraints()
    objective: Literal["latency", "throughput"] = "latency"
    target: Target = Target()
    budget: Budget = Budget()
    bytes_moved: int | None = Field(default=None, gt=0)
    flops: float | None = Field(default=None, gt=0)
    variants: list[str] = []
    # Per-task overrides of configs/default.yaml (thresholds, tolerances of the search, ...).
    settings: dict[str, Any] = {}

    @field_validator("settings")
    @classmethod
    def _evaluator_settings(cls, value: dict[str, Any]) -> dict[str, Any]:
        # The evaluator reads these itself (tools/evaluate.py), so they are checked here, not only by the
        # graph's settings model (which uses the same EvaluatorOverrides).
        evaluator_overrides(value)
        return value

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str | list[str]) -> str | list[str]:
        for name in [value] if isinstance(value, str) else value:
            if name not in DTYPES:
                raise ValueError(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}")
        if isinstance(value, list) and not value:
            raise ValueError("needs at least one dtype")
        return value

    @field_validator("shapes", "check_shapes", "cpu_shapes")
    @classmethod
    def _positive_dims(cls, shapes: list[Shape]) -> list[Shape]:
        for i, shape in enumerate(shapes):
            if not shape:
                raise ValueError(f"shape #{i} is empty")
            for dim, size in shape.items():
                if size < 1:
                    raise ValueError(f"shape #{i} has {dim}={size}; sizes must be >= 1")
        return shapes

    @field_validator("inputs")
    @classmethod
    def _module_colon_function(cls, value: str) -> str:
        if ":" not in value or not value.split(":", 1)[1]:
            raise ValueError("must read FILE.py:FUNCTION, e.g. 'reference.py:make_inputs'")
        return value

    @model_validator(mode="after")
    def _same_dims_everywhere(self) -> TaskSpec:
        dims = set(self.shapes[0])
        for field in ("shapes", "check_shapes", "cpu_shapes"):
            for i, shape in enumerate(getattr(self, field)):
                if set(shape) != dims:
                    raise ValueError(
                        f"{field}[{i}] has dimensions {sorted(shape)} but shapes[0] has {sorted(dims)}"
                    )
        if problem := unknown_fixed_dims(self.settings.get("evaluator", {}).get("hidden_fixed_dims", []), self.shapes[0]):
            raise ValueError(f"settings.evaluator.{problem}")
        return self


def shrunk(shape: Shape, product: int = CPU_SHAPE_PRODUCT) -> Shape:
    """``shape`` with its largest dim halved (rounding up) until the product of its dims is at most
    ``product``: the sizes keep their order and a power of two stays one."""
    small = dict(shape)
    while math.prod(small.values()) > product and max(small.values()) > 1:
        dim = max(small, key=lambda d: small[d])
        small[dim] = (small[dim] + 1) // 2
    return small


class Task:
    """A loaded task: the spec plus its folder, importable reference and candidate sources."""

    def __init__(self, spec: TaskSpec, folder: Path):
        self.spec = spec
        self.folder = folder
        self.search_spaces = _normalize_search_space(spec)
        _check_target(spec)
        self._modules: dict[str, ModuleType] = {}
        self._import_lock = threading.Lock()

    # -- identity -----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dtypes(self) -> list[str]:
        return [self.spec.dtype] if isinstance(self.spec.dtype, str) else list(self.spec.dtype)

    @property
    def baseline_name(self) -> str | None:
        """The baseline module's file name; None for a task without a baseline kernel."""
        return self.spec.baseline

    @property
    def has_baseline(self) -> bool:
        return self.spec.baseline is not None

    @property
    def first_kernel_notes(self) -> list[str]:
        """What tools.first_kernel says of a baseline it made from torch.compile's code (else empty)."""
        return list(self.spec.settings.get("first_kernel", {}).get("notes", []))

    @property
    def module_names(self) -> list[str]:
        return [m for m in (self.spec.baseline, *self.spec.variants) if m is not None]

    @property
    def default_module(self) -> str | None:
        """The module a config belongs to when none is named: the baseline, else the first variant."""
        return self.module_names[0] if self.module_names else None

    def signature(self) -> dict[str, Any]:
        """What identifies the workload (for caches and the case library)."""
        return {
            "name": self.name,
            "description": self.spec.description,
            "dtypes": self.dtypes,
            "shapes": self.spec.shapes,
        }

    # -- files --------------------------------------------------------------------------------
    def path(self, relative: str) -> Path:
        return self.folder / relative

    def source(self, module: str) -> str:
        return self.path(module).read_text()

    @property
    def baseline_source(self) -> str | None:
        """The baseline's source; None for a task without a baseline kernel."""
        return self.source(self.spec.baseline) if self.spec.baseline is not None else None

    # -- reference ----------------------------------------------------------------------------
    @property
    def reference_module(self) -> ModuleType:
        return self._module(self.spec.reference)

    def _module(self, file: str) -> ModuleType:
        """The task's file imported once. Under a lock: the judge's threads ask at once, and two imports
        would be two modules, each with its own state (a reference's locks and caches, its RNG use)."""
        with self._import_lock:
            if file not in self._modules:
                kind = "ref" if file == self.spec.reference else "inputs"
                self._modules[file] = import_file(self.path(file), f"_ka_{kind}_{self.name}")
            return self._modules[file]

    @property
    def reference(self) -> Callable[..., Any]:
        fn = getattr(self.reference_module, "reference", None)
        if not callable(fn):
            raise TaskError(f"reference: {self.spec.reference} defines no function 'reference'")
        return fn

    @property
    def make_inputs(self) -> Callable[..., tuple]:
        """The task's input function, whose result is always a tuple: one tensor returned alone (as a
        one-input task is often written) is the tuple of that tensor, never unpacked row by row."""
        file, func = self.spec.inputs.split(":", 1)
        module = self._module(file)
        fn = getattr(module, func, None)
        if not callable(fn):
            raise TaskError(f"inputs: {file} defines no function {func!r}")

        @functools.wraps(fn)
        def made(*args: Any, **kwargs: Any) -> tuple:
            out = fn(*args, **kwargs)
            return tuple(out) if isinstance(out, tuple | list) else (out,)

        return made

    # -- workload -----------------------------------------------------------------------------
    @property
    def cpu_shapes(self) -> list[Shape]:
        """What a CPU run times: ``cpu_shapes``, else ``check_shapes``, else each shape shrunk (``shrunk``)."""
        if self.spec.cpu_shapes or self.spec.check_shapes:
            return self.spec.cpu_shapes or self.spec.check_shapes
        return self.derived_cpu_shapes

    @property
    def derived_cpu_shapes(self) -> list[Shape]:
        """Each shape shrunk for the interpreter, duplicates dropped ([] when the task names CPU or check
        shapes: they are what a CPU run uses)."""
        if self.spec.cpu_shapes or self.spec.check_shapes:
            return []
        derived: list[Shape] = []
        for shape in map(shrunk, self.spec.shapes):
            if shape not in derived:
                derived.append(shape)
        return derived

    def workload(self, device: str) -> list[tuple[Shape, str]]:
        """(shape, dtype) pairs that are timed: every shape x dtype on a GPU, ``cpu_shapes`` on CPU."""
        shapes = self.spec.shapes if device != "cpu" else self.cpu_shapes
        return [(shape, dtype) for shape in shapes for dtype in self.dtypes]

    def check_workload(self, device: str) -> list[tuple[Shape, str]]:
        """(shape, dtype) pairs checked for correctness only."""
        extra = self.spec.check_shapes if device != "cpu" or self.spec.cpu_shapes else []
        return [(shape, dtype) for shape in extra for dtype in self.dtypes]

    @property
    def row_scaled(self) -> bool:
        return self.spec.tolerance is not None and self.spec.tolerance.scale == "row"

    def tolerance(self, dtype: str) -> tuple[float, float]:
        if self.spec.tolerance is not None:
            return self.spec.tolerance.rtol, self.spec.tolerance.atol
        return DEFAULT_TOLERANCE[dtype]

    # -- search space -------------------------------------------------------------------------
    def search_space(self, module: str | None = None) -> dict[str, list]:
        """The module's space; a module the task does not list gets the default module's ({} without one)."""
        module = module or self.default_module
        if module in self.search_spaces:
            return self.search_spaces[module]
        return self.search_spaces.get(self.default_module, {})

    def config_problems(self, config: dict[str, Any], module: str | None = None) -> list[str]:
        """Why ``config`` is outside the human's search space (empty when inside)."""
        return config_problems(self.search_space(module), config)

    def default_config(self, module: str | None = None) -> dict[str, Any]:
        """The baseline's config: the task may name it in settings.baseline_config, else each key's first value."""
        module = module or self.default_module
        named = self.spec.settings.get("baseline_config", {})
        if module in named:
            return dict(named[module])
        if named and module == self.default_module and all(k in self.search_space(module) for k in named):
            return dict(named)
        return {key: values[0] for key, values in self.search_space(module).items()}

    def space_size(self, module: str | None = None) -> int:
        return math.prod(len(v) for v in self.search_space(module).values())


def config_problems(space: dict[str, list], config: dict[str, Any]) -> list[str]:
    """Why ``config`` lies outside ``space``, naming each key (empty when inside)."""
    problems = []
    for key, value in config.items():
        if key not in space:
            problems.append(f"{key} is not a search-space key (allowed: {', '.join(space) or 'none'})")
        elif value not in space[key]:
            problems.append(f"{key}={value!r} is not among the allowed values {space[key]}")
    missing = [key for key in space if key not in config]
    if missing:
        problems.append(f"missing value(s) for {', '.join(missing)}")
    return problems


def _normalize_search_space(spec: TaskSpec) -> dict[str, dict[str, list]]:
    space = spec.search_space
    keyed_by_module = bool(space) and all(key.endswith(".py") for key in space)
    if not keyed_by_module:
        spaces = {spec.baseline: space} if spec.baseline is not None else {}
        for variant in spec.variants:
            spaces.setdefault(variant, space)
    else:
        unknown = [key for key in space if key not in (spec.baseline, *spec.variants)]
        if unknown:
            raise TaskError(f"search_space: {unknown[0]} is neither the baseline nor a listed variant")
        spaces = dict(space)
    for module, sub in spaces.items():
        if not isinstance(sub, dict):
            raise TaskError(f"search_space[{module!r}] must map parameter names to lists of values")
        for key, values in sub.items():
            if not isinstance(values, list) or not values:
                raise TaskError(f"search_space: {key} must be a non-empty list of allowed values")
    return spaces


def _check_target(spec: TaskSpec) -> None:
    """target.min_dims against the rest of the spec: it scopes roofline_pct to some of the shapes."""
    min_dims = spec.target.min_dims
    if min_dims is None:
        return
    where = f"task {spec.name!r}: target.min_dims"
    if spec.target.roofline_pct is None:
        raise TaskError(f"{where} needs target.roofline_pct: it only scopes the roofline target")
    if not min_dims:
        raise TaskError(f"{where} is empty; name at least one dimension or leave min_dims out")
    dims = list(spec.shapes[0])
    unknown = [dim for dim in min_dims if dim not in dims]
    if unknown:
        raise TaskError(
            f"{where}: {unknown[0]!r} is not a dimension of the task's shapes ({', '.join(dims)})"
        )
    if not any(meets_min_dims(shape, min_dims) for shape in spec.shapes):
        wanted = ", ".join(f"{dim} >= {size}" for dim, size in min_dims.items())
        raise TaskError(
            f"{where}: no shape in shapes has {wanted}, so the roofline target would judge nothing"
        )


def load_task(path: str | Path) -> Task:
    """Load a task from its folder or its JSON file. Raises TaskError naming the field."""
    path = Path(path)
    if path.is_dir():
        folder, file = path, path / "task.json"
    else:
        folder, file = path.parent, path
    if not file.exists():
        raise TaskError(f"task file not found: {file}")
    try:
        raw = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise TaskError(
            f"{file}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(raw, dict):
        raise TaskError(f"{file}: the top level must be a JSON object")
    try:
        spec = TaskSpec.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "(top level)"
            lines.append(f"{field}: {err['msg']}")
        raise TaskError(f"{file}: " + "; ".join(lines)) from None
    for field in ("reference", "baseline"):
        if getattr(spec, field) is not None and not (folder / getattr(spec, field)).is_file():
            raise TaskError(f"{field}: file {getattr(spec, field)!r} not found in {folder}")
    inputs_file = spec.inputs.split(":", 1)[0]
    if not (folder / inputs_file).is_file():
        raise TaskError(f"inputs: file {inputs_file!r} not found in {folder}")
    for i, variant in enumerate(spec.variants):
        if not (folder / variant).is_file():
            raise TaskError(f"variants[{i}]: file {variant!r} not found in {folder}")
    return Task(spec, folder.resolve())


def import_file(path: Path, module_name: str) -> ModuleType:
    """Import a Python file under a private module name (no sys.path changes)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TaskError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise TaskError(f"{path.name} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def bytes_moved(task: Task, inputs: tuple, outputs: tuple) -> int:
    """What one call moves through memory: the task's bytes_moved, else every input read once and every
    output written once (the roofline's numerator)."""
    if task.spec.bytes_moved:
        return task.spec.bytes_moved
    return sum(t.numel() * t.element_size() for t in (*inputs, *outputs) if hasattr(t, "element_size"))


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


if __name__ == "__main__":  # python -m tools.task TASK [--run]: check a task (tools/task_cli.py)
    from tools.task_cli import main

    sys.exit(main())
