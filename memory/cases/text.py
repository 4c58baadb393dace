"""The text that gets embedded: a case and a query are written the same way, op first, so a search
for a new task lands on cases of the same kind of op with the same bottleneck."""

from __future__ import annotations

from typing import Any

from memory.cases.model import Case, TaskSignature, guess_op_family

# Each op family is spelled out with its common names, in documents and queries alike: a query for
# "LayerNorm" then shares words with an RMSNorm case even though the two descriptions do not.
FAMILY_GLOSS = {
    "attention": "attention kernel: query-key scores, softmax, weighted sum of values "
    "(flash attention, GQA, MQA, decode over a KV cache)",
    "normalization": "normalization kernel: per-row statistics then scale "
    "(LayerNorm, RMSNorm, layer norm, RMS norm)",
    "softmax": "softmax kernel: per-row max, exponentials and their sum (softmax, log-softmax, logsumexp)",
    "matmul": "matrix multiplication kernel: tiled dot products on tensor cores (GEMM, matmul, linear layer)",
    "convolution": "convolution kernel: sliding-window dot products (conv1d, conv2d)",
    "scan": "scan kernel: prefix sums along a dimension (cumsum, cumulative product)",
    "reduction": "reduction kernel: sum, mean or max along a dimension",
    "elementwise": "elementwise kernel: independent per-element math (activation, add, multiply, GELU, SiLU)",
}


def _words(identifier: str) -> str:
    # "add_rmsnorm" -> "add rmsnorm", "memory_bound" -> "memory bound": the tokenizer reads words.
    return identifier.replace("_", " ").replace("-", " ")


def family_gloss(op_family: str) -> str:
    return FAMILY_GLOSS.get(op_family, f"{_words(op_family)} kernel")


def task_text(task: TaskSignature) -> str:
    # Shapes stay out: numbers only dilute the meaning of the op for the embedding.
    parts = [f"{family_gloss(task.op_family)}.", f"Task {_words(task.name)}:", task.description.strip()]
    if task.dtypes:
        parts.append(f"dtype {', '.join(task.dtypes)}.")
    return " ".join(p for p in parts if p)


def bottleneck_text(bottleneck: str | None) -> str:
    return f"Bottleneck: {_words(bottleneck)}." if bottleneck else ""


def case_document(case: Case) -> str:
    change = case.change
    config = ", ".join(f"{k}={v}" for k, v in change.config.items()) or "default config"
    outcome = (
        f"failed with {_words(case.outcome.error_type or 'an error')}"
        if case.failed
        else ("kept, faster" if case.kept else "passed, not kept")
    )
    parts = [
        task_text(case.task),
        bottleneck_text(case.snapshot.bottleneck),
        case.diagnosis.strip(),
        f"Change: {_words(change.module.removesuffix('.py'))} with {config}"
        + (", new kernel source." if change.new_source else "."),
        case.rationale.strip(),
        f"Outcome: {outcome}.",
    ]
    return " ".join(p for p in parts if p)


def task_query(task_signature: dict[str, Any] | TaskSignature, bottleneck: str | None = None) -> str:
    task = task_signature if isinstance(task_signature, TaskSignature) else TaskSignature(**task_signature)
    return " ".join(p for p in (task_text(task), bottleneck_text(bottleneck)) if p)


def expand_query(text: str) -> str:
    """A free-text query gets the gloss of the op family it names, as documents have."""
    family = guess_op_family(text)
    return text if family == "other" else f"{family_gloss(family)}. {text}"
