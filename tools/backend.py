"""The local evaluation backend: one judge process (tools/judge.py) on this machine, started again when it
dies, with its unfinished candidates sent again once.

A backend takes jobs ``{"key", "source", "config", "identity"}`` (candidates that passed the static checks)
and reports each job's raw result as it arrives; ``tools.cluster`` is the other backend, with one of these
on every Dask worker.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools import sandbox

Finished = Callable[[int, dict[str, Any]], None]


class JudgeLost(RuntimeError):
    """The judge process died or stopped answering."""


class JudgeClient:
    """One judge process for one task and device; started again when it dies."""

    READY_TIMEOUT_S = 300.0  # its imports, the copy bandwidth, a busy machine
    POLL_S = 1.0  # how often a quiet judge is checked for being dead
    BURY_TIMEOUT_S = 10.0  # a judge whose pipe closed but that will not exit is killed
    COMMAND = [sys.executable, "-P", "-m", "tools.judge_boot"]

    def __init__(self, task_folder: str, device: str, settings: dict[str, Any], hidden: list[dict], root: Path):
        """``settings``: the judge's (tools.judge.JudgeSettings fields, as EvalSettings.for_judge gives them)."""
        self.device, self.settings, self.root = device, settings, root
        self.start_request = {"task": task_folder, "device": device, "settings": settings,
                              "hidden_shapes": hidden, "workdir": str(root)}  # fmt: skip
        self.proc: subprocess.Popen | None = None
        self.ready: dict[str, Any] = {}
        self.last_done: dict[str, Any] = {}  # the judge's last "done": its zygote's pid, for tests and logs
        self.restarts = 0
        self._lines: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._next = 0

    def _start(self) -> None:
        env = sandbox.child_env()
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("TRITON_INTERPRET", None)
        if self.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        log = open(self.root / "judge.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            self.COMMAND, cwd=self.root, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=log, preexec_fn=os.setsid,
        )  # fmt: skip
        self._lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self._lines), daemon=True).start()
        started = time.perf_counter()
        self._send(self.start_request)
        message = self._receive(self.READY_TIMEOUT_S)
        if not message.get("ready"):
            raise JudgeLost(f"the judge did not start: {message}")
        self.ready = {**message, "started_in_s": round(time.perf_counter() - started, 3)}  # its imports included

    @staticmethod
    def _read(proc: subprocess.Popen, lines: queue.Queue) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                lines.put(json.loads(line))
            except ValueError:
                continue
        lines.put(None)

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise JudgeLost(f"the judge stopped reading: {exc}") from None

    def _receive(self, timeout: float) -> dict[str, Any]:
        """The judge's next message. Its death is read off the process, not only off its pipe: the pipe closes
        a moment before the process can be reaped, and a child still holding the pipe would hide the death."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self._lines.get(timeout=max(0.0, min(self.POLL_S, deadline - time.monotonic())))
            except queue.Empty:
                if self.proc.poll() is not None:
                    message = None
                elif time.monotonic() < deadline:
                    continue
                else:
                    self.kill()
                    raise JudgeLost(f"the judge said nothing for {timeout:.0f} s") from None
            if message is None:
                raise JudgeLost(self._death())
            return message

    def _death(self) -> str:
        """How the judge ended and the end of its log: what a user needs to tell an out-of-memory kill from
        a crash (the folder is a temporary one unless the settings name it)."""
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=self.BURY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            how = "its pipe closed while it still ran"
        elif code < 0:
            how = f"killed by signal {-code}" + (
                " (SIGKILL: the out-of-memory killer, or a kill)" if code == -9 else ""
            )
        else:
            how = f"exit code {code}"
        log = self.root / "judge.log"
        tail = log.read_bytes()[-1500:].decode(errors="replace").strip() if log.exists() else ""
        return f"the judge died ({how}); its log: {log}" + (f"\n{tail}" if tail else "")

    def _bury(self) -> None:
        """Wait until the lost judge is reaped, so that ``alive()`` says so: the pipe closes a moment before
        the process can be reaped, and a judge that stopped reading may not exit at all (it is killed)."""
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=self.BURY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure(self) -> None:
        if not self.alive():
            if self.proc is not None:
                self.restarts += 1
            self._start()

    def request(self, op: str, on_message: Callable[[dict], None], **fields: Any) -> None:
        """Send one request and pass every reply to ``on_message`` until the judge says done."""
        with self._lock:
            try:
                self._serve(op, on_message, fields)
            except JudgeLost:
                self._bury()  # however it was lost, the next request finds no judge and starts one
                raise

    def _serve(self, op: str, on_message: Callable[[dict], None], fields: dict[str, Any]) -> None:
        self.ensure()
        self._next += 1
        rid = self._next
        self._send({"op": op, "id": rid, **fields})
        quiet = self.settings["check_timeout_s"] + self.settings["timing_timeout_s"] + 120
        while True:
            message = self._receive(quiet)
            if message.get("id") != rid:
                continue
            if message.get("error"):
                raise RuntimeError(f"the judge refused {op}: {message['error']}")
            on_message(message)
            if message.get("done"):
                self.last_done = message
                return

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            sandbox.kill_group(self.proc.pid)
            self.proc.wait()

    def close(self) -> None:
        if self.proc is not None:
            sandbox.stop_server(self.proc)
            sandbox.kill_group(self.proc.pid)  # its zygote and workers share its process group


class LocalBackend:
    """Candidates evaluated by one judge on this machine."""

    def __init__(self, task_folder: str, device: str, settings: Any, hidden: list[dict], root: Path):
        self.root = root
        self.device = device
        self.hidden_shapes = hidden
        self.judge = JudgeClient(task_folder, device, settings, hidden, root)

    def job(self, job: dict[str, Any]) -> dict[str, Any]:
        """The judge's job: the candidate written into a scratch folder of its own."""
        scratch = self.root / f"{job['identity']}-{time.time_ns()}"
        (scratch / "triton_cache").mkdir(parents=True)
        path = scratch / "candidate.py"
        path.write_text(job["source"])
        return {"key": job["key"], "candidate": str(path), "config": job["config"], "identity": job["identity"],
                "scratch": str(scratch), "triton_cache": str(scratch / "triton_cache"),
                "deadline_unix": job.get("deadline_unix")}  # fmt: skip

    def evaluate(self, jobs: list[dict[str, Any]], finished: Finished) -> None:
        """Every job through the judge; a judge that dies is started again and what it left is sent again
        once, then failed with the reason."""
        originals = {job["key"]: job for job in jobs}
        pending = {key: self.job(job) for key, job in originals.items()}
        for attempt in range(2):
            if not pending:
                return
            if attempt:
                # A fresh scratch folder for each candidate sent again: the dead judge's workers may still
                # hold the old one's channel open, and a new judge must never talk to them.
                pending.update({key: self.job(originals[key]) for key in pending})

            def on_message(message: dict) -> None:
                if "key" in message and message["key"] in pending:
                    del pending[message["key"]]
                    finished(message["key"], {**message["result"], "worker": self.name()})

            try:
                self.judge.request("evaluate", on_message, jobs=list(pending.values()))
            except JudgeLost as lost:
                if attempt == 1:
                    for key in list(pending):
                        finished(key, _lost_twice(lost, "correctness"))
                        del pending[key]

    def retime(self, jobs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
        """Re-time passed candidates in fresh workers; a judge that dies is started again and the re-time
        asked once more (fresh scratch folders), then each job fails with the reason."""
        try:
            return self._twice(lambda: self._retime(jobs))
        except JudgeLost as lost:
            return {job["key"]: _lost_twice(lost, "timing") for job in jobs}

    def _retime(self, jobs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
        answers: dict[int, dict[str, Any]] = {}

        def on_message(message: dict) -> None:
            for key, raw in message.get("results", {}).items():
                answers[int(key)] = {**raw, "worker": self.name()}

        self.judge.request("retime", on_message, jobs=[self.job(job) for job in jobs])
        return answers

    def anchors(self) -> list[dict[str, Any]]:
        """The reference in eager and under torch.compile at each timed shape, timed by the judge (GPU); asked
        once more of a fresh judge when the first one dies."""
        return self._twice(self._anchors)

    def _anchors(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        self.judge.request("anchors", lambda message: found.extend(message.get("anchors", [])))
        return found

    @staticmethod
    def _twice(ask: Callable[[], Any]) -> Any:
        """``ask()``, and once more when the judge died under it (the next request starts a new judge)."""
        try:
            return ask()
        except JudgeLost:
            return ask()

    def name(self) -> str:
        gpu = self.judge.ready.get("device", {}).get("name", self.device)
        return f"local ({gpu})"

    def workers(self) -> list[dict[str, Any]]:
        return [{"worker": "local", "device": self.judge.ready.get("device", {}), "copy_gbps": self.judge.ready.get("copy_gbps")}]

    def close(self) -> None:
        self.judge.close()


def _lost_twice(lost: JudgeLost, stage: str) -> dict[str, Any]:
    return {"verdict": "fail", "stage": stage, "error_type": "runtime_error",
            "message": f"the judge died twice while this candidate was evaluated: {lost}"}  # fmt: skip
