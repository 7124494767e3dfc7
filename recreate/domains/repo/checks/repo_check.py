"""Runs INSIDE a repository evaluation sandbox (standard library only): set the repository up at its base
state, apply the submitted patch, put every test file and test configuration back as it was, apply the
instance's test patch, run the tests and report each test's outcome as data.

Reads job.json (see ../evaluation.py) and the per-run marker from marker.txt (deleted at once); prints
"<marker> {json}" lines. The verdict (resolved or not) is computed on the host from the outcomes.
"""

import json
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import threading
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
    ".pytest.ini",
    "pytest.toml",  # read by pytest 9 and later, before every other configuration file
    ".pytest.toml",
}
PROTECTED_TOP = {"_pytest", "pluggy", "pytest"}
OUTPUT_TAIL = 3000
PLUGIN = "recreate_repo_results.py"
READ_LIMIT = 64 * 1024 * 1024
TAMPERED_EXIT = 99  # how the runner leaves when it found pytest, json or itself changed


def is_protected(relpath, named=()):
    """A test file or test configuration by its name, or a file the instance's test ids name (`named`:
    those decide the verdict whatever they are called, e.g. under `python_files = checks.py`)."""
    parts = relpath.split("/")
    name = parts[-1]
    if any("/".join(parts[:depth]) in named for depth in range(1, len(parts) + 1)):
        return True
    if any(part in TEST_DIRS for part in parts[:-1]) or parts[0] in PROTECTED_TOP:
        return True
    if name in PROTECTED_NAMES or name.endswith(".pth"):
        return True
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def protected_files(root, named=()):
    """relative path -> ("file", bytes, mode) | ("link", target) for every protected entry under root."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        entries = list(files) + [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        for name in entries:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if not is_protected(rel, named):
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


def restore_protected(root, before, named=()):
    """Put protected files back as `before` has them; delete protected files the patch added."""
    after = protected_files(root, named)
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


def _pump(fd, data):
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass  # the runner died before reading its job: it reports nothing
    finally:
        os.close(fd)


def _drain(fd, into):
    with os.fdopen(fd, "rb") as handle:
        into.append(handle.read(READ_LIMIT + 1))


def read_channel(data, nonce):
    """The runner's report, or (None, why): exactly "<nonce>\n{json}" and nothing else. Anything more or
    other was written by the tested code (it inherits no handle on the channel: it had to find one)."""
    if not data:
        return None, "the test run sent no results (it crashed, was killed or exited early)"
    head, _, body = data.partition(b"\n")
    if head != nonce.encode() or len(data) > READ_LIMIT:
        return None, "the results channel carried data the judge did not write"
    try:
        report, end = json.JSONDecoder().raw_decode(body.decode())
    except (UnicodeDecodeError, ValueError):
        return None, "the results channel carried data the judge did not write"
    if body.decode()[end:].strip() or not isinstance(report, dict):
        return None, "the results channel carried data the judge did not write"
    return report, None


def ending_problem(report, code):
    """Why a well-signed report still is not the runner's, judged by how its process ended: the runner
    leaves with the status its report names ("exit"); tested code that wrote a report and then killed
    or ended the process cannot make the two agree. Marks the report tampered for TAMPERED_EXIT."""
    if code != report.get("exit"):
        return (
            f"the test process ended with status {code}, not the {report.get('exit')} its report names: "
            "the report was not the runner's or the process was ended before the runner finished"
        )
    if code == TAMPERED_EXIT and not report.get("tampered"):
        report["tampered"] = ["the runner's own checks (it left as a runner that found a change)"]
    return None


def run_tests(job, root, work):
    """Run the tests with the runner (recreate_repo_results.py) in a child process; its report comes
    over a pipe, signed with a nonce the tested code never sees in its environment or arguments."""
    nonce = secrets.token_hex(16)
    runner_job = {
        "nonce": nonce,
        "paths": [os.path.join(root, p) for p in job.get("pythonpath", [])],
        "args": ["-p", "no:cacheprovider", "-q", "--color=no", *job.get("pytest_args", [])]
        + job.get("test_files", []),
        "root": root,
        "trace": bool(job.get("trace")),
    }
    job_read, job_write = os.pipe()
    results_read, results_write = os.pipe()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST", "RECREATE"))}
    env.update(PYTHONHASHSEED=os.environ.get("PYTHONHASHSEED", "0"), PYTHONDONTWRITEBYTECODE="1")
    runner = os.path.join(work, "plugin", PLUGIN)
    command = [job["python"], "-s", "-B", runner, str(job_read), str(results_write)]
    chunks = []
    started = time.monotonic()
    try:
        child = subprocess.Popen(
            command, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, pass_fds=(job_read, results_write),
        )  # fmt: skip
    finally:
        os.close(job_read)
        os.close(results_write)
    threading.Thread(target=_pump, args=(job_write, json.dumps(runner_job).encode()), daemon=True).start()
    reader = threading.Thread(target=_drain, args=(results_read, chunks), daemon=True)
    reader.start()
    try:
        output, _ = child.communicate(timeout=job["timeout"])
        code, timed_out = child.returncode, False
    except subprocess.TimeoutExpired:
        child.kill()
        output, _ = child.communicate()
        code, timed_out = None, True
    reader.join(timeout=5)  # a process the tests left behind may still hold the channel open
    elapsed = time.monotonic() - started
    results, channel_error = read_channel(chunks[0] if chunks else b"", nonce)
    if results is not None and not timed_out:
        channel_error = ending_problem(results, code)
        results = None if channel_error else results
    run = {"pytest_exit": code, "timed_out": timed_out, "tests_s": round(elapsed, 3)}
    if channel_error and not timed_out:
        run["channel_error"] = channel_error
    return results or {}, run, output.decode(errors="replace")


def _not_dumpable():
    """Keep the tested code (same uid) out of this process's memory and file descriptors (/proc/PID/mem,
    /proc/PID/fd): where the marker and the sandbox's real stdout are."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        pass


def main():
    _not_dumpable()
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
    named = {os.path.normpath(f).replace(os.sep, "/") for f in job.get("test_files", [])}
    before = protected_files(root, named)
    if job.get("submission"):
        applied, message = apply_patch(root, os.path.join(work, job["submission"]))
        if not applied:
            emit(stage="apply", applied=False, apply_error=message)
            return 0
    emit(applied=True, restored=restore_protected(root, before, named))
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
        tampered=results.get("tampered", []),
        output_tail=output[-OUTPUT_TAIL:],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
