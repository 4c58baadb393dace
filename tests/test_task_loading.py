"""Task files: a good one loads from its folder or its JSON; a bad one names the field and the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.task import TaskError, load_task, meets_min_dims

TASK = Path(__file__).parent / "fixtures" / "tasks" / "axpy"


def _write(tmp_path: Path, **changes) -> Path:
    spec = json.loads((TASK / "task.json").read_text())
    for key, value in changes.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    for name in ("reference.py", "baseline.py"):
        (tmp_path / name).write_text((TASK / name).read_text())
    (tmp_path / "task.json").write_text(json.dumps(spec))
    return tmp_path


def test_folder_and_json_file_both_load():
    a, b = load_task(TASK), load_task(TASK / "task.json")
    assert a.name == b.name == "axpy"
    assert a.folder == b.folder
    assert a.tolerance("float32") == (1e-4, 1e-4)  # default by dtype
    assert a.default_config() == {"BLOCK": 128, "num_warps": 4}


@pytest.mark.parametrize(
    ("changes", "field", "problem"),
    [
        ({"dtype": "float8"}, "dtype", "unknown dtype"),
        ({"shapes": []}, "shapes", "at least 1"),
        ({"name": None}, "name", "Field required"),
        ({"inputs": "reference.py"}, "inputs", "FILE.py:FUNCTION"),
        ({"check_shapes": [{"M": 0, "N": 3}]}, "check_shapes", "sizes must be >= 1"),
        ({"check_shapes": [{"rows": 2}]}, "check_shapes[0]", "dimensions"),
        ({"baseline": "nope.py"}, "baseline", "not found"),
        ({"budget": {"rounds": 0}}, "budget.rounds", "greater than or equal to 1"),
        ({"bogus": 1}, "bogus", "Extra inputs"),
        ({"search_space": {"BLOCK": []}}, "search_space", "non-empty list"),
        ({"settings": {"evaluator": {"hidden_fixed_dims": ["K"]}}}, "hidden_fixed_dims", "not dims of the shapes"),
        ({"settings": {"evaluator": {"hidden_fixed_dims": "M"}}}, "hidden_fixed_dims", "valid list"),
    ],
)
def test_bad_fields_are_named(tmp_path, changes, field, problem):
    with pytest.raises(TaskError) as info:
        load_task(_write(tmp_path, **changes))
    assert field in str(info.value) and problem in str(info.value)


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ({"roofline_pct": 90, "min_dims": {"K": 8}}, "'K' is not a dimension of the task's shapes (M, N)"),
        ({"roofline_pct": 90, "min_dims": {"M": 5}}, "no shape in shapes has M >= 5"),
        ({"speedup": 2, "min_dims": {"M": 4}}, "needs target.roofline_pct"),
        ({"min_dims": {"M": 4}}, "needs target.roofline_pct"),
        ({"roofline_pct": 90, "min_dims": {}}, "is empty"),
    ],
)
def test_min_dims_is_checked_against_the_shapes_naming_the_task(tmp_path, target, problem):
    with pytest.raises(TaskError) as info:
        load_task(_write(tmp_path, target=target))
    assert "task 'axpy': target.min_dims" in str(info.value) and problem in str(info.value)


@pytest.mark.parametrize("size", [0, -1, 2.5, "8", True])
def test_min_dims_sizes_are_integers_from_1(tmp_path, size):
    with pytest.raises(TaskError, match=r"task.json: target.min_dims.M: "):
        load_task(_write(tmp_path, target={"roofline_pct": 90, "min_dims": {"M": size}}))


def test_min_dims_that_match_a_shape_load(tmp_path):
    task = load_task(_write(tmp_path, target={"roofline_pct": 90, "min_dims": {"M": 4, "N": 300}}))
    assert task.spec.target.min_dims == {"M": 4, "N": 300}
    assert load_task(TASK).spec.target.min_dims is None  # absent: every shape is judged


@pytest.mark.parametrize(
    ("name", "target", "judged"),
    [
        ("gqa_decode", {"roofline_pct": 85, "min_dims": {"B": 8}}, 3),  # of 4: B=1 is not judged
        ("softmax", {"roofline_pct": 90, "min_dims": {"M": 2048}}, 3),  # of 5: M=1 and M=32 are not judged
        ("add_rmsnorm", {"roofline_pct": 92, "min_dims": {"M": 4096}}, 4),  # of 10
    ],
)
def test_the_example_tasks_load_with_their_scoped_roofline_targets(name, target, judged):
    task = load_task(Path(__file__).parents[1] / "tasks" / name)
    assert task.spec.target.model_dump(exclude_none=True) == target
    assert sum(meets_min_dims(s, task.spec.target.min_dims) for s in task.spec.shapes) == judged


def test_invalid_json_says_where(tmp_path):
    (tmp_path / "task.json").write_text('{"name": "x",\n "shapes": [}')
    with pytest.raises(TaskError, match="line 2"):
        load_task(tmp_path)


def test_config_problems_name_the_key():
    task = load_task(TASK)
    assert task.config_problems({"BLOCK": 128, "num_warps": 4}) == []
    problems = task.config_problems({"BLOCK": 100, "num_warps": 4, "EXTRA": 1})
    assert any("BLOCK=100" in p for p in problems)
    assert any("EXTRA is not a search-space key" in p for p in problems)


def test_a_task_without_a_baseline_loads_with_no_modules_and_no_space(tmp_path):
    task = load_task(_write(tmp_path, baseline=None, search_space=None, settings=None))
    assert task.spec.baseline is None and task.baseline_name is None and not task.has_baseline
    assert task.baseline_source is None
    assert task.module_names == [] and task.default_module is None
    assert task.search_space() == {} and task.default_config() == {} and task.space_size() == 1
    assert task.workload("cpu") and task.reference is not None


def test_without_a_baseline_the_first_variant_is_the_default_module(tmp_path):
    (tmp_path / "fast.py").write_text((TASK / "baseline.py").read_text())
    task = load_task(_write(tmp_path, baseline=None, variants=["fast.py"], settings=None))
    assert task.module_names == ["fast.py"] and task.default_module == "fast.py"
    assert (
        task.search_space()
        == task.search_space("other.py")
        == {"BLOCK": [64, 128, 256], "num_warps": [1, 2, 4]}
    )
    assert task.default_config() == {"BLOCK": 64, "num_warps": 1}


def test_a_null_baseline_is_no_baseline_and_a_missing_file_is_still_named(tmp_path):
    folder = _write(tmp_path)
    spec = json.loads((folder / "task.json").read_text())
    (folder / "task.json").write_text(json.dumps({**spec, "baseline": None}))
    assert load_task(folder).baseline_name is None
    with pytest.raises(TaskError, match="baseline: file 'gone.py' not found"):
        load_task(_write(tmp_path, baseline="gone.py"))


def test_hidden_shapes_move_every_dim_but_the_ones_a_task_fixes(tmp_path):
    from tools.evaluate import EvalSettings, draw_hidden_shapes

    two_models = {"shapes": [{"M": 4, "N": 300}, {"M": 8, "N": 500}], "cpu_shapes": [{"M": 4, "N": 30}, {"M": 5, "N": 31}]}
    fixed = load_task(_write(tmp_path, settings={"evaluator": {"hidden_fixed_dims": ["N"]}}, **two_models))
    (tmp_path / "free").mkdir()
    free = load_task(_write(tmp_path / "free", **two_models))
    timed_n = {s["N"] for s in fixed.spec.shapes}
    for seed in range(20):
        for device, first in (("cuda", fixed.spec.shapes[0]), ("cpu", fixed.spec.cpu_shapes[0])):
            drawn = draw_hidden_shapes(fixed, device, EvalSettings.for_task(fixed, hidden_seed=seed))
            assert drawn and all(s["N"] == first["N"] for s in drawn)  # one model: the first shape's
            assert all(s not in fixed.spec.shapes + fixed.spec.cpu_shapes for s in drawn)  # nobody listed it
    moved = [draw_hidden_shapes(free, "cuda", EvalSettings.for_task(free, hidden_seed=s))[0] for s in range(20)]
    assert any(s["N"] not in timed_n for s in moved)


def test_a_runs_fixed_dims_that_are_not_the_tasks_dims_stop_it_before_it_starts():
    from loop.settings import SettingsError, load_settings

    with pytest.raises(SettingsError, match=r"setting evaluator.hidden_fixed_dims names \['K'\], not dims"):
        load_settings(load_task(TASK), {"evaluator": {"hidden_fixed_dims": ["K"]}})


def test_an_inputs_file_of_its_own_is_imported_once_and_keeps_its_state(tmp_path):
    """make_inputs in a file beside the reference: every call is the same module's function (module
    state, a cache a user keeps there or a slow setup, is not redone or lost on each call)."""
    folder = _write(tmp_path, inputs="inputs.py:make_inputs")
    (folder / "inputs.py").write_text(
        "CALLS = []\n\n\ndef make_inputs(shape, dtype, device, seed):\n    CALLS.append(seed)\n    return ()\n"
    )
    task = load_task(folder)
    for seed in range(3):
        task.make_inputs({"M": 2, "N": 8}, "float32", "cpu", seed)
    assert task.make_inputs.__wrapped__.__globals__["CALLS"] == [0, 1, 2]


def test_threads_asking_for_the_reference_at_once_share_one_module(tmp_path):
    """The judge's input threads all ask for make_inputs first thing: one import, one module (two would
    each keep their own lock and shape records: the reference's one-at-a-time rule would not hold). From
    Python 3.12 functools.cached_property takes no lock: eight threads asking at once got two."""
    import threading

    folder = _write(tmp_path)
    reference = folder / "reference.py"
    reference.write_text("import time\ntime.sleep(0.2)\n" + reference.read_text())
    task = load_task(folder)
    start, seen = threading.Barrier(8), []

    def ask() -> None:
        start.wait()
        seen.append(id(task.make_inputs.__wrapped__.__globals__))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and len(set(seen)) == 1
    assert task.reference.__globals__ is task.make_inputs.__wrapped__.__globals__
