"""One split_kv launch at B=8 S=8192 for ncu (after a warm-up launch)."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from tasks.gqa_decode.reference import make_inputs  # noqa: E402
from tasks.gqa_decode.split_kv import launch  # noqa: E402

q, k, v = make_inputs({"B": 8, "S": 8192}, torch.bfloat16, "cuda", 0)
for _ in range(2):
    launch(q, k, v, SPLITS=2, BLOCK_S=128, num_warps=4, num_stages=3)
torch.cuda.synchronize()
