"""One name per concept across `recreate` and `tapo` commands; shared flags; help that renders as written.

The walks go over the real command trees (`recreate.cli.command()`, the tapo app with the same
conventions), so a command added later is checked without touching this file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from recreate.cli import command
from recreate.cli_options import apply_conventions, common_flags
from tapo_backend.cli import app as tapo_app

REPO = Path(__file__).resolve().parents[1]
# commands that read or write no state under the home (so take no --home)
STATELESS = {
    ("recreate", "domain", "list"),
    ("recreate", "sandbox", "run"),
    ("recreate", "sandbox", "status"),
    ("recreate", "scaffold", "import"),
    ("tapo", "merge"),
    ("tapo", "serve"),
    ("tapo", "train"),  # writes under --output-dir (default RECREATE_HOME/tapo)
}
COUNTS = {"--seeds", "--val-seeds", "--test-seeds", "--finetune-val-seeds"}  # repetitions, not seeds


def _leaves(cmd, path):
    subs = getattr(cmd, "commands", None)
    if subs is None:
        yield path, cmd
        return
    for name, sub in subs.items():
        yield from _leaves(sub, (*path, name))


def leaves():
    tapo = apply_conventions(typer.main.get_command(tapo_app), common_flags({"debug": False}))
    return [*_leaves(command(), ("recreate",)), *_leaves(tapo, ("tapo",))]


def options(cmd):
    return [p for p in cmd.params if p.param_type_name == "option" and not p.hidden]


def run(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    full = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "recreate", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full,
        cwd=cwd,
    )


def test_every_option_has_a_help_line():
    missing = [
        f"{' '.join(path)} {'/'.join(p.opts)}" for path, cmd in leaves() for p in options(cmd) if not p.help
    ]
    assert not missing


@pytest.mark.parametrize("path", [path for path, _ in leaves()], ids=" ".join)
def test_help_renders_as_written(path, capsys):
    tree = dict(leaves())[path]
    prog = command() if path[0] == "recreate" else None
    if prog is None:
        prog = apply_conventions(typer.main.get_command(tapo_app), common_flags({"debug": False}))
    prog([*path[1:], "--help"], standalone_mode=False, prog_name=path[0])
    text = " ".join(capsys.readouterr().out.split())
    assert "<bool>" not in text
    for param in options(tree):
        shown = param.show_default
        if isinstance(shown, str) or (shown is not False and param.default not in (None, False, "", [], ())):
            assert "[default: " in text, f"{param.opts} lost its default"
    assert "[default: 1e-4]" in text or path != ("recreate", "finetune")


def test_state_commands_take_home_and_the_shared_flags():
    for path, cmd in leaves():
        names = {name for p in cmd.params for name in p.opts}
        assert {"--quiet", "--verbose", "--debug"} <= names, path
        if path not in STATELESS:
            assert "--home" in names, f"{' '.join(path)} reads or writes state but takes no --home"


def test_one_name_per_concept():
    for path, cmd in leaves():
        for param in options(cmd):
            for name in param.opts:
                assert name not in ("--run-id", "--backend", "-b"), f"{path}: {name} (use --run / --sandbox)"
                if name == "--seed":
                    assert path == ("recreate", "evolve"), f"{path}: the random seed is --random-seed"
                if name in COUNTS:
                    assert "count" in param.help or "runs per" in param.help.lower(), (path, name)
                if "seed" in name:
                    assert name in COUNTS | {"--seed", "--random-seed"}, (path, name)


def test_every_float_option_refuses_nan_and_inf():
    """nan passes a range check (each comparison with it is false): --min-improvement nan rejected every
    candidate, --max-wall-s nan never stopped a run."""
    found = [
        (cmd, p)
        for _, cmd in leaves()
        for p in options(cmd)
        if getattr(getattr(p, "type_descriptor", None), "annotation", None) is float
    ]
    assert {p.opts[0] for _, p in found} >= {"--min-improvement", "--max-wall-s", "--lr", "--timeout"}
    for cmd, param in found:
        for value in ("nan", "inf", "-inf"):
            with pytest.raises(typer.BadParameter):
                param.process_value(typer.Context(cmd), value)
    done = run("evolve", "--seed", "s", "--domain", "math", "--data", "d", "--min-improvement", "nan")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "'--min-improvement': nan is not a finite number" in done.stderr


def test_every_sandbox_option_refuses_an_unknown_backend_before_anything_runs():
    """`evolve --dry-run --sandbox nonsense` printed a plan and exited 0."""
    found = [(cmd, p) for _, cmd in leaves() for p in options(cmd) if "--sandbox" in p.opts]
    assert len(found) >= 4
    for cmd, param in found:
        with pytest.raises(typer.BadParameter, match="unknown sandbox backend 'nonsense'; one of bwrap"):
            param.process_value(typer.Context(cmd), "nonsense")
        assert param.process_value(typer.Context(cmd), "local") == "local"
    done = run("evolve", "--seed", "s", "--domain", "math", "--data", "d", "--dry-run", "--sandbox", "bad")
    assert done.returncode == 2 and "'--sandbox': unknown sandbox backend 'bad'" in done.stderr


@pytest.mark.parametrize(
    ("path", "refused", "accepted"),
    [
        (("recreate", "ui"), ["0", "-1", "65536", "99999"], ["1", "65535"]),
        (("recreate", "model", "serve"), ["-1", "65536"], ["0", "65535"]),  # 0 (or none): a free port
        (("tapo", "serve"), ["0", "70000"], ["8000"]),
    ],
)
def test_a_port_is_one_the_system_can_bind(path, refused, accepted):
    """--port 99999 was taken, printed as given, and bound modulo 65536."""
    cmd = dict(leaves())[path]
    [port] = [p for p in options(cmd) if "--port" in p.opts]
    for value in refused:
        with pytest.raises(typer.BadParameter):
            port.process_value(typer.Context(cmd), value)
    for value in accepted:
        assert port.process_value(typer.Context(cmd), value) == int(value)


def test_a_dotenv_line_nobody_can_parse_is_said_once(tmp_path):
    """Every library settings class that reads .env said it again: 7 lines a command."""
    (tmp_path / ".env").write_text('GOOD=1\nthis is not = = valid "\n')
    done = run("experience", "ls", "--home", str(tmp_path / "home"), cwd=tmp_path)
    assert done.stderr.count("python-dotenv could not parse statement starting at line 2") == 1, done.stderr


def test_old_spellings_still_work_with_a_notice():
    done = run("sandbox", "run", "--backend", "bwrap", "--", "echo", "hi")
    assert done.returncode == 0 and done.stdout == "hi\n"
    assert "--backend is deprecated; use --sandbox" in done.stderr
    both = run("domain", "build", "repo", "--from", "x==1", "--seed", "3", "--random-seed", "4")
    assert both.returncode == 2 and "given twice" in both.stderr and "Traceback" not in both.stderr


def test_json_output_is_the_only_stdout(tmp_path):
    home = tmp_path / "home"
    minimal = str(REPO / "scaffolds" / "minimal")
    for args in (
        ("domain", "list"),
        ("sandbox", "status"),
        ("experience", "ls", "--home", str(home)),
        ("scaffold", "show", minimal),
        ("model", "status", "--home", str(home)),
        ("doctor", "--home", str(home)),
    ):
        done = run(*args, "--json")
        assert done.returncode in (0, 1), done.stderr
        json.loads(done.stdout)  # nothing but the document


def test_evolve_dry_run_json_prices_the_local_fallback_at_zero(tmp_path):
    env = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "RECREATE_MODEL": ""}
    done = run(
        "evolve", "--seed", str(REPO / "scaffolds" / "minimal"), "--domain", "math",
        "--data", str(REPO / "examples" / "arithmetic"), "--dry-run", "--json", "--home", str(tmp_path),
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)["plan"]
    assert {row["role"] for row in plan} == {"agent", "optimizer", "synthesis"}
    assert all(row["usd"] == 0.0 for row in plan)


def test_flags_after_the_subcommand(tmp_path):
    quiet = run("sandbox", "status", "--quiet")
    assert quiet.stdout == ""
    missing = str(tmp_path / "nope")
    plain = run("scaffold", "show", missing)
    debug = run("scaffold", "show", missing, "--debug")
    assert plain.returncode == 2 and plain.stderr.startswith("error: ") and "Traceback" not in plain.stderr
    assert "Traceback" in debug.stderr
    assert run("domain", "list", "--verbose").returncode == 0


def test_home_reaches_what_reads_the_home_itself(tmp_path):
    """--home is RECREATE_HOME for the whole command: the scaffold store under it is the one used."""
    a, b = tmp_path / "a", tmp_path / "b"
    assert run("scaffold", "commit", str(REPO / "scaffolds" / "minimal"), "--home", str(a)).returncode == 0
    versions = json.loads(run("scaffold", "log", "minimal", "--home", str(a), "--json").stdout)
    assert [v["version"] for v in versions] == [1]
    assert (a / "scaffolds").is_dir() and not b.exists()
    assert json.loads(run("scaffold", "log", "minimal", "--home", str(b), "--json").stdout) == []
