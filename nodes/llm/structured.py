"""Structured answers from any chat model: pydantic schemas, tolerant JSON, one re-ask, then a
recorded failure.

Methods: ``tools`` (``with_structured_output``: tool calling / the provider's native mode),
``json_schema`` (``with_structured_output(method="json_schema")``), ``json`` (the schema in the
prompt and in ``response_format`` where the backend constrains decoding to it; the JSON is then found
in the text). Whatever the method, an answer that does not parse or validate is shown back to the
model with the error once (``retries``); after that the call raises ``AgentOutputError`` carrying the
raw text, which the roles turn into a recorded failure.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import BaseModel, ValidationError

from nodes.llm.accounting import Usage
from nodes.llm.context import load_prompt

T = TypeVar("T")
S = TypeVar("S", bound=BaseModel)


class AgentOutputError(RuntimeError):
    """A role's model gave no usable answer (after the re-ask), or the call itself failed.

    ``raw`` is the model's last answer text (empty when the call failed), ``kind`` is
    ``"unparseable"`` | ``"invalid"`` | ``"call_failed"``.
    """

    def __init__(self, role: str, kind: str, message: str, raw: str = ""):
        super().__init__(f"{role}: {message}")
        self.role, self.kind, self.raw, self.reason = role, kind, raw, message


class JSONNotFound(ValueError):
    """No JSON value could be read from the text."""


# --------------------------------------------------------------------------------------------
# tolerant JSON


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)


def _scan(text: str, start: int) -> tuple[int | None, list[tuple[int, str]]]:
    """Walk a JSON value from ``text[start]`` ('{' or '['). Returns (end index when the value closes,
    else None; the cut points where the prefix is a complete value once its open brackets are closed,
    each with the closing brackets it needs)."""
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []
    in_string = escape = False
    expect_key: list[bool] = []  # per open object: is the next string a key?
    string_is_key = False
    i = start
    while i < len(text):
        ch = text[i]
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
                if not string_is_key:
                    cuts.append((i + 1, "".join(reversed(stack))))
        elif ch == '"':
            in_string = True
            string_is_key = bool(stack) and stack[-1] == "}" and expect_key[-1]
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
            expect_key.append(ch == "{")
            cuts.append((i + 1, "".join(reversed(stack))))
        elif ch in "}]":
            if not stack:
                return None, cuts
            stack.pop()
            expect_key.pop()
            if not stack:
                return i + 1, cuts
            cuts.append((i + 1, "".join(reversed(stack))))
        elif ch == ":" and expect_key:
            expect_key[-1] = False
        elif ch == "," and expect_key:
            expect_key[-1] = stack[-1] == "}"
        elif ch.isdigit() or ch in "-.eE+" or ch.isalpha():
            # a number or literal: a cut point where it ends
            j = i
            while j < len(text) and (text[j].isalnum() or text[j] in "-.+"):
                j += 1
            if stack and not (stack[-1] == "}" and expect_key[-1]):
                cuts.append((j, "".join(reversed(stack))))
            i = j
            continue
        i += 1
    return None, cuts


def _loads(text: str) -> Any:
    # strict=False: raw newlines and tabs inside strings (source code, multi-line evidence) are fine
    try:
        return json.loads(text, strict=False)
    except json.JSONDecodeError:
        # Trailing commas are the commonest slip; the grammar of JSON has no room for them.
        return json.loads(re.sub(r",(\s*[}\]])", r"\1", text), strict=False)


def _from(text: str, start: int) -> tuple[Any, bool]:
    """The JSON value starting at ``start``; (value, recovered_from_truncation)."""
    end, cuts = _scan(text, start)
    if end is not None:
        return _loads(text[start:end]), False
    for cut, closers in reversed(cuts):
        candidate = text[start:cut].rstrip().rstrip(",") + closers
        try:
            return _loads(candidate), True
        except json.JSONDecodeError:
            continue
    raise JSONNotFound("the JSON object is cut short and nothing before the cut closes cleanly")


def extract_json(text: str) -> tuple[Any, list[str]]:
    """The JSON object (or array) in a model's answer, tolerating code fences, prose around it and a
    truncated end. Returns (value, notes about what was repaired); raises JSONNotFound."""
    text = _THINK.sub("", text or "").strip()
    if not text:
        raise JSONNotFound("the answer is empty")
    # Candidates, best first: fenced blocks labelled json, other fenced blocks, then the bare text.
    fenced = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]
    candidates = [body for label, body in fenced if label == "json"]
    candidates += [body for label, body in fenced if label != "json"] + [text]
    errors: list[str] = []
    for body in candidates:
        for match in re.finditer(r"[{\[]", body):
            try:
                value, truncated = _from(body, match.start())
            except (JSONNotFound, json.JSONDecodeError) as exc:
                errors.append(str(exc))
                break  # the first bracket of a body decides; a later one is usually inside it
            if isinstance(value, dict | list):
                return value, (["recovered a truncated JSON object"] if truncated else [])
    detail = f" ({errors[0]})" if errors else ""
    raise JSONNotFound(f"no JSON object found in the answer{detail}")


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema without $ref/$defs (grammar converters and small models both do better)."""
    defs = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                target = defs[node["$ref"].split("/")[-1]]
                return resolve({**target, **{k: v for k, v in node.items() if k != "$ref"}})
            # "title" annotations (strings) cost tokens and say nothing the property name does not
            return {
                k: resolve(v)
                for k, v in node.items()
                if k != "$defs" and not (k == "title" and isinstance(v, str))
            }
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)


def bounded(
    schema: Any, max_chars: int = 200, max_items: int = 4, unbounded: tuple[str, ...] = ("source",)
) -> Any:
    """The schema with free-text strings capped at ``max_chars`` and string lists at ``max_items``, so
    a constrained decoder cannot loop inside a field (small models do) and answers stay short (with a
    grammar, llama.cpp checks every vocabulary entry per token: each token is expensive). ``unbounded``
    fields (the kernel source) keep their length."""

    def walk(node: Any, name: str = "") -> Any:
        if isinstance(node, list):
            return [walk(v, name) for v in node]
        if not isinstance(node, dict):
            return node
        out = {
            k: {pk: walk(pv, pk) for pk, pv in v.items()} if k == "properties" else walk(v, name)
            for k, v in node.items()
        }
        if out.get("type") == "string" and "enum" not in out and name not in unbounded:
            out.setdefault("maxLength", max_chars)
        items = out.get("items")
        if out.get("type") == "array" and isinstance(items, dict) and items.get("type") == "string":
            out.setdefault("maxItems", max_items)
        return out

    return walk(schema)


def grammar_of(
    model: type[BaseModel], optional: tuple[str, ...] = (), min_items: dict[str, int] | None = None
) -> dict[str, Any]:
    """The JSON schema a constrained decoder follows for ``model``: refs inlined, every field required
    except ``optional`` (a small model skips what it may skip), ``min_items`` per list field."""
    schema = inline_refs(model.model_json_schema())
    props = schema.get("properties", {})
    schema["required"] = [name for name in props if name not in optional]
    for name, n in (min_items or {}).items():
        props[name]["minItems"] = n
    return schema


# --------------------------------------------------------------------------------------------
# asking


Method = Literal["tools", "json_schema", "json"]


def _raw_text(message: AIMessage | None) -> str:
    if message is None:
        return ""
    if message.tool_calls:
        return json.dumps(message.tool_calls[0]["args"])
    content = message.content
    if isinstance(content, list):  # content blocks
        return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return str(content)


def _errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors()[:8]:
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"- {where}: {err['msg']}")
    return "\n".join(lines)


def _parse(schema: type[S], data: Any, coerce: Callable[[Any], Any] | None) -> S:
    if coerce is not None:
        data = coerce(data)
    return schema.model_validate(data)


def _invoke(
    model: BaseChatModel,
    conversation: list[BaseMessage],
    schema: type[BaseModel],
    method: Method,
    grammar: dict[str, Any],
    role: str,
    usage: Usage,
) -> tuple[AIMessage | None, Any]:
    """One call of the model: (its answer, the provider's parsed object or None); a failed call raises
    AgentOutputError."""
    started = time.monotonic()
    answer: Any = None
    parsed: Any = None
    try:
        if method in {"tools", "json_schema"}:
            # function calling is the one structured mode every tool-calling provider shares
            kwargs = {"method": "json_schema" if method == "json_schema" else "function_calling"}
            out = model.with_structured_output(schema, include_raw=True, **kwargs).invoke(conversation)
            answer, parsed = out["raw"], out.get("parsed")
        else:
            response_format = {"type": "json_object", "schema": bounded(grammar)}
            answer = model.invoke(conversation, response_format=response_format)
    except Exception as exc:  # a provider error, a timeout, a context overflow: no answer to parse
        usage.record_call(conversation, None, started)
        message = f"the model call failed: {type(exc).__name__}: {exc}"
        usage.record_failure("call_failed", message)
        raise AgentOutputError(role, "call_failed", message) from exc
    answer = answer if isinstance(answer, AIMessage) else None
    usage.record_call(conversation, answer, started)
    return answer, parsed


def ask_structured(
    model: BaseChatModel,
    messages: list[BaseMessage],
    schema: type[S],
    *,
    role: str,
    usage: Usage,
    method: Method = "tools",
    grammar: dict[str, Any] | None = None,
    coerce: Callable[[Any], Any] | None = None,
    check: Callable[[S], T] | None = None,
    retries: int = 1,
) -> T:
    """Ask ``model`` for one ``schema`` object; ``check`` turns it into the result or raises
    ValueError with a reason the model can act on. Raises AgentOutputError when no answer is usable."""
    grammar = grammar or inline_refs(schema.model_json_schema())
    conversation = list(messages)
    last_raw, last_error, kind = "", "", "unparseable"
    for attempt in range(retries + 1):
        if attempt:
            usage.retries += 1
            conversation += [
                AIMessage(content=last_raw or "(no answer)"),
                HumanMessage(content=load_prompt("retry", error=last_error, schema=schema.__name__)),
            ]
        answer, parsed = _invoke(model, conversation, schema, method, grammar, role, usage)
        last_raw = _raw_text(answer)
        try:
            if isinstance(parsed, schema) and coerce is None:
                value = parsed
            else:
                data, notes = extract_json(last_raw)
                for note in notes:
                    usage.note(f"{role}: {note}")
                value = _parse(schema, data, coerce)
            return check(value) if check is not None else value  # type: ignore[return-value]
        except JSONNotFound as exc:
            kind, last_error = "unparseable", f"{exc}. Answer with one JSON object only."
        except ValidationError as exc:
            kind, last_error = "invalid", f"the JSON does not match {schema.__name__}:\n{_errors(exc)}"
        except ValueError as exc:
            kind, last_error = "invalid", str(exc)
    usage.record_failure(kind, last_error, last_raw)
    raise AgentOutputError(role, kind, last_error, last_raw)
