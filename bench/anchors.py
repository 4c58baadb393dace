"""Library anchors: what a user would call instead of our kernel, for the ops a library has.

A task names its anchors in task.json, each with its options (an empty object for none):

    "settings": {"anchors": {"liger.fused_add_rms_norm": {"eps": 1e-6}}}

An anchor adapts the task's inputs to one library call and returns the task's outputs, so the suite
checks its output against the task's reference before it times it, exactly as it does our kernel.
Liger-Kernel anchors need the optional extra (``pip install 'kernel-agent[anchors]'``); a library
missing, or refusing a shape (Liger refuses rows wider than 65536), raises when the anchor is built or
first called, and the suite reports that anchor as refused with the message.

The anchors every task gets (torch eager, torch.compile) are the suite's own; see bench/suite.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class AnchorError(ValueError):
    """A task names an anchor wrongly; the message names the key."""


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NormOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    eps: float = Field(default=1e-6, gt=0)
    # Liger's default ("llama") multiplies by w in the input dtype; "gemma" keeps fp32 to the end.
    casting_mode: Literal["llama", "gemma", "none"] = "llama"


Build = Callable[[Any], Callable[..., Any]]  # options -> fn(*task inputs) -> the task's outputs


@dataclass(frozen=True)
class Anchor:
    name: str
    label: str
    signature: str  # the task inputs it takes and the outputs it gives
    options: type[BaseModel]
    build: Build


def _liger_fused_add_rms_norm(options: NormOptions) -> Callable[..., Any]:
    from liger_kernel.transformers.functional import liger_fused_add_rms_norm

    return lambda x, r, w: liger_fused_add_rms_norm(x, r, w, options.eps, casting_mode=options.casting_mode)


def _liger_rms_norm(options: NormOptions) -> Callable[..., Any]:
    from liger_kernel.transformers.functional import liger_rms_norm

    return lambda x, w: liger_rms_norm(x, w, options.eps, casting_mode=options.casting_mode)


def _liger_softmax(options: NoOptions) -> Callable[..., Any]:
    from liger_kernel.transformers.functional import liger_softmax

    return liger_softmax


def _liger_swiglu(options: NoOptions) -> Callable[..., Any]:
    from liger_kernel.transformers.functional import liger_swiglu

    return liger_swiglu


def _sdpa_decode(options: NoOptions) -> Callable[..., Any]:
    import torch.nn.functional as F

    def sdpa(q, k, v):
        # One query per head: q [B, Hq, D] -> [B, Hq, 1, D]; the KV heads are shared (enable_gqa).
        return F.scaled_dot_product_attention(q.unsqueeze(2), k, v, enable_gqa=True).squeeze(2)

    return sdpa


ANCHORS: dict[str, Anchor] = {
    a.name: a
    for a in (
        Anchor("liger.fused_add_rms_norm", "Liger fused add+RMSNorm",
               "(x [M, N], r [M, N], w [N]) -> (y, h = x + r)", NormOptions, _liger_fused_add_rms_norm),
        Anchor("liger.rms_norm", "Liger RMSNorm", "(x [M, N], w [N]) -> y", NormOptions, _liger_rms_norm),
        Anchor("liger.softmax", "Liger softmax", "(x [..., N]) -> softmax over the last dim", NoOptions,
               _liger_softmax),
        Anchor("liger.swiglu", "Liger SwiGLU", "(a, b) -> silu(a) * b", NoOptions, _liger_swiglu),
        Anchor("sdpa", "torch SDPA (enable_gqa)",
               "(q [B, Hq, D], k, v [B, Hkv, S, D]) -> o [B, Hq, D], one decode step", NoOptions, _sdpa_decode),
    )
}  # fmt: skip


@dataclass(frozen=True)
class Chosen:
    """An anchor a task named, with its validated options."""

    anchor: Anchor
    options: BaseModel

    @property
    def name(self) -> str:
        return self.anchor.name

    def build(self) -> Callable[..., Any]:
        return self.anchor.build(self.options)


def task_anchors(settings: dict[str, Any]) -> list[Chosen]:
    """The anchors a task's ``settings`` names, validated; AnchorError names the key."""
    named = settings.get("anchors", {})
    if not isinstance(named, dict):
        raise AnchorError(
            'settings.anchors must map anchor names to their options, e.g. {"liger.softmax": {}}'
        )
    chosen = []
    for name, options in named.items():
        anchor = ANCHORS.get(name)
        if anchor is None:
            raise AnchorError(f"settings.anchors: unknown anchor {name!r} (known: {', '.join(ANCHORS)})")
        try:
            chosen.append(Chosen(anchor, anchor.options.model_validate(options)))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise AnchorError(
                f"settings.anchors.{name}{'.' + where if where else ''}: {err['msg']}"
            ) from None
    return chosen


def library_versions() -> dict[str, str]:
    """Versions of the anchor libraries installed here (those missing are left out)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("liger-kernel",):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            continue
    return found
