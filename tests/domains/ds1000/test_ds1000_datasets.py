"""DS-1000 problems whose tests download example data (seaborn's `load_dataset`, scikit-learn's
`fetch_*`): evaluation sandboxes have no network, so each such test failed before any solution was
judged, on every run (an evaluator error, rerun forever, and enough in a row halted the run). Now the
run is refused at start naming what to put where, and a datasets folder makes them run offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from recreate.domains.ds1000.datasets import MOUNT, needed_datasets
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
    plain = {**tips, "metadata": {**metadata, "problem_id": 2, "perturbation_origin_id": 2}}
    plain["code_context"] = plain["code_context"].replace(
        'sns.load_dataset("tips")', "pd.read_csv('tips.csv')"
    )
    return [tips, plain]


def datasets_folder(root: Path) -> Path:
    (root / "seaborn-data").mkdir(parents=True)
    (root / "seaborn-data" / "tips.csv").write_text(TIPS)
    return root


def test_what_a_test_downloads_is_read_from_its_calls():
    code = "sns.load_dataset(\"tips\")\ndf = sns.load_dataset(name='iris')\nsns.load_dataset(which)\n"
    code += "from sklearn.datasets import fetch_openml\nX = fetch_california_housing(as_frame=True)\n"
    assert needed_datasets(code) == {
        "seaborn-data/tips.csv",
        "seaborn-data/iris.csv",
        "fetch_california_housing",
    }
    assert needed_datasets("my_load_dataset('x'); prefetch_all()") == set()


def test_a_run_needing_data_the_folder_lacks_is_refused_naming_the_files(ds1000_env, tmp_path):
    domain = next(ds1000_domain(rows(), ds1000_env, tmp_path, datasets=tmp_path / "none"))
    why = domain.environment_problem()
    assert why.startswith(
        "the task downloads example data (seaborn-data/tips.csv), and evaluation sandboxes "
    )
    assert f"put {tmp_path / 'none'}/seaborn-data/tips.csv (seaborn's CSVs are in github.com/mwaskom" in why
    assert "or pass datasets=DIR (-o datasets=DIR), or leave those tasks out" in why and "\n" not in why
    verdict = domain.evaluate(task_of(domain, 1), 'result = tips["tip"].max()', sandbox=None)
    assert verdict.score == 0 and verdict.details["error"] == why  # an error before any sandbox, not a zero


def test_a_fetcher_needs_the_scikit_learn_cache_folder(ds1000_env, tmp_path):
    fetching = rows()[1]
    fetching["code_context"] = fetching["code_context"].replace("import pandas as pd", "import pandas as pd\n"
                                                                "from sklearn.datasets import fetch_covtype\n"
                                                                "X = fetch_covtype()")  # fmt: skip
    domain = next(ds1000_domain([fetching], ds1000_env, tmp_path, datasets=tmp_path / "data"))
    assert "(fetch_covtype)" in domain.environment_problem()
    assert "/data/scikit_learn_data (as fetch_covtype() leaves it online)" in domain.environment_problem()
    (tmp_path / "data" / "scikit_learn_data").mkdir(parents=True)
    domain = next(ds1000_domain([fetching], ds1000_env, tmp_path, datasets=tmp_path / "data"))
    assert domain.environment_problem() is None


@pytest.mark.bwrap
def test_with_the_datasets_folder_the_test_runs_offline(ds1000_env, bwrap, tmp_path):
    folder = datasets_folder(tmp_path / "datasets")  # private to root: the sandbox reads a shared copy
    for domain in ds1000_domain(rows(), ds1000_env, tmp_path, datasets=folder):
        assert domain.environment_problem() is None
        task = task_of(domain, 1)
        passed = domain.evaluate(task, task.reference, bwrap)
        assert passed.passed, passed.feedback
        wrong = domain.evaluate(task, 'result = tips["tip"].min()', bwrap)
        assert not wrong.passed and "error" not in wrong.details, wrong.feedback
        spec = domain.agent_spec()  # the agent runs the problem's code as it is judged
        assert any(target == MOUNT for _, target in spec.ro_binds)
        assert spec.env["SEABORN_DATA"] == f"{MOUNT}/seaborn-data"


def test_another_copy_of_a_dataset_is_another_cache_key(ds1000_env, tmp_path):
    folder = datasets_folder(tmp_path / "datasets")
    before = settings_fingerprint(next(ds1000_domain(rows(), ds1000_env, tmp_path, datasets=folder)))
    (folder / "seaborn-data" / "planets.csv").write_text("method,number\n")  # no task loads it
    unused = settings_fingerprint(next(ds1000_domain(rows(), ds1000_env, tmp_path, datasets=folder)))
    assert unused["datasets_digest"] == before["datasets_digest"]
    (folder / "seaborn-data" / "tips.csv").write_text(TIPS + "5.0,9.0,Male,Yes,Fri,Lunch,1\n")
    after = settings_fingerprint(next(ds1000_domain(rows(), ds1000_env, tmp_path, datasets=folder)))
    assert before["datasets_digest"] != after["datasets_digest"]
