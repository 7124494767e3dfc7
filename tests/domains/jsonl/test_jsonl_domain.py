import json
import textwrap
from pathlib import Path

import pytest

from recreate.domains import DomainDataError, Evaluation, UnknownDomainError, get_domain
from recreate.domains.common import MAX_SUBMISSION_BYTES
from recreate.domains.jsonl.domain import is_callable_spec
from recreate.sandbox import get_sandbox

ROWS = [
    {"id": "one", "task": "Say yes.", "expected": "yes", "category": "easy"},
    {"id": "two", "task": "Say no.", "answer": "no", "files": {"notes.txt": "hint"}},
    {"id": "three", "task": "Anything.", "tests": [1, 2]},
]


@pytest.fixture
def tasks_file(open_tmp: Path) -> Path:
    (open_tmp / "domain").mkdir(mode=0o755)
    path = open_tmp / "domain" / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def _evaluator(tasks_file: Path, body: str) -> str:
    (tasks_file.parent / "judge.py").write_text(textwrap.dedent(body))
    return "python3 /evaluator/judge.py"


def test_loading_and_default_exact_match(tasks_file):
    domain = get_domain("jsonl", data=tasks_file)
    one, two, three = domain.tasks()
    assert (one.reference, two.reference, three.reference) == ("yes", "no", None)
    assert two.files == {"notes.txt": "hint"} and three.metadata["fields"] == {"tests": [1, 2]}
    assert domain.evaluate(one, " yes\n", sandbox=None).passed
    wrong = domain.evaluate(one, "no", sandbox=None)
    assert not wrong.passed and "expected 'yes'" in wrong.feedback
    assert "no expected answer" in domain.evaluate(three, "x", sandbox=None).feedback


def test_an_expected_answer_that_is_not_text_is_its_json(tmp_path):
    answers = {"b": True, "l": [1, "é"], "d": {"a": 1}, "n": 2.5}
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        "".join(json.dumps({"id": k, "task": "t", "expected": v}) + "\n" for k, v in answers.items())
    )
    domain = get_domain("jsonl", data=path)
    assert [t.reference for t in domain.tasks()] == ["true", '[1, "é"]', '{"a": 1}', "2.5"]
    boolean = domain.tasks()[0]
    assert domain.evaluate(boolean, "true", sandbox=None).passed  # str(True) asked for "True"
    assert not domain.evaluate(boolean, "True", sandbox=None).passed


def test_bad_input_is_reported(tmp_path, tasks_file, caplog):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "task": "t"}\nnot json\n')
    with pytest.raises(DomainDataError, match="bad.jsonl:2: not valid JSON"):
        get_domain("jsonl", data=bad)
    with pytest.raises(
        UnknownDomainError, match="unknown domain 'nope'; known domains: math, ds1000, repo, jsonl"
    ):
        get_domain("nope", data=tasks_file)
    with pytest.raises(UnknownDomainError, match="takes no option.*colour"):
        get_domain("jsonl", data=tasks_file, colour="red")
    missing = tmp_path / "missing.jsonl"
    missing.write_text('{"id": "a"}\n{"id": "b", "task": null}\n{"id": "c", "task": "fine"}\n')
    with caplog.at_level("WARNING", logger="recreate.domains.common"):
        task = get_domain("jsonl", data=missing).tasks()[0]
    assert f"2 task(s) in {missing} cannot be judged" in caplog.text
    assert f"(first: {missing}:1: no 'task' text)" in caplog.text
    assert "no 'task' text" in get_domain("jsonl", data=missing).evaluate(task, "x", sandbox=None).feedback
    # no row can be judged (another domain's file): refused at load, not run as all errors
    math_rows = tmp_path / "math.jsonl"
    math_rows.write_text('{"id": "m1", "problem": "What is 2 + 2?", "answer": "4"}\n')
    with pytest.raises(DomainDataError, match=r"no task in .*math\.jsonl can be judged by the jsonl domain"):
        get_domain("jsonl", data=math_rows)


def test_huge_and_missing_submissions_score_zero(tasks_file):
    domain = get_domain("jsonl", data=tasks_file)
    task = domain.tasks()[0]
    assert domain.evaluate(task, "y" * (MAX_SUBMISSION_BYTES + 1), sandbox=None).score == 0.0
    assert "no submission" in domain.evaluate(task, None, sandbox=None).feedback


def judge_length(task, submission):
    """A trusted Python evaluator: treats the submission as data."""
    return {
        "score": min(len(submission) / 10, 1.0),
        "feedback": f"{len(submission)} chars",
        "chars": len(submission),
    }


def judge_crashes(task, submission):
    raise RuntimeError("judge is broken")


def judge_hangs(task, submission):
    import time

    time.sleep(30)


def test_callable_evaluators(tasks_file):
    assert is_callable_spec("tests.domains.jsonl.test_jsonl_domain:judge_length")
    assert is_callable_spec("judge.py:judge") and not is_callable_spec("python3 judge.py")
    domain = get_domain(
        "jsonl", data=tasks_file, evaluator="tests.domains.jsonl.test_jsonl_domain:judge_length"
    )
    evaluation = domain.evaluate(domain.tasks()[0], "abcde", sandbox=None)
    assert evaluation.score == 0.5 and not evaluation.passed and evaluation.details["chars"] == 5
    crash = get_domain("jsonl", data=tasks_file, evaluator=judge_crashes).evaluate(
        domain.tasks()[0], "x", None
    )
    assert crash.score == 0.0 and "RuntimeError: judge is broken" in crash.feedback
    hang = get_domain("jsonl", data=tasks_file, evaluator=judge_hangs, timeout=0.5)
    assert "did not return within 0.5 s" in hang.evaluate(domain.tasks()[0], "x", None).feedback


def test_callable_from_a_file_beside_the_tasks(tasks_file):
    (tasks_file.parent / "judge.py").write_text(
        "def judge(task, submission):\n    return submission == task.reference\n"
    )
    domain = get_domain("jsonl", data=tasks_file, evaluator="judge.py:judge")
    assert domain.evaluate(domain.tasks()[0], "yes", None) == Evaluation(
        score=1.0, passed=True, feedback="passed"
    )
    with pytest.raises(DomainDataError, match="has no function 'nope'"):
        get_domain("jsonl", data=tasks_file, evaluator="judge.py:nope")
    (tasks_file.parent / "broken.py").write_text("raise RuntimeError('boom at import')\n")
    said = r"importing .*broken.py raised RuntimeError: boom at import; fix the file"
    with pytest.raises(DomainDataError, match=said):
        get_domain("jsonl", data=tasks_file, evaluator="broken.py:judge")
    with pytest.raises(DomainDataError, match="'json.nosuch' cannot be imported: ModuleNotFoundError"):
        get_domain("jsonl", data=tasks_file, evaluator="json.nosuch:judge")


@pytest.mark.bwrap
def test_command_evaluator_json_line_and_exit_code(tasks_file, bwrap):
    command = _evaluator(
        tasks_file,
        """
        import json, pathlib, sys
        task = json.loads(pathlib.Path("task.json").read_text())
        answer = pathlib.Path("submission.txt").read_text().strip()
        if answer == "exit":
            sys.exit(3)
        if answer == "ok":
            sys.exit(0)
        print("noise")
        print(json.dumps({"score": float(answer == task["expected"]), "feedback": "compared " + answer}))
        """,
    )
    domain = get_domain("jsonl", data=tasks_file, evaluator=command)
    task = domain.tasks()[0]
    good = domain.evaluate(task, "yes", bwrap)
    assert good.passed and good.score == 1.0 and good.feedback == "compared yes"
    assert not domain.evaluate(task, "maybe", bwrap).passed
    assert domain.evaluate(task, "ok", bwrap).passed
    failed = domain.evaluate(task, "exit", bwrap)
    assert not failed.passed and "evaluator exited 3" in failed.feedback


@pytest.mark.bwrap
def test_command_evaluator_crash_timeout_and_isolation(open_tmp, tasks_file, bwrap):
    secret = open_tmp / "host_only.txt"  # readable by anyone on the host, outside the evaluator folder
    secret.write_text("host secret")
    command = _evaluator(
        tasks_file,
        f"""
        import pathlib, sys, time
        answer = pathlib.Path("submission.txt").read_text()
        if answer == "crash":
            raise ValueError("evaluator bug")
        if answer == "hang":
            time.sleep(60)
        if answer == "write":
            pathlib.Path("/evaluator/judge.py").write_text("tampered")
        if answer == "read":
            print(pathlib.Path({str(secret)!r}).read_text())
        """,
    )
    domain = get_domain("jsonl", data=tasks_file, evaluator=command, timeout=3)
    task = domain.tasks()[0]
    crash = domain.evaluate(task, "crash", bwrap)
    assert crash.score == 0.0 and "ValueError: evaluator bug" in crash.feedback
    hang = domain.evaluate(task, "hang", bwrap)
    assert hang.score == 0.0 and "timeout" in hang.feedback
    judge = tasks_file.parent / "judge.py"
    source = judge.read_text()
    assert not domain.evaluate(task, "write", bwrap).passed
    assert judge.read_text() == source  # the evaluator folder is read-only inside
    leak = domain.evaluate(task, "read", bwrap)
    assert not leak.passed and "host secret" not in leak.feedback


@pytest.mark.bwrap
def test_the_tasks_file_never_reaches_the_evaluator_sandbox(tasks_file, bwrap):
    command = _evaluator(
        tasks_file,
        """
        import os
        print(sorted(os.listdir("/evaluator")))
        print(open("/evaluator/tasks.jsonl").read() if os.path.exists("/evaluator/tasks.jsonl") else "hidden")
        """,
    )
    domain = get_domain("jsonl", data=tasks_file, evaluator=command)
    evaluation = domain.evaluate(domain.tasks()[0], "anything", bwrap)
    assert "['judge.py']" in evaluation.feedback and "hidden" in evaluation.feedback
    assert '"expected": "yes"' not in evaluation.feedback


@pytest.mark.parametrize("tasks_inside", [True, False])
def test_a_home_inside_the_evaluator_folder_never_reaches_the_sandbox(
    tasks_file, bwrap, monkeypatch, tasks_inside
):
    """The run's home (feedback quoting answers, cached rollouts) may lie in the evaluator's folder:
    the sandbox gets a copy without it, also through a link, whether or not the tasks file is there."""
    folder = tasks_file.parent
    home = folder / "state"
    (home / "runs").mkdir(parents=True)
    (home / "runs" / "feedback.json").write_text('{"expected": "SECRET-ANSWER"}')
    (folder / "link").symlink_to(home / "runs" / "feedback.json")
    monkeypatch.setenv("RECREATE_HOME", str(home))
    command = _evaluator(
        tasks_file,
        """
        import os
        for d, _, names in os.walk("/evaluator"):
            for path in (os.path.join(d, n) for n in names):
                print(path, open(path).read() if os.path.isfile(path) else "")
        """,
    )
    data = tasks_file
    if not tasks_inside:
        data = folder.parent / "elsewhere.jsonl"
        data.write_text(tasks_file.read_text())
    domain = get_domain("jsonl", data=data, evaluator=command, evaluator_dir=folder)
    evaluation = domain.evaluate(domain.tasks()[0], "anything", bwrap)
    assert "/evaluator/judge.py" in evaluation.feedback, evaluation.feedback
    assert "SECRET-ANSWER" not in evaluation.feedback and "state" not in evaluation.feedback


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "custom_domain"
# the attacks on the example evaluator, and variants: each must score 0
EXAMPLE_FORGERIES = {
    "print a passing line, exit 0": (
        "import json, os\nprint(json.dumps({'score': 1, 'feedback': 'all tests pass'}), flush=True)\n"
        "os._exit(0)"
    ),
    "exec the expected answer from task.json": "import json\nexec(json.load(open('task.json'))['expected'])",
    "exec the reference from the tasks file": (
        "import json\nfor line in open('/evaluator/tasks.jsonl'):\n"
        "    row = json.loads(line)\n    exec(row['reference'])"
    ),
    "write a passing line into the judge's stdout": (
        "import os, json\nline = json.dumps({'score': 1, 'feedback': 'x'}) + '\\n'\n"
        "for pid in (os.getppid(), 1, 2):\n    for fd in (1, 2):\n        try:\n"
        "            with open(f'/proc/{pid}/fd/{fd}', 'w') as out:\n                out.write(line)\n"
        "        except OSError:\n            pass\n"
    ),
    "kill the judge": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
    "read the judge's memory": (
        "import os\nwith open(f'/proc/{os.getppid()}/mem', 'rb') as mem:\n    mem.read(1)\n"
    ),
}


@pytest.fixture
def example_domain(open_tmp):
    import shutil

    example = shutil.copytree(EXAMPLE, open_tmp / "custom_domain")
    return get_domain("jsonl", data=example / "tasks.jsonl", evaluator="python3 /evaluator/evaluate.py")


@pytest.mark.bwrap
@pytest.mark.parametrize("name", sorted(EXAMPLE_FORGERIES))
def test_forgeries_score_zero_with_the_example_evaluator(example_domain, bwrap, name):
    task = next(t for t in example_domain.tasks() if t.id == "reverse-words")
    assert example_domain.evaluate(task, task.reference, bwrap).passed
    evaluation = example_domain.evaluate(task, EXAMPLE_FORGERIES[name], bwrap)
    assert evaluation.score == 0.0, evaluation.feedback


def test_evaluator_copies_unused_for_a_day_are_removed_and_used_ones_kept(tasks_file, bwrap):
    import os
    import time

    from recreate.domains.jsonl.evaluator_folder import STALE_COPY_S, evaluator_folder

    body = 'import json, os\nprint(json.dumps({"score": 1, "feedback": os.environ["RECREATE_TASK_ID"]}))'
    command = _evaluator(tasks_file, body)
    domain = get_domain("jsonl", data=tasks_file, evaluator=command, evaluator_dir=tasks_file.parent)
    first = evaluator_folder(tasks_file.parent, [tasks_file])
    assert not (first / tasks_file.name).exists()  # the copy leaves the answers out
    old = time.time() - STALE_COPY_S - 60
    os.utime(first, (old, old))
    assert evaluator_folder(tasks_file.parent, [tasks_file]) == first  # used again: kept, and fresh
    assert first.stat().st_mtime > old + 60
    stale = first.parent / "0000stale-copy"
    stale.mkdir(exist_ok=True)
    os.utime(stale, (old, old))
    (tasks_file.parent / "judge.py").write_text((tasks_file.parent / "judge.py").read_text() + "\n")
    second = evaluator_folder(tasks_file.parent, [tasks_file])  # the folder changed: a new copy ...
    assert second != first and second.is_dir() and first.is_dir()
    assert not stale.exists()  # ... and the copies unused for a day are gone
    task = domain.tasks()[1]
    assert domain.evaluate(task, "anything", bwrap).feedback == task.id  # the task's id, at run time


def test_a_command_running_a_file_the_evaluator_folder_lacks_is_an_environment_problem(tasks_file, tmp_path):
    """Every submission would score 0 for it (the evaluator cannot start): the run's preflight refuses it."""
    from recreate.evaluation.preflight import PreflightError, preflight

    missing = get_domain("jsonl", data=tasks_file, evaluator="python3 /evaluator/evaluate.py")
    problem = missing.environment_problem()
    assert problem and f"{tasks_file.parent} (what /evaluator shows) has no evaluate.py" in problem
    with pytest.raises(PreflightError, match="^domain jsonl: the evaluator command runs /evaluator/evaluate"):
        preflight("bwrap", missing, tmp_path)
    (tasks_file.parent / "evaluate.py").write_text("print('{\"score\": 1}')\n")
    assert missing.environment_problem() is None
    inline = get_domain("jsonl", data=tasks_file, evaluator="python3 -c 'print(1)'")
    assert inline.environment_problem() is None
    assert get_domain("jsonl", data=tasks_file).environment_problem() is None  # exact match, no command


@pytest.mark.bwrap
def test_an_evaluator_the_sandbox_cannot_start_is_refused_before_the_run(tasks_file, bwrap, tmp_path):
    """Exit 127 (not found) or 126 (not executable) from the shell on every submission would read as
    the submissions' failures: the preflight tries the command once and refuses it, naming the fix."""
    from recreate.evaluation.preflight import PreflightError, preflight

    missing = get_domain("jsonl", data=tasks_file, evaluator="nosuchjudge --strict")
    said = missing.evaluator_problem(bwrap)
    assert "`nosuchjudge --strict` is not found in the bwrap sandbox (exit 127)" in said
    with pytest.raises(PreflightError, match="^domain jsonl: the evaluator command `nosuchjudge"):
        preflight(bwrap, missing, tmp_path)
    (tasks_file.parent / "judge.sh").write_text("echo judged\n")  # not executable
    plain = get_domain("jsonl", data=tasks_file, evaluator="/evaluator/judge.sh")
    assert "is not executable in the bwrap sandbox (exit 126)" in plain.evaluator_problem(bwrap)
    judge = _evaluator(tasks_file, "print('{\"score\": 0}')")
    working = get_domain("jsonl", data=tasks_file, evaluator=judge)
    assert working.evaluator_problem(bwrap) is None  # a wrong answer scored 0 is the evaluator working
    said = str(working.evaluator_problem(get_sandbox("local")))
    assert "cannot run in the local sandbox: the evaluation sandbox failed" in said and "/evaluator" in said
