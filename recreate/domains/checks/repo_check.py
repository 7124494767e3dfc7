"""Runs INSIDE a repository evaluation sandbox (standard library only): set the repository up at its base
state, apply the submitted patch, put every test file and test configuration back as it was, apply the
instance's test patch, run the tests and report each test's outcome as data.

Reads job.json (see repo_eval.py) and the per-run marker from marker.txt (deleted at once); prints
"<marker> {json}" lines. The verdict (resolved or not) is computed on the host from the outcomes.
"""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

TEST_DIRS = {"tests", "test", "testing"}
# files that decide what the tests are or how pytest runs them: a patch must not change them
PROTECTED_NAMES = {
    "conftest.py",
    "pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "pytest.py",
    "py.py",
    "sitecustomize.py",
    "usercustomize.py",
}
PROTECTED_TOP = {"_pytest", "pluggy", "pytest"}
OUTPUT_TAIL = 3000


def is_protected(relpath):
    parts = relpath.split("/")
    name = parts[-1]
    if any(part in TEST_DIRS for part in parts[:-1]) or parts[0] in PROTECTED_TOP:
        return True
    if name in PROTECTED_NAMES or name.endswith(".pth"):
        return True
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def protected_files(root):
    """relative path -> ("file", bytes, mode) | ("link", target) for every protected entry under root."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        entries = list(files) + [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        for name in entries:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if not is_protected(rel):
                continue
            if os.path.islink(path):
                found[rel] = ("link", os.readlink(path))
            else:
                found[rel] = ("file", Path(path).read_bytes(), os.stat(path).st_mode & 0o777)
    return found


def _real_parent(root, rel):
    """Make every folder on the way to `rel` a real folder (a patch may have swapped one for a link)."""
    current = root
    for part in rel.split("/")[:-1]:
        current = os.path.join(current, part)
        if os.path.islink(current) or (os.path.exists(current) and not os.path.isdir(current)):
            os.remove(current)
        os.makedirs(current, exist_ok=True)


def restore_protected(root, before):
    """Put protected files back as `before` has them; delete protected files the patch added."""
    after = protected_files(root)
    restored = []
    for rel in sorted(set(before) | set(after)):
        if before.get(rel) == after.get(rel):
            continue
        path = os.path.join(root, rel)
        if os.path.lexists(path):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        if rel in before:
            _real_parent(root, rel)
            kind = before[rel]
            if kind[0] == "link":
                os.symlink(kind[1], path)
            else:
                Path(path).write_bytes(kind[1])
                os.chmod(path, kind[2])
        restored.append(rel)
    return restored


def apply_patch(root, patch_file):
    """(applied?, message): git apply, else patch(1) for images without git."""
    commands = [
        ["git", "apply", "--recount", "--whitespace=nowarn", "-p1", patch_file],
        ["patch", "-p1", "-f", "-N", "-i", patch_file],
    ]
    messages = []
    for command in commands:
        try:
            done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            messages.append(f"{command[0]}: {exc}")
            continue
        if done.returncode == 0:
            return True, ""
        messages.append(f"{' '.join(command[:2])}: {(done.stdout + done.stderr).strip()[-800:]}")
        if command[0] == "git":  # patch(1) may half-apply a diff git rejected: start from a clean copy
            return False, "\n".join(messages)
    return False, "\n".join(messages)


def set_up(job, root):
    source = job["source"]
    if source.endswith(".tar"):
        os.makedirs(root)
        with tarfile.open(source) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(root, filter="data")
            else:  # Python before 3.11.4: the archive comes from the host's own git archive
                tar.extractall(root)
        os.remove(source)
    else:  # a folder of the image (SWE-bench: /testbed), copied so the sandbox user can change it
        shutil.copytree(source, root, symlinks=True)


def run_tests(job, root, work):
    results_file = os.path.join(work, f"results-{os.getpid()}.json")
    pythonpath = [os.path.join(work, "plugin")] + [os.path.join(root, p) for p in job.get("pythonpath", [])]
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join(pythonpath),
        PYTHONDONTWRITEBYTECODE="1",
        RECREATE_REPO_RESULTS=results_file,
        RECREATE_REPO_ROOT=root,
    )
    if job.get("trace"):
        env["RECREATE_REPO_TRACE"] = "1"
    command = [job["python"], "-m", "pytest", "-p", "recreate_repo_results", "-p", "no:cacheprovider"]
    command += ["-q", "--color=no", *job.get("pytest_args", []), *job.get("test_files", [])]
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=root, env=env, capture_output=True, text=True, timeout=job["timeout"]
        )
        code, output, timed_out = done.returncode, done.stdout + done.stderr, False
    except subprocess.TimeoutExpired as exc:
        code, timed_out = None, True
        output = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
    elapsed = time.monotonic() - started
    try:
        results = json.loads(Path(results_file).read_text())
    except (OSError, ValueError):
        results = {}
    return results, {"pytest_exit": code, "timed_out": timed_out, "tests_s": round(elapsed, 3)}, output


def main():
    marker = Path("marker.txt").read_text().strip()
    os.remove("marker.txt")
    work = os.getcwd()
    job = json.loads(Path("job.json").read_text())
    root = os.path.join(work, "repo")
    report = {}

    def emit(**fields):
        report.update(fields)
        print(marker, json.dumps(fields), flush=True)

    started = time.monotonic()
    set_up(job, root)
    before = protected_files(root)
    if job.get("submission"):
        applied, message = apply_patch(root, os.path.join(work, job["submission"]))
        if not applied:
            emit(stage="apply", applied=False, apply_error=message)
            return 0
    emit(applied=True, restored=restore_protected(root, before))
    if job.get("test_patch"):
        applied, message = apply_patch(root, os.path.join(work, job["test_patch"]))
        if not applied:
            emit(stage="test_patch", test_patch_error=message)
            return 0
    setup_s = round(time.monotonic() - started, 3)
    results, run, output = run_tests(job, root, work)
    emit(stage="tests", setup_s=setup_s, **run)
    emit(
        tests=results.get("tests", {}),
        messages=results.get("messages", {}),
        collect_errors=results.get("collect_errors", []),
        covered=results.get("covered", []),
        output_tail=output[-OUTPUT_TAIL:],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
