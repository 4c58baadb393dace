"""Sealing processes from each other: what the kernel, not the audit hook, refuses a candidate.

Every process of a run belongs to one user, and Linux lets a process read another of the same user's
memory (``/proc/PID/mem``, ``process_vm_readv``, ptrace) while that one is *dumpable*. The judge's heap
holds the expected outputs, so the judge makes itself undumpable (``seal``): reading it then needs
CAP_SYS_PTRACE. A worker seals itself too (a parked candidate's outputs are nobody else's business) and,
when the run is root's, gives up every capability (``drop_capabilities``) so that it cannot read a sealed
process anyway. Both are done by trusted code before any candidate code runs, through ctypes, which the
candidate is refused afterwards.

``SEALED_DEVICES``: the devices on which the judge and its workers seal themselves. The GPU joins once a
run on one shows CUDA IPC (the judge exports each arena, a worker opens it) unaffected.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from pathlib import Path

SEALED_DEVICES = frozenset({"cpu"})
_PR_SET_DUMPABLE, _PR_GET_DUMPABLE = 4, 3
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 24, 38
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name, use_errno=True) if name else None
    except OSError:
        return None


def _prctl(option: int, arg: int = 0) -> int:
    libc = _libc()
    if libc is None:
        return -1
    return libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def seal() -> bool:
    """This process undumpable: its memory, maps and file descriptors need CAP_SYS_PTRACE to read."""
    return _prctl(_PR_SET_DUMPABLE, 0) == 0


def sealed() -> bool:
    """Whether this process is undumpable."""
    return _prctl(_PR_GET_DUMPABLE) == 0


def _last_capability() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40


def drop_capabilities() -> bool:
    """No capability left to this process or to any program it starts (root's included: the bounding
    set is emptied first, and no exec may gain privileges). True when it holds none afterwards."""
    libc = _libc()
    if libc is None:
        return False
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    for cap in range(_last_capability() + 1):
        _prctl(_PR_CAPBSET_DROP, cap)  # fails without CAP_SETPCAP: then the set below is all there is
    header, data = _CapHeader(_CAP_VERSION_3, 0), (_CapData * 2)()
    libc.capset(ctypes.byref(header), data)
    libc.capget(ctypes.byref(header), data)
    return all(d.effective == d.permitted == d.inheritable == 0 for d in data)


def seal_worker(device: str) -> None:
    """A worker, before it reads its first command: sealed and without capabilities where its device is
    in ``SEALED_DEVICES``."""
    if device in SEALED_DEVICES:
        seal()
        drop_capabilities()
