"""Tool argument schemas: model-written JSON schemas, checked on the host without trusting them.

A tool's `args` schema and its smoke test's arguments come from the meta-agent; the arguments of a call
come from the agent's model. Three things in a schema can take the host down: nesting (jsonschema walks
it recursively: a RecursionError, not a message); `$ref`s, which share a definition, so 30 definitions
that each use the one before twice are 2**30 nodes once inlined (LangChain inlines them to show the
tool to a model) and as many checks for one `allOf` chain; and regular expressions (`pattern`,
`patternProperties`), which Python matches by backtracking: `^(a|a)*$` against 40 characters runs for
hours and holds the GIL meanwhile. So a schema nests at most MAX_SCHEMA_DEPTH levels, its `$ref`s are
local and expand to at most MAX_EXPANDED_NODES, and arguments are checked against a schema with
regexes, `$ref`s or `uniqueItems` (pairwise, O(n**2)) in a bounded worker (`recreate.scaffold.bounded`).
"""

from __future__ import annotations

from typing import Any

import jsonschema

from recreate.scaffold._render_worker import schema_errors
from recreate.scaffold.bounded import schema_errors_bounded

MAX_SCHEMA_DEPTH = 32  # levels of JSON objects and arrays; a real tool's schema has a handful
MAX_EXPANDED_NODES = 50_000  # JSON values in the schema with every `$ref` inlined
BOUNDED_KEYWORDS = frozenset(  # uniqueItems: jsonschema compares unhashable items pairwise, O(n**2)
    {"pattern", "patternProperties", "$ref", "$dynamicRef", "$recursiveRef", "uniqueItems"}
)


def nesting_depth(value: Any) -> int:
    """How many levels of dicts and lists `value` nests (0 for a scalar); iterative, so any depth."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in children)
    return deepest


def needs_bounding(schema: Any) -> bool:
    """Whether any object in `schema` has a keyword whose check can run away (a property named
    "pattern" counts too: the check then only takes the slower, bounded path)."""
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if BOUNDED_KEYWORDS & item.keys():
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is no usable tool argument schema, or None."""
    depth = nesting_depth(schema)
    if depth > MAX_SCHEMA_DEPTH:
        return f"nested {depth} levels deep; a tool's argument schema may nest at most {MAX_SCHEMA_DEPTH}"
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"invalid JSON schema: {exc.message}"
    except RecursionError:  # a regex nested too deeply for the `regex` format check
        return "invalid JSON schema: a regular expression nested too deeply"
    return _ref_problem(schema)


def _ref_problem(schema: dict[str, Any]) -> str | None:
    """Why the schema's `$ref`s are unusable: one that is not local (`#/...`) or points nowhere, or all
    of them inlined making more than MAX_EXPANDED_NODES values."""
    sizes: dict[str, int] = {}
    try:
        total = _expanded(schema, schema, sizes, frozenset())
    except _BadRef as exc:
        return f"$ref {exc.args[0]!r}: points nowhere in the schema (only local refs, #/..., are read)"
    except RecursionError:
        return "$refs chained too deeply"
    if total > MAX_EXPANDED_NODES:
        return f"its $refs expand to {total:,} values once inlined; at most {MAX_EXPANDED_NODES:,}"
    return None


class _BadRef(Exception):
    pass


def _expanded(node: Any, root: dict[str, Any], sizes: dict[str, int], active: frozenset[str]) -> int:
    """How many JSON values `node` has with every `$ref` in it inlined (a cycle counts once); `sizes`
    remembers each ref's, so shared definitions cost nothing more to count."""
    if isinstance(node, list):
        return 1 + sum(_expanded(item, root, sizes, active) for item in node)
    if not isinstance(node, dict):
        return 1
    total = 1 + sum(_expanded(value, root, sizes, active) for value in node.values())
    ref = node.get("$ref")
    if isinstance(ref, str) and ref not in active:
        if ref not in sizes:
            sizes[ref] = _expanded(_resolve(root, ref), root, sizes, active | {ref})
        total += sizes[ref]
    return total


def _resolve(root: dict[str, Any], ref: str) -> Any:
    """The value a local JSON pointer (`#`, `#/$defs/a`) names; _BadRef when there is none."""
    if ref != "#" and not ref.startswith("#/"):
        raise _BadRef(ref)
    node: Any = root
    for part in ref[2:].split("/") if ref != "#" else []:
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            raise _BadRef(ref)
    return node


def argument_errors(schema: dict[str, Any], args: Any, what: str) -> list[tuple[list[str | int], str]]:
    """(path, message) of every way `args` fail `schema` (a schema without `schema_problem`), the best
    match first. Raises ScaffoldError naming `what` when a regex in the schema runs past its time."""
    if needs_bounding(schema):
        return schema_errors_bounded(schema, args, what)
    return [(path, message) for path, message in schema_errors(schema, args)]
