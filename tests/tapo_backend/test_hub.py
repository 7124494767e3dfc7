"""tapo_backend.hub: a model that is in the local cache loads offline; one that is not fails at once."""

from __future__ import annotations

from huggingface_hub import constants

from tapo_backend.hub import check_model_available


def test_a_cached_hub_model_is_not_refused(tmp_path, monkeypatch) -> None:
    snapshot = tmp_path / "models--org--tiny" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "models--org--tiny" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    check_model_available("org/tiny")  # no error: transformers loads it from the cache offline
