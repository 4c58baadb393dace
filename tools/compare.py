"""Compare a candidate's outputs with the reference's, and say exactly where they differ."""

from __future__ import annotations

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


def compare(got: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> tuple[str, dict] | None:
    """None when close. Else (kind, details): kind is 'nan' or 'mismatch', details localize the first
    bad element. Closeness is elementwise |g-e| <= atol + rtol|e| AND a scale-aware whole-output
    relative error ||g-e|| / ||e|| <= rtol, so a degenerate output cannot hide under atol."""
    g = got.detach().to(torch.float64).cpu()
    e = expected.detach().to(torch.float64).cpu()
    g_nan, e_nan = torch.isnan(g), torch.isnan(e)
    bad_nan = g_nan & ~e_nan
    if bool(bad_nan.any()):
        return "nan", _locate(bad_nan, g, e, "NaN where the reference is finite")
    both_inf = torch.isinf(g) & torch.isinf(e) & (torch.sign(g) == torch.sign(e))
    diff = torch.where(both_inf | (g_nan & e_nan), torch.zeros_like(g), (g - e).abs())
    bad = (diff > atol + rtol * e.abs()) | (e_nan & ~g_nan)
    if bool(bad.any()):
        details = _locate(bad, g, e, "outside tolerance")
        details["max_abs_err"] = (
            float(diff[torch.isfinite(diff)].max()) if torch.isfinite(diff).any() else None
        )
        return "mismatch", details
    finite = torch.isfinite(e) & torch.isfinite(g)
    ref_norm = float(e[finite].norm()) if finite.any() else 0.0
    if ref_norm > 0:
        rel = float((g[finite] - e[finite]).norm()) / ref_norm
        if rel > max(rtol, 1e-6):
            worst = torch.zeros_like(bad)
            worst.view(-1)[int(diff.view(-1).argmax())] = True
            details = _locate(
                worst, g, e, f"relative error {rel:.3g} over the whole output exceeds rtol {rtol}"
            )
            details["relative_error"] = rel
            return "mismatch", details
    return None


def _locate(mask: torch.Tensor, g: torch.Tensor, e: torch.Tensor, what: str) -> dict[str, Any]:
    flat = int(mask.reshape(-1).nonzero()[0].item())
    index = list(torch.unravel_index(torch.tensor(flat), mask.shape)) if mask.dim() else []
    index = [int(i) for i in index]
    return {
        "index": index,
        "got": _num(g.reshape(-1)[flat]),
        "expected": _num(e.reshape(-1)[flat]),
        "count": int(mask.sum()),
        "numel": int(mask.numel()),
        "what": what,
    }


def _num(x: torch.Tensor) -> float | str:
    v = float(x)
    return v if v == v and abs(v) != float("inf") else str(v)


def same_bits(a: tuple, b: tuple) -> bool:
    return all(
        x.shape == y.shape
        and torch.equal(torch.nan_to_num(x, nan=0.0), torch.nan_to_num(y, nan=0.0))
        and torch.equal(torch.isnan(x), torch.isnan(y))
        for x, y in zip(a, b, strict=True)
    )
