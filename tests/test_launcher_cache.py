"""Triton's C launchers prebuilt by the judge (tools.launcher_cache): a worker's claim of the signatures it met
is only ever a list of Triton type names; each is built once, by a process that never imports a candidate,
and copied into a worker's own cache. On the GPU: a fresh process whose cache was seeded runs its kernel
without building a launcher of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools import launcher_cache
from tools.launcher_cache import LauncherCache, valid

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "claim",
    [
        ["*fp16", 'i32) { system("sh"); } (int'],  # C code where a type name goes
        ["*fp16", ("*fp32", "i32")],  # a tuple argument: the worker builds its own
        ["tensordesc<fp16[64, 64]>"],
        ["*fp16"] * (launcher_cache.MAX_ARGS + 1),
        [],
        "*fp16,i32",
        [7],
    ],
    ids=["c_injection", "tuple", "tensordesc", "too_long", "empty", "not_a_list", "not_a_name"],
)
def test_a_claim_that_is_not_a_list_of_triton_type_names_is_never_built(claim):
    assert valid(claim) is None


def test_real_signatures_are_accepted():
    assert valid(["*fp16", "*bf16", "*fp32", "i32", "i64", "fp32", "constexpr", "*i8", "u64"]) is not None


def _fake_build(calls: list):
    """Stands in for the C compiler where Triton builds no C launchers (this machine's Triton): one key
    folder per signature, as Triton lays them out."""

    def build(folder: Path, signatures: list[tuple[str, ...]]) -> tuple[list[str], str | None]:
        calls.append(list(signatures))
        for sig in signatures:
            key = folder / ("K" + "_".join(t.replace("*", "p") for t in sig))
            key.mkdir(parents=True, exist_ok=True)
            (key / f"{launcher_cache.LAUNCHER_NAME}.so").write_bytes(b"built by the judge")
        return launcher_cache._complete(folder), None

    return build


def test_each_signature_is_built_once_and_copied_once_into_each_worker(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(launcher_cache, "build", _fake_build(calls))
    cache = LauncherCache(tmp_path / "judge", enabled=True)
    cache.learn([["*fp16", "i32", "constexpr"], ["*fp16", "i32", "constexpr"], ["evil"]])
    assert cache.wait(10)
    cache.learn([["*fp32", "i32", "constexpr"]])  # *fp32 and *fp16 make the same C: Triton's hash merges them
    assert cache.wait(10)
    cache.learn([["*fp16", "i32", "constexpr"]])  # known: not built again
    assert cache.wait(10)
    assert calls == [[("*fp16", "i32", "constexpr")], [("*fp32", "i32", "constexpr")]]

    worker_cache, copied = tmp_path / "worker" / "triton_cache", set()
    worker_cache.mkdir(parents=True)
    cache.seed(worker_cache, copied)
    assert sorted(p.parent.name for p in worker_cache.glob("*/*.so")) == sorted(copied) and len(copied) == 2
    (worker_cache / next(iter(copied)) / f"{launcher_cache.LAUNCHER_NAME}.so").write_bytes(b"the worker's own")
    cache.seed(worker_cache, copied)  # nothing new: what the worker did to its copy stays its own
    assert b"the worker's own" in {p.read_bytes() for p in worker_cache.glob("*/*.so")}


def test_a_launcher_the_worker_built_itself_is_never_written_over(tmp_path, monkeypatch):
    """A worker may have built and loaded the same launcher before the judge's build ended: writing over a
    mapped library kills the process (SIGSEGV on the H200), so its own stays as it is."""
    monkeypatch.setattr(launcher_cache, "build", _fake_build([]))
    cache = LauncherCache(tmp_path / "judge", enabled=True)
    cache.learn([["*fp16", "i32"]])
    assert cache.wait(10)
    (key,) = launcher_cache._complete(tmp_path / "judge")
    worker_cache = tmp_path / "worker"
    own = worker_cache / key / f"{launcher_cache.LAUNCHER_NAME}.so"
    own.parent.mkdir(parents=True)
    own.write_bytes(b"the worker's own, loaded")
    inode = own.stat().st_ino
    cache.seed(worker_cache, set())
    assert own.read_bytes() == b"the worker's own, loaded" and own.stat().st_ino == inode
    assert [p.name for p in worker_cache.iterdir()] == [key]  # no part folder left behind
    assert all(p.read_bytes() == b"built by the judge" for p in (tmp_path / "judge").glob("*/*.so"))


def test_a_failed_build_leaves_the_workers_to_build_their_own(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(launcher_cache, "build", lambda folder, sigs: ([], "cc: not found"))
    cache = LauncherCache(tmp_path / "judge", enabled=True)
    cache.learn([["*fp16", "i32"]])
    assert cache.wait(10)
    copied: set[str] = set()
    cache.seed(tmp_path / "worker", copied)
    assert cache.failures == ["cc: not found"] and not copied and cache.built == 0
    assert "workers build their own" in capfd.readouterr().err


def test_a_judge_builds_what_an_earlier_judge_learned_before_any_worker_asks(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(launcher_cache, "build", _fake_build(calls))
    memory = tmp_path / "home" / "launchers.json"
    first = LauncherCache(tmp_path / "judge1", enabled=True, remembered=memory)
    first.learn([["*fp16", "i32", "constexpr"]])
    assert first.wait(10)
    memory.write_text(json.dumps([*json.loads(memory.read_text()), ["i32); evil(); (int"], "junk"]))  # tampered

    second = LauncherCache(tmp_path / "judge2", enabled=True, remembered=memory)
    assert second.wait(10)
    assert calls == [[("*fp16", "i32", "constexpr")]] * 2 and second.built == 1
    assert json.loads(memory.read_text())[0] == ["*fp16", "i32", "constexpr"]


def test_off_where_triton_launches_without_c_launchers(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(launcher_cache, "build", _fake_build(calls))
    cache = LauncherCache(tmp_path / "judge", enabled=False)
    cache.learn([["*fp16", "i32"]])
    assert cache.wait(1) and not calls


# -- on the GPU: a real Triton launcher, built by the judge's process and used by a fresh one ---------------

KERNEL_RUN = textwrap.dedent("""
    import json, sys
    import torch, triton, triton.language as tl
    from tools.launcher_cache import SignatureLog

    log = SignatureLog()
    log.install()

    @triton.jit
    def axpy(x, y, out, n, a, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, a * tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

    x = torch.arange(1000, device="cuda", dtype=torch.float32)
    y = torch.ones_like(x)
    out = torch.empty_like(x)
    axpy[(4,)](x, y, out, x.numel(), 2.0, BLOCK=256)
    assert torch.equal(out, 2 * x + 1)
    print(json.dumps(log.take()))
""")


def _run_kernel(cache_dir: Path) -> list:
    script = cache_dir.parent / "kernel_run.py"  # Triton reads a kernel's source from its file
    script.write_text(KERNEL_RUN)
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache_dir), "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _launchers(cache_dir: Path) -> set[str]:
    return {p.parent.name for p in cache_dir.glob(f"*/{launcher_cache.LAUNCHER_NAME}*.so")}


@pytest.mark.gpu
def test_a_seeded_worker_runs_its_kernel_on_the_judges_launcher(tmp_path):
    if not launcher_cache.c_launchers():
        pytest.skip("this Triton builds no C launchers")
    first = tmp_path / "first"
    signatures = _run_kernel(first)
    assert signatures and all(valid(s) for s in signatures)
    assert len(_launchers(first)) == 1  # the worker built its own

    cache = LauncherCache(tmp_path / "judge", enabled=True)
    cache.learn(signatures)
    assert cache.wait(300) and not cache.failures and cache.built == 1
    assert _launchers(tmp_path / "judge") == _launchers(first)  # the same source, so the same key

    seeded, copied = tmp_path / "seeded", set()
    seeded.mkdir()
    cache.seed(seeded, copied)
    before = {p: p.stat().st_mtime_ns for p in seeded.glob("*/*.so")}
    _run_kernel(seeded)
    after = {p: p.stat().st_mtime_ns for p in seeded.glob("*/*.so") if launcher_cache.LAUNCHER_NAME in p.name}
    assert after == before  # used as copied: no launcher built in the fresh process
