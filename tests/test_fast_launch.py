"""The replay of a launcher's launches (tools/fast_launch.py), on CPU.

Triton's launcher of compiled kernels needs a GPU; here a host launcher stands in for it with the same
calling convention (grid, stream, function, metadata, launch metadata, hooks, then the kernel's
arguments) and really computes from the addresses it is given, so a replay that passes a stale or wrong
address gives a wrong answer. The same replay of real Triton kernels runs on the GPU in
tests/test_export_gpu.py."""

from __future__ import annotations

import ctypes

import pytest
import torch

from tools.fast_launch import Replayed

STREAM = 77
ADD, ACCUMULATE, SCALE, COPY_FROM = 1, 2, 3, 4


def at(address: int, n: int):
    """n float32 values at an address (plain ctypes: the launcher runs no torch op, as Triton's does not)."""
    return (ctypes.c_float * n).from_address(address)


class HostLauncher:
    """Stands in for Triton's launcher of one compiled kernel (its Python, then its native ``launch``):
    reads and writes memory by address."""

    global_scratch_size = profile_scratch_size = 0  # no scratch memory: its Python only forwards
    calls = 0

    def __call__(self, gx, gy, gz, stream, function, metadata, launch_metadata, enter, exit, *args):
        HostLauncher.calls += 1
        scratch = (1 << 20) + 64 * HostLauncher.calls if self.global_scratch_size else None  # a fresh buffer per call
        self.launch(gx, gy, gz, stream, function, False, False, scratch, None, metadata, launch_metadata, enter, exit, *args)

    def launch(self, gx, gy, gz, stream, function, cooperative, pdl, scratch, profile, metadata, launch_metadata,
               enter, exit, *args):  # fmt: skip
        assert stream == HostBackend.stream and gx == HostBackend.device  # as Triton reads them at the call
        if function == ADD:
            x, r, y, n = args
            xs, rs, ys = at(x.data_ptr(), n), at(r.data_ptr(), n), at(y.data_ptr(), n)
            for i in range(n):
                ys[i] = xs[i] + rs[i]
        elif function == ACCUMULATE:
            x, acc, n = args
            at(acc.data_ptr(), 1)[0] += sum(at(x.data_ptr(), n))
        elif function == SCALE:
            x, y, n, factor = args
            xs, ys = at(x.data_ptr(), n), at(y.data_ptr(), n)
            for i in range(n):
                ys[i] = xs[i] * factor
        elif function == COPY_FROM:
            address, y, n = args
            at(y.data_ptr(), n)[:] = at(address, n)[:]


class ScratchLauncher(HostLauncher):
    """One whose Python allocates scratch memory per call: a replay must go through it."""

    global_scratch_size = 64


class HostKernel:
    """Stands in for a JITFunction: ``kernel[grid](...)`` calls its launcher once."""

    def __init__(self, function: int, launcher: HostLauncher | None = None):
        self.function, self.launcher = function, launcher or HostLauncher()

    def run(self, *args, grid, warmup):
        if not warmup:
            hooks = HostBackend.hooks  # Triton passes its current hooks
            self.launcher(HostBackend.device, 1, 1, HostBackend.stream, self.function, (), None,
                          hooks.launch_enter_hook, hooks.launch_exit_hook, *args)  # fmt: skip

    def __getitem__(self, grid):
        return lambda *args: self.run(*args, grid=grid, warmup=False)


class Hooks:
    launch_enter_hook = None
    launch_exit_hook = None


class HostBackend:
    """Triton's side of a replay; the grid's first size stands for the device a kernel is loaded on."""

    device_type = "cpu"
    launcher_class = HostLauncher
    jit_class = HostKernel
    hooks = Hooks
    stream = STREAM
    device = 1

    @staticmethod
    def current_device():
        return HostBackend.device

    @staticmethod
    def current_stream(device):
        return HostBackend.stream


add, accumulate, scale, copy_from = (HostKernel(k) for k in (ADD, ACCUMULATE, SCALE, COPY_FROM))


class Counted:
    """A launcher that counts how often its own Python body runs."""

    def __init__(self, body):
        self.body, self.calls = body, 0

    def __call__(self, *inputs):
        self.calls += 1
        return self.body(*inputs)


def add_launcher(x, r):
    y = torch.empty_like(x)
    add[(1,)](x, r, y, x.numel())
    return y


def replayed(body):
    counted = Counted(body)
    return Replayed(counted, backend=HostBackend()), counted


def test_after_two_agreeing_calls_the_launches_are_replayed_on_new_buffers():
    fast, body = replayed(add_launcher)
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        x, r = torch.randn(64, generator=g), torch.randn(64, generator=g)
        y = fast(x, r)
        torch.testing.assert_close(y, x + r)
    assert body.calls == 2 and fast.replaying() == 1


def test_a_view_at_an_offset_is_launched_at_the_new_inputs_offset():
    def tail_launcher(x, r):  # the kernel reads x from its 8th element on
        tail = x[8:]
        y = torch.empty_like(tail)
        add[(1,)](tail, r, y, tail.numel())
        return y

    fast, body = replayed(tail_launcher)
    for seed in range(4):
        g = torch.Generator().manual_seed(seed)
        x, r = torch.randn(40, generator=g), torch.randn(32, generator=g)
        torch.testing.assert_close(fast(x, r), x[8:] + r)
    assert body.calls == 2


def test_outputs_that_are_views_and_filled_allocations_are_rebuilt():
    def total_launcher(x):
        acc = torch.ones(1)  # the replay fills it again: fresh memory would be zeros
        accumulate[(1,)](x, acc, x.numel())
        y = torch.empty(2 * x.numel())
        scale[(1,)](x, y, x.numel(), 2.0)
        return acc[0], y[: x.numel()].view(4, -1)

    fast, body = replayed(total_launcher)
    for seed in range(4):
        x = torch.randn(16, generator=torch.Generator().manual_seed(seed))
        total, doubled = fast(x)
        torch.testing.assert_close(total, 1 + x.sum())
        assert doubled.shape == (4, 4)
        torch.testing.assert_close(doubled, (2.0 * x).view(4, 4))
    assert body.calls == 2


def test_a_launcher_that_runs_other_torch_ops_is_never_replayed():
    def zeroing_launcher(x):
        acc = torch.empty(1)
        acc.zero_()  # an op the replay would not repeat: the sum would start from stale memory
        accumulate[(1,)](x, acc, x.numel())
        return acc

    fast, body = replayed(zeroing_launcher)
    for seed in range(6):
        x = torch.randn(16, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(fast(x)[0], x.sum())
    assert body.calls == 6 and fast.replaying() == 0


def test_each_signature_is_recorded_apart():
    fast, body = replayed(add_launcher)
    for n in (8, 16, 8, 16, 8, 16):
        x, r = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(fast(x, r), x + r)
    assert body.calls == 4 and fast.replaying() == 2
    fast(torch.randn(16)[::2], torch.randn(8))  # other strides: a signature of its own, recorded again
    assert body.calls == 5


def test_an_address_passed_as_an_integer_keeps_the_launcher():
    def address_launcher(x):  # a replay would pass the first call's address again
        y = torch.empty_like(x)
        copy_from[(1,)](x.data_ptr(), y, x.numel())
        return y

    fast, body = replayed(address_launcher)
    held = [torch.randn(8, generator=torch.Generator().manual_seed(seed)) for seed in range(4)]  # each its own address
    for x in [held[0], *held]:  # the first two calls on the same buffer: both recordings see one address
        torch.testing.assert_close(fast(x), x)
    assert body.calls == 5 and fast.replaying() == 0


def test_inputs_recorded_as_one_buffer_are_not_replayed_as_one():
    fast, body = replayed(add_launcher)
    x = torch.randn(8)
    for _ in range(2):
        torch.testing.assert_close(fast(x, x), 2 * x)
    a, b = torch.randn(8), torch.randn(8)
    torch.testing.assert_close(fast(a, b), a + b)


class HookChain:
    """Triton's newer hooks: one object, hooks added to its list."""

    def __init__(self):
        self.calls = []


@pytest.mark.parametrize("how", ["set", "added to the chain"])
def test_a_launch_hook_sends_calls_back_to_the_launcher(how):
    chains = (HookChain(), HookChain()) if how != "set" else (None, None)
    Hooks.launch_enter_hook, Hooks.launch_exit_hook = chains
    try:
        fast, body = replayed(add_launcher)
        x, r = torch.randn(8), torch.randn(8)
        for _ in range(3):
            fast(x, r)
        assert body.calls == 2 and fast.replaying() == 1
        hook = lambda metadata: None  # a profiler's hook: it must see every launch
        if how == "set":
            Hooks.launch_enter_hook = hook
        else:
            chains[0].calls.append(hook)
        torch.testing.assert_close(fast(x, r), x + r)
        assert body.calls == 3
    finally:
        Hooks.launch_enter_hook = Hooks.launch_exit_hook = None


@pytest.mark.parametrize("launcher", [HostLauncher, ScratchLauncher])
def test_a_replay_skips_the_launchers_python_only_where_it_just_forwards(launcher):
    kernel = HostKernel(ADD, launcher())
    HostBackend.launcher_class = launcher

    def scratch_launcher(x, r):
        y = torch.empty_like(x)
        kernel[(1,)](x, r, y, x.numel())
        return y

    try:
        fast, _ = replayed(scratch_launcher)
        x, r = torch.randn(8), torch.randn(8)
        for _ in range(2):
            fast(x, r)
        before = HostLauncher.calls
        torch.testing.assert_close(fast(x, r), x + r)
        assert fast.replaying() == 1
        assert HostLauncher.calls - before == (1 if launcher is ScratchLauncher else 0)
    finally:
        HostBackend.launcher_class = HostLauncher


@pytest.mark.parametrize("value", [[1, 2], {"a": 1}])
def test_unhashable_arguments_run_the_launcher(value):
    fast, body = replayed(lambda x, extra: add_launcher(x, x))
    for _ in range(3):
        fast(torch.ones(4), value)
    assert body.calls == 3


def test_an_integer_argument_equal_to_the_recorded_stream_stays_itself_on_another_stream():
    def zero_launcher(x):  # a kernel argument 0, the default stream's handle too
        y = torch.empty_like(x)
        scale[(1,)](x, y, x.numel(), 0)
        return y

    HostBackend.stream = 0
    try:
        fast, _ = replayed(zero_launcher)
        x = torch.ones(4)
        for _ in range(2):
            fast(x)
        HostBackend.stream = 5  # a later call on another stream (a CUDA-graph capture, say)
        torch.testing.assert_close(fast(x), torch.zeros(4))
        assert fast.replaying() == 1
    finally:
        HostBackend.stream = STREAM


def test_a_replayed_launcher_inside_a_recording_is_seen_by_it():
    inner, _ = replayed(add_launcher)

    def outer_launcher(x, r):  # another replayed op inside this launcher
        y = inner(x, r)
        z = torch.empty_like(x)
        scale[(1,)](y, z, x.numel(), 2.0)
        return z

    x, r = torch.ones(8), torch.ones(8)
    for _ in range(2):
        inner(x, r)
    assert inner.replaying() == 1
    outer, _ = replayed(outer_launcher)
    for i in range(4):
        x = torch.full((8,), float(i))
        torch.testing.assert_close(outer(x, r), 2 * (x + r))
    assert outer.replaying() == 1


def test_a_launcher_that_switches_device_is_not_replayed():
    def switching_launcher(x, r):  # as `with torch.cuda.device(x.device):` does
        HostBackend.device = 2
        try:
            return add_launcher(x, r)
        finally:
            HostBackend.device = 1

    fast, body = replayed(switching_launcher)
    x, r = torch.ones(8), torch.ones(8)
    for _ in range(4):
        torch.testing.assert_close(fast(x, r), x + r)
    assert body.calls == 4 and fast.replaying() == 0


def test_a_named_tuple_of_outputs_keeps_the_launcher():
    from collections import namedtuple

    Out = namedtuple("Out", "y")
    fast, body = replayed(lambda x, r: Out(add_launcher(x, r)))
    x, r = torch.ones(8), torch.ones(8)
    for _ in range(4):
        torch.testing.assert_close(fast(x, r).y, x + r)
    assert body.calls == 4
