"""What a repository patch may not do, checked on the host before anything runs.

The tests run the patched code in the same process as pytest (as in SWE-bench), so code of the patch
can reach what decides a test's outcome. The judge closes what it can for good (repo_check.py and its
runner: the repository is not first on sys.path, the results go over a pipe with a per-run nonce, the
collector is registered as an object no configuration can name, test files and pytest's configuration
are put back, the process leaves with os._exit before any atexit hook, and a run that changed pytest's
functions or registered a plugin is refused). This module refuses the rest by reading the diff:

- new modules that would shadow the standard library, pytest, pluggy or the judge where the tests
  import from (the repository root, its import folders, folders of test files that are not packages);
- packaging metadata (*.dist-info, *.egg-info, *.pth, entry_points.txt: pytest loads plugins from
  them), compiled modules (*.pyc, *.so: they can replace a source the reviewer reads) and Python
  files sent as GIT binary patches (their code is in no added line); paths are read as git apply reads
  them (C-quoted names unquoted, the first component stripped);
- Python code (outside the test files, which the judge puts back) that introduces into a file a
  reference to the test framework's internals, the import machinery (sys.modules), atexit, builtins,
  os._exit, os.exec*, frames or gc walking, dynamic code (exec/eval/__import__/importlib/runpy), ctypes,
  /proc, names computed with getattr on gc, sys, inspect or os, or the judge's names (`import __main__`
  reaches the runner). A file that already used the name (pytest's own repository, a project's import
  hooks) may keep its uses (a fix may rewrite such a line), but a patch may not add more.

Residual risk: this is a static check, and code run in process can always do what Python allows; a
determined obfuscation (e.g. getattr chains over objects the project already imports) is not proven
impossible. SWE-bench parses a test log the patched code can print to, so a print of "PASSED" lines
forges its verdict; here the outcomes never come from the output, and every route named above is closed
or refused.
"""

from __future__ import annotations

import io
import posixpath
import re
import sys
import tarfile
from dataclasses import dataclass, field

RESERVED = frozenset(sys.stdlib_module_names) | frozenset(sys.builtin_module_names)
RESERVED |= {"pytest", "_pytest", "pluggy", "py", "sitecustomize", "usercustomize"}
RESERVED |= {"recreate_repo_results", "check", "iniconfig", "packaging"}
IMPORTABLE = (".py", ".pyw", ".pyc", ".pyo", ".so", ".pyd")
COMPILED = (".pyc", ".pyo", ".so", ".pyd")
PACKAGING = (".dist-info", ".egg-info", ".egg-link", ".pth", "entry_points.txt", "__pycache__")
TEST_FILE = re.compile(r"(^|/)(test_[^/]*\.py|[^/]*_test\.py|conftest\.py)$")
TEST_DIRS = re.compile(r"(^|/)(tests|test|testing)/")  # with TEST_FILE: what the judge puts back
FORBIDDEN = (
    (
        re.compile(r"\b_pytest\b|\bpluggy\b|\bpluginmanager\b|\bhookimpl\b|\bhookwrapper\b"),
        "pytest's internals",
    ),
    (re.compile(r"\b(TestReport|CollectReport|CallInfo)\b|\bpytest_[a-z_]+\b"), "pytest's hooks or reports"),
    (re.compile(r"\bsys\s*\.\s*modules\b|\bmeta_path\b|\bpath_hooks\b"), "the import machinery"),
    (re.compile(r"\batexit\b"), "atexit"),
    (re.compile(r"\bbuiltins\b|\b__builtins__\b"), "builtins"),
    (re.compile(r"\b_exit\b"), "os._exit"),
    (
        re.compile(
            r"\b(settrace|setprofile|_getframe|_current_frames|get_referrers|get_objects|currentframe"
            r"|f_back|f_locals|f_globals|tb_frame|gi_frame|cr_frame|getouterframes|getinnerframes"
            r"|walk_stack)\b|\binspect\s*\.\s*(stack|trace)\b"
        ),
        "frames or gc walking",
    ),
    (re.compile(r"\b(execv|execve|execl|execle|execlp|execlpe|execvp|execvpe|fexecve)\b"), "os.exec*"),
    (
        re.compile(
            r"\b__import__\b|\bimportlib\b|\brunpy\b|\bzipimport\b|(?<![\w.])(exec|eval|compile)\s*\("
        ),
        "dynamic code",
    ),
    (re.compile(r"\bctypes\b"), "ctypes"),
    (
        re.compile(r"\bgetattr\s*\(\s*(gc|sys|inspect|os|builtins)\s*,"),
        "names computed on gc, sys, inspect or os",
    ),
    (re.compile(r"/proc\b"), "/proc"),
    (
        re.compile(
            r"recreate_repo|RECREATE|\bmarker\.txt\b|\bjob\.json\b|\bimport\s+__main__\b"
            r"|\bfrom\s+__main__\s+import\b"
        ),
        "the judge's names",
    ),
)


_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13}
_QUOTED_END = re.compile(r'"(?:[^"\\]|\\.)*"$')


@dataclass
class FileChange:
    path: str
    new: bool = False
    binary: bool = False  # a GIT binary patch: its content is not in the added lines
    added: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # context and removed lines: the file as it was
    removed: list[str] = field(default_factory=list)


def unquote(name: str) -> str:
    """A path as git apply reads it: git quotes one with special characters C-style
    ("b/\\303\\251 x.py"), and a hand-written patch may quote any path."""
    if len(name) < 2 or name[0] != '"' or name[-1] != '"':
        return name
    body, out, i = name[1:-1], bytearray(), 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            octal = re.match(r"[0-7]{1,3}", body[i + 1 : i + 4])
            if octal:
                out.append(int(octal.group(0), 8) & 0xFF)
                i += 1 + len(octal.group(0))
                continue
            out += bytes([_ESCAPES[body[i + 1]]]) if body[i + 1] in _ESCAPES else body[i + 1].encode()
            i += 2
            continue
        out += body[i].encode()
        i += 1
    return out.decode(errors="replace")


def strip_prefix(path: str) -> str:
    """The path git apply -p1 writes to: the first component (a/, b/ or any other) removed."""
    return path.split("/", 1)[1] if "/" in path else path


def _git_header_path(rest: str) -> str:
    """The new path of a `diff --git A B` line (either name may be quoted, unquoted ones may hold spaces)."""
    quoted = _QUOTED_END.search(rest)
    if quoted:
        return strip_prefix(unquote(quoted.group(0)))
    if " b/" in rest:
        return rest.split(" b/", 1)[1]
    words = rest.split(" ")
    return strip_prefix(" ".join(words[len(words) // 2 :]))


def parse(patch: str) -> list[FileChange]:
    """Each file a unified (git) diff changes, with its added lines and what it shows of the old file."""
    changes: list[FileChange] = []
    current: FileChange | None = None
    headed = False  # the current file's ---/+++ pair was read: another pair starts a new file
    lines = patch.splitlines()
    for i, line in enumerate(lines):
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if line.startswith("diff --git "):
            current, headed = FileChange(_git_header_path(line[len("diff --git ") :])), False
            changes.append(current)
        elif line.startswith("--- ") and following.startswith("+++ "):
            if current is None or headed:
                current = FileChange("")
                changes.append(current)
            headed, target = True, unquote(following[4:].split("\t")[0])
            current.new = current.new or line.startswith("--- /dev/null")
            if target != "/dev/null":
                current.path = strip_prefix(target)
        elif current is None or (line.startswith("+++ ") and lines[i - 1].startswith("--- ")):
            continue
        elif line.startswith(("GIT binary patch", "Binary files ")):
            current.binary = True
        elif line.startswith(("new file mode", "rename to ", "copy to ")):
            current.new = True
            if " to " in line:
                current.path = unquote(line.split(" to ", 1)[1])
        elif line.startswith("+"):
            current.added.append(line[1:])
        elif line[:1] in ("-", " "):
            current.kept.append(line[1:])
            if line[:1] == "-":
                current.removed.append(line[1:])
    return [c for c in changes if c.path]


def tree_files(tree: bytes | None, wanted: set[str]) -> tuple[set[str], dict[str, str]]:
    """(every path in the base tree, the text of the `wanted` ones)."""
    if tree is None:
        return set(), {}
    names, texts = set(), {}
    with tarfile.open(fileobj=io.BytesIO(tree)) as tar:
        for member in tar:
            names.add(member.name)
            if member.name in wanted and member.isfile():
                handle = tar.extractfile(member)
                texts[member.name] = handle.read().decode(errors="replace") if handle else ""
    return names, texts


def _import_roots(paths: set[str], pythonpath: tuple[str, ...]) -> set[str]:
    """Folders the test run imports top-level names from: the root, the import folders, and where pytest
    puts test files' folders on sys.path (the first folder upwards that is not a package)."""
    roots = {""} | {posixpath.normpath(p).strip("./") for p in pythonpath}
    for path in paths:
        if TEST_FILE.search(path):
            folder = posixpath.dirname(path)
            while folder and posixpath.join(folder, "__init__.py") in paths:
                folder = posixpath.dirname(folder)
            roots.add(folder)
    return roots


def _shadowing(path: str, roots: set[str]) -> str | None:
    """The reserved name a new file at `path` would shadow, if it lands right under an import root."""
    parts = path.split("/")
    for depth in range(len(parts)):
        name = parts[depth]
        if depth == len(parts) - 1 and not name.endswith(IMPORTABLE):
            return None
        module = name.split(".")[0]
        if module in RESERVED and "/".join(parts[:depth]) in roots:
            return module
    return None


def refusal(patch: str, tree: bytes | None, pythonpath: tuple[str, ...] = (".",)) -> str | None:
    """Why `patch` is refused (one paragraph naming the file), or None."""
    changes = parse(patch)
    base_names, base_texts = tree_files(tree, {c.path for c in changes})
    paths = base_names | {c.path for c in changes}
    roots = _import_roots(paths, pythonpath)
    for change in changes:
        name = change.path.rsplit("/", 1)[-1]
        if any(part.endswith(PACKAGING) for part in change.path.split("/")):
            return f"{change.path}: a patch may not add packaging metadata (pytest loads plugins from it)"
        if name.endswith(COMPILED):
            return f"{change.path}: a patch may not add compiled modules; change the source"
        if change.binary and name.endswith(IMPORTABLE):
            return f"{change.path}: a patch may not change Python code as binary data; submit a text diff"
        if change.new or change.path not in base_names:
            shadowed = _shadowing(change.path, roots)
            if shadowed:
                return (
                    f"{change.path}: a new module named {shadowed!r} where the tests import from would "
                    "shadow the standard library, pytest or the judge; give it another name"
                )
        if (
            not name.endswith((".py", ".pyw"))
            or TEST_FILE.search(change.path)
            or TEST_DIRS.search(change.path)
        ):
            continue  # test files are put back before the tests run: changing them changes nothing
        before = base_texts.get(change.path, "\n".join(change.kept))
        added, removed = "\n".join(change.added), "\n".join(change.removed)
        for pattern, what in FORBIDDEN:
            found = pattern.search(added)
            # a file that used the name may keep its uses (a fix may rewrite such a line), not add more
            if found and (
                not pattern.search(before) or len(pattern.findall(added)) > len(pattern.findall(removed))
            ):
                return (
                    f"{change.path}: the patch adds code that reaches for {what} ({found.group(0)!r}); a fix "
                    "of the library must not touch the test run or the judge"
                )
    return None
