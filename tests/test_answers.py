"""Answers are parsed and checked against the task before any is taken (nodes/answers.py), and which
launch() keywords size a block is read from the kernels' source (tools/kernel_roles.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodes.answers import AnswerError, parse_answer
from tools.kernel_roles import block_size_keys
from tools.task import load_task

REPO = Path(__file__).parent.parent
RMSNORM = load_task(REPO / "tasks" / "add_rmsnorm")
AXPY = load_task(Path(__file__).parent / "fixtures" / "tasks" / "axpy")


def refused(answer: str, task=RMSNORM) -> str:
    with pytest.raises(AnswerError) as caught:
        parse_answer(answer, task.search_spaces, [], task)
    return str(caught.value)


def taken(answer: str, task=RMSNORM) -> dict:
    return parse_answer(answer, task.search_spaces, [], task)


def test_a_value_of_another_type_than_the_keys_values_is_refused():
    assert "num_warps takes whole numbers" in refused("widen num_warps=abc")
    assert "'abc' is not one" in refused("widen num_warps=abc")
    assert "takes whole numbers" in refused("constrain ROWS=1.5")


def test_triton_launch_options_take_only_what_triton_runs():
    assert "powers of two" in refused("widen num_warps=12")
    assert "num_stages is a whole number >= 1" in refused("widen num_stages=0", load_task(REPO / "tasks" / "gqa_decode"))
    assert taken("widen num_warps=2")["changes"][0]["values"] == [2]


def test_a_block_size_must_be_a_power_of_two_where_a_kernel_arange_takes_it_but_a_loop_count_need_not():
    why = refused("widen ROWS=3")  # multirow.py's ROWS sizes tl.arange(0, ROWS); baseline.py's is a loop count
    assert "ROWS sizes a block (tl.arange) in multirow.py" in why and "baseline.py" not in why
    assert refused("widen multirow.py:ROWS=3")
    assert taken("widen baseline.py:ROWS=3")["changes"] == [{"modules": ["baseline.py"], "key": "ROWS", "values": [3]}]
    assert taken("widen ROWS=16")["changes"][0]["modules"] == ["baseline.py", "multirow.py"]


def test_a_constraint_must_name_a_construct():
    assert "names no construct" in refused("constrain forbid=")
    assert "not a dotted name" in refused("constrain forbid=tl.dot,1+1")
    assert taken("constrain forbid=tl.dot,tl.atomic_max")["forbid"] == ["tl.dot", "tl.atomic_max"]


def test_a_candidate_needs_a_file_and_a_config_inside_the_space(tmp_path):
    assert "candidate file not found" in refused(f"candidate {tmp_path / 'nothing.py'}", AXPY)
    mine = tmp_path / "mine.py"
    mine.write_text((AXPY.folder / "baseline.py").read_text())
    assert "outside baseline.py's space" in refused(f'candidate {mine} {{"BLOCK": 100, "num_warps": 4}}', AXPY)
    assert taken(f'candidate {mine} {{"BLOCK": 64, "num_warps": 4}}', AXPY)["config"] == {"BLOCK": 64, "num_warps": 4}


def test_unknown_answers_and_keys_say_what_would_work():
    assert "choose one of: continue, stop" in refused("yes please")
    assert "unknown search-space key 'BLOCK'" in refused("widen BLOCK=64")
    assert "no values given" in refused("widen num_warps=")


KERNELS = '''
import triton
import triton.language as tl

@triton.jit
def helper(x, WIDTH: tl.constexpr):
    return x + tl.arange(0, WIDTH)

@triton.jit
def kernel(x_ptr, n, TILE: tl.constexpr, HALF: tl.constexpr, LOOPS: tl.constexpr, FIXED: tl.constexpr):
    TWICE: tl.constexpr = HALF * 2
    acc = tl.zeros([TWICE], tl.float32)
    for i in range(LOOPS):
        acc += helper(acc, TILE)
    tl.store(x_ptr + tl.arange(0, FIXED), acc)

def launch(x, *, BLOCK, SPLIT, REPEAT, PROGRAMS):
    n = x.numel()
    tile = BLOCK * 4
    kernel[(PROGRAMS,)](x, n, TILE=tile, HALF=min(SPLIT, 8), LOOPS=REPEAT, FIXED=triton.next_power_of_2(n))
    return x
'''


def test_block_size_keys_follow_values_through_arithmetic_assignments_and_helper_kernels():
    # BLOCK: * 4 in launch, then a helper's tl.arange; SPLIT: min() then * 2 into tl.zeros' shape.
    # REPEAT is a loop count, PROGRAMS a grid size, and next_power_of_2(n) is a new number.
    assert block_size_keys(KERNELS) == {"BLOCK", "SPLIT"}
    assert block_size_keys("def launch(:") == set()
