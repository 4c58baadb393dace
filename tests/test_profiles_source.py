"""Source summaries of real task modules, and the hottest loop of real compiled PTX/SASS."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiles.source_summary import hot_loop_asm, summarize_source

REPO = Path(__file__).resolve().parents[1]
TASK_MODULES = sorted(REPO.glob("tasks/*/*.py"))
CANDIDATES = [p for p in TASK_MODULES if p.name != "reference.py"] or [REPO / "tests" / "gpu_kernels.py"]


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_candidate_module_is_summarized_compactly(path: Path) -> None:
    source = path.read_text()
    summary = summarize_source(source)
    kernels = re.findall(r"@triton\.jit\s*\ndef (\w+)", source)
    for name in kernels:
        assert f"kernel {name} (lines" in summary
    assert summary.count("\nkernel ") == len(kernels)
    assert "launch in launch()" in summary
    assert len(summary) < max(2000, len(source) // 2), "a summary must be much shorter than the source"


def test_gqa_decode_baseline_summary_names_its_structure() -> None:
    path = REPO / "tasks" / "gqa_decode" / "baseline.py"
    if not path.exists():
        pytest.skip("tasks/gqa_decode not written yet")
    summary = summarize_source(path.read_text())
    assert "constexpr tunables: HQ, HKV, D, BLOCK_S" in summary
    assert "loop for start in range(0, S, BLOCK_S)" in summary
    # The loads inside the S loop are masked, indented under it; the q load before it is not masked.
    assert re.search(r"\n    load k_ptr \+ offs  masked \(s_mask\[:, None\]\)", summary)
    assert re.search(r"\n  load q_ptr \+ pid \* D \+ d  UNMASKED", summary)
    assert "gqa_decode_kernel[(B * HQ,)]" in summary and "num_warps=num_warps" in summary
    assert "0 tl.dot, 4 reductions, 0 atomics" in summary


def test_test_kernels_summary_shows_atomics_and_grid_assignments() -> None:
    summary = summarize_source((REPO / "tests" / "gpu_kernels.py").read_text())
    assert "atomic_add Out + offs % SLOTS  masked" in summary
    assert "where grid = (triton.cdiv(m * n, block),)" in summary
    assert "constexpr tunables: SLOTS, BLOCK" in summary


def test_unparseable_or_kernel_free_source() -> None:
    assert summarize_source("def f(:\n").startswith("cannot summarize: syntax error at line 1")
    assert (
        summarize_source("import torch\n\ndef launch(x):\n    return x\n")
        == "no @triton.jit kernel in this module"
    )


NESTED = """
import json, os, subprocess, sys, tempfile
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget


@triton.jit
def nested(X, Y, M, N, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(0, M):
        for j in range(0, N, BLOCK):
            offs = j + tl.arange(0, BLOCK)
            acc += tl.load(X + i * N + offs, mask=offs < N, other=0.0)
    tl.store(Y + pid * BLOCK + tl.arange(0, BLOCK), acc)


src = triton.compiler.ASTSource(
    fn=nested, signature={"X": "*fp32", "Y": "*fp32", "M": "i32", "N": "i32"}, constexprs={"BLOCK": 128}
)
compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32))
out = sys.argv[1]
with open(os.path.join(out, "k.ptx"), "w") as f:
    f.write(compiled.asm["ptx"])
cubin = os.path.join(out, "k.cubin")
with open(cubin, "wb") as f:
    f.write(compiled.asm["cubin"])
bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
for tool, args, name in (("nvdisasm", ["-c", "-gi"], "k.nvdisasm"), ("cuobjdump", ["-sass"], "k.cuobjdump")):
    path = os.path.join(bin_dir, tool)
    if os.path.exists(path):
        text = subprocess.run([path, *args, cubin], capture_output=True, text=True).stdout
        with open(os.path.join(out, name), "w") as f:
            f.write(text)
"""


@pytest.fixture(scope="module")
def compiled_asm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PTX and SASS of a real two-level loop nest, compiled for sm_90 (no GPU needed to compile)."""
    out = tmp_path_factory.mktemp("asm")
    script = out / "nested_kernel.py"
    script.write_text(NESTED)
    env = {"PATH": "/usr/bin:/bin", "TRITON_CACHE_DIR": str(out / "cache"), "HOME": str(out)}
    proc = subprocess.run(
        [sys.executable, str(script), str(out)], capture_output=True, text=True, env=env, timeout=300
    )
    if proc.returncode != 0 or not (out / "k.ptx").exists():
        pytest.skip(f"Triton could not compile for sm_90 here: {proc.stderr[-500:]}")
    return out


def _range(summary: str) -> tuple[int, int]:
    first, last = re.search(r"lines (\d+)-(\d+) of the listing", summary).groups()
    return int(first), int(last)


def test_hot_loop_of_real_ptx_is_the_inner_loop(compiled_asm: Path) -> None:
    ptx = (compiled_asm / "k.ptx").read_text()
    lines = ptx.splitlines()
    # LLVM marks its loop headers; the one at depth 2 is the inner loop.
    inner = next(i + 1 for i, line in enumerate(lines) if "Inner Loop Header: Depth=2" in line)
    outer = next(i + 1 for i, line in enumerate(lines) if "Loop Header: Depth=1" in line)
    hot = hot_loop_asm(ptx)
    first, last = _range(hot)
    assert first <= inner <= last and not first <= outer <= last
    assert "nesting depth 2" in hot and "ld.global" in hot
    assert ".loc" not in hot  # debug-line noise is dropped
    assert len(hot_loop_asm(ptx, max_lines=5).splitlines()) == 6  # header + 4 lines + "... more lines"


@pytest.mark.parametrize("listing", ["k.nvdisasm", "k.cuobjdump"])
def test_hot_loop_of_real_sass(compiled_asm: Path, listing: str) -> None:
    path = compiled_asm / listing
    if not path.exists() or "LDG" not in path.read_text():
        pytest.skip(f"{listing} not available with this Triton")
    hot = hot_loop_asm(path.read_text())
    assert "nesting depth 2" in hot and "LDG" in hot and "BRA" in hot
    assert not re.search(r"/\* 0x[0-9a-f]{16} \*/", hot)  # cuobjdump's encodings are stripped


def test_hot_loop_without_a_loop() -> None:
    assert hot_loop_asm("mov.u32 %r1, %tid.x;\nret;\n").startswith("no loop found")


def test_summary_json_safe() -> None:
    # The summary travels inside JSON state: plain text only.
    text = summarize_source((REPO / "tests" / "gpu_kernels.py").read_text())
    assert json.loads(json.dumps(text)) == text
