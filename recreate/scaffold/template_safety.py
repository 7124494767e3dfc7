"""A static check that a template reaches no Python internals, whatever branch it takes.

recreate renders templates in a sandbox, but an exported mini-swe-agent config is rendered by plain,
unsandboxed `jinja2.Template`: there `{{ cycler.__init__.__globals__.os.popen("...") }}` runs on the
host. So every template is read once, as a Jinja syntax tree, and refused when anything in it names
what the sandbox would refuse at run time: an attribute starting with "_", or one of the internals
`jinja2.sandbox.is_internal_attribute` knows (mro, gi_frame, ...), by `.name`, by `["name"]`, by the
`attr` filter or by a filter's `attribute=` path. A name the tree does not spell out (a computed
subscript key or attribute name) cannot be checked, so it is refused too, and so is `str.format`,
whose format fields read attributes outside any sandbox. Nothing is rendered or evaluated.
"""

from __future__ import annotations

from jinja2 import Environment, nodes
from jinja2.sandbox import (
    UNSAFE_ASYNC_GENERATOR_ATTRIBUTES,
    UNSAFE_COROUTINE_ATTRIBUTES,
    UNSAFE_FUNCTION_ATTRIBUTES,
    UNSAFE_GENERATOR_ATTRIBUTES,
    UNSAFE_METHOD_ATTRIBUTES,
)

# What jinja2.sandbox refuses by name, plus the frame, code and traceback attributes it refuses by type.
UNSAFE_NAMES = frozenset(
    {
        "mro",
        "format",
        "format_map",
        *UNSAFE_FUNCTION_ATTRIBUTES,
        *UNSAFE_METHOD_ATTRIBUTES,
        *UNSAFE_GENERATOR_ATTRIBUTES,
        *UNSAFE_COROUTINE_ATTRIBUTES,
        *UNSAFE_ASYNC_GENERATOR_ATTRIBUTES,
        *("f_back", "f_builtins", "f_code", "f_globals", "f_locals", "f_trace"),
        *("tb_frame", "tb_next", "co_code", "co_consts", "co_names"),
    }
)
# Filters that look attributes up by a name given as an argument: (filter, positional index of the name)
NAMED_BY_ARGUMENT = {"attr": 0, "selectattr": 0, "rejectattr": 0, "groupby": 0}
_parser = Environment()


def unsafe_reason(source: str) -> str | None:
    """Why `source` could reach Python internals when rendered without a sandbox ("line N: ..."), or None
    when it cannot (a template that does not parse renders nowhere: its syntax error is reported by
    whoever validates or renders it)."""
    try:
        tree = _parser.parse(source)
    except RecursionError:  # fails here, may parse where a deeper recursion limit is set: not vouched for
        return "nested too deeply to check"
    except Exception:  # a syntax error: it renders nowhere
        return None
    try:
        for node in tree.find_all((nodes.Getattr, nodes.Getitem, nodes.Filter)):
            reason = _node_reason(node)
            if reason:
                return f"line {node.lineno}: {reason}"
    except RecursionError:  # a tree too deep to walk is not one we can vouch for
        return "nested too deeply to check"
    return None


def _node_reason(node: nodes.Node) -> str | None:
    if isinstance(node, nodes.Getattr):
        return _name_reason(node.attr, f".{node.attr}")
    if isinstance(node, nodes.Getitem):
        if isinstance(node.arg, nodes.Slice):
            return None
        key = _constant(node.arg)
        if key is None:
            return "a computed subscript [...] (write a constant key, or .name)"
        return _name_reason(key, f"[{key!r}]") if isinstance(key, str) else None
    assert isinstance(node, nodes.Filter)
    return _filter_reason(node)


def _filter_reason(node: nodes.Filter) -> str | None:
    if node.dyn_args is not None or node.dyn_kwargs is not None:
        return f"|{node.name} with *args or **kwargs"
    named = [kw.value for kw in node.kwargs if kw.key == "attribute"]
    index = NAMED_BY_ARGUMENT.get(node.name)
    if index is not None and len(node.args) > index:
        named.append(node.args[index])
    if node.name == "map" and node.args:
        first = _constant(node.args[0])
        if not isinstance(first, str):
            return "|map with a computed filter name"
        if first in NAMED_BY_ARGUMENT:  # map("attr", name)
            named += node.args[1:2]
    for value in named:
        name = _constant(value)
        if not isinstance(name, str | int):
            return f"|{node.name} with a computed attribute name"
        for part in str(name).split("."):
            reason = _name_reason(part, f"|{node.name}({name!r})")
            if reason:
                return reason
    return None


def _constant(node: nodes.Expr) -> object:
    """The value of an expression made of constants only (`-1`, `"a" ~ "b"`), else None."""
    try:
        return node.as_const()
    except Exception:  # nodes.Impossible, or an error evaluating the constants
        return None


def _name_reason(name: str, shown: str) -> str | None:
    if name.startswith("_") or name in UNSAFE_NAMES:
        return f"{shown} reaches a Python internal"
    return None
