"""A chat model that replays a recorded transcript: ``scripted:/path/transcript.json``.

A transcript maps each role to the answers its model gives, in order::

    {"diagnoser": [{"tool": "Diagnosis", "args": {...}}],
     "proposer":  [{"tool": "ProposalBatch", "args": {"proposals": [{"source_file": "fast.py", ...}]}},
                   {"text": "Here you go: ```json {...} ```"}],
     "critic":    [{"tool": "Critique", "args": {"verdict": "approve", "objections": []}}]}

``tool`` answers come back as tool calls (so ``with_structured_output`` works), ``text`` answers as
plain text (exercising the tolerant JSON parser). ``source_file`` inside a proposal is replaced by
that file's text, relative to the transcript. Every prompt the model was sent is kept in ``prompts``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

EXHAUSTED = "(the transcript has no more answers)"


def _inline_sources(value: Any, folder: Path) -> Any:
    if isinstance(value, dict):
        out = {k: _inline_sources(v, folder) for k, v in value.items() if k != "source_file"}
        if "source_file" in value:
            out["source"] = (folder / value["source_file"]).read_text()
        return out
    if isinstance(value, list):
        return [_inline_sources(v, folder) for v in value]
    return value


def answer_message(entry: dict[str, Any], folder: Path | None = None, n: int = 0) -> AIMessage:
    """One transcript entry as the AIMessage a provider would return."""
    folder = folder or Path(".")
    if "tool" in entry:
        args = _inline_sources(entry.get("args", {}), folder)
        return AIMessage(content="", tool_calls=[{"name": entry["tool"], "args": args, "id": f"call{n}"}])
    if "text" in entry:
        return AIMessage(content=entry["text"])
    if "text_file" in entry:
        return AIMessage(content=(folder / entry["text_file"]).read_text())
    raise ValueError(f"transcript entry needs 'tool', 'text' or 'text_file': {entry}")


class ScriptedChatModel(FakeMessagesListChatModel):
    """Answers from a list, in order, then says it has nothing more (never cycles)."""

    prompts: list[list[BaseMessage]] = []
    roles: dict[str, list[AIMessage]] = {}

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self

    def for_role(self, role: str) -> ScriptedChatModel:
        """A model answering with this role's part of the transcript (one transcript, three roles)."""
        if not self.roles:
            return self
        return ScriptedChatModel(responses=list(self.roles.get(role, [])))

    @classmethod
    def from_transcript(cls, path: str | Path) -> ScriptedChatModel:
        path = Path(path)
        if not path.is_file():
            from nodes.llm.models import ModelSpecError

            raise ModelSpecError(f"model SPEC 'scripted:{path}': no transcript file at {path}")
        data = json.loads(path.read_text())
        roles = {
            role: [answer_message(e, path.parent, i) for i, e in enumerate(entries)]
            for role, entries in data.items()
            if isinstance(entries, list)
        }
        return cls(responses=[], roles=roles)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.prompts = [*self.prompts, list(messages)]
        if self.i >= len(self.responses):
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=EXHAUSTED))])
        response = self.responses[self.i]
        self.i += 1
        return ChatResult(generations=[ChatGeneration(message=response)])
