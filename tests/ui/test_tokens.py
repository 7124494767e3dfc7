"""The heat map's token text: a real byte-level BPE tokenizer (built from files here; the embedded
model's own in tests/ui/test_real_home.py), found from a run's policy versions or the home's models/,
loaded once, decoded token by token without ever failing a page."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from recreate.experience.schema import ModelInfo, Step, Trajectory
from recreate.experience.store import ExperienceStore
from recreate.ui import create_app
from recreate.ui.tokens import Detokenizer, Token, Tokenizers, token_heat

tokenizers = pytest.importorskip("tokenizers")
CORPUS = ["echo $((3 + 4))", "Hello world", "What is the sum of 31 and 45?", "The answer is 76.\n"]
SAMPLED = 'Hello <b id="x">world</b>\n\techo  76 — 漢字 🙂<|im_end|>'


def _tokenizer_file(folder: Path) -> Path:
    """A real byte-level BPE tokenizer (the GPT-2/SmolLM2 family's kind) with a small vocabulary, so
    that characters outside ASCII are split into pieces that are not whole UTF-8 characters."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS * 5, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tokenizer_file(tmp_path_factory.mktemp("tok") / "base")


@pytest.fixture(scope="module")
def detok(tokenizer_file: Path) -> Detokenizer:
    return Detokenizer(tokenizers.Tokenizer.from_file(str(tokenizer_file)))


def test_each_token_shows_its_text_and_a_split_character_shows_once(detok: Detokenizer) -> None:
    ids = detok.tokenizer.encode(SAMPLED).ids
    texts = detok.texts(ids)
    assert "".join(t or "" for t in texts) == SAMPLED
    assert "Hell" in texts and "<|im_end|>" in texts
    for char in "—漢字🙂":  # several byte pieces each: the last one shows the character, the others ""
        at = texts.index(next(t for t in texts if t and char in t))
        assert texts[at - 1] == "" and len(detok.tokenizer.encode(char).ids) > 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=-5, max_value=320), max_size=40))
def test_any_ids_decode_without_failing(detok: Detokenizer, ids: list[int]) -> None:
    texts = detok.texts(ids)
    assert len(texts) == len(ids)
    for token_id, text in zip(ids, texts, strict=True):
        assert (text is None) == (not 0 <= token_id < 300)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=40))
def test_the_texts_of_an_encoding_join_into_its_decoding(detok: Detokenizer, text: str) -> None:
    ids = detok.tokenizer.encode(text).ids
    assert "".join(t or "" for t in detok.texts(ids)) == detok.tokenizer.decode(
        ids, skip_special_tokens=False
    )


def test_whitespace_and_invisible_characters_show_as_markers() -> None:
    shown = Token(1, -0.1, 0, " a\n\t\u200b\x00b").shown
    assert shown == [(True, "·"), (False, "a"), (True, "↵→U+200BU+0000"), (False, "b")]


def test_without_a_tokenizer_the_map_keeps_ids() -> None:
    step = Step(index=0, token_ids=[5, 6], logprobs=[-0.1, -3.0, -9.0])
    assert [(t.id, t.text, t.bucket) for t in token_heat(step)] == [
        (5, None, 0),
        (6, None, 4),
        (None, None, 5),
    ]


def _home_with_run(home: Path, versions: list[dict] | None) -> None:
    run = home / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"seed_ref": "minimal@v1", "train": [], "val": []}))
    if versions is not None:
        (run / "policy").mkdir()
        (run / "policy" / "versions.json").write_text(json.dumps(versions))


def _traj(model: str, ids: list[int], run_id: str = "r1") -> Trajectory:
    return Trajectory(
        trajectory_id="t-tok", task_id="a", run_id=run_id, domain="math", model=ModelInfo(name=model),
        steps=[Step(index=0, token_ids=ids, logprobs=[-0.5] * len(ids))],
    )  # fmt: skip


def test_the_tokenizer_is_found_from_the_runs_policy_or_the_homes_models(tmp_path, tokenizer_file) -> None:
    home = tmp_path / "home"
    moved = "/elsewhere/home/runs/r1/policy/v1"  # the home was copied: its own policy/v1 still has it
    _home_with_run(
        home, [{"name": "base", "hf_dir": "/nowhere/base"}, {"name": "base+ft1-ab", "hf_dir": moved}]
    )
    _tokenizer_file(home / "runs" / "r1" / "policy" / "v1")
    tokens = Tokenizers(home)
    assert tokens.for_trajectory(_traj("base+ft1-ab", [1])).tokenizer is not None
    assert tokens.for_trajectory(_traj("base", [1])).tokenizer is not None  # versions share a tokenizer
    (home / "runs" / "r1" / "policy" / "v1" / "tokenizer.json").unlink()
    assert tokens.for_trajectory(_traj("base", [1])).tokenizer is not None  # loaded once per run and model
    assert "no tokenizer.json for other" in Tokenizers(home).for_trajectory(_traj("other", [1])).note

    _tokenizer_file(home / "models" / "base")  # the embedded base model, converted into the home
    found = Tokenizers(home).for_trajectory(_traj("base+ft2-cd", [1], run_id="gone"))
    assert found.tokenizer is not None and not found.note
    assert "no model named" in Tokenizers(home).for_trajectory(_traj("", [1])).note


@pytest.mark.parametrize("content", [b"{not json", b'{"model": {"type": "Nope"}}', b"\xff\xfe\x00"])
def test_a_broken_tokenizer_is_a_note_not_an_error(tmp_path, content: bytes) -> None:
    home = tmp_path / "home"
    _home_with_run(home, [{"name": "base", "hf_dir": str(home / "models" / "base")}])
    (home / "models" / "base").mkdir(parents=True)
    (home / "models" / "base" / "tokenizer.json").write_bytes(content)
    note = Tokenizers(home).for_trajectory(_traj("base", [1])).note
    assert note.startswith("token text unavailable (base/tokenizer.json does not load") and "\n" not in note


def _page(home: Path, traj: Trajectory) -> str:
    store = ExperienceStore(home / "experience", embedding="hash")
    store.add(traj)
    store.close()
    with TestClient(create_app(home, embedding="hash"), base_url="http://127.0.0.1:8765") as client:
        reply = client.get(f"/trajectories/{traj.trajectory_id}")
    assert reply.status_code == 200
    return reply.text


def _cells(page: str) -> list[str]:
    cells = re.findall(
        r'<span class="tok p\d" title="[^"]*">(.*?)</span>(?=<br>|<span class="tok|\s*</div>)', page
    )
    return [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in cells]


def test_the_trajectory_page_shows_the_text_of_each_sampled_token(tmp_path, tokenizer_file) -> None:
    home = tmp_path / "home"
    policy_v0 = tokenizer_file.parent
    _home_with_run(home, [{"name": "base", "hf_dir": str(policy_v0)}])
    ids = tokenizers.Tokenizer.from_file(str(tokenizer_file)).encode(SAMPLED).ids
    page = _page(home, _traj("base", ids))
    cells = _cells(page)
    assert len(cells) == len(ids) and "Hell" in cells and "<|im_end|>" in cells
    assert "".join(cells).replace("…", "") == SAMPLED.replace(" ", "·").replace("\n", "↵").replace("\t", "→")
    assert "<b id" not in page and "&lt;" in page and "&#34;" in page  # model output is escaped
    assert "token text unavailable" not in page


def test_without_its_tokenizer_the_page_shows_ids_and_says_why(tmp_path) -> None:
    home = tmp_path / "home"
    _home_with_run(home, [{"name": "base", "hf_dir": str(tmp_path / "deleted")}])
    page = _page(home, _traj("base", [7, 8]))
    assert _cells(page) == ["7", "8"]
    assert "token text unavailable (no tokenizer.json for base in its run&#39;s policy versions" in page
