"""Compare a candidate's outputs with the reference's, and say exactly where they differ."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Mismatch:
    error_type: str  # mismatch | nan | unwritten_output | forbidden_construct | runtime_error
    message: str
    details: dict[str, Any] = field(default_factory=dict)


def as_tuple(out: Any) -> tuple:
    return tuple(out) if isinstance(out, tuple | list) else (out,)


def check_structure(got: tuple, expected: tuple, inputs: tuple) -> Mismatch | None:
    """Same count, type, shape, dtype and device as the reference; no output aliasing an input."""
    if len(got) != len(expected):
        return Mismatch(
            "mismatch", f"launch() returned {len(got)} output(s), the reference returns {len(expected)}"
        )
    input_storages = {
        t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor) and t.numel()
    }
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if not isinstance(g, torch.Tensor):
            return Mismatch("mismatch", f"output {i} is a {type(g).__name__}, not a tensor", {"output": i})
        if type(g) is not torch.Tensor and not isinstance(g, torch.nn.Parameter):
            return Mismatch(
                "forbidden_construct", f"output {i} is a tensor subclass ({type(g).__name__})", {"output": i}
            )
        if tuple(g.shape) != tuple(e.shape):
            return Mismatch(
                "mismatch",
                f"output {i} has shape {list(g.shape)}, expected {list(e.shape)}",
                {"output": i, "got_shape": list(g.shape), "expected_shape": list(e.shape)},
            )
        if g.dtype != e.dtype:
            return Mismatch(
                "mismatch",
                f"output {i} has dtype {str(g.dtype).removeprefix('torch.')}, "
                f"expected {str(e.dtype).removeprefix('torch.')}",
                {"output": i},
            )
        if g.device.type != e.device.type:
            return Mismatch("mismatch", f"output {i} is on {g.device}, expected {e.device}", {"output": i})
        if g.numel() and g.untyped_storage().data_ptr() in input_storages:
            return Mismatch(
                "forbidden_construct",
                f"output {i} aliases an input's memory (returns an input or a view)",
                {"output": i},
            )
    return None


# Elements per slice: outputs of a GB are compared where they live, in fp64 slices of bounded size,
# instead of one fp64 copy on the host (seconds per output, the check phase's old bottleneck).
CHUNK = 1 << 24
ROW_SCALE_MIN_ROW = 16


@dataclass
class _Scan:
    """What one pass over the slices found: first position and count per kind, norms, worst diff."""

    nan_first: int | None = None
    nan_count: int = 0
    bad_first: int | None = None
    bad_count: int = 0
    max_finite_diff: float | None = None
    diff_sq: float = 0.0
    ref_sq: float = 0.0
    worst_diff: float = -1.0
    worst_at: int = 0


def compare(
    got: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float, row_scale: bool = False
) -> tuple[str, dict] | None:
    """None when close. Else (kind, details): kind is 'nan' or 'mismatch', details localize the first
    bad element. Closeness is elementwise |g-e| <= atol + rtol * |e| AND a scale-aware whole-output
    relative error ||g-e|| / ||e|| <= rtol, so a degenerate output cannot hide under atol.

    With ``row_scale`` (a task's ``tolerance.scale: "row"``) the elementwise bound uses
    max(|e|, RMS of e's row) instead of |e| (rows: the last dimension, at least ROW_SCALE_MIN_ROW wide):
    an element near zero in a row of values ~10 carries that row's rounding (one bf16 step at 10 is
    0.06). It is opt-in because it is looser: an element may then be off by rtol of its row's scale."""
    g_all, e_all = _flat(got, got.device), _flat(expected, got.device)
    scan = _Scan()
    row = int(got.shape[-1]) if got.dim() >= 2 else 0
    if not row_scale or not ROW_SCALE_MIN_ROW <= row <= CHUNK:
        row = 0  # element scale (1-D outputs, short or very long rows always)
    step = CHUNK // row * row if row else CHUNK  # whole rows per slice
    whole = g_all.numel() <= step  # one slice: no slicing (each torch operation waits for the judge's GIL)
    for start in range(0, g_all.numel(), step):
        g, e = (g_all, e_all) if whole else (g_all[start : start + step], e_all[start : start + step])
        _scan_slice(scan, g, e, start, rtol, atol, row)
    shape = list(got.shape)
    if scan.nan_count:
        return "nan", _details(
            g_all, e_all, shape, scan.nan_first, scan.nan_count, "NaN where the reference is finite"
        )
    if scan.bad_count:
        details = _details(g_all, e_all, shape, scan.bad_first, scan.bad_count, "outside tolerance")
        details["max_abs_err"] = scan.max_finite_diff
        return "mismatch", details
    ref_norm = scan.ref_sq**0.5
    if ref_norm > 0:
        rel = scan.diff_sq**0.5 / ref_norm
        if rel > max(rtol, 1e-6):
            details = _details(
                g_all,
                e_all,
                shape,
                scan.worst_at,
                1,
                f"relative error {rel:.3g} over the whole output exceeds rtol {rtol}",
            )
            details["relative_error"] = rel
            return "mismatch", details
    return None


def _flat(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` flat, on ``device``, without grad; the operations it does not need are skipped."""
    t = t.detach() if t.requires_grad else t
    t = t if t.device == device else t.to(device)
    return t.reshape(-1)


def _scan_slice(
    scan: _Scan, got: torch.Tensor, expected: torch.Tensor, offset: int, rtol: float, atol: float, row: int
) -> None:
    """Every statistic of one slice reduced on its device and read back in one transfer: each host
    read waits for the GPU, and with many check workers time-slicing one GPU that wait dominates.
    A slice whose every element is finite and close takes the short path: a third of the passes."""
    if _scan_close_slice(scan, got, expected, offset, rtol, atol, row):
        return
    g = got.to(torch.float64)
    e = expected.to(torch.float64)
    g_nan, e_nan = torch.isnan(g), torch.isnan(e)
    bad_nan = g_nan & ~e_nan
    both_inf = torch.isinf(g) & torch.isinf(e) & (torch.sign(g) == torch.sign(e))
    diff = torch.where(both_inf | (g_nan & e_nan), torch.zeros_like(g), (g - e).abs())
    # row > 0: rtol applies to the element's magnitude or its row's RMS, whichever is larger (opt-in)
    scale = torch.maximum(e.abs(), _row_rms(e, row)) if row else e.abs()
    # an infinity of the reference is matched only by the same infinity (its tolerance would be infinite)
    bad = (diff > atol + rtol * scale) | (e_nan & ~g_nan) | (torch.isinf(e) & ~both_inf)
    finite = torch.isfinite(e) & torch.isfinite(g)
    zero = torch.zeros((), dtype=torch.float64, device=g.device)
    empty = not diff.numel()
    worst_at = zero if empty else diff.argmax()
    stats = torch.stack(
        [
            bad_nan.sum().to(torch.float64),
            bad.sum().to(torch.float64),
            torch.where(torch.isfinite(diff), diff, -torch.inf).amax() if not empty else -torch.inf + zero,
            torch.where(finite, e, zero).square().sum(),
            torch.where(finite, g - e, zero).square().sum(),
            worst_at.to(torch.float64),
            zero if empty else diff.take(worst_at),  # take: indexing by a GPU scalar would sync
        ]
    ).tolist()
    nan_count, bad_count, top, ref_sq, diff_sq, at, value = stats
    if nan_count:
        if scan.nan_first is None:
            scan.nan_first = offset + int(bad_nan.nonzero()[0, 0])
        scan.nan_count += int(nan_count)
    if bad_count:
        if scan.bad_first is None:
            scan.bad_first = offset + int(bad.nonzero()[0, 0])
        scan.bad_count += int(bad_count)
    if top != -float("inf"):
        scan.max_finite_diff = top if scan.max_finite_diff is None else max(scan.max_finite_diff, top)
    scan.ref_sq += ref_sq
    scan.diff_sq += diff_sq
    if not empty and value > scan.worst_diff:
        scan.worst_diff, scan.worst_at = value, offset + int(at)


def _scan_close_slice(
    scan: _Scan, got: torch.Tensor, expected: torch.Tensor, offset: int, rtol: float, atol: float, row: int
) -> bool:
    """The common case in few passes: True (and ``scan`` updated) when every element of the slice is
    finite and within tolerance; False, nothing updated, when the full scan must say what is wrong.

    16-bit floats are compared in fp32, which holds them and their differences exactly (to well under
    any tolerance); anything wider in fp64. Sums of squares accumulate in fp64 either way."""
    if got.is_cuda and not row:
        from tools import close_scan  # Triton: imported where a GPU judges, not by a CPU run

        if close_scan.covered(got, expected):
            n_far, ref_sq, diff_sq, top_value, at_value = close_scan.stats(got, expected, rtol, atol)
            return _take_close(scan, offset, n_far, ref_sq, diff_sq, top_value, at_value)
    work = torch.float32 if got.is_floating_point() and got.element_size() <= 2 else torch.float64
    g, e = got.to(work), expected.to(work)
    diff = (g - e).abs_()  # NaN where either is NaN, inf where one is infinite: never "close" below
    scale = torch.maximum(e.abs(), _row_rms(e, row)) if row else e.abs()
    close = diff <= scale.mul_(rtol).add_(atol)
    top, at = diff.max(dim=0)  # compare() never scans an empty slice
    stats = torch.stack(
        [
            close.sum(dtype=torch.float64),
            e.square().sum(dtype=torch.float64),  # not finite when e holds an inf or a NaN
            diff.square().sum(dtype=torch.float64),
            top.to(torch.float64),
            at.to(torch.float64),
        ]
    ).tolist()
    n_close, *rest = stats
    return _take_close(scan, offset, diff.numel() - n_close, *rest)


def _take_close(
    scan: _Scan, offset: int, n_far: float, ref_sq: float, diff_sq: float, top_value: float, at_value: float
) -> bool:
    """Fold a close scan's statistics into ``scan``: False (nothing folded) unless every element was close
    and the sums are finite."""
    if n_far or not math.isfinite(ref_sq) or not math.isfinite(diff_sq):
        return False
    scan.max_finite_diff = top_value if scan.max_finite_diff is None else max(scan.max_finite_diff, top_value)
    if top_value > scan.worst_diff:
        scan.worst_diff, scan.worst_at = top_value, offset + int(at_value)
    scan.ref_sq += ref_sq
    scan.diff_sq += diff_sq
    return True


def _row_rms(e: torch.Tensor, row: int) -> torch.Tensor:
    finite = torch.where(torch.isfinite(e), e, torch.zeros_like(e))
    rms = finite.reshape(-1, row).square().mean(dim=1, keepdim=True).sqrt()
    return rms.expand(-1, row).reshape(-1)


def _details(
    g: torch.Tensor, e: torch.Tensor, shape: list[int], flat: int, count: int, what: str
) -> dict[str, Any]:
    index = []
    rest = flat
    for size in reversed(shape):
        index.append(rest % size)
        rest //= size
    return {
        "index": index[::-1],
        "got": _num(g[flat]),
        "expected": _num(e[flat]),
        "count": count,
        "numel": int(g.numel()),
        "what": what,
    }


def _num(x: torch.Tensor) -> float | str:
    v = float(x)
    return v if v == v and abs(v) != float("inf") else str(v)


def _read_back(flags: list[torch.Tensor]) -> list[bool]:
    """Per-pair verdicts computed on the device, read back in one transfer (one wait for the GPU)."""
    where = flags[0].device
    return [bool(f) for f in torch.stack([f.to(where) for f in flags]).tolist()]


def same_bits(a: tuple, b: tuple) -> bool:
    """Bit-identical outputs (NaN where NaN)."""
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
        return False
    if not a:
        return True
    if all(torch.equal(_bytes(x), _bytes(y)) for x, y in zip(a, b, strict=True)):
        return True  # the common case, in one operation per output; otherwise +0/-0 and NaN payloads may differ
    return all(
        _read_back(
            [
                (torch.nan_to_num(x, nan=0.0) == torch.nan_to_num(y, nan=0.0)).all()
                & (torch.isnan(x) == torch.isnan(y)).all()
                for x, y in zip(a, b, strict=True)
            ]
        )
    )


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)  # reshape copies a tensor that is not contiguous


def changed_inputs(inputs: tuple, saved: tuple) -> list[int]:
    """Indices of inputs that no longer equal their saved copies (as ``torch.equal`` judges)."""
    if not inputs:
        return []
    flags = [
        (now != before).any() if now.shape == before.shape else torch.ones((), dtype=torch.bool)
        for now, before in zip(inputs, saved, strict=True)
    ]
    return [i for i, changed in enumerate(_read_back(flags)) if changed]


def check_described(described: list[dict[str, Any]], expected: tuple, device: str) -> Mismatch | None:
    """``check_structure`` on what a worker reports of its outputs (the judge never holds them as objects):
    count, tensor type, shape, dtype, device, and no output in the memory the inputs were handed in."""
    if len(described) != len(expected):
        return Mismatch(
            "mismatch", f"launch() returned {len(described)} output(s), the reference returns {len(expected)}"
        )
    for i, (d, e) in enumerate(zip(described, expected, strict=True)):
        if "shape" not in d:
            return Mismatch("mismatch", f"output {i} is a {d.get('type', '?')}, not a tensor", {"output": i})
        if d["type"] != "Tensor":
            return Mismatch("forbidden_construct", f"output {i} is a tensor subclass ({d['type']})", {"output": i})
        if tuple(d["shape"]) != tuple(e.shape):
            return Mismatch(
                "mismatch",
                f"output {i} has shape {list(d['shape'])}, expected {list(e.shape)}",
                {"output": i, "got_shape": list(d["shape"]), "expected_shape": list(e.shape)},
            )
        want = str(e.dtype).removeprefix("torch.")
        if d["dtype"] != want:
            return Mismatch("mismatch", f"output {i} has dtype {d['dtype']}, expected {want}", {"output": i})
        if d["device"] != device:
            return Mismatch("mismatch", f"output {i} is on {d['device']}, expected {device}", {"output": i})
        if d.get("aliases_input"):
            return Mismatch(
                "forbidden_construct", f"output {i} aliases an input's memory (returns an input or a view)",
                {"output": i},
            )  # fmt: skip
    return None


def sample_positions(numel: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """About ``count`` distinct flat positions (all of them when the output is smaller), sorted; drawn in
    O(count), not by permuting every position (outputs of hundreds of millions of elements)."""
    if numel <= count:
        return torch.arange(numel)
    return torch.randint(numel, (count,), generator=generator).unique()


def unravel(flat: torch.Tensor, shape: tuple[int, ...]) -> list[list[int]]:
    """Flat positions as one index list per dimension (what indexing by ``out[i0, i1, ...]`` takes)."""
    if not shape:
        return []
    return [ix.tolist() for ix in torch.unravel_index(flat, shape)]


def scale_at(expected: torch.Tensor, flat: torch.Tensor, row_scale: bool) -> torch.Tensor:
    """The scale ``compare``'s elementwise rule uses at these flat positions: |expected|, or with
    ``row_scale`` max(|expected|, the RMS of its row)."""
    e_all = expected.detach().reshape(-1)  # indexed before it is widened: outputs of a GB
    at = flat.to(e_all.device)
    scale = e_all[at].to(torch.float64).abs()
    row = int(expected.shape[-1]) if expected.dim() >= 2 else 0
    if row_scale and ROW_SCALE_MIN_ROW <= row <= CHUNK:  # only the rows sampled
        rows = e_all.reshape(-1, row)[at // row].to(torch.float64)
        rows = torch.where(torch.isfinite(rows), rows, torch.zeros_like(rows))
        scale = torch.maximum(scale, rows.square().mean(dim=1).sqrt())
    return scale


def samples_close(
    got: torch.Tensor, expected: torch.Tensor, scale: torch.Tensor, rtol: float, atol: float
) -> torch.Tensor:
    """Elementwise, ``compare``'s rule on sampled values (a timed replay's log): within atol + rtol * scale,
    NaN where the reference is NaN, and an infinity of the reference matched only by the same infinity
    (its scale is infinite, so the tolerance alone would take any finite value)."""
    within = (got - expected).abs() <= atol + rtol * scale
    return torch.where(torch.isinf(expected), got == expected, within) | (torch.isnan(got) & torch.isnan(expected))
