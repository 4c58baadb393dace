"""What the compiler gives one kernel of a task module for H200 (sm_90), on a machine without a GPU.

    python tests/sm90_resources.py MODULE.py KERNEL '{"x_ptr": "*bf16", ...}' '[{"BLOCK_N": 256, "num_warps": 2}, ...]'

Compiles the kernel with Triton's own ptxas for each config (constexprs from the config, ``num_warps``
and ``num_stages`` as options) and reads the cubin with the bundled cuobjdump. Prints one JSON list:
``{"config", "n_regs", "n_spills", "shared_bytes"}`` per config, ``n_spills`` being the local bytes per
thread over 4, as Triton reads it on a GPU. Run it without TRITON_INTERPRET.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

OPTIONS = ("num_warps", "num_stages")


def resources(module_path: str, kernel: str, signature: dict[str, str], config: dict) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget

    spec = importlib.util.spec_from_file_location("_sm90_module", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, kernel)
    constexprs = {k: v for k, v in config.items() if k not in OPTIONS}
    full = {name: signature.get(name, "constexpr") for name in fn.arg_names}
    source = triton.compiler.ASTSource(fn=fn, signature=full, constexprs=constexprs)
    options = {k: config[k] for k in OPTIONS if k in config}
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([str(tool), "-res-usage", cubin.name], capture_output=True, text=True).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", usage)
    if not found:
        raise RuntimeError(f"no resource usage from cuobjdump: {usage[-300:]}")
    regs, stack, _ = (int(g) for g in found.groups())
    return {
        "config": config,
        "n_regs": regs,
        "n_spills": stack // 4,
        "shared_bytes": compiled.metadata.shared,
    }


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("run without TRITON_INTERPRET=1", file=sys.stderr)
        return 2
    module_path, kernel, signature, configs = (
        sys.argv[1],
        sys.argv[2],
        json.loads(sys.argv[3]),
        json.loads(sys.argv[4]),
    )
    print(json.dumps([resources(module_path, kernel, signature, c) for c in configs]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
