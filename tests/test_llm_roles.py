"""The chat-model roles with scripted models: what each prompt carries (task, profile, layered history,
full failure log, objections), the proposer's modes, the critic's independence and fact checks, the
token budget, and unusable answers turned into recorded failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from loop.roles import AgentContext, Diagnosis, Proposal
from nodes.llm.models import LLMSettings, parse_spec
from nodes.llm.roles import LLMCritic, LLMDiagnoser, LLMProposer
from nodes.llm.scripted import ScriptedChatModel
from nodes.llm.structured import AgentOutputError
from profiles.snapshot import snapshots_from_csv
from tools.candidate import candidate_identity
from tools.task import load_task

REPO = Path(__file__).parent.parent
TASK = load_task(REPO / "tasks" / "add_rmsnorm")
SNAPSHOT = snapshots_from_csv(
    REPO / "tests" / "fixtures" / "ncu" / "h200_add_rmsnorm_16384x8192_details.csv"
)[0]
ROWS_SOURCE = (REPO / "tests" / "fixtures" / "transcripts" / "add_rmsnorm_rows.py").read_text()
BASE_CONFIG = {"ROWS": 1, "num_warps": 8}


def attempt(n: int, config: dict, us: float | None, module: str = "baseline.py", **extra: Any) -> dict:
    per_shape = [
        {"shape": {"M": 4096, "N": 4096}, "dtype": "bfloat16", "median_us": us, "roofline_pct": 80.0},
        {"shape": {"M": 32, "N": 4096}, "dtype": "bfloat16", "median_us": us / 10 if us else None},
    ]
    record = {
        "n": n, "round": n, "module": module, "config": config, "origin": "baseline" if n == 0 else "llm:x",
        "identity": candidate_identity(TASK.source(module), config), "rationale": f"rationale {n}",
        "verdict": "pass" if us else "fail", "stage": "done" if us else "compile",
        "error_type": None if us else "compile_error", "message": "" if us else "CompilationError",
        "geomean_us": us, "per_shape": per_shape if us else [], "resources": {"n_regs": 40 + n, "n_spills": 0},
        "interpreted": False,
    }  # fmt: skip
    record.update(extra)
    return record


BASELINE = attempt(0, BASE_CONFIG, 100.0)


def make_ctx(**fields: Any) -> AgentContext:
    base: dict[str, Any] = {
        "task_name": TASK.name,
        "description": TASK.spec.description,
        "constraints": TASK.spec.constraints.model_dump(),
        "search_spaces": TASK.search_spaces,
        "baseline_module": "baseline.py",
        "baseline_source": TASK.baseline_source,
        "module_sources": {m: TASK.source(m) for m in TASK.module_names},
        "best": BASELINE,
        "snapshot": SNAPSHOT,
        "history": [BASELINE],
        "evaluated": [BASELINE["identity"]],
        "n_candidates": 4,
        "shapes": TASK.spec.shapes[:4],
        "diagnosis": Diagnosis(bottleneck="memory_bound", evidence=["DRAM 84% of peak"], confidence=0.9),
    }
    base.update(fields)
    return AgentContext.model_validate(base)


def tool(name: str, args: dict) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "c"}])


def build(cls, answers: list[AIMessage], **cfg: Any):
    model = ScriptedChatModel(responses=answers)
    return cls(model, parse_spec("scripted:test"), LLMSettings(**cfg), "tools"), model


def prompt_text(model: ScriptedChatModel, call: int = -1) -> str:
    return "\n".join(str(m.content) for m in model.prompts[call])


def proposal(config: dict, module: str = "multirow.py", **extra: Any) -> dict:
    return {"module": module, "config": config, "rationale": "SECRET-CHAIN of thought", "expected_effect": "faster",
            "risks": "spills", **extra}  # fmt: skip


# -- diagnoser ------------------------------------------------------------------------------------
def test_the_diagnoser_reads_task_profile_and_history_and_answers_a_diagnosis():
    answer = {"bottleneck": "memory_bound", "evidence": ["DRAM throughput 84% of peak"], "confidence": 0.85}
    diagnoser, model = build(LLMDiagnoser, [tool("Diagnosis", answer)])
    d = diagnoser.diagnose(make_ctx())
    assert d.bottleneck == "memory_bound" and d.confidence == 0.85 and d.summary  # summary filled in
    text = prompt_text(model)
    assert "Fused residual add + RMSNorm" in text and "ROWS in [1, 2, 4, 8]" in text
    assert "bottleneck: memory_bound" in text and "DRAM" in text  # the rendered ncu snapshot
    assert "kernel add_rmsnorm_kernel" in text  # the source summary
    assert "#0 r0 baseline.py" in text  # the history
    assert diagnoser.usage()["calls"] == 1 and diagnoser.usage()["role"] == "diagnoser"


def test_an_unusable_diagnosis_is_recorded_and_the_profile_label_kept():
    bad = {"bottleneck": "bandwidth", "evidence": [], "confidence": 3}
    diagnoser, _ = build(LLMDiagnoser, [tool("Diagnosis", bad), AIMessage(content="I think it is slow.")])
    d = diagnoser.diagnose(make_ctx())
    assert d.bottleneck == SNAPSHOT["bottleneck"] and d.confidence <= 0.3
    assert "unusable" in d.summary and "profile" in d.summary
    usage = diagnoser.usage()
    assert usage["calls"] == 2 and usage["retries"] == 1 and usage["failures"] == 1
    assert usage["failure_log"][0]["raw"] == "I think it is slow."

    strict, _ = build(LLMDiagnoser, [AIMessage(content="?"), AIMessage(content="?")], on_failure="raise")
    with pytest.raises(AgentOutputError):
        strict.diagnose(make_ctx())


# -- proposer -------------------------------------------------------------------------------------
def test_the_proposer_writes_source_from_the_best_module_and_the_diagnosis():
    fenced = f"```python\n{ROWS_SOURCE}```"
    batch = {
        "proposals": [
            proposal({"ROWS": 2, "num_warps": 16}, source=fenced),
            proposal({"ROWS": 4, "num_warps": 8}),
        ]
    }
    proposer, model = build(LLMProposer, [tool("ProposalBatch", batch)])
    props = proposer.propose(make_ctx()).proposals
    assert [p.config for p in props] == [{"ROWS": 2, "num_warps": 16}, {"ROWS": 4, "num_warps": 8}]
    assert props[0].source == ROWS_SOURCE and props[1].source is None  # the fence is stripped
    text = prompt_text(model)
    assert "def add_rmsnorm_kernel(" in text  # the best module's full source
    assert "memory_bound (confidence 0.90)" in text and "Mode: explore" in text
    assert "@triton.jit kernels, and `def launch" in text  # the rules for new source


def test_fix_mode_sends_the_full_log_and_the_failing_source_back():
    broken = ROWS_SOURCE.replace("tl.rsqrt(", "tl.rsqrtt(")
    first = {"proposals": [proposal({"ROWS": 2, "num_warps": 8}, source=broken)]}
    fixed = {"proposals": [proposal({"ROWS": 2, "num_warps": 8}, source=ROWS_SOURCE)]}
    proposer, model = build(LLMProposer, [tool("ProposalBatch", first), tool("ProposalBatch", fixed)])
    [p] = proposer.propose(make_ctx()).proposals
    log = "\n".join(
        f"line {i}: triton.compiler.errors.CompilationError: at 31:11 detail {i}" for i in range(80)
    )
    failure = attempt(1, p.config, None, module="multirow.py", identity=candidate_identity(broken, p.config),
                      log=log, details={})  # fmt: skip
    [fix] = proposer.propose(
        make_ctx(mode="fix", last_failure=failure, history=[BASELINE, failure])
    ).proposals
    assert fix.source == ROWS_SOURCE
    text = prompt_text(model)
    assert "Mode: fix" in text and log in text  # every line of the log, verbatim
    assert "tl.rsqrtt(" in text  # its own failing source, remembered by identity


def test_a_runtime_failure_shows_the_first_mismatch():
    failure = attempt(1, {"ROWS": 2, "num_warps": 8}, None, module="multirow.py", error_type="mismatch",
                      stage="correctness", log="Traceback ...\nAssertionError", details={
                          "shape": {"M": 9, "N": 4097}, "output": 1, "index": [3, 4096], "got": 1.5, "expected": 0.25})  # fmt: skip
    proposer, model = build(
        LLMProposer, [tool("ProposalBatch", {"proposals": [proposal({"ROWS": 4, "num_warps": 8})]})]
    )
    proposer.propose(make_ctx(last_failure=failure, history=[BASELINE, failure]))
    assert (
        "first mismatch: shape {'M': 9, 'N': 4097} output 1 index [3, 4096]: got 1.5, expected 0.25"
        in prompt_text(model)
    )


def test_revise_mode_requires_an_answer_per_objection_and_records_them():
    revise = [
        {
            "proposal": proposal({"ROWS": 3, "num_warps": 4}),
            "objections": ["ROWS=3 is not allowed", "4 warps is too few"],
        }
    ]
    short = {"proposals": [proposal({"ROWS": 4, "num_warps": 8}, revises=0, answers=["accept: ROWS=4"])]}
    full = {"proposals": [proposal({"ROWS": 4, "num_warps": 8}, revises=0,
                                   answers=["accept: ROWS=4", "rebut: 4 warps suffice at N=4096 (32 elements per thread)"])]}  # fmt: skip
    proposer, model = build(LLMProposer, [tool("ProposalBatch", short), tool("ProposalBatch", full)])
    ctx = make_ctx(mode="revise", revise=revise, objections=[o for r in revise for o in r["objections"]])
    [p] = proposer.propose(ctx).proposals
    assert p.revises == 0 and len(p.answers) == 2 and p.answers[1].startswith("rebut:")
    first = prompt_text(model, 0)
    assert (
        "Mode: revise" in first and "1. ROWS=3 is not allowed" in first and "2. 4 warps is too few" in first
    )
    assert "answers 1 of its 2 objection(s)" in prompt_text(model, 1)  # the re-ask names the gap


def test_an_unknown_module_is_re_asked_and_then_a_recorded_failure():
    bad = {"proposals": [proposal({"ROWS": 2, "num_warps": 8}, module="fast.py")]}
    proposer, model = build(LLMProposer, [tool("ProposalBatch", bad), AIMessage(content="Sorry, I cannot.")])
    answer = proposer.propose(make_ctx())
    assert answer.proposals == []
    assert "unusable" in answer.reason and not answer.converged
    assert "'fast.py' is not a task module" in prompt_text(model, 1)
    assert proposer.usage()["failures"] == 1


def test_config_only_mode_takes_no_source():
    batch = {"proposals": [{**proposal({"ROWS": 8, "num_warps": 16}), "source": "print('hi')"}]}
    proposer, model = build(LLMProposer, [tool("ConfigProposalBatch", batch)], config_only=True)
    [p] = proposer.propose(make_ctx()).proposals
    assert p.source is None and p.config == {"ROWS": 8, "num_warps": 16}
    text = prompt_text(model)
    assert "Config-only mode" in text and "def add_rmsnorm_kernel(" not in text  # summary, not the code


def test_repeats_of_evaluated_candidates_are_re_asked_then_dropped():
    repeat = proposal(BASE_CONFIG, module="baseline.py")
    fresh = proposal({"ROWS": 2, "num_warps": 16}, module="baseline.py")
    answers = [
        tool("ProposalBatch", {"proposals": [repeat]}),
        tool("ProposalBatch", {"proposals": [repeat, fresh]}),
    ]
    proposer, model = build(LLMProposer, answers)
    [p] = proposer.propose(make_ctx()).proposals
    assert p.config == {"ROWS": 2, "num_warps": 16}
    first, retry = prompt_text(model, 0), prompt_text(model, 1)
    assert (
        '## Already evaluated (never propose these again)\nbaseline.py {"ROWS": 1, "num_warps": 8}' in first
    )
    assert "every proposal was already evaluated (baseline.py" in retry
    assert "67 of 68 configs of the search space not evaluated yet, for example:" in first
    assert any("dropped a repeat" in n for n in proposer.usage()["notes"])


def test_the_history_is_trimmed_oldest_first_to_fit_the_budget_and_can_be_expanded():
    history = [BASELINE] + [
        attempt(n, {"ROWS": 2, "num_warps": 8}, 100.0 - n, module="multirow.py") for n in range(1, 200)
    ]
    ctx = make_ctx(history=history, best=history[-1])
    ask_more = {"proposals": [], "expand": ["history"]}
    answer = {"proposals": [proposal({"ROWS": 8, "num_warps": 32})]}
    proposer, model = build(LLMProposer, [tool("ProposalBatch", ask_more), tool("ProposalBatch", answer)],
                            token_budget=3000)  # fmt: skip
    [p] = proposer.propose(ctx).proposals
    assert p.config == {"ROWS": 8, "num_warps": 32}
    first, second = prompt_text(model, 0), prompt_text(model, 1)
    assert len(first) / 4 <= 3000 * 1.05
    assert "#199 r199 multirow.py" in first and "#1 r1 multirow.py" not in first  # newest kept, oldest gone
    assert "older attempt(s) not shown" in first and "Shortened to fit the prompt budget" in first
    assert "history (" in first
    # asked for in full, the history keeps more of its oldest attempts (other sections shrink instead)
    assert second.count("multirow.py {") > first.count("multirow.py {")
    # per-shape and resource deltas against the best, for the newest attempts
    assert "per shape vs best: M=4096,N=4096" in first and "n_regs 238 (-1)" in first


# -- critic ---------------------------------------------------------------------------------------
def test_the_critic_sees_code_and_evidence_but_not_the_proposers_reasoning():
    p = Proposal(**proposal({"ROWS": 2, "num_warps": 16}, source=ROWS_SOURCE))
    critic, model = build(LLMCritic, [tool("Critique", {"verdict": "approve", "objections": []})])
    [c] = critic.critique(make_ctx(), [p])
    assert c.verdict == "approve"
    text = prompt_text(model)
    assert "SECRET-CHAIN" not in text
    assert "add_rmsnorm_rows_kernel" in text and "ROWS" in text and "expected effect: faster" in text
    assert "bottleneck: memory_bound" in text and "memory_bound (confidence 0.90)" in text
    assert "all pass" in text


def test_facts_override_an_approval_of_a_config_outside_the_space():
    inside = Proposal(**proposal({"ROWS": 4, "num_warps": 8}))
    outside = Proposal(**proposal({"ROWS": 3, "num_warps": 8}))
    approve = tool("Critique", {"verdict": "approve", "objections": []})
    reject = tool("Critique", {"verdict": "reject", "objections": ["ROWS=3 is not allowed"]})
    critic, model = build(LLMCritic, [approve, approve, reject])
    a, b, c = critic.critique(make_ctx(), [inside, outside, outside])
    assert a.verdict == "approve"
    assert b.verdict == "revise" and any("ROWS=3 is outside the search space" in o for o in b.objections)
    assert c.verdict == "reject" and c.objections == ["ROWS=3 is not allowed"]  # already said: not repeated
    assert "FAILED: ROWS=3 is outside the search space" in prompt_text(model, 1)


def test_a_verdict_without_objections_is_re_asked_and_a_broken_critic_rules_on_facts_alone():
    vague = tool("Critique", {"verdict": "reject", "objections": []})
    critic, model = build(
        LLMCritic, [vague, AIMessage(content="nope"), AIMessage(content="?"), AIMessage(content="?")]
    )
    inside = Proposal(**proposal({"ROWS": 4, "num_warps": 8}))
    outside = Proposal(**proposal({"ROWS": 3, "num_warps": 8}))
    a, b = critic.critique(make_ctx(), [inside, outside])
    assert "needs at least one objection" in prompt_text(model, 1)
    assert a.verdict == "approve" and "ruled on the fact checks alone" in a.objections[-1]
    assert b.verdict == "revise" and "outside the search space" in b.objections[0]
    assert critic.usage()["failures"] == 2


def test_the_grammar_fixes_modules_and_keys_but_leaves_values_to_the_critic():
    from nodes.llm.roles import proposal_grammar

    g = proposal_grammar(make_ctx(), config_only=True, allow_expand=False)
    items = g["properties"]["proposals"]
    item = items["items"]["properties"]
    assert item["module"]["enum"] == ["baseline.py", "multirow.py", "persistent.py"] and "source" not in item
    keys = ("ROWS", "num_warps", "PROGRAMS", "STAGES")  # every module's keys; values stay the critic's
    assert item["config"]["properties"] == {key: {"type": "integer"} for key in keys}
    assert items["minItems"] == 1 and items["maxItems"] == 4 and "expand" not in g["properties"]
    revise = proposal_grammar(make_ctx(mode="revise"), config_only=False, allow_expand=False)
    assert "minItems" not in revise["properties"]["proposals"]
    assert {"revises", "answers", "source"} <= set(revise["properties"]["proposals"]["items"]["properties"])


def test_a_verdict_label_given_as_an_objection_is_caught():
    echo = tool("Critique", {"verdict": "revise", "objections": ["revise", "revise"]})
    reason = tool(
        "Critique", {"verdict": "revise", "objections": ["32 warps leave 8 elements per thread at N=256"]}
    )
    critic, model = build(LLMCritic, [echo, reason])
    [c] = critic.critique(make_ctx(), [Proposal(**proposal({"ROWS": 1, "num_warps": 32}))])
    assert c.objections == ["32 warps leave 8 elements per thread at N=256"]
    assert "objection 1 ('revise'), objection 2 ('revise') is not a reason" in prompt_text(model, 1)
