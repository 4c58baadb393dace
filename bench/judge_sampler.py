"""The judge with a sampling profiler beside it: where its threads spend a batch's seconds.

    python -m bench.judge_sampler OUT.json      (what tools.backend.JudgeClient runs instead of the judge)

Every ``INTERVAL_S`` a thread of its own reads every other thread's Python stack. A thread judging a
candidate (``Judge.evaluate_one`` or ``Judge.time_one`` on its stack) adds one interval to each project
function on its stack (inclusive) and to the innermost project line (where it waits: a CUDA sync, the
worker's reply, a comparison). Seconds are thread-seconds: 15 threads judging for 1 s count 15 s.
OUT.json is rewritten every few seconds, so a judge that is killed still leaves its profile.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from tools import judge

INTERVAL_S = 0.005
WRITE_EVERY_S = 5.0
REPO = Path(__file__).resolve().parent.parent


def _where(frame) -> list[tuple[str, str]]:
    """(file:function, file:function:line) of each project frame, innermost first."""
    found = []
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(str(REPO)):
            rel = path[len(str(REPO)) + 1 :]
            found.append((f"{rel}:{frame.f_code.co_name}", f"{rel}:{frame.f_code.co_name}:{frame.f_lineno}"))
        frame = frame.f_back
    return found


class Sampler:
    def __init__(self, out: Path):
        self.out = out
        self.inclusive: dict[str, Counter] = {"check": Counter(), "timing": Counter()}
        self.innermost: dict[str, Counter] = {"check": Counter(), "timing": Counter()}
        self.busy = Counter()
        self.started = time.perf_counter()
        self.lock = threading.Lock()

    def run(self) -> None:
        me, last_write = threading.get_ident(), time.perf_counter()
        while True:
            time.sleep(INTERVAL_S)
            with self.lock:
                for tid, frame in sys._current_frames().items():
                    if tid != me:
                        self.add(_where(frame))
            if time.perf_counter() - last_write > WRITE_EVERY_S:
                with self.lock:
                    self.write()
                last_write = time.perf_counter()

    def add(self, frames: list[tuple[str, str]]) -> None:
        functions = [f for f, _ in frames]
        if "tools/judge.py:time_one" in functions:
            part = "timing"
        elif "tools/judge.py:evaluate_one" in functions:
            part = "check"
        else:
            return
        self.busy[part] += INTERVAL_S
        for function in set(functions):
            self.inclusive[part][function] += INTERVAL_S
        self.innermost[part][frames[0][1]] += INTERVAL_S

    def write(self) -> None:
        report = {"interval_s": INTERVAL_S, "wall_s": time.perf_counter() - self.started,
                  "thread_seconds": dict(self.busy)}  # fmt: skip
        for part in ("check", "timing"):
            report[part] = {"inclusive": self.inclusive[part].most_common(60),
                            "innermost": self.innermost[part].most_common(60)}  # fmt: skip
        self.out.write_text(json.dumps(report, indent=1))


def main() -> None:
    sampler = Sampler(Path(sys.argv.pop(1)))
    threading.Thread(target=sampler.run, daemon=True).start()
    try:
        judge.serve()
    finally:
        with sampler.lock:
            sampler.write()


if __name__ == "__main__":
    main()
