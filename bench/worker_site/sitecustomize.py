"""Profiles every check worker a zygote forks (bench only: ``bench/evaluator_bench.py --worker-profile DIR``).

On PYTHONPATH with KA_WORKER_PROFILE=DIR set, in the zygote alone (``-m tools.zygote``): the worker's entry
point is wrapped so that each forked worker runs under cProfile and leaves DIR/PID.prof (marshal'd
pstats) and DIR/PID.json (its own and its children's CPU seconds: ptxas, the C compiler). The files are
opened before the worker enters its sandbox, which refuses writes outside its scratch folder afterwards.
A diagnostic: what a worker writes here is never a verdict.
"""

import os
import sys

_DIR = os.environ.get("KA_WORKER_PROFILE")
if _DIR and "tools.zygote" in sys.orig_argv:
    import cProfile
    import json
    import marshal
    import resource
    import time

    import tools.worker

    _real_main = tools.worker.main

    def _profiled_main(argv):
        pid = os.getpid()
        prof_fd = os.open(os.path.join(_DIR, f"{pid}.prof"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        info_fd = os.open(os.path.join(_DIR, f"{pid}.json"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        started = time.perf_counter()
        profile = cProfile.Profile()
        profile.enable()
        try:
            return _real_main(argv)
        finally:
            profile.disable()
            profile.create_stats()
            own = resource.getrusage(resource.RUSAGE_SELF)
            kids = resource.getrusage(resource.RUSAGE_CHILDREN)
            os.write(prof_fd, marshal.dumps(profile.stats))
            os.write(info_fd, json.dumps({"wall_s": time.perf_counter() - started,
                                          "cpu_s": own.ru_utime + own.ru_stime,
                                          "children_cpu_s": kids.ru_utime + kids.ru_stime,
                                          "cwd": os.getcwd()}).encode())
            os.close(prof_fd)
            os.close(info_fd)

    tools.worker.main = _profiled_main
