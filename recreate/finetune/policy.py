"""The served policy: the model the agents sample from, versioned as it is fine-tuned.

A policy version is a full HF directory (what the trainer starts the next update from) plus, for the
llama.cpp engine, an f32 GGUF of the same weights (what the agents sample from). Publishing a LoRA
adapter folds it into the current version's weights, writes both, and restarts the llama.cpp server
on the new GGUF under the version's name (a second: the 135M model loads at once), so every
trajectory records in `model.name` the policy version that produced it. Versions are
`<base>` (v0), then `<base>+ft1-<hash>`, `<base>+ft2-<hash>`, ...: the hash of the adapter's weights makes
the name say which weights answered, also across runs (the rollout cache is keyed by it). A candidate that
a gate rejects is discarded with `rollback`; one published as a `candidate` stays one until `accept`, and a
process that reopens the versions (a resume after a kill mid-gate) discards it instead of serving it. The
last `keep` versions stay on disk.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from recreate.local import LocalModel, LocalServer, ServerInfo, embedded_gguf, ensure_hf_model, llamacpp
from recreate.local.gguf_export import export_gguf, load_weights
from recreate.local.server import free_port

# Adam learning rate of a LoRA update of the policy (r 16, alpha 32): a default, picked (2026-12-04) on
# the held-out curve of an earlier closed-loop benchmark with TAPO only (two-term sums: held-out pass@1
# 0.27 -> 0.85 / 0.94 / 1.00 after iterations 1 / 2 / 3 at 1e-4; 0.42 / 0.48 / 0.54 at 2e-5). It is no
# basis for comparing losses: benchmarks/closed_loop.py sweeps each variant's rate on training reward.
LORA_LR = 1e-4


@dataclass(frozen=True)
class PolicyVersion:
    index: int
    name: str
    hf_dir: Path  # what the trainer loads
    gguf: Path | None  # what llama.cpp serves (None for the embedded base: its own Q4_1 file is not it)
    candidate: bool = False  # published for a gate that has not accepted it (yet)


class ServedPolicy:
    """Versions of one policy under `root`, the current one served by llama.cpp."""

    def __init__(self, home: Path, root: Path, *, parallel: int = 4, keep: int = 2, base: Path | None = None):
        self.home, self.root = Path(home), Path(root)
        self.parallel, self.keep = parallel, keep
        self.root.mkdir(parents=True, exist_ok=True)
        self.template = embedded_gguf()
        self.base_dir = base or ensure_hf_model(self.home)
        self.versions: list[PolicyVersion] = self._load_versions()
        self.server: LocalServer | None = None

    # -- versions --------------------------------------------------------------------------------
    def _load_versions(self) -> list[PolicyVersion]:
        index_file = self.root / "versions.json"
        if index_file.is_file():
            from recreate.runs import BrokenRun, read_json

            try:
                self.versions = [
                    PolicyVersion(
                        r["index"], r["name"], Path(r["hf_dir"]), _path(r["gguf"]), r.get("candidate", False)
                    )
                    for r in read_json(index_file, list)
                ]
            except (KeyError, TypeError, AttributeError):
                self.versions = []
            if not self.versions:  # it holds the base version at least
                raise BrokenRun(index_file, "is not a list of policy versions (index, name, hf_dir, gguf)")
            while len(self.versions) > 1 and self.current.candidate:  # its gate never ended: never serve it
                self._remove(self.versions.pop())
                self._save_versions()
            return self.versions
        return [PolicyVersion(0, self.base_name, self.base_dir, self._base_gguf())]

    def _base_gguf(self) -> Path:
        """The base weights as f32 GGUF (so the base samples from exactly the weights the trainer scores),
        written once per home and base and shared by every run (~0.5 GB each for the 135M model)."""
        weights = sorted(p for p in self.base_dir.iterdir() if p.suffix in (".safetensors", ".bin"))
        identity = [str(self.base_dir.resolve())] + [
            f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in weights
        ]
        digest = hashlib.sha256("\n".join(identity).encode()).hexdigest()[:12]
        path = self.home / "models" / "policies" / f"{self.base_dir.name}-{digest}.f32.gguf"
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{path}.lock"):  # two runs starting at once write it once
            if not path.is_file():
                export_gguf(load_weights(self.base_dir), self.template, path, name="v0")
        return path

    @property
    def base_name(self) -> str:
        return self.base_dir.name

    @property
    def current(self) -> PolicyVersion:
        return self.versions[-1]

    def _save_versions(self) -> None:
        rows = [
            {
                "index": v.index,
                "name": v.name,
                "hf_dir": str(v.hf_dir),
                "gguf": str(v.gguf) if v.gguf else None,
                "candidate": v.candidate,
            }
            for v in self.versions
        ]
        tmp = self.root / "versions.json.tmp"  # a kill mid-write must not leave a torn index
        tmp.write_text(json.dumps(rows, indent=1), encoding="utf-8")
        tmp.replace(self.root / "versions.json")

    def publish(self, adapter_dir: Path, *, candidate: bool = False) -> PolicyVersion:
        """Fold a LoRA adapter trained on the current version into a new version and serve it.
        `candidate`: a gate decides on it next (`accept` or `rollback`)."""
        index = self.current.index + 1
        name = f"{self.base_name}+ft{index}-{adapter_digest(adapter_dir, parent=self.current.name)}"
        hf_dir, gguf = self.root / f"v{index}", self.root / f"v{index}.gguf"
        state = merge_adapter(self.current.hf_dir, adapter_dir, hf_dir)
        export_gguf(state, self.template, gguf, name=name)
        self.versions.append(PolicyVersion(index, name, hf_dir, gguf, candidate))
        self._save_versions()
        self._prune()
        if self.server is not None:
            self.serve()
        return self.current

    def accept(self) -> PolicyVersion:
        """The gate accepted the current version: it stays when the versions are reopened."""
        if self.current.candidate:
            self.versions[-1] = dataclasses.replace(self.current, candidate=False)
            self._save_versions()
        return self.current

    def rollback(self, name: str) -> PolicyVersion:
        """Discard the versions after `name` (rejected candidates) and serve `name` again."""
        names = [v.name for v in self.versions]
        if name not in names:
            raise ValueError(f"no policy version {name!r} under {self.root} (have {', '.join(names)})")
        keep = names.index(name) + 1
        if keep == len(self.versions):
            return self.current
        for dropped in self.versions[keep:]:
            self._remove(dropped)
        self.versions = self.versions[:keep]
        self._save_versions()
        if self.server is not None:
            self.serve()
        return self.current

    @staticmethod
    def _remove(version: PolicyVersion) -> None:
        shutil.rmtree(version.hf_dir, ignore_errors=True)
        if version.gguf is not None:
            version.gguf.unlink(missing_ok=True)

    def _prune(self) -> None:
        for old in self.versions[1 : -self.keep]:
            if old.hf_dir != self.base_dir:
                shutil.rmtree(old.hf_dir, ignore_errors=True)
            if old.gguf is not None:
                old.gguf.unlink(missing_ok=True)

    # -- serving ---------------------------------------------------------------------------------
    def serve(self, version: PolicyVersion | None = None) -> ServerInfo:
        """(Re)start llama.cpp on `version` (default: the current one); its name is the model name
        agents record. Serving another version changes no version: `serve()` goes back to the current."""
        self.stop()
        version = version or self.current
        assert version.gguf is not None
        port = free_port()
        command = llamacpp.command(
            LocalModel(version.name, gguf=version.gguf), port=port, parallel=self.parallel
        )
        self.server = LocalServer(
            command, engine="llamacpp", model=version.name, port=port, home=self.home, tool_calls=False
        )
        return self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def __enter__(self) -> ServedPolicy:
        self.serve()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def adapter_digest(adapter_dir: Path, *, parent: str) -> str:
    """8 hex digits of the sha256 of what the merged weights are made of: the parent version, the
    adapter's config and its weight files."""
    adapter_dir = Path(adapter_dir)
    weights = sorted(adapter_dir.glob("*.safetensors")) or sorted(adapter_dir.glob("*.bin"))
    if not weights:
        raise ValueError(f"{adapter_dir}: no adapter weights (*.safetensors or *.bin) to publish")
    digest = hashlib.sha256(parent.encode())
    for file in [adapter_dir / "adapter_config.json", *weights]:
        if file.is_file():
            digest.update(file.read_bytes())
    return digest.hexdigest()[:8]


def merge_adapter(base_dir: Path, adapter_dir: Path, out: Path) -> dict[str, Any]:
    """base + LoRA -> merged weights, saved to `out` (HF) and returned (for the GGUF export)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # loading and writing bars at every publish: the caller reports it
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(out)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out)
    return merged.state_dict()


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None
