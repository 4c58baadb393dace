"""A LangChain chat model over llama-cpp-python's ``Llama.create_chat_completion`` (a local GGUF file).

Answers are deterministic (temperature 0, fixed seed) and, when the caller passes
``response_format={"type": "json_object", "schema": {...}}``, constrained by llama.cpp's grammar to
JSON of that schema. The weights load once per process and are shared by every role using the file.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, PrivateAttr

_LOADED: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def _load(model_path: str, n_ctx: int, n_threads: int | None, seed: int) -> Any:
    from llama_cpp import Llama

    key = (model_path, n_ctx, n_threads, seed)
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = Llama(
                model_path=model_path,
                n_ctx=n_ctx,
                n_threads=n_threads or max(1, (os.cpu_count() or 2)),
                seed=seed,
                verbose=False,
            )
        return _LOADED[key]


def _role(message: BaseMessage) -> str:
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, AIMessage):
        return "assistant"
    return "user"  # HumanMessage, ToolMessage and anything else a chat template knows as the user


def _text(message: BaseMessage) -> str:
    text = message.content if isinstance(message.content, str) else json.dumps(message.content)
    if isinstance(message, AIMessage) and message.tool_calls:
        text += "\n" + json.dumps([c["args"] for c in message.tool_calls])
    if isinstance(message, ToolMessage):
        text = f"(tool result) {text}"
    return text


def to_llama_messages(messages: list[BaseMessage]) -> list[dict[str, str]]:
    """OpenAI-style messages; consecutive turns of one role are merged (some templates, Gemma's among
    them, require strictly alternating user/assistant turns)."""
    out: list[dict[str, str]] = []
    for message in messages:
        role, text = _role(message), _text(message)
        if out and out[-1]["role"] == role:
            out[-1]["content"] += "\n\n" + text
        else:
            out.append({"role": role, "content": text})
    return out


class ChatLlamaCpp(BaseChatModel):
    """Chat completions from a local GGUF model."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    model_path: str
    n_ctx: int = 8192
    max_tokens: int = 1024
    temperature: float = 0.0
    seed: int = 0
    n_threads: int | None = None
    _llama: Any = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "llamacpp"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "n_ctx": self.n_ctx, "temperature": self.temperature}

    @property
    def llama(self) -> Any:
        if self._llama is None:
            self._llama = _load(self.model_path, self.n_ctx, self.n_threads, self.seed)
        return self._llama

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        request: dict[str, Any] = {
            "messages": to_llama_messages(messages),
            "temperature": self.temperature,
            "max_tokens": kwargs.pop("max_tokens", self.max_tokens),
            "seed": self.seed,
            "stop": stop,
        }
        if kwargs.get("response_format") is not None:
            request["response_format"] = kwargs["response_format"]
        completion = self.llama.create_chat_completion(**request)
        choice = completion["choices"][0]
        usage = completion.get("usage") or {}
        message = AIMessage(
            content=choice["message"].get("content") or "",
            usage_metadata={
                "input_tokens": int(usage.get("prompt_tokens", 0)),
                "output_tokens": int(usage.get("completion_tokens", 0)),
                "total_tokens": int(usage.get("total_tokens", 0)),
            },
            response_metadata={"finish_reason": choice.get("finish_reason"), "model_name": self.model_path},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])
