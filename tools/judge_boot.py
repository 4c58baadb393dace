"""The judge's entry point: ``python -m tools.judge_boot`` (what tools/backend.py starts).

It reads the start request and starts the judge's zygote before this process imports torch, so that the
zygote's imports (torch, Triton: seconds) run beside the judge's own instead of after them; then it
serves as the judge (tools/judge.py). Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    started = time.perf_counter()
    protocol = os.dup(1)
    os.dup2(2, 1)  # prints from imported code land in the log, not in the protocol
    start = json.loads(sys.stdin.readline())
    from tools.sandbox import MAX_OPEN_FILES
    from tools.zygote import start_zygote

    open_files = int(start.get("settings", {}).get("max_open_files", MAX_OPEN_FILES))
    zygote = start_zygote(start["device"], Path(start["workdir"]), open_files)
    from tools import judge

    judge.serve(protocol, start, zygote, started)


if __name__ == "__main__":
    main()
