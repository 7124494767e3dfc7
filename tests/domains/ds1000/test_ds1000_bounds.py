"""What a plot solution sends is bounded before the checker works on it: the solution runs in the process
that summarizes its figure, so it can send any summary the codec carries, and any output.png. Too many
ticks, a figure of 10^10 pixels or an image that decodes to gigabytes fail the case in seconds; the
same plot at a real size passes."""

import json
import time

import pytest

from recreate.domains import get_domain

PLOT_CONTEXT = '''
import numpy as np
import matplotlib.pyplot as plt
from PIL import Image

def generate_test_case(test_case_id):
    return None, None

def exec_test(result, ans):
    image = np.array(Image.open("output.png"))
    assert image.shape[0] > 10
    assert [line.get_color() for line in plt.gca().get_lines()] == ["red"]
    return 1

exec_context = r"""
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
[insert]
plt.savefig("output.png")
result = None
"""

def test_execution(solution: str):
    code = exec_context.replace("[insert]", solution)
    test_input, expected_result = generate_test_case(1)
    test_env = {"test_input": test_input}
    exec(code, test_env)
    assert exec_test(test_env["result"], expected_result)
'''
PLOT = 'plt.plot([1, 2], color="red")\n'
# the solution's own process sends the summary: it may replace the function that makes it
FORGE = "import sys\nfigure = sys.modules['ds1000_figure']\nreal = figure.summarize\n"


@pytest.fixture(scope="module")
def plot_domain(ds1000_env, tmp_path_factory):
    path = tmp_path_factory.mktemp("plot") / "plot.jsonl"
    row = {
        "prompt": "plot a red line",
        "reference_code": PLOT,
        "metadata": {"problem_id": 1, "library": "Matplotlib", "perturbation_origin_id": 1},
        "code_context": PLOT_CONTEXT,
    }
    path.write_text(json.dumps(row) + "\n")
    domain = get_domain("ds1000", data=path, env=ds1000_env, timeout=60)
    yield domain
    domain.close()


def _judge(domain, sandbox, solution):
    started = time.monotonic()
    evaluation = domain.evaluate(domain.tasks()[0], solution, sandbox)
    return evaluation, time.monotonic() - started


@pytest.mark.bwrap
def test_the_plot_at_a_real_size_passes(plot_domain, bwrap):
    evaluation, _ = _judge(plot_domain, bwrap, PLOT)
    assert evaluation.passed, evaluation.feedback


@pytest.mark.bwrap
@pytest.mark.parametrize(
    ("forged", "says"),
    [
        (
            "def summarize():\n    s = real()\n"
            "    s['axes'][0]['ticks']['x_major']['locs'] = list(range(30000))\n    return s\n",
            "more ticks than a figure can show",
        ),
        (
            "import numpy as np\ndef summarize():\n    s = real()\n"
            "    s['axes'][0]['ticks']['y_minor'].update(locs=np.arange(3000.0))\n    return s\n",
            "more ticks than a figure can show",
        ),
        ("def summarize():\n    return {**real(), 'size': (1e5, 1e5)}\n", "a figure too large to rebuild"),
        (
            "def summarize():\n    s = real()\n    s['texts'] = [{'text': 'x'}] * 10**6\n    return s\n",
            "a figure too large to rebuild",
        ),
    ],
    ids=["30000 ticks", "3000 minor ticks as an array", "10^10 pixels", "a million texts"],
)
def test_a_forged_summary_too_large_to_rebuild_fails_in_seconds(plot_domain, bwrap, forged, says):
    evaluation, seconds = _judge(plot_domain, bwrap, PLOT + FORGE + forged + "figure.summarize = summarize\n")
    assert not evaluation.passed and says in evaluation.feedback, evaluation.feedback
    assert seconds < 30


@pytest.mark.bwrap
def test_an_output_png_that_decodes_to_gigabytes_fails_the_case(plot_domain, bwrap):
    bomb = (
        "import sys\nfrom PIL import Image\nsave = plt.savefig\n"
        "def savefig(*args, **kwargs):\n    Image.new('L', (6000, 6000)).save('output.png')\n"
        "plt.savefig = savefig\n"
    )
    evaluation, seconds = _judge(plot_domain, bwrap, PLOT + bomb)
    assert not evaluation.passed and "DecompressionBomb" in evaluation.feedback, evaluation.feedback
    assert seconds < 30
