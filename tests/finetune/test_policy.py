"""Policy versions: a LoRA adapter folded into the weights, exported, served under the version's name,
and the served log-probs are the new weights' (not the base's)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import httpx
import pytest
import torch

from recreate.finetune.policy import ServedPolicy
from recreate.local.keys import auth_headers
from recreate.runs import BrokenRun

pytestmark = pytest.mark.slow
MESSAGES = [{"role": "user", "content": "What is 12 + 30?"}]


def _adapter(base_dir, out):
    """A LoRA adapter whose B matrices are not zero, so the merged weights differ from the base."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.3)
    peft.save_pretrained(out)
    return out


def _served_logprobs(info) -> tuple[list[int], list[float]]:
    from recreate.local import BEHAVIOUR_SAMPLING

    body = {"model": info.model, "messages": MESSAGES, "max_tokens": 12, "logprobs": True, "seed": 1,
            "temperature": 0.7, **BEHAVIOUR_SAMPLING}  # fmt: skip
    content = httpx.post(
        f"{info.base_url}/chat/completions", json=body, headers=auth_headers(info.base_url), timeout=120
    ).json()
    entries = content["choices"][0]["logprobs"]["content"]
    return [e["id"] for e in entries], [float(torch.tensor(e["prob"]).log()) for e in entries]


def _trainer_logprobs(model_dir, ids: list[int]) -> torch.Tensor:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    prompt = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + ids])).logits[0, len(prompt_ids) - 1 : -1].float()
    return torch.log_softmax(logits / 0.7, -1).gather(1, torch.tensor(ids)[:, None]).squeeze(1)


def test_a_published_adapter_is_served_under_a_new_version(hf_model, tmp_path):
    home = hf_model.parents[1]
    with ServedPolicy(home, tmp_path / "policy", parallel=1) as policy:
        assert policy.current.index == 0 and policy.server.info.model == hf_model.name
        version = policy.publish(_adapter(hf_model, tmp_path / "adapter"))
        info = policy.server.info
        assert version.index == 1 and info.model == version.name
        assert re.fullmatch(re.escape(hf_model.name) + r"\+ft1-[0-9a-f]{8}", version.name)
        ids, served = _served_logprobs(info)
    tuned = _trainer_logprobs(version.hf_dir, ids)
    base = _trainer_logprobs(hf_model, ids)
    assert (tuned - torch.tensor(served)).abs().mean() < 0.01  # the engine samples the trained weights
    assert (base - torch.tensor(served)).abs().mean() > 0.05  # ... which are not the base's

    reopened = ServedPolicy(home, tmp_path / "policy", parallel=1)  # versions survive the process
    assert [v.name for v in reopened.versions] == [hf_model.name, version.name]

    with reopened:  # a rejected candidate is discarded and the previous version served again
        reopened.rollback(hf_model.name)
        assert reopened.server.info.model == hf_model.name and not version.hf_dir.exists()
    assert [v.name for v in ServedPolicy(home, tmp_path / "policy").versions] == [hf_model.name]


def test_a_version_name_says_which_weights_it_serves(tmp_path):
    from recreate.finetune.policy import adapter_digest

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    with pytest.raises(ValueError, match="no adapter weights"):
        adapter_digest(adapter, parent="base")
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    (adapter / "adapter_config.json").write_text('{"r": 4}')
    first = adapter_digest(adapter, parent="base")
    assert first == adapter_digest(adapter, parent="base") != adapter_digest(adapter, parent="base+ft1-x")
    (adapter / "adapter_config.json").write_text('{"r": 8}')  # same weights, another rank: other weights
    assert adapter_digest(adapter, parent="base") != first


def test_a_candidate_left_by_a_kill_mid_gate_is_never_served_again(hf_model: Path, tmp_path: Path) -> None:
    home, root = hf_model.parents[1], tmp_path / "policy"
    policy = ServedPolicy(home, root, parallel=1)  # not serving: the versions alone
    accepted = policy.publish(_adapter(hf_model, tmp_path / "a1"), candidate=True)
    policy.accept()  # its gate accepted it
    candidate = policy.publish(_adapter(hf_model, tmp_path / "a2"), candidate=True)
    assert candidate.candidate and candidate.gguf is not None and candidate.gguf.is_file()
    # ... then the process is killed before the gate decides: the next process starts from `accepted`
    reopened = ServedPolicy(home, root, parallel=1)
    assert [v.name for v in reopened.versions] == [hf_model.name, accepted.name]
    assert not candidate.hf_dir.exists() and not candidate.gguf.exists()
    assert [v.name for v in ServedPolicy(home, root).versions] == [hf_model.name, accepted.name]
    assert reopened.publish(_adapter(hf_model, tmp_path / "a3")).index == 2  # what other loops publish stays
    assert ServedPolicy(home, root).current.index == 2


def test_runs_on_one_base_share_its_f32_export(hf_model: Path, tmp_path: Path) -> None:
    """The base as f32 GGUF is ~0.5 GB for the 135M model: written once per home, not once per run."""
    home = tmp_path / "home"
    first = ServedPolicy(home, tmp_path / "run-1" / "policy", base=hf_model).versions[0].gguf
    written = first.stat().st_mtime_ns
    second = ServedPolicy(home, tmp_path / "run-2" / "policy", base=hf_model).versions[0].gguf
    assert first == second and second.stat().st_mtime_ns == written
    assert not list((tmp_path / "run-2" / "policy").glob("*.gguf"))
    base = tmp_path / "base"
    shutil.copytree(hf_model, base)
    before = ServedPolicy(home, tmp_path / "run-3" / "policy", base=base).versions[0].gguf
    (base / "model.safetensors").touch()  # the base's weights changed: another export, not the old one
    after = ServedPolicy(home, tmp_path / "run-4" / "policy", base=base).versions[0].gguf
    assert len({first, before, after}) == 3 and after.is_file()


@pytest.mark.parametrize(
    "data", ["", "[{", "{}", "[]", '[{"name": "base"}]', '[{"index": 0, "name": "b", "hf_dir": 3}]']
)
def test_a_damaged_version_index_is_one_line_naming_it(tmp_path: Path, data: str) -> None:
    """A resumed fine-tuning run read it bare: a JSON, Key or TypeError traceback."""
    root = tmp_path / "policy"
    root.mkdir()
    (root / "versions.json").write_text(data)
    with pytest.raises(BrokenRun) as caught:
        ServedPolicy(tmp_path, root, base=tmp_path / "base")
    assert str(caught.value).startswith(f"{root / 'versions.json'} ") and "\n" not in str(caught.value)
    assert (root / "versions.json").read_text() == data
