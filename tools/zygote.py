"""A zygote: one process that has already imported torch, Triton and the worker, and forks a fresh
check worker per candidate, so a worker starts in milliseconds instead of seconds of imports.

    python -m tools.zygote      (started by the evaluator; one JSON request per stdin line)

The zygote itself never touches the GPU (a CUDA context does not survive a fork) and never runs
candidate code. Each forked child then becomes exactly what a freshly spawned worker is: its own
session (process group), resource limits, scratch folder, environment, log file and sandbox; it runs
``tools.worker check JOB OUT`` and exits. The network namespace (``unshare --net``) is the zygote's,
inherited by every child.

Protocol, one JSON object per line. In: ``{"token", "argv", "cwd", "env", "log", "limits"}``.
Out: ``{"token", "pid"}`` once forked; ``{"pid", "status"}`` once reaped (``os.waitpid``'s status).
When stdin closes, children still running are killed and the zygote exits.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any

from tools import sandbox

_PROTOCOL_FD = 1  # moved off fd 1 by serve(), so that stray prints cannot corrupt the protocol


def _say(message: dict) -> None:
    os.write(_PROTOCOL_FD, (json.dumps(message) + "\n").encode())  # unbuffered: a child inherits none


def _child(request: dict) -> None:
    """In the forked child: become a fresh worker, run it, exit. Never returns."""
    code = 1
    try:
        if _PROTOCOL_FD != 1:
            os.close(_PROTOCOL_FD)  # a candidate must not be able to speak the zygote's protocol
        os.setsid()
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        quiet = os.open(os.devnull, os.O_RDONLY)
        os.dup2(quiet, 0)
        os.close(quiet)
        os.chdir(request["cwd"])
        os.environ.update(request["env"])
        tempfile.tempdir = None  # recomputed from the child's TMPDIR
        sandbox.apply_limits(**request["limits"])
        from tools.worker import main

        code = main(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    global _PROTOCOL_FD
    started = time.perf_counter()
    import torch
    import triton.language  # noqa: F401  (what every child would otherwise import itself)

    import tools.worker  # noqa: F401

    _PROTOCOL_FD = os.dup(1)
    os.dup2(2, 1)  # prints from imported code land in the log, not in the protocol
    seconds = {"imports": round(time.perf_counter() - started, 3), **_warm()}
    children: set[int] = set()
    pending = b""
    reading = True
    try:
        _say({"ready": True, "seconds": seconds})
        while reading or children:
            ready, _, _ = select.select([0] if reading else [], [], [], 0.05)
            if ready:
                chunk = os.read(0, 1 << 16)
                if not chunk:
                    reading = False
                    for pid in children:  # the evaluator is gone: nobody will read these results
                        sandbox.kill_group(pid)
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if not line.strip():
                        continue
                    request = json.loads(line)
                    if torch.cuda.is_initialized():  # a CUDA context does not survive fork()
                        raise RuntimeError("the zygote initialized CUDA; it cannot fork workers")
                    pid = os.fork()
                    if pid == 0:
                        _child(request)
                    children.add(pid)
                    _say({"token": request["token"], "pid": pid})
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                children.discard(pid)
                _say({"pid": pid, "status": status})
    finally:
        for pid in children:  # whatever ended the zygote, no worker outlives it unsupervised
            sandbox.kill_group(pid)


def _warm() -> dict[str, float]:
    """What every worker would otherwise pay for on its own, paid once here before any fork, without
    touching the GPU (the check before each fork says so): the op guard's first dispatch (what it imports),
    Triton's compiler modules, the hash of Triton's own sources that keys every kernel in
    its cache, and on a GPU Triton's C driver module (built and loaded; CUDA itself is not initialized).
    Each step is only a head start: one that fails is logged, and the workers pay for it as before.
    Returns each step's seconds."""
    import triton
    from triton.runtime.cache import triton_key

    from tools import guard

    steps = {"guard": guard.warm, "triton_key": triton_key}
    steps |= {name: functools.partial(importlib.import_module, name)
              for name in ("triton.compiler.code_generator", "triton.experimental.gluon.language")}  # fmt: skip
    if not os.environ.get("TRITON_INTERPRET"):
        steps["driver"] = lambda: triton.runtime.driver.active.utils  # the proxy builds the driver on first use
    seconds = {}
    for name, step in steps.items():
        lap = time.perf_counter()
        try:
            step()
        except Exception:
            print("zygote: a warm-up step failed; the workers will do it themselves", file=sys.stderr)
            traceback.print_exc()
        seconds[name] = round(time.perf_counter() - lap, 3)
    return seconds


class Zygote:
    """The evaluator's side: forks workers through one zygote process; safe to call from many threads.

    Any failure (the zygote died, did not start, did not answer) raises RuntimeError after the worker
    it may have forked is killed, so the caller can run the candidate another way."""

    READY_TIMEOUT_S = 180.0  # the zygote's own imports (torch, Triton) on a busy machine
    FORK_TIMEOUT_S = 30.0

    def __init__(self, command_prefix: list[str], cwd: Path, env: dict[str, str], max_open_files: int):
        self._log: IO[bytes] = open(cwd / "zygote.log", "ab")  # noqa: SIM115 - owned by the process
        self._started = time.perf_counter()
        self.ready_s: float | None = None  # seconds from its start to its warm-up done (its first fork)
        self.warm_s: dict[str, float] = {}  # its imports and each warm-up step, as it timed them
        self.proc = subprocess.Popen(
            # -P: the zygote's folder is not on sys.path (nothing planted there is imported)
            [*command_prefix, sys.executable, "-P", "-m", "tools.zygote"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            preexec_fn=sandbox.limits(max_open_files, cpu_seconds=None, address_space=None),
        )
        self._changed = threading.Condition()
        self._ready = False
        self._eof = False
        self._pids: dict[str, int] = {}
        self._status: dict[int, int] = {}
        self._cancelled: set[str] = set()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                with self._changed:
                    if message.get("ready"):
                        self._ready = True
                        self.ready_s = round(time.perf_counter() - self._started, 3)
                        self.warm_s = message.get("seconds", {})
                    elif "token" in message:
                        if message["token"] in self._cancelled:  # its caller gave up: no orphan
                            self._cancelled.discard(message["token"])
                            sandbox.kill_group(message["pid"])
                        else:
                            self._pids[message["token"]] = message["pid"]
                    elif "pid" in message:
                        self._status[message["pid"]] = message["status"]
                    self._changed.notify_all()
        finally:
            with self._changed:
                self._eof = True  # the zygote died or closed: wake every waiter
                self._changed.notify_all()

    @property
    def alive(self) -> bool:
        return not self._eof and self.proc.poll() is None

    def spawn(self, argv: list[str], cwd: Path, env: dict[str, str], limits: dict[str, Any]) -> int:
        """Fork a worker running ``tools.worker ARGV`` in ``cwd`` (its output in cwd/worker.log): its pid."""
        token = f"{cwd}:{threading.get_ident()}:{os.urandom(4).hex()}"
        request = {
            "token": token,
            "argv": argv,
            "cwd": str(cwd),
            "env": env,
            "log": str(cwd / "worker.log"),
            "limits": limits,
        }
        with self._changed:
            if not self._changed.wait_for(lambda: self._ready or self._eof, self.READY_TIMEOUT_S):
                raise RuntimeError(f"the zygote did not start within {self.READY_TIMEOUT_S:.0f} s")
            if self._eof:
                raise RuntimeError("the zygote is gone")
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
            except (OSError, ValueError) as exc:
                raise RuntimeError(f"the zygote stopped reading: {exc}") from exc
            if not self._changed.wait_for(lambda: token in self._pids or self._eof, self.FORK_TIMEOUT_S):
                self._cancelled.add(token)
                raise RuntimeError(f"the zygote did not fork a worker within {self.FORK_TIMEOUT_S:.0f} s")
            if token not in self._pids:
                raise RuntimeError("the zygote died before it forked the worker")
            return self._pids.pop(token)

    def running(self, pid: int) -> bool:
        with self._changed:
            return pid not in self._status and not self._eof

    def wait(self, pid: int, timeout: float) -> int | None:
        """The worker's exit code as subprocess gives it, or None when it was still running at
        ``timeout`` (then it is killed with its process group)."""
        with self._changed:
            finished = self._changed.wait_for(lambda: pid in self._status or self._eof, timeout)
            if not finished or pid not in self._status:
                sandbox.kill_group(pid)
                if finished:  # the zygote died while the worker ran
                    raise RuntimeError("the zygote died while its worker ran")
                self._changed.wait_for(lambda: pid in self._status or self._eof, 30)
                self._status.pop(pid, None)
                return None
            return os.waitstatus_to_exitcode(self._status.pop(pid))

    def close(self) -> None:
        sandbox.stop_server(self.proc)
        self._log.close()


def worker_env(device: str, triton_cache: Path, scratch: Path) -> dict[str, str]:
    env = sandbox.child_env()
    env["TRITON_CACHE_DIR"] = str(triton_cache)
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(scratch / "tmp")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def start_zygote(device: str, root: Path, max_open_files: int) -> Zygote:
    """The judge's zygote for ``device``, its workers' scratch under ``root``. Needs no torch here, so the
    judge can start it before its own imports (tools/judge_boot.py)."""
    env = worker_env(device, root / "zygote_triton_cache", root)
    env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # is_available() there must not initialize CUDA
    return Zygote(sandbox.network_isolation(), root, env, max_open_files)


if __name__ == "__main__":
    serve()
