"""The sandbox a worker process runs candidate code in.

Outside the process (set up by the evaluator): a scratch working directory, TMPDIR inside it, a fresh
network namespace with no interfaces up (``unshare --net``) where the machine allows one, resource
limits (core dumps off, open files, CPU seconds, address space on CPU runs), its own process group.

Inside the process (``install_audit_hook``): a Python audit hook, which cannot be removed once added,
refuses writes outside the writable folders, sockets, and subprocesses other than the compiler tools
Triton itself runs (ptxas, the C compiler for its launcher). It backs up the static checks and the
import guard: a candidate that slips past them is still stopped before the write or the connection.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def child_env() -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH: what a child started as
    ``python -m tools.X`` (the judge, the zygote, a builder, a cluster's processes) needs to import us."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


MAX_OPEN_FILES = 4096  # a worker's (and its zygote's) open-file limit unless the settings say otherwise

# Programs Triton runs while compiling (ptxas and friends; a C compiler builds its launcher module).
ALLOWED_PROGRAMS = frozenset(
    {
        "ptxas",
        "ptxas-blackwell",
        "nvdisasm",
        "cuobjdump",
        "nvlink",
        "fatbinary",
        "cc",
        "gcc",
        "g++",
        "clang",
        "clang++",
        "ld",
        "as",
        "ldconfig",
        "ldconfig.real",
        "uname",
        "file",  # platform.architecture(), which Triton's launcher build key calls
    }
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_SOCKET_EVENTS = frozenset(
    {
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.getaddrinfo",
        "socket.sendto",
        "socket.sendmsg",
    }
)
_PROCESS_EVENTS = frozenset(
    {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.fork",
        "os.forkpty",
        "pty.spawn",
        "os.spawn",
        "os.startfile",
    }
)
# Signals: only to this process or its own children (subprocess timeouts kill a stuck ptxas).
_SIGNAL_EVENTS = frozenset({"os.kill", "os.killpg", "signal.pthread_kill"})


def _own_process(target: object, event: str) -> bool:
    if event == "signal.pthread_kill":
        return True  # a thread of this process
    if not isinstance(target, int) or target <= 0:
        return False  # 0 / negative: a whole process group
    if target == os.getpid() or (event == "os.killpg" and target == os.getpgid(0)):
        return True
    try:
        stat = Path(f"/proc/{target}/stat").read_text()
    except OSError:
        return False
    return int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid()  # its parent is this process


# The exec behind subprocess.Popen with close_fds=False (how Triton runs ptxas): judged like Popen.
# os.exec* stays refused: it would replace the worker, which then reports what it likes.
_SPAWN_EVENTS = frozenset({"os.posix_spawn"})
# Compiler options that run other programs or load code into the compiler.
_COMPILER_ESCAPES = (
    "-wrapper",
    "-B",
    "-fplugin",
    "-specs",
    "--specs",
    "@",
    "-plugin",
    "--plugin",
    "-Wl,-plugin",
)
_COMPILERS = frozenset({"cc", "gcc", "g++", "clang", "clang++", "ld", "as"})
_PATH_EVENTS = frozenset(
    {
        "os.remove",
        "os.rmdir",
        "os.rename",
        "os.chmod",
        "os.chown",
        "os.link",
        "os.symlink",
        "os.truncate",
        "os.utime",
        "shutil.rmtree",
        "shutil.move",
    }
)


class ForbiddenOperation(RuntimeError):
    """The candidate did something the evaluator does not allow (error_type forbidden_construct)."""


class SandboxViolation(ForbiddenOperation):
    """The candidate tried to leave its sandbox (error_type forbidden_construct)."""


def _program(path: object) -> str:
    try:
        return os.path.basename(os.fsdecode(path)) if path else ""  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""


def program_refused(executable: object, argv: object, env: object, inside: Callable[[object], bool]) -> str:
    """Why starting this program is refused ("" when allowed): an allowed name, not a file the
    candidate could have made (anything under the scratch roots), and no option that runs or writes
    something else (a compiler's -wrapper/-B/plugins, an output outside the scratch folder)."""
    program = _program(executable)
    if program not in ALLOWED_PROGRAMS:
        return f"starting {program or argv!r} refused"
    path = os.fsdecode(executable)  # type: ignore[arg-type]
    if os.sep not in path:
        search = env.get("PATH") if isinstance(env, dict) else None
        path = shutil.which(path, path=search) or path
    if inside(path):
        return f"starting {path} refused: a program in the scratch folder"
    words = [os.fsdecode(a) for a in (argv or [])[1:] if isinstance(a, str | bytes)]  # type: ignore[union-attr]
    if program in _COMPILERS and any(w.startswith(_COMPILER_ESCAPES) for w in words):
        return f"{program} with an option that runs or loads other code refused"
    if program.startswith("ldconfig") and any(w != "-p" for w in words):
        return "ldconfig other than -p refused"
    if program == "file" and any(w.startswith("-") and w not in {"-b", "-L"} for w in words):
        return "file with options other than -b/-L refused"
    for i, w in enumerate(words):
        target = words[i + 1] if w in {"-o", "--output-file"} and i + 1 < len(words) else None
        if w.startswith("-o") and len(w) > 2 and program in _COMPILERS:
            target = w[2:]
        if target is not None and not inside(target):
            return f"{program} writing {target} outside the scratch folder refused"
    return ""


def other_process_file(path: str) -> str:
    """Why opening ``path`` (resolved) reads another process ("" when it does not): anything under
    /proc/PID/ of a process other than this one (its memory, maps, file descriptors, environment), its
    ``stat`` aside (state and CPU times, nothing of its memory)."""
    parts = path.split(os.sep)
    if len(parts) < 4 or parts[1] != "proc" or not parts[2].isdigit() or parts[3] == "stat":
        return ""
    pid = int(parts[2])
    if pid == os.getpid() or os.path.isdir(f"/proc/{os.getpid()}/task/{pid}"):  # itself or its own thread
        return ""
    return f"reading {path} (another process's {parts[3]}) refused"


def _refuse_reading(resolved: str, denied: set[str], private: list[str], inside: Callable[[object], bool]) -> None:
    if resolved in denied:
        raise SandboxViolation(f"sandbox: opening {resolved} refused (the judge's channel)")
    foreign = other_process_file(resolved)
    if foreign:
        raise SandboxViolation(f"sandbox: {foreign}")
    if any(resolved == p or resolved.startswith(p + os.sep) for p in private) and not inside(resolved):
        raise SandboxViolation(f"sandbox: opening {resolved} refused (the judge's folder: other candidates' files)")


def install_audit_hook(writable: list[Path], deny: tuple[str, ...] = (), private: tuple[str, ...] = ()) -> None:
    """Refuse writes outside ``writable``, sockets, foreign programs and signals, and opening another
    process's files under /proc; ``deny``: paths that may not be opened at all from here on (the worker's
    own channel to the judge); ``private``: folders none of whose files may be opened outside
    ``writable`` (the judge's, where other candidates' scratch folders, channels and arenas live)."""
    roots = [str(Path(p).resolve()) for p in writable]
    denied = {os.path.realpath(p) for p in deny}
    closed = [os.path.realpath(p) for p in private]

    def inside(path: object) -> bool:
        if isinstance(path, int):  # an already-open file descriptor
            return True
        try:
            resolved = os.path.realpath(os.fsdecode(path))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return any(resolved == r or resolved.startswith(r + os.sep) for r in roots) or resolved == os.devnull

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            if isinstance(path, str | bytes):
                _refuse_reading(os.path.realpath(os.fsdecode(path)), denied, closed, inside)
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writes and path is not None and not inside(path):
                raise SandboxViolation(f"sandbox: write to {path} outside the scratch folder refused")
        elif event in _SOCKET_EVENTS:
            raise SandboxViolation("sandbox: network access refused")
        elif event == "subprocess.Popen" or (event in _SPAWN_EVENTS and args):
            executable, argv = args[0], args[1]
            env = args[3] if event == "subprocess.Popen" else args[2]
            refused = program_refused(executable, argv, env, inside)
            if refused:
                raise SandboxViolation(f"sandbox: {refused}")
        elif (
            event == "ctypes.dlopen"
            and args
            and args[0]
            and os.sep in os.fsdecode(args[0])
            and inside(args[0])
        ):
            raise SandboxViolation(
                f"sandbox: loading the library {args[0]} built in the scratch folder refused"
            )
        elif event in _PROCESS_EVENTS:
            raise SandboxViolation(f"sandbox: {event} refused")
        elif event in _SIGNAL_EVENTS and args and not _own_process(args[0], event):
            # the zygote that forked this worker, other workers, the evaluator: none may be signalled
            raise SandboxViolation(f"sandbox: {event} to process {args[0]} refused")
        elif (
            event in _PATH_EVENTS
            and args
            and not all(inside(a) for a in args[:2] if isinstance(a, str | bytes))
        ):
            raise SandboxViolation(f"sandbox: {event} outside the scratch folder refused")

    sys.addaudithook(hook)


@functools.cache
def network_isolation() -> list[str]:
    """The command prefix that gives a worker its own empty network namespace, or [] where refused."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    for prefix in ([unshare, "--net"], [unshare, "--net", "--map-root-user"]):
        try:
            probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    return []


def describe(device: str) -> dict:
    """What isolates a candidate on this machine (for results and reports)."""
    return {
        "process": "own process (forked from a zygote that never runs candidate code) and process "
        "group, killed on timeout",
        "network": "own empty network namespace (unshare --net)"
        if network_isolation()
        else "not isolated by the OS here (unshare refused); sockets refused by the audit hook",
        "files": "scratch working folder; writes elsewhere refused by the audit hook",
        "imports": "allow-list enforced statically and at run time",
        "limits": "core dumps off, open files capped, CPU seconds capped"
        + (", address space capped" if device == "cpu" else ""),
    }


def apply_limits(
    max_open_files: int, cpu_seconds: float | None, address_space: int | None, file_bytes: int | None = None
) -> None:
    """This process's resource limits: no core dumps, open files, CPU seconds, address space, the size
    of any file it writes (a worker flooding its log dies with SIGXFSZ)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if file_bytes:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = max_open_files if hard == resource.RLIM_INFINITY else min(max_open_files, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if cpu_seconds:
        resource.setrlimit(resource.RLIMIT_CPU, (int(cpu_seconds), int(cpu_seconds) + 5))
    if address_space:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))


def kill_group(pid: int) -> None:
    """SIGKILL a worker's process group (it called setsid()), or the process alone if it has not yet."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def stop_server(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """End a server that exits when its stdin closes; its process group is killed after ``grace_s``."""
    if proc.poll() is not None:
        return
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        proc.wait()


def limits(max_open_files: int, cpu_seconds: float | None, address_space: int | None) -> Callable[[], None]:
    """preexec_fn for a worker: new session (process group) and resource limits."""

    def preexec() -> None:
        os.setsid()
        apply_limits(max_open_files, cpu_seconds, address_space)

    return preexec


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used so far, read from /proc (0.0 where unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0
