"""Property tests: random edit sequences never leave an invalid version; lineage replays exactly and
every version differs visibly from its parent."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from recreate.scaffold import (
    OpError,
    ScaffoldStore,
    ScaffoldValidationError,
    apply,
    parse_ops,
    validate_scaffold,
)
from tests.scaffold.conftest import ECHO_CODE, make_scaffold, tree_snapshot

IDS = st.sampled_from(["r1", "r2", "r3", "m1", "m2", "x"])
TEXT = st.text(min_size=1, max_size=30)
FRAGMENTS = st.sampled_from(
    ["task", "{{ ", " }}", "careful", "a", "print", "echo", "", "{{ nope }}", "{{ task }}"]
)
TEXT_FIELDS = st.sampled_from(
    [
        "system_prompt",
        "instance_template",
        "description",
        "rules.r1.text",
        "tools.echo_text.code",
        "memory.m1.content",
    ]
)
TOOL = st.fixed_dictionaries(
    {
        "op": st.just("add_tool"),
        "name": st.sampled_from(["echo_text", "other", "bash", "Bad-Name"]),
        "description": st.just("Echo."),
        "args": st.sampled_from(
            [{"type": "object", "properties": {"text": {"type": "string"}}}, {"type": "array"}]
        ),
        "smoke": st.just({"args": {"text": "hi"}, "expect": "echo: hi"}),
        "code": st.sampled_from([ECHO_CODE, "print(:\n", "import sys\n"]),
    }
)
OP = st.one_of(
    st.builds(lambda i, t: {"op": "add_rule", "id": i, "text": t}, st.none() | IDS, TEXT),
    st.builds(lambda i, t: {"op": "update_rule", "id": i, "text": t}, IDS, TEXT),
    st.builds(lambda i: {"op": "remove_rule", "id": i}, IDS),
    st.builds(
        lambda f, o, n: {"op": "replace_text", "field": f, "old": o or "x", "new": n},
        TEXT_FIELDS,
        FRAGMENTS,
        FRAGMENTS,
    ),
    st.builds(lambda v: {"op": "set_field", "field": "limits.max_steps", "value": v}, st.integers(-5, 400)),
    st.builds(
        lambda v: {"op": "set_field", "field": "action_format", "value": v}, st.sampled_from(["text", "xml"])
    ),
    st.builds(lambda i, t: {"op": "add_memory", "id": i, "title": t, "content": t}, st.none() | IDS, TEXT),
    st.builds(lambda i: {"op": "remove_memory", "id": i}, IDS),
    st.builds(
        lambda target, i, h: {"op": "vote", "target": target, "id": i, "helpful": h, "harmful": 1 - h},
        st.sampled_from(["rule", "memory"]),
        IDS,
        st.integers(0, 1),
    ),
    TOOL,
    st.builds(lambda n: {"op": "remove_tool", "name": n}, st.sampled_from(["echo_text", "other"])),
)


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(OP, min_size=1, max_size=3), min_size=1, max_size=5))
def test_random_edits_never_store_an_invalid_version(batches):
    with tempfile.TemporaryDirectory() as root:
        store = ScaffoldStore(root)
        store.commit(make_scaffold())
        for ops in batches:
            before = tree_snapshot(store.root)
            try:
                store.apply("demo", ops)
            except (OpError, ScaffoldValidationError):
                assert tree_snapshot(store.root) == before
        for info in store.log("demo"):
            scaffold = store.load(info.ref)  # content matches the recorded hash
            validate_scaffold(scaffold)
            if info.parent:  # the recorded ops turn the parent into exactly this version
                parent = store.load(info.parent)
                assert apply(parent, parse_ops(info.ops)).content_hash() == info.hash
                assert store.diff(parent, scaffold)  # a new version always shows a change
            assert not store.diff(scaffold, scaffold)
