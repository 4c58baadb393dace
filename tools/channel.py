"""The judge <-> worker control channel: two named pipes in the worker's scratch folder, one JSON
object per line.

The judge reads with a deadline and a size cap, so a worker that hangs or floods the channel costs one
verdict, never the judge. Every command carries an id and gets exactly one reply; a reply with another
id, or a second one, means someone else wrote into the channel (the candidate), and the judge stops
believing the worker.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import stat
import time
from pathlib import Path
from typing import Any

MAX_MESSAGE_BYTES = 8 << 20


class ChannelError(RuntimeError):
    """The worker broke the protocol: gone, too slow, too much, or not what was asked."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # closed | timeout | flood | garbled


def make_fifos(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    to_worker, from_worker = folder / "to_worker", folder / "from_worker"
    for path in (to_worker, from_worker):
        if not path.exists():
            os.mkfifo(path, 0o600)
    return to_worker, from_worker


class JudgeEnd:
    """The judge's end: open without blocking, read with a deadline."""

    def __init__(self, folder: Path):
        self.to_worker, self.from_worker = make_fifos(folder)
        self._rfd = os.open(self.from_worker, os.O_RDONLY | os.O_NONBLOCK)
        self._wfd: int | None = None
        self._pending = b""
        self._next_id = 0

    def connect(self, timeout: float, alive: Any = lambda: True) -> None:
        """Wait until the worker opened its reading end (it then opens its writing end at once)."""
        deadline = time.monotonic() + timeout
        while self._wfd is None:
            try:
                self._wfd = os.open(self.to_worker, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                if time.monotonic() > deadline:
                    raise ChannelError("timeout", f"the worker did not connect within {timeout:.0f} s") from None
                if not alive():
                    raise ChannelError("closed", "the worker exited before it connected") from None
                time.sleep(0.005)
        os.set_blocking(self._wfd, True)

    def ask(self, op: str, timeout: float, **fields: Any) -> dict[str, Any]:
        """Send one command and return its one reply (raises ChannelError)."""
        self._next_id += 1
        mid = self._next_id
        self._send({"op": op, "id": mid, **fields})
        reply = self.receive(timeout)
        if reply.get("id") != mid:
            raise ChannelError("garbled", f"a reply to command {reply.get('id')!r} arrived for command {mid}")
        return reply

    def _send(self, message: dict[str, Any]) -> None:
        assert self._wfd is not None, "connect() first"
        data = (json.dumps(message) + "\n").encode()
        try:
            while data:
                data = data[os.write(self._wfd, data) :]
        except OSError as exc:  # EPIPE: the worker is gone
            raise ChannelError("closed", f"the worker stopped reading ({exc.strerror})") from None

    def receive(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            if len(self._pending) > MAX_MESSAGE_BYTES:
                raise ChannelError("flood", f"the worker wrote over {MAX_MESSAGE_BYTES >> 20} MB without a line end")
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelError("timeout", f"no reply within {timeout:.0f} s")
            ready, _, _ = select.select([self._rfd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self._rfd, 1 << 20)
            if not chunk:
                raise ChannelError("closed", "the worker closed the channel (it exited or died)")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        try:
            message = json.loads(line)
        except ValueError:
            raise ChannelError("garbled", "the worker wrote a line that is not JSON") from None
        if not isinstance(message, dict):
            raise ChannelError("garbled", "the worker wrote JSON that is not an object")
        return message

    def leftover(self) -> bool:
        """True when the worker wrote more than it was asked for (checked once the session ends)."""
        if self._pending.strip():
            return True
        ready, _, _ = select.select([self._rfd], [], [], 0)
        if ready:
            try:
                return bool(os.read(self._rfd, 1 << 16).strip())
            except OSError:
                return False
        return False

    def close(self) -> None:
        for fd in (self._rfd, self._wfd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._wfd = None


class WorkerEnd:
    """The worker's end: blocking reads of the judge's commands, one reply each."""

    def __init__(self, folder: Path):
        to_worker, from_worker = folder / "to_worker", folder / "from_worker"
        for path in (to_worker, from_worker):
            if not stat.S_ISFIFO(os.stat(path).st_mode):
                raise RuntimeError(f"{path} is not a pipe")
        self._rfd = os.open(to_worker, os.O_RDONLY)  # returns once the judge opened its writing end
        self._wfd = os.open(from_worker, os.O_WRONLY)
        self._pending = b""
        self.paths = (str(to_worker.resolve()), str(from_worker.resolve()))

    def receive(self) -> dict[str, Any] | None:
        while b"\n" not in self._pending:
            chunk = os.read(self._rfd, 1 << 20)
            if not chunk:
                return None  # the judge is gone
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def reply(self, mid: Any, **fields: Any) -> None:
        data = (json.dumps({"id": mid, **fields}, default=str) + "\n").encode()
        while data:
            data = data[os.write(self._wfd, data) :]
