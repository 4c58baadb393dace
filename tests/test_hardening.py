"""Reward hacks, sandbox escapes and bad input: each gets the right verdict on CPU, and a correct
candidate still passes in the same session afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.candidate import Candidate
from tools.evaluate import EvalSettings, Evaluator, evaluate
from tools.sandbox import network_isolation
from tools.task import load_task

HERE = Path(__file__).parent
TASKS = HERE / "fixtures" / "tasks"
CHEATS = HERE / "fixtures" / "cheats"
GOOD = (HERE / "fixtures" / "candidates" / "good.py").read_text()
CONFIG = {"BLOCK": 128, "num_warps": 4}

# cheat file -> (error_type, stage, a phrase the message must carry)
EXPECTED = {
    "returns_input_view": ("forbidden_construct", "correctness", "aliases an input"),
    "tensor_subclass": ("forbidden_construct", "static", "class definitions"),
    "try_fallback": ("forbidden_construct", "static", "try/except"),
    "patches_timer": ("forbidden_construct", "static", ".do_bench"),
    "downcast": ("mismatch", "correctness", "outside tolerance"),
    "wrong_output_count": ("mismatch", "correctness", "returned 2 output(s)"),
    "listed_shapes_only": ("mismatch", "correctness", "differs"),
    "memory_hog": ("runtime_error", "compile", ""),
}


@pytest.fixture(scope="module")
def verdicts() -> dict:
    task = load_task(TASKS / "axpy")
    names = list(EXPECTED)
    cands = [Candidate(source=(CHEATS / f"{n}.py").read_text(), config=CONFIG) for n in names]
    with Evaluator(task, "cpu", EvalSettings(parallel=2, hidden_seed=7)) as evaluator:
        results = evaluator.evaluate_many([*cands, Candidate(source=GOOD, config=CONFIG)])
        hidden = evaluator.hidden_shapes
    return {"hidden": hidden, "good_after": results[-1], **dict(zip(names, results, strict=False))}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_cheat_gets_its_verdict(verdicts, name):
    error_type, stage, phrase = EXPECTED[name]
    r = verdicts[name]
    assert (r.error_type, r.stage) == (error_type, stage), r.message
    assert phrase in r.message


def test_benchmark_shape_specialization_is_caught_by_a_hidden_shape(verdicts):
    r = verdicts["listed_shapes_only"]
    hidden = verdicts["hidden"]
    assert hidden and all(s not in ({"M": 4, "N": 300}, {"M": 1, "N": 1}, {"M": 3, "N": 257}) for s in hidden)
    assert r.details["shape"] in hidden  # only the shape nobody listed exposed it


def test_correct_candidate_still_passes_after_the_cheats(verdicts):
    assert verdicts["good_after"].verdict == "pass"
    assert verdicts["good_after"].details["hidden_shapes"] == verdicts["hidden"]


def test_degenerate_output_cannot_hide_under_absolute_tolerance():
    r = evaluate(TASKS / "tiny_scale", (CHEATS / "zeros_output.py").read_text(), CONFIG, device="cpu")
    assert r.error_type == "mismatch"
    assert "relative error" in r.message
    baseline = evaluate(
        TASKS / "tiny_scale", (TASKS / "tiny_scale" / "baseline.py").read_text(), CONFIG, device="cpu"
    )
    assert baseline.error_type == "mismatch"  # the fixture's baseline computes axpy, not the scale


def test_write_outside_scratch_is_stopped_at_run_time(tmp_path):
    target = Path("/tmp/ka_escape_test.txt")
    target.unlink(missing_ok=True)
    settings = EvalSettings(static_checks=False, workdir=str(tmp_path))
    r = evaluate(
        TASKS / "axpy", (CHEATS / "writes_outside.py").read_text(), CONFIG, device="cpu", settings=settings
    )
    assert r.error_type == "forbidden_construct"
    assert "outside the scratch folder" in r.message
    assert not target.exists()


def test_network_is_stopped_at_run_time(tmp_path):
    settings = EvalSettings(static_checks=False, workdir=str(tmp_path))
    r = evaluate(
        TASKS / "axpy", (CHEATS / "opens_socket.py").read_text(), CONFIG, device="cpu", settings=settings
    )
    assert r.error_type == "forbidden_construct"
    assert "network access refused" in r.message


def test_signalling_another_process_is_stopped_at_run_time_and_the_next_candidate_runs(tmp_path):
    settings = EvalSettings(static_checks=False, workdir=str(tmp_path), parallel=1)
    task = load_task(TASKS / "axpy")
    cheat = Candidate(source=(CHEATS / "signals_parent.py").read_text(), config=CONFIG)
    good = Candidate(source=(HERE / "fixtures" / "candidates" / "good.py").read_text(), config=CONFIG)
    with Evaluator(task, "cpu", settings) as evaluator:
        stopped, after = evaluator.evaluate_many([cheat, good])
        zygote = evaluator.judge.last_done["zygote_pid"]
        state = Path(f"/proc/{zygote}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state != "T"  # not stopped: it forks the next worker at once
    assert stopped.error_type == "forbidden_construct" and "os.kill to process" in stopped.message
    assert after.passed, after.message


def test_static_checks_stop_both_escapes_first():
    for name in ("writes_outside", "opens_socket"):
        r = evaluate(TASKS / "axpy", (CHEATS / f"{name}.py").read_text(), CONFIG, device="cpu")
        assert (r.stage, r.error_type) == ("static", "forbidden_construct"), name


def test_worker_network_namespace_when_the_machine_allows_it():
    prefix = network_isolation()
    if not prefix:
        pytest.skip("unshare --net is refused on this machine; the audit hook alone guards sockets")
    out = subprocess.run(
        [*prefix, sys.executable, "-c", "import socket; print(socket.if_nameindex())"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and "eth" not in out.stdout  # only the loopback device exists


def test_reference_that_raises_is_a_task_error_with_exit_2():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.evaluate",
            str(TASKS / "broken_reference"),
            str(TASKS / "broken_reference" / "baseline.py"),
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        cwd=HERE.parent,
        timeout=300,
    )
    assert out.returncode == 2
    assert "reference raised" in out.stderr and "not implemented for this layout" in out.stderr


def test_the_sandbox_lets_triton_build_its_gpu_launcher_key(tmp_path):
    """Triton's driver keys its launcher builds on platform.architecture(), which runs `file`: the
    worker's sandbox must allow it (a GPU-only path, checked here without a GPU)."""
    code = (
        "import platform, sys; from pathlib import Path; from tools.sandbox import install_audit_hook; "
        f"install_audit_hook([Path({str(tmp_path)!r})]); print(platform.architecture(sys.executable)); "
        "import subprocess; subprocess.run(['curl', '--version'])"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=HERE.parent, capture_output=True, text=True)
    assert "bit" in done.stdout, done.stderr
    assert "starting 'curl' refused" in done.stderr


AOT_COMPILE = """
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tools.worker import _enter_sandbox

@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=o < n) * 2, mask=o < n)

_enter_sandbox()
src = ASTSource(fn=double, signature={"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, constexprs={"BLOCK": 128})
kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32))
print("cubin bytes", len(kernel.asm["cubin"]))
import os
os.posix_spawn("/usr/bin/curl", ["curl"], {})
"""


def test_the_sandbox_lets_triton_run_ptxas_for_an_sm90_cubin(tmp_path):
    """The GPU compile path without a GPU: Triton lowers a kernel to an sm_90 cubin (ptxas runs through
    posix_spawn) inside the worker's sandbox; spawning any other program stays refused."""
    scratch = tmp_path / "scratch"
    (scratch / "tmp").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(
        TRITON_CACHE_DIR=str(scratch / "cache"), TMPDIR=str(scratch / "tmp"), PYTHONPATH=str(HERE.parent)
    )
    script = scratch / "aot.py"
    script.write_text(AOT_COMPILE)
    done = subprocess.run([sys.executable, str(script)], cwd=scratch, env=env, capture_output=True, text=True)
    assert "cubin bytes" in done.stdout, done.stderr[-3000:]
    assert "starting 'curl' refused" in done.stderr


def test_a_huge_host_allocation_inside_launch_is_stopped_before_it_is_touched(monkeypatch):
    """GPU workers have no address-space limit; the op guard sizes host allocations on the meta device
    and refuses them before any memory is taken: one big tensor, any creation op, a resize, or many
    tensors under the cap that add up over it."""
    import torch

    from tools import guard

    monkeypatch.setattr(guard, "HOST_ALLOCATION_LIMIT", 1 << 20)
    two_mib = 1 << 19  # float32 elements
    for make in (
        lambda: torch.empty((two_mib,), dtype=torch.float32),
        lambda: torch.zeros((two_mib,), dtype=torch.float32),
        lambda: torch.full((two_mib,), 1.0),
        lambda: torch.empty(0).resize_(two_mib),
        lambda: [torch.empty((1 << 17,), dtype=torch.float32) for _ in range(3)],  # 3 x 512 KiB
        lambda: torch.empty_strided((2,), (1 << 19,)),  # 2 elements whose strides span 2 MiB
    ):
        with pytest.raises(MemoryError, match="out of memory: launch\\(\\) asked for"), guard.TorchOpGuard():
            make()
    with guard.TorchOpGuard():
        small = torch.empty((1 << 17,), dtype=torch.float32)  # 512 KiB: allowed, and poisoned
    assert torch.isnan(small).all()


PROFILE_TARGET = """
import sys
from pathlib import Path
from tools.profile_target import enter_sandbox

folder = enter_sandbox(sys.argv[1])
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=o < n) * 2, mask=o < n)

src = ASTSource(fn=double, signature={"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, constexprs={"BLOCK": 128})
triton.compile(src, target=GPUTarget("cuda", 90, 32))
print("compiled into", sorted(p.name for p in folder.iterdir()))
from tools.task import import_file, load_task
task = load_task(sys.argv[3])
import_file(task.path(task.baseline_name), "profiled_baseline")
print("task loaded")
open(sys.argv[2], "w").write("overwritten by the profiled candidate")
"""


def test_the_profiled_candidate_runs_in_the_sandbox_too(tmp_path):
    """ncu runs the candidate's code again (tools/profile_target.py): Triton still compiles there, into
    the scratch folder, and a write into the run folder is refused."""
    run_folder = tmp_path / "run"
    run_folder.mkdir()
    report = run_folder / "report.json"
    report.write_text("{}")
    script = tmp_path / "target.py"
    script.write_text(PROFILE_TARGET)
    task_copy = run_folder / "task"  # no __pycache__ yet: importing must not try to write one
    shutil.copytree(
        HERE.parent / "tasks" / "add_rmsnorm", task_copy, ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(HERE.parent)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "scratch"), str(report), str(task_copy)],
        cwd=HERE.parent,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "compiled into" in done.stdout and "triton_cache" in done.stdout, done.stderr[-3000:]
    assert "outside the scratch folder refused" in done.stderr
    assert report.read_text() == "{}" and "task loaded" in done.stdout


NATIVE_AND_HANDLES = {
    "native code through Triton's builder": "triton.runtime.build.compile_module_from_src('int x;', 'm')",
    "os reached through a module": "triton.language.core.os.system('id')",
    "a compiled kernel's handle on a stream": "axpy_kernel[(1,)](x, y, out, n, 2.0, BLOCK=128)[(1,)](x, y, out, n, 2.0, stream=0)",
    "an explicit stream keyword": "axpy_kernel[(1,)](x, y, out, n, 2.0, BLOCK=128, stream=0)",
    "warmup handle": "axpy_kernel.warmup(x, y, out, n, 2.0, BLOCK=128, grid=(1,))",
}


@pytest.mark.parametrize("what", NATIVE_AND_HANDLES)
def test_native_code_and_unrecorded_launch_paths_are_refused_statically(what):
    from tools.static_check import check_source

    source = (
        "import triton\nimport triton.language as tl\nimport torch\n\n\n@triton.jit\n"
        "def axpy_kernel(x_ptr, y_ptr, out_ptr, n, a, BLOCK: tl.constexpr):\n    pass\n\n\n"
        "def launch(x, y):\n    out = torch.empty_like(x)\n    n = x.numel()\n"
        f"    axpy_kernel[(1,)](x, y, out, n, 2.0, BLOCK=128)\n    {NATIVE_AND_HANDLES[what]}\n    return out\n"
    )
    report = check_source(source)
    assert not report.ok and report.error_type == "forbidden_construct", (what, report.message)


@pytest.mark.parametrize(
    "line", ["from triton.runtime import build", "from triton import runtime", "import triton.compiler"]
)
def test_imports_beyond_the_kernel_language_are_refused(line):
    from tools.static_check import check_source

    report = check_source(
        f"{line}\nimport triton\n\n\n@triton.jit\ndef k(x):\n    pass\n\n\ndef launch(x):\n    k[(1,)](x)\n"
    )
    assert report.error_type == "forbidden_construct", report.message


def test_allowed_program_names_do_not_open_the_sandbox(tmp_path):
    """Programs are judged by name, place and options: Triton's own commands pass; a shell copied into
    the scratch folder as `ptxas`, a compiler told to run a wrapper, an output outside the scratch
    folder and ldconfig writing a cache are refused."""
    from tools.sandbox import program_refused

    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def inside(path) -> bool:
        return os.path.realpath(os.fsdecode(path)).startswith(str(scratch))

    so, src = str(scratch / "launcher.so"), str(scratch / "main.c")
    allowed = [
        (
            "/usr/bin/cc",
            [
                "/usr/bin/cc",
                src,
                "-O3",
                "-shared",
                "-fPIC",
                "-Wno-psabi",
                "-o",
                so,
                "-lcuda",
                "-L/usr/lib64",
                "-I/opt/include",
            ],
        ),
        (
            "/opt/triton/bin/ptxas",
            ["ptxas", "-v", "--gpu-name=sm_90a", str(scratch / "k.ptx"), "-o", str(scratch / "k.cubin")],
        ),
        ("/opt/triton/bin/ptxas", ["ptxas", "--version"]),
        ("/sbin/ldconfig", ["/sbin/ldconfig", "-p"]),
        ("file", ["file", "-b", "/usr/bin/python3"]),
    ]
    for exe, argv in allowed:
        assert program_refused(exe, argv, None, inside) == "", (exe, argv)
    refused = [
        (str(scratch / "ptxas"), ["ptxas"]),
        ("/usr/bin/cc", ["cc", "-wrapper", "/bin/sh,-c,id", "x.c"]),
        ("/usr/bin/cc", ["cc", "-B/tmp/evil", "x.c"]),
        ("/usr/bin/cc", ["cc", src, "-o", "/etc/owned.so"]),
        ("/opt/triton/bin/ptxas", ["ptxas", "k.ptx", "-o", "/home/user/.bashrc"]),
        ("/sbin/ldconfig", ["ldconfig", "-C", "/tmp/cache"]),
        ("/bin/sh", ["sh", "-c", "id"]),
    ]
    for exe, argv in refused:
        assert program_refused(exe, argv, None, inside), (exe, argv)


def test_legitimate_launch_forms_pass_the_static_checks():
    """A kernel chosen by a conditional alias, Hopper TMA descriptors and the allocator they need."""
    from tools.static_check import check_source

    source = """
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def k_even(x_ptr, n, BLOCK: tl.constexpr):
    pass


@triton.jit
def k_any(x_ptr, n, BLOCK: tl.constexpr):
    pass


def launch(x, BLOCK=128):
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=x.device))
    n = x.numel()
    kernel = k_even if n % BLOCK == 0 else k_any
    kernel[(triton.cdiv(n, BLOCK),)](x, n, BLOCK=BLOCK)
    return x
"""
    report = check_source(source)
    assert report.ok, report.message
    assert report.launched == ["k_any", "k_even"]
    rebound = source.replace("    return x", "    kernel = print\n    kernel[(1,)](x)\n    return x")
    assert check_source(rebound).error_type == "forbidden_construct"


@pytest.mark.parametrize(
    "target",
    ["tools.timing.bench_ms", "tools.timing.flush_l2", "torch.sum", "torch.cuda.Event.elapsed_time"],
)
def test_a_patched_timing_function_is_reported(monkeypatch, target):
    """The timing server's tamper check: a candidate that replaced the timing loop, its L2 flush or the
    reduction the flush runs (a no-op flush would time it from a warm L2) is caught by name."""
    import importlib

    import tools.guard

    before = tools.guard.tamper_snapshot()
    owner_path, _, name = target.rpartition(".")
    if owner_path == "torch.cuda.Event":
        import torch

        owner = torch.cuda.Event
    else:
        owner = importlib.import_module(owner_path)
    monkeypatch.setattr(owner, name, lambda *a, **k: None)
    assert tools.guard.tampered(before) == [target]
    monkeypatch.undo()
    assert tools.guard.tampered(before) == []


def test_a_compile_only_call_writes_no_constant_fill_that_could_run_beside_a_timed_kernel():
    """The judge compiles a candidate's other shapes in commands meant to run nothing on the GPU while
    another candidate is timed: there, launch()'s zeros/ones/full/fill_ allocate and write nothing, with
    the shapes and dtypes they would have had; in every other call they fill as asked."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from tools import guard

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not (isinstance(out, torch.Tensor) and out.is_meta):  # the guard's size and dtype lookups
                self.seen.append(func.__name__)
            return out

    def launch_like() -> list:
        made = [torch.zeros((3, 4)), torch.ones_like(torch.empty(5)), torch.full((2,), 7), torch.empty(6)]
        made[-1].fill_(1.5)
        made.append(torch.empty(2).zero_())
        return made

    for fills in (True, False):
        with Ops() as below, guard.TorchOpGuard(poison=None, fills=fills):
            made = launch_like()
        writes = [op for op in below.seen if op.split(".")[0] in {"zeros", "ones", "full", "ones_like", "fill_", "zero_"}]
        assert bool(writes) == fills, (fills, below.seen)
        assert [(tuple(t.shape), t.dtype) for t in made] == [((3, 4), torch.float32), ((5,), torch.float32),
                                                             ((2,), torch.int64), ((6,), torch.float32),
                                                             ((2,), torch.float32)]  # fmt: skip
