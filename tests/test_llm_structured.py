"""Structured answers: tolerant JSON (fences, prose, truncation), the re-ask with the error, the
recorded failure, and per-role accounting."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from loop.roles import Diagnosis
from nodes.llm.accounting import Usage, collect
from nodes.llm.scripted import ScriptedChatModel
from nodes.llm.structured import AgentOutputError, JSONNotFound, ask_structured, extract_json, inline_refs

GOOD = {"bottleneck": "memory_bound", "evidence": ["DRAM 84% of peak"], "confidence": 0.8, "summary": "bw"}
PROMPT = [SystemMessage(content="diagnose"), HumanMessage(content="DRAM 84% of peak, SM 21%")]


def test_json_is_found_in_a_fence_inside_prose():
    text = 'Sure! Looking at the numbers:\n```json\n{"a": 1, "b": [1, 2]}\n```\nHope this helps {not json}.'
    assert extract_json(text) == ({"a": 1, "b": [1, 2]}, [])


def test_json_is_found_in_bare_prose_and_braces_inside_strings_do_not_confuse_it():
    text = 'My answer is {"source": "def f():\\n    return {1: 2}", "n": 3} and that is final.'
    value, notes = extract_json(text)
    assert value == {"source": "def f():\n    return {1: 2}", "n": 3} and notes == []


def test_raw_newlines_inside_strings_are_tolerated():
    text = '{"evidence": ["DRAM 84%\n(of peak)"], "source": "def f():\n\treturn 1"}'  # real newline, tab
    assert "\n" in text and "\\n" not in text
    value, _ = extract_json(text)
    assert value["source"] == "def f():\n\treturn 1" and value["evidence"] == ["DRAM 84%\n(of peak)"]


def test_reasoning_blocks_and_trailing_commas_are_tolerated():
    text = '<think>maybe {"x": 0}</think>{"proposals": [{"module": "a.py",},],}'
    assert extract_json(text)[0] == {"proposals": [{"module": "a.py"}]}


def test_a_truncated_object_keeps_every_complete_value():
    text = '{"bottleneck": "memory_bound", "evidence": ["DRAM 84%", "SM 21%"], "confidence": 0.8, "summary": "the ker'
    value, notes = extract_json(text)
    assert value == {"bottleneck": "memory_bound", "evidence": ["DRAM 84%", "SM 21%"], "confidence": 0.8}
    assert notes == ["recovered a truncated JSON object"]


def test_a_truncated_list_of_proposals_keeps_the_complete_ones():
    text = '```json\n{"proposals": [{"module": "a.py", "config": {"B": 1}}, {"module": "a.py", "config": {"B"'
    value, _ = extract_json(text)
    assert value["proposals"][0] == {"module": "a.py", "config": {"B": 1}}
    assert value["proposals"][1] == {"module": "a.py", "config": {}}


def test_no_json_at_all_is_an_error():
    with pytest.raises(JSONNotFound):
        extract_json("I cannot help with that.")
    with pytest.raises(JSONNotFound):
        extract_json("")


def test_refs_are_inlined_for_grammar_converters():
    from nodes.llm.roles import ProposalBatch

    schema = inline_refs(ProposalBatch.model_json_schema())
    assert "$defs" not in str(schema) and "$ref" not in str(schema)
    assert schema["properties"]["proposals"]["items"]["properties"]["module"]["type"] == "string"


@pytest.mark.parametrize("method", ["tools", "json"])
def test_a_tool_call_answer_is_parsed_with_either_method(method):
    model = ScriptedChatModel(
        responses=[AIMessage(content="", tool_calls=[{"name": "Diagnosis", "args": GOOD, "id": "1"}])]
    )
    usage = Usage(role="diagnoser", spec="scripted:x")
    d = ask_structured(model, PROMPT, Diagnosis, role="diagnoser", usage=usage, method=method)
    assert d == Diagnosis(**GOOD)
    assert usage.calls == 1 and usage.retries == 0 and usage.failures == 0


def test_prose_with_json_is_parsed_when_the_model_does_not_call_the_tool():
    text = 'The kernel is bandwidth limited.\n```json\n{"bottleneck": "memory_bound", "evidence": ["DRAM 84%"], "confidence": 0.7}\n```'
    model = ScriptedChatModel(responses=[AIMessage(content=text)])
    d = ask_structured(
        model, PROMPT, Diagnosis, role="diagnoser", usage=Usage("diagnoser", "s"), method="tools"
    )
    assert d.bottleneck == "memory_bound" and d.confidence == 0.7


def test_a_wrong_label_is_shown_to_the_model_and_the_second_answer_is_used():
    bad = {**GOOD, "bottleneck": "bandwidth_bound"}
    model = ScriptedChatModel(
        responses=[
            AIMessage(content="", tool_calls=[{"name": "Diagnosis", "args": bad, "id": "1"}]),
            AIMessage(content="", tool_calls=[{"name": "Diagnosis", "args": GOOD, "id": "2"}]),
        ]
    )
    usage = Usage("diagnoser", "s")
    d = ask_structured(model, PROMPT, Diagnosis, role="diagnoser", usage=usage)
    assert d.bottleneck == "memory_bound" and usage.calls == 2 and usage.retries == 1
    retry_prompt = model.prompts[1]
    assert "bandwidth_bound" in retry_prompt[-2].content  # the bad answer, as the model gave it
    assert (
        "bottleneck" in retry_prompt[-1].content and "memory_bound" in retry_prompt[-1].content
    )  # the error


def test_two_unusable_answers_raise_a_recorded_failure_with_the_raw_text():
    model = ScriptedChatModel(responses=[AIMessage(content="no idea"), AIMessage(content="still no idea")])
    usage = Usage("diagnoser", "s")
    with pytest.raises(AgentOutputError) as err:
        ask_structured(model, PROMPT, Diagnosis, role="diagnoser", usage=usage)
    assert (
        err.value.kind == "unparseable" and err.value.raw == "still no idea" and err.value.role == "diagnoser"
    )
    assert usage.failures == 1 and usage.failure_log[0]["raw"] == "still no idea"


def test_a_failing_call_is_a_recorded_failure_not_a_crash():
    class Broken(ScriptedChatModel):
        def _generate(self, *args, **kwargs):
            raise ConnectionError("server went away")

    usage = Usage("critic", "s")
    with pytest.raises(AgentOutputError) as err:
        ask_structured(Broken(responses=[]), PROMPT, Diagnosis, role="critic", usage=usage)
    assert err.value.kind == "call_failed" and "server went away" in str(err.value)
    assert usage.failures == 1 and usage.calls == 1


def test_accounting_uses_reported_tokens_and_cost_and_estimates_otherwise():
    reported = AIMessage(
        content="",
        tool_calls=[{"name": "Diagnosis", "args": GOOD, "id": "1"}],
        usage_metadata={"input_tokens": 1200, "output_tokens": 80, "total_tokens": 1280},
        response_metadata={"token_usage": {"cost": 0.0042}},
    )
    usage = Usage("diagnoser", "openai:x")
    ask_structured(ScriptedChatModel(responses=[reported]), PROMPT, Diagnosis, role="diagnoser", usage=usage)
    data = usage.as_dict()
    assert (data["tokens_in"], data["tokens_out"], data["tokens_estimated"]) == (1200, 80, False)
    assert data["cost_usd"] == pytest.approx(0.0042) and data["latency_s"] >= 0

    silent = Usage("critic", "scripted:x")
    answer = AIMessage(content="", tool_calls=[{"name": "Diagnosis", "args": GOOD, "id": "1"}])
    ask_structured(ScriptedChatModel(responses=[answer]), PROMPT, Diagnosis, role="critic", usage=silent)
    assert silent.as_dict()["tokens_estimated"] is True and silent.tokens_in > 0 and silent.cost_usd is None

    class Role:
        def __init__(self, u):
            self.u = u

        def usage(self):
            return self.u.as_dict()

    report = collect([Role(usage), Role(silent), object()])
    assert set(report["roles"]) == {"diagnoser", "critic"}
    assert report["total"]["calls"] == 2 and report["total"]["tokens_in"] == 1200 + silent.tokens_in
    assert report["total"]["cost_usd"] == pytest.approx(0.0042)
