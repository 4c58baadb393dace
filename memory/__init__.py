"""Long-term memory of kernel-agent: the case library, the validation cache and run-folder artifacts.

Memory is optional: on a box without chromadb, sentence-transformers or the packaged model,
``open_case_library`` says why and the graph runs without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from memory.home import default_case_store, default_validation_cache, kernel_agent_home

if TYPE_CHECKING:
    from memory.cases.library import CaseLibrary

__all__ = ["default_case_store", "default_validation_cache", "kernel_agent_home", "open_case_library"]


def open_case_library(
    path: str | Path | None = None,
    *,
    model_path: str | Path | None = None,
    lazy_model: bool = False,
) -> tuple[CaseLibrary | None, str | None]:
    """Open the case library at ``path`` (default: ``$KERNEL_AGENT_HOME/cases``).

    Returns ``(library, None)``, or ``(None, "memory off: <reason>")`` when chromadb,
    sentence-transformers or the embedding model cannot be imported or loaded, or the store cannot be
    opened. Never raises; the caller prints the reason once and puts it in the report.
    ``model_path`` overrides the packaged model folder; ``lazy_model`` defers loading the model to
    the first add/search (for commands that only read stored cases).
    """
    try:
        import chromadb  # noqa: F401
    except Exception as exc:
        return None, f"memory off: chromadb cannot be imported ({type(exc).__name__}: {exc})"
    try:
        from memory.embedding import MiniLMEmbedding

        embedding = MiniLMEmbedding(model_path, lazy=lazy_model)
    except Exception as exc:
        return None, f"memory off: embedding model unavailable ({exc})"
    store = Path(path) if path is not None else default_case_store()
    try:
        from memory.cases.library import CaseLibrary

        return CaseLibrary(store, embedding=embedding), None
    except Exception as exc:
        return None, f"memory off: case store {store} cannot be opened ({type(exc).__name__}: {exc})"
