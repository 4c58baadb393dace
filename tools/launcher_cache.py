"""Triton's C launchers built once per judge by a trusted process, and copied into each worker's own cache.

Triton (up to 3.6 at least) compiles a small C module per kernel signature to launch it: a C compiler run of
about 0.3 s that every fresh worker pays again for every signature it meets (seven per add_rmsnorm
candidate). Its source depends only on the signature's argument kinds (a pointer of any dtype, each scalar
type, a constexpr), so candidates of one kernel file share them whatever their config.

Nothing a worker built is ever handed to another worker: a worker only says which signatures it met (a
claim, checked against Triton's type names here), and a process that never imports a candidate regenerates
the source with Triton's own ``make_launcher`` and compiles it into the judge's folder. Triton finds a
launcher by the hash of its source, so a copied launcher is used only by a worker whose own source is the
same; one built for a signature a worker made up is never looked up. Where Triton builds no C launchers
(later versions launch every kernel through one module) this is off."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tools.sandbox import child_env

# a pointer to, or a scalar of, one of Triton's element types; or a constexpr (no C argument)
_TYPE = re.compile(r"\*?k?(i1|i8|i16|i32|i64|u1|u8|u16|u32|u64|fp8e4nv|fp8e5|fp8e4b15|fp8e4b8|fp8e5b16|fp16|bf16|fp32|f32|fp64)"
                   r"|constexpr")  # fmt: skip
MAX_ARGS = 256
MAX_SIGNATURES = 256  # per judge: what a worker may make it build is bounded
BUILD_TIMEOUT_S = 300.0
LAUNCHER_NAME = "__triton_launcher"


def valid(signature: Any) -> tuple[str, ...] | None:
    """The signature as a tuple of Triton type names, or None when it is anything else (a tuple argument,
    a tensor descriptor, a made-up type: those workers build their own launchers, as before)."""
    if not isinstance(signature, list) or not 0 < len(signature) <= MAX_ARGS:
        return None
    if not all(isinstance(t, str) and _TYPE.fullmatch(t) for t in signature):
        return None
    return tuple(signature)


def c_launchers() -> bool:
    """Whether this Triton compiles a C launcher per signature (``make_launcher`` in its CUDA driver)."""
    try:
        from triton.backends.nvidia import driver
    except Exception:
        return False
    return callable(getattr(driver, "make_launcher", None)) and hasattr(driver, "compile_module_from_src")


class LauncherCache:
    """The judge's side: learns signatures from workers' replies, builds them in the background in a
    trusted process, one build at a time, and copies what is built into a worker's cache folder.

    ``remembered``: a file of the signatures built before (type names only, checked again when read), built
    again at the start so that the first workers of a run find them too."""

    def __init__(self, folder: Path, enabled: bool, remembered: Path | None = None):
        self.folder = folder
        self.enabled = enabled
        self.remembered = remembered
        self._lock = threading.Lock()
        self._known: set[tuple[str, ...]] = set()  # asked for, built or not
        self._waiting: list[tuple[str, ...]] = []
        self._building = False
        self._idle = threading.Event()
        self._idle.set()
        self._built: list[str] = []  # key folders under ``folder``, complete
        self.failures: list[str] = []
        if enabled and remembered is not None:
            self.learn(_read_list(remembered))

    def learn(self, signatures: Any) -> None:
        """Signatures a worker met (its claim): each new valid one is built once."""
        if not self.enabled or not isinstance(signatures, list):
            return
        with self._lock:
            for raw in signatures[:MAX_SIGNATURES]:
                sig = valid(raw)
                if sig is not None and sig not in self._known and len(self._known) < MAX_SIGNATURES:
                    self._known.add(sig)
                    self._waiting.append(sig)
            if self._waiting and not self._building:
                self._building = True
                self._idle.clear()
                threading.Thread(target=self._build_waiting, daemon=True).start()

    def seed(self, cache_dir: str | Path, copied: set[str]) -> None:
        """Copy every launcher built so far and not in ``copied`` into a worker's Triton cache folder."""
        with self._lock:
            new = [key for key in self._built if key not in copied]
        for key in new:
            copied.add(key)
            target = Path(cache_dir) / key
            if target.exists():  # the worker's own, maybe loaded: a file written over a mapped library kills it
                continue
            part = Path(cache_dir) / f".{key}.part"
            try:
                shutil.copytree(self.folder / key, part)
                part.rename(target)  # whole or not at all: Triton never sees half a folder
            except OSError:
                shutil.rmtree(part, ignore_errors=True)  # the worker builds its own

    def wait(self, timeout: float) -> bool:
        """Whether every signature learned so far was built (or failed) within ``timeout`` seconds."""
        return self._idle.wait(timeout)

    @property
    def built(self) -> int:
        with self._lock:
            return len(self._built)

    def _build_waiting(self) -> None:
        while True:
            with self._lock:
                batch, self._waiting = self._waiting, []
                if not batch:
                    self._building = False
                    self._idle.set()
                    return
            keys, error = build(self.folder, batch)
            with self._lock:
                self._built += [k for k in keys if k not in self._built]
                if error:
                    self.failures.append(error)
            if error:
                print(f"judge: Triton launchers not prebuilt, workers build their own: {error}", file=sys.stderr)
            elif self.remembered is not None:
                _remember(self.remembered, batch)


def build(folder: Path, signatures: list[tuple[str, ...]]) -> tuple[list[str], str | None]:
    """Build ``signatures``' launchers under ``folder`` in a fresh process that imports only Triton.
    Returns the cache keys now complete there, and what went wrong, if anything."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**child_env(), "TRITON_CACHE_DIR": str(folder)}
    command = [sys.executable, "-P", "-m", "tools.launcher_cache", json.dumps([list(s) for s in signatures])]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                              cwd=folder)  # fmt: skip
    except subprocess.TimeoutExpired:
        return _complete(folder), f"the build ran past {BUILD_TIMEOUT_S:.0f} s"
    error = None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["exit status"])[-1]
    return _complete(folder), error


def _read_list(path: Path) -> list:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else []


def _remember(path: Path, signatures: list[tuple[str, ...]]) -> None:
    """Add ``signatures`` to the file, written whole through a rename (never half a file)."""
    known = [s for s in map(valid, _read_list(path)) if s is not None]
    merged = list(dict.fromkeys([*known, *signatures]))[-MAX_SIGNATURES:]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f".{path.name}.{os.getpid()}")
        part.write_text(json.dumps([list(s) for s in merged]))
        part.replace(path)
    except OSError:
        pass  # a later run learns them again


def _complete(folder: Path) -> list[str]:
    return sorted(p.parent.name for p in folder.glob(f"*/{LAUNCHER_NAME}*.so"))


def _build_here(signatures: list[list[str]]) -> None:
    """In the builder process: each launcher as Triton's CudaLauncher would build it in a worker."""
    from triton.backends.nvidia import driver

    for sig in signatures:
        if valid(sig) is None:
            continue
        src = driver.make_launcher({}, dict(enumerate(sig)), None)
        driver.compile_module_from_src(src=src, name=LAUNCHER_NAME, library_dirs=driver.library_dirs(),
                                       include_dirs=driver.include_dirs, libraries=driver.libraries)  # fmt: skip


class SignatureLog:
    """The worker's side: the signatures Triton made launchers for since the last reply (a hint to the
    judge, never part of a verdict)."""

    def __init__(self) -> None:
        self._seen: list[list[str]] = []

    def install(self) -> None:
        if not c_launchers():
            return
        from triton.backends.nvidia import driver

        original = driver.make_launcher

        def make_launcher(constants: Any, signature: Any, tensordesc_meta: Any) -> Any:
            with contextlib.suppress(Exception):  # a hint only: the launcher is made whatever happens here
                if not tensordesc_meta and len(self._seen) < MAX_SIGNATURES:
                    self._seen.append([str(t) for t in dict(signature).values()])
            return original(constants, signature, tensordesc_meta)

        driver.make_launcher = make_launcher

    def take(self) -> list[list[str]]:
        seen, self._seen = self._seen, []
        return seen


if __name__ == "__main__":
    _build_here(json.loads(sys.argv[1]))
