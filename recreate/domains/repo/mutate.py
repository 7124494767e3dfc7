"""Procedural bug mutations (the SWE-smith method): small AST changes inside functions the tests cover.

Each mutation edits only the source text of the changed node (the rest of the file keeps its exact
formatting, so the gold patch is a minimal diff) and is kept only if the edited file parses to exactly
the intended tree. Kinds: flipped comparison, off-by-one comparison boundary, and/or swapped, `not`
removed, boolean constant flipped, integer constant changed by one, + and - swapped, the first two
positional arguments of a call swapped, a statement removed.
"""

from __future__ import annotations

import ast
import copy
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

FLIP = {
    ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In,
}  # fmt: skip
BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
REMOVABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.Raise)
Functions = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Mutation:
    path: str  # file, relative to the repository
    function: str  # qualified name of the function it is in
    kind: str
    line: int
    source: str  # the whole mutated file

    def group(self) -> str:
        """An opaque name of the function: mutations of one function stay in one split."""
        return "fn-" + hashlib.sha256(f"{self.path}:{self.function}".encode()).hexdigest()[:10]


def _edits(node: ast.AST) -> Iterator[tuple[str, object]]:
    """(kind, change) pairs for one node; the change is applied to a copy by `_apply`."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        op = type(node.ops[0])
        if op in FLIP:
            yield "flip_comparison", FLIP[op]
        if op in BOUNDARY:
            yield "off_by_one_comparison", BOUNDARY[op]
    elif isinstance(node, ast.BoolOp):
        yield "swap_and_or", ast.Or if isinstance(node.op, ast.And) else ast.And
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "remove_not", None
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield "flip_boolean", not node.value
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield "change_constant", node.value + 1
        if node.value > 0:
            yield "change_constant", node.value - 1
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        yield "swap_plus_minus", ast.Sub if isinstance(node.op, ast.Add) else ast.Add
    elif isinstance(node, ast.Call) and len(node.args) >= 2:
        first, second = node.args[:2]
        plain = not isinstance(first, ast.Starred) and not isinstance(second, ast.Starred)
        if plain and ast.dump(first) != ast.dump(second):
            yield "swap_arguments", None


def _apply(node: ast.AST, kind: str, change: object, parent: ast.AST) -> None:
    """Change `node` (in a copied tree) in place, or in its parent."""
    if kind in ("flip_comparison", "off_by_one_comparison"):
        node.ops[0] = change()  # type: ignore[attr-defined, operator]
    elif kind in ("swap_and_or", "swap_plus_minus"):
        node.op = change()  # type: ignore[attr-defined, operator]
    elif kind in ("flip_boolean", "change_constant"):
        node.value = change  # type: ignore[attr-defined]
    elif kind == "swap_arguments":
        node.args[0], node.args[1] = node.args[1], node.args[0]  # type: ignore[attr-defined]
    elif kind == "remove_not":
        _replace_child(parent, node, node.operand)  # type: ignore[attr-defined]


def _replace_child(parent: ast.AST, old: ast.AST, new: ast.AST | None) -> None:
    for name, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, name, new)
            return
        if isinstance(value, list) and any(v is old for v in value):
            index = next(i for i, v in enumerate(value) if v is old)
            if new is None:
                del value[index]
            else:
                value[index] = new
            return


def _offsets(lines: list[str], node: ast.AST) -> tuple[int, int]:
    """Character offsets of a node in the file (ast columns count UTF-8 bytes)."""

    def offset(line: int, col: int) -> int:
        text = lines[line - 1]
        return sum(len(x) for x in lines[: line - 1]) + len(text.encode()[:col].decode(errors="ignore"))

    return offset(node.lineno, node.col_offset), offset(node.end_lineno, node.end_col_offset)  # type: ignore[arg-type]


def _statement_removal(lines: list[str], stmt: ast.stmt, block: list[ast.stmt]) -> str | None:
    """The file without `stmt` (`pass` if it was the block's only statement), when it has its lines alone."""
    first, last = lines[stmt.lineno - 1], lines[stmt.end_lineno - 1]  # type: ignore[index]
    if (
        first[: stmt.col_offset].strip()
        or last.encode()[stmt.end_col_offset :].decode(errors="ignore").strip()
    ):
        return None
    replacement = [first[: stmt.col_offset] + "pass\n"] if len(block) == 1 else []
    return "".join(lines[: stmt.lineno - 1] + replacement + lines[stmt.end_lineno :])  # type: ignore[operator]


def _functions(tree: ast.Module, covered: set[int]) -> Iterator[tuple[str, Functions]]:
    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, Functions]]:
        for child in ast.iter_child_nodes(node):
            name = f"{prefix}{getattr(child, 'name', '')}"
            if isinstance(child, Functions):
                lines = {child.lineno, *(d.lineno for d in child.decorator_list)}
                if lines & covered:
                    yield name, child
                yield from visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, name + ".")

    yield from visit(tree, "")


def _body_nodes(function: Functions) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(node, parent) pairs in the function's body, not in nested functions, docstrings or annotations."""
    stack: list[tuple[ast.AST, ast.AST]] = [(stmt, function) for stmt in function.body]
    if ast.get_docstring(function) is not None:
        stack = stack[1:]
    while stack:
        node, parent = stack.pop(0)
        yield node, parent
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, Functions | ast.ClassDef | ast.Lambda | ast.arg | ast.JoinedStr):
                stack.append((child, node))


def mutations(path: str, source: str, covered: set[int]) -> list[Mutation]:
    """Every mutation of the functions of `source` whose first line is in `covered`, in file order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines(keepends=True)
    index = {id(node): i for i, node in enumerate(ast.walk(tree))}
    found = []
    for name, function in _functions(tree, covered):
        for node, parent in _body_nodes(function):
            if isinstance(node, REMOVABLE) and not _is_docstring(node):
                block = next(v for _, v in ast.iter_fields(parent) if isinstance(v, list) and node in v)
                text = _statement_removal(lines, node, block)
                expected = _changed(tree, index, node, "remove_statement", None, parent)
                if text is not None and _parses_to(text, expected):
                    found.append(Mutation(path, name, "remove_statement", node.lineno, text))
            for kind, change in _edits(node):
                expected = _changed(tree, index, node, kind, change, parent)
                target = node.operand if kind == "remove_not" else _find(expected, index[id(node)])  # type: ignore[attr-defined]
                start, end = _offsets(lines, node)
                whole = "".join(lines)
                for new in (ast.unparse(target), "(" + ast.unparse(target) + ")"):
                    text = whole[:start] + new + whole[end:]
                    if _parses_to(text, expected):
                        found.append(Mutation(path, name, kind, node.lineno, text))  # type: ignore[attr-defined]
                        break
    return found


def _is_docstring(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _find(tree: ast.AST, position: int) -> ast.AST:
    return next(node for i, node in enumerate(ast.walk(tree)) if i == position)


def _changed(
    tree: ast.Module, index: dict[int, int], node: ast.AST, kind: str, change: object, parent: ast.AST
) -> ast.Module:
    """A copy of `tree` with the change made: what the edited text must parse to."""
    copied = copy.deepcopy(tree)
    nodes = list(ast.walk(copied))
    target, target_parent = nodes[index[id(node)]], nodes[index[id(parent)]]
    if kind == "remove_statement":
        block = next(v for _, v in ast.iter_fields(target_parent) if isinstance(v, list) and target in v)
        if len(block) == 1:
            _replace_child(target_parent, target, ast.Pass())
        else:
            _replace_child(target_parent, target, None)
    else:
        _apply(target, kind, change, target_parent)
    return copied


def _parses_to(text: str, expected: ast.Module) -> bool:
    try:
        return ast.dump(ast.parse(text)) == ast.dump(expected)
    except SyntaxError:
        return False
