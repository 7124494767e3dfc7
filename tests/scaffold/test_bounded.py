"""Model-written templates render under a time, memory and output bound, never at the host's expense."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recreate.scaffold import ScaffoldError, ScaffoldValidationError, apply, bounded
from recreate.scaffold.bounded import render_bounded

NESTED_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ task }}"
HUGE_STRING = "{{ ('x'*100000)*100000 }}{{ task }}"


def test_a_template_that_loops_for_hours_is_stopped_at_the_time_bound():
    started = time.monotonic()
    with pytest.raises(ScaffoldError, match="instance_template: rendering took longer than 1 s"):
        render_bounded(NESTED_LOOPS, {"task": "t"}, "instance_template", timeout_s=1)
    assert time.monotonic() - started < 10
    assert render_bounded("ok {{ task }}", {"task": "t"}) == "ok t"  # the next render gets a fresh worker


def test_a_template_that_asks_for_10_gb_fails_without_touching_our_memory():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ScaffoldError, match="instance_template: needs more memory .*MiB"):
        render_bounded(HUGE_STRING, {"task": "t"}, "instance_template")
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 100 * 1024  # the 10 GB were asked of the worker, not of this process


def test_finding_a_templates_variables_evaluates_nothing_here():
    # jinja2.meta folds constant expressions while it looks for variables: 300 MB here, 10 GB for HUGE_STRING
    probe = """
import re
from recreate.scaffold import ScaffoldError
from recreate.scaffold.render import template_variables
try:
    template_variables("{{ ('x'*100000)*3000 }}{{ task }}")
except ScaffoldError:
    pass  # a bound of the worker: what matters is that this process built nothing
with open("/proc/self/status") as status:  # VmHWM: this process's peak (ru_maxrss counts our parent's)
    print(re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) < 200 * 1024  # KiB: the 300 MB string was never built in this process


def test_output_beyond_the_bound_is_refused(monkeypatch):
    monkeypatch.setattr(bounded, "RENDER_MAX_CHARS", 1000)
    with pytest.raises(ScaffoldError, match="renders to more than 1,000 characters"):
        render_bounded("{% for i in range(100) %}{{ task }}{% endfor %}", {"task": "0123456789+"})
    assert render_bounded("{% for i in range(10) %}{{ task }}{% endfor %}", {"task": "0123456789"})


def test_errors_keep_naming_the_template_and_line():
    with pytest.raises(ScaffoldError, match=r"system_prompt \(line 2\): unexpected end of template"):
        render_bounded("a\n{{ nowhere ", {}, "system_prompt")
    with pytest.raises(ScaffoldError, match="system_prompt: 'nowhere' is undefined"):
        render_bounded("{{ nowhere }}", {}, "system_prompt")
    with pytest.raises(ScaffoldError, match="instance_template: ZeroDivisionError"):
        render_bounded("{{ 1 // 0 }}", {}, "instance_template")


@pytest.mark.parametrize(
    ("template", "reason"), [(HUGE_STRING, "needs more memory"), (NESTED_LOOPS, "took longer than")]
)
def test_a_proposal_with_a_runaway_template_fails_validation_with_the_reason(
    scaffold, monkeypatch, template, reason
):
    monkeypatch.setattr(bounded, "RENDER_TIMEOUT_S", 1.0)
    started = time.monotonic()
    with pytest.raises(ScaffoldValidationError) as info:
        apply(scaffold, [{"op": "set_field", "field": "instance_template", "value": template}])
    assert time.monotonic() - started < 10
    (problem,) = [str(p) for p in info.value.problems]
    assert problem.startswith("scaffold.yaml: instance_template: does not render") and reason in problem


def test_a_worker_does_not_outlive_a_parent_killed_mid_render(tmp_path):
    parent = f"""
import functools, threading, time
from recreate.scaffold.bounded import render_bounded
render = functools.partial(render_bounded, {NESTED_LOOPS!r}, {{"task": "t"}}, timeout_s=60)
threading.Thread(target=render).start()
time.sleep(60)
"""
    proc = subprocess.Popen([sys.executable, "-c", parent])
    try:
        deadline = time.monotonic() + 30
        while not (workers := _children(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert workers, "the render worker never started"
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(w) for w in workers)


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_renders_in_a_process_with_more_than_1024_open_files():
    script = (
        "import os, resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))\n"
        "held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]\n"
        "from recreate.scaffold.bounded import render_bounded\n"
        "print(render_bounded('ok {{ task }}', {'task': 't'}))\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=root
    )
    assert done.returncode == 0 and done.stdout == "ok t\n", done.stderr[-2000:]


def test_the_renderer_of_model_written_templates_gets_no_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-renderer-123456")
    monkeypatch.setenv("HF_TOKEN", "hf_canary_renderer_123456")
    worker = bounded._Worker()
    try:
        environ = Path(f"/proc/{worker.proc.pid}/environ").read_bytes().decode()
    finally:
        worker.kill()
    assert "canary" not in environ and "OPENAI_API_KEY" not in environ and "PATH=" in environ
