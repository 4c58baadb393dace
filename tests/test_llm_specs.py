"""Model SPECs: parsing, options, and a clear error naming what is missing (never another model)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from nodes.agents import build_agents
from nodes.expert import ExpertCritic
from nodes.llm.factory import build_llm_role
from nodes.llm.models import ModelSpecError, llm_settings, parse_spec
from nodes.llm.roles import LLMCritic, LLMDiagnoser, LLMProposer

REPO = Path(__file__).parent.parent
TRANSCRIPT = REPO / "tests" / "fixtures" / "transcripts" / "add_rmsnorm_rows.json"


def test_specs_parse_into_provider_model_url_and_options():
    s = parse_spec("openai:gpt-5")
    assert (s.provider, s.model, s.base_url, s.options) == ("openai", "gpt-5", None, {})
    s = parse_spec("openai:Qwen/Qwen2.5-Coder-7B@http://127.0.0.1:8000/v1")
    assert (s.model, s.base_url) == ("Qwen/Qwen2.5-Coder-7B", "http://127.0.0.1:8000/v1")
    s = parse_spec("llamacpp:/models/a@b.gguf?config_only=true&token_budget=3000")
    assert (s.provider, s.model, s.base_url) == ("llamacpp", "/models/a@b.gguf", None)
    assert (
        s.options == {"config_only": "true", "token_budget": "3000"}
        and s.label == "llamacpp:/models/a@b.gguf"
    )


@pytest.mark.parametrize("bad", ["gpt-5", "openai:", ":gpt-5", "openai:x?budget", "openai:@http://h:1/v1"])
def test_malformed_specs_are_rejected_with_the_expected_form(bad):
    with pytest.raises(ModelSpecError, match="model SPEC"):
        parse_spec(bad)


def test_options_override_settings_and_a_wrong_option_is_named():
    cfg = llm_settings(
        {"llm": {"token_budget": 9000, "retries": 0}}, parse_spec("openai:x?token_budget=4000")
    )
    assert (cfg.token_budget, cfg.retries, cfg.config_only) == (4000, 0, False)
    assert llm_settings({}, parse_spec("llamacpp:gemma3")).config_only is True  # the 270M model's default
    assert llm_settings({}, parse_spec("llamacpp:gemma3?config_only=false")).config_only is False
    with pytest.raises(ModelSpecError, match="option token_budgt"):
        llm_settings({}, parse_spec("openai:x?token_budgt=1"))
    with pytest.raises(ModelSpecError, match="option retries"):
        llm_settings({}, parse_spec("openai:x?retries=many"))


def test_a_missing_api_key_is_named(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ModelSpecError, match="OPENAI_API_KEY"):
        build_llm_role("proposer", "openai:gpt-5", {})
    with pytest.raises(ModelSpecError, match="OPENAI_API_KEY"):
        build_llm_role("critic", "openai:qwen@http://10.1.2.3:8000/v1", {})


def test_a_local_server_needs_no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    role = build_llm_role("critic", "openai:qwen@http://127.0.0.1:8000/v1", {})
    assert isinstance(role, LLMCritic) and role.method == "json"
    assert str(role.model.openai_api_base) == "http://127.0.0.1:8000/v1"
    assert role.model.openai_api_key.get_secret_value() == "EMPTY"


@pytest.mark.skipif(
    importlib.util.find_spec("langchain_anthropic") is not None, reason="the extra is installed"
)
def test_a_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    with pytest.raises(ModelSpecError, match=r"pip install 'kernel-agent\[anthropic\]'"):
        build_llm_role("diagnoser", "anthropic:claude-sonnet-4-5", {})


def test_a_missing_model_file_is_named():
    with pytest.raises(ModelSpecError, match="no GGUF file at /nowhere/model.gguf"):
        build_llm_role("diagnoser", "llamacpp:/nowhere/model.gguf", {})
    with pytest.raises(ModelSpecError, match="no transcript file"):
        build_llm_role("diagnoser", "scripted:/nowhere.json", {})
    with pytest.raises(ValueError, match="unknown role"):
        build_llm_role("judge", f"scripted:{TRANSCRIPT}", {})


def test_build_agents_mixes_a_model_with_the_expert_critic():
    d, p, c = build_agents(f"scripted:{TRANSCRIPT}", "expert", {})
    assert isinstance(d, LLMDiagnoser) and isinstance(p, LLMProposer) and isinstance(c, ExpertCritic)
    d, p, c = build_agents(f"scripted:{TRANSCRIPT}", None, {})
    assert isinstance(c, LLMCritic) and c.usage()["spec"] == f"scripted:{TRANSCRIPT}"


def test_the_cli_refuses_a_spec_it_cannot_serve_before_any_work(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "graph.run", "tasks/add_rmsnorm", "--device", "cpu", "--model", "openai:gpt-5",
           "--run-dir", str(tmp_path / "run"), "--non-interactive"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2
    assert "OPENAI_API_KEY" in done.stdout + done.stderr
    assert not (tmp_path / "run" / "report.json").exists()
