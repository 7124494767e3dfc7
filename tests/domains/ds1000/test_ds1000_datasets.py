"""DS-1000 problems whose tests download example data (seaborn's `load_dataset`, scikit-learn's
`fetch_*`, URLs): evaluation sandboxes have no network, so each such test failed before any solution was
judged, on every run (an evaluator error, rerun forever; enough in a row halted the run). Now the run is
refused at start naming what to put where and which tasks to leave out, and seaborn's datasets come from
a folder, each needed file bound alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from recreate.domains.ds1000.datasets import MOUNT, needed_downloads
from recreate.evaluation.cache import settings_fingerprint
from tests.domains.ds1000.problems import TEST_EXECUTION, ds1000_domain, task_of

CONTEXT = '''
import pandas as pd
import seaborn as sns


def generate_test_case(test_case_id):
    tips = sns.load_dataset("tips")
    return None, tips["tip"].max()


def exec_test(result, ans):
    assert result == ans
    return 1


exec_context = r"""
import seaborn as sns
tips = sns.load_dataset("tips")
[insert]
"""
'''
TIPS = """total_bill,tip,sex,smoker,day,time,size
16.99,1.01,Female,No,Sun,Dinner,2
10.34,1.66,Male,No,Sun,Dinner,3
21.01,3.5,Male,No,Sat,Dinner,3
"""


def rows() -> list[dict]:
    metadata = {"problem_id": 1, "library": "Seaborn", "perturbation_origin_id": 1}
    tips = {"prompt": "the largest tip", "reference_code": 'result = tips["tip"].max()', "metadata": metadata}
    tips["code_context"] = CONTEXT + TEST_EXECUTION
    fetching = {**tips, "metadata": {**metadata, "problem_id": 2, "perturbation_origin_id": 2}}
    fetching["code_context"] = (
        tips["code_context"]
        .replace("import pandas as pd", "import pandas as pd\nfrom sklearn.datasets import fetch_covtype")
        .replace('sns.load_dataset("tips")', "fetch_covtype(as_frame=True).frame")
    )
    return [tips, fetching]


def datasets_folder(root: Path) -> Path:
    (root / "seaborn-data").mkdir(parents=True)
    (root / "seaborn-data" / "tips.csv").write_text(TIPS)
    return root


@pytest.mark.parametrize(
    ("code", "seaborn", "other"),
    [
        ('import seaborn as sns\nsns.load_dataset("tips")', {"tips"}, set()),
        ('from seaborn import load_dataset as ld\nx = ld(\n    "iris",\n)', {"iris"}, set()),
        ('import seaborn\nseaborn.load_dataset(name="penguins", cache=True)', {"penguins"}, set()),
        ("import seaborn as sns\nsns.load_dataset(which)", set(), {"seaborn's load_dataset(...)"}),
        (
            'import seaborn as sns\nsns.load_dataset("tips", cache=False)',
            set(),
            {"seaborn's load_dataset(...)"},
        ),
        (
            "from sklearn.datasets import fetch_california_housing as f\nf()",
            set(),
            {"fetch_california_housing()"},
        ),
        ("import sklearn.datasets as d\nd.fetch_openml(name='x')", set(), {"fetch_openml()"}),
        (
            'import pandas as pd\npd.read_csv("https://example.org/a.csv")',
            set(),
            {"https://example.org/a.csv"},
        ),
        (
            "import tensorflow as tf\ntf.keras.datasets.mnist.load_data()",
            set(),
            {"tensorflow.keras.datasets.mnist.load_data()"},
        ),
        (
            'exec_context = r"""\nimport seaborn as sns\nt = sns.load_dataset("planets")\n[insert]\n"""',
            {"planets"},
            set(),
        ),
        ('# sns.load_dataset("tips")\nx = "fetch_all()"', set(), set()),
        ("def fetch_data():\n    return 1\nfetch_data()", set(), set()),
        ('from datasets import load_dataset\nload_dataset("imdb")', set(), set()),  # not seaborn's
        ('import seaborn as sns\nsns.load_dataset("../../x")', set(), {"seaborn's load_dataset(...)"}),
    ],
)
def test_what_a_test_downloads_is_read_from_its_calls(code, seaborn, other):
    assert needed_downloads(code) == (frozenset(seaborn), frozenset(other))


def test_a_run_needing_what_no_folder_has_is_refused_naming_files_and_tasks(ds1000_env, tmp_path):
    domain = next(ds1000_domain(rows(), ds1000_env, tmp_path, datasets=tmp_path / "none"))
    why = domain.environment_problem()
    assert why.startswith("evaluation sandboxes have no network; the task loads seaborn's example data: put ")
    assert (
        f"put tips.csv (from github.com/mwaskom/seaborn-data) in {tmp_path / 'none' / 'seaborn-data'}" in why
    )
    assert "; ds1000-2 downloads (fetch_covtype()), which no folder serves: leave it out of the data" in why
    assert "\n" not in why
    verdict = domain.evaluate(task_of(domain, 1), 'result = tips["tip"].max()', sandbox=None)
    assert verdict.score == 0 and "tips.csv" in verdict.details["error"]  # an error, before any sandbox


def test_a_file_that_is_the_tasks_file_is_never_bound(ds1000_env, tmp_path):
    folder = tmp_path / "datasets"
    (folder / "seaborn-data").mkdir(parents=True)
    (folder / "seaborn-data" / "tips.csv").symlink_to(tmp_path / "tasks.jsonl")  # the answers, renamed
    domain = next(ds1000_domain(rows()[:1], ds1000_env, tmp_path, datasets=folder))
    assert "put tips.csv" in domain.environment_problem()
    assert not any(target.startswith(MOUNT) for _, target in domain.agent_spec().ro_binds)


@pytest.mark.bwrap
def test_with_the_datasets_folder_the_test_runs_offline_and_sees_nothing_else(ds1000_env, bwrap, tmp_path):
    folder = datasets_folder(tmp_path)  # private to root (a copy is bound), and the tasks file is in it
    for domain in ds1000_domain(rows()[:1], ds1000_env, tmp_path, datasets=folder):
        assert domain.environment_problem() is None
        task = task_of(domain, 1)
        passed = domain.evaluate(task, task.reference, bwrap)
        assert passed.passed, passed.feedback
        wrong = domain.evaluate(task, 'result = tips["tip"].min()', bwrap)
        assert not wrong.passed and "error" not in wrong.details, wrong.feedback
        looks = f'import os\nassert os.listdir("{MOUNT}") == ["tips.csv"]\nresult = tips["tip"].max()'
        assert domain.evaluate(task, looks, bwrap).passed  # not the tasks file, nor the rest of the folder
        spec = domain.agent_spec()  # the agent runs the problem's code as it is judged
        assert [target for _, target in spec.ro_binds if target.startswith(MOUNT)] == [f"{MOUNT}/tips.csv"]
        assert spec.env["SEABORN_DATA"] == MOUNT


def test_another_copy_of_a_dataset_is_another_cache_key(ds1000_env, tmp_path):
    folder = datasets_folder(tmp_path / "datasets")
    tips = folder / "seaborn-data" / "tips.csv"

    def digest() -> str:
        return settings_fingerprint(next(ds1000_domain(rows()[:1], ds1000_env, tmp_path, datasets=folder)))[
            "datasets_digest"
        ]

    before = digest()
    (folder / "seaborn-data" / "planets.csv").write_text("method,number\n")  # no task loads it
    assert digest() == before
    stat = tips.stat()
    tips.write_text(TIPS.replace("1.01", "9.01"))  # same size, and the time set back: the content decides
    os.utime(tips, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert digest() != before
