"""Runs INSIDE the solution's own DS-1000 sandbox: run the solution on each test input, send back data.

Reads `cases.pkl` (written by the checker: the code of each test case, the solution inserted, and its
input namespace). Each case runs in a fresh namespace, as the problem's own test harness would run it,
in the working folder `work/`. Writes `results.json` + `results.npz` (ds1000_data: no code on load):
per case the value of `result` (or that there was none), the exception the code raised, and for plot
problems a summary of the figure (or why it could not be summarized) and the bytes of `output.png`.
Nothing here decides a verdict.
"""

import os
import pickle
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
import ds1000_data  # noqa: E402
import ds1000_figure  # noqa: E402

MAX_IMAGE_BYTES = 8 * 1024 * 1024


def run_case(code, namespace):
    outcome = {"result": None, "has_result": False, "error": None, "figure": None, "image": None}
    try:
        exec(code, namespace)
    except BaseException as exc:  # the solution may raise anything, SystemExit included
        outcome["error"] = {
            "exception": type(exc).__name__,
            "message": str(exc)[:1000],
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next))[
                -1500:
            ],
        }
    if "result" in namespace:
        outcome["result"], outcome["has_result"] = namespace["result"], True
    if "matplotlib.pyplot" in sys.modules:
        try:
            outcome["figure"] = ds1000_figure.summarize()
        except Exception as exc:  # a figure the summary cannot hold: the case fails, saying so
            outcome["figure_error"] = f"{type(exc).__name__}: {exc}"[:500]
        sys.modules["matplotlib.pyplot"].close("all")
    image = Path("output.png")
    if image.is_file() and image.stat().st_size <= MAX_IMAGE_BYTES:
        outcome["image"] = image.read_bytes()
        image.unlink()
    return outcome


def main():
    cases = pickle.loads(Path("cases.pkl").read_bytes())  # from the checker, never from the solution
    os.makedirs("work", exist_ok=True)
    os.chdir("work")
    outcomes = [run_case(code, namespace) for code, namespace in cases]
    try:
        text, arrays = ds1000_data.dumps(outcomes)
    except BaseException as exc:  # e.g. a result too deep to send
        text, arrays = ds1000_data.dumps({"unsendable": f"{type(exc).__name__}: {exc}"[:500]})
    try:
        Path("../results.npz").write_bytes(arrays)
        Path("../results.json").write_text(text)
    except OSError as exc:  # past the size a sandbox lets a file grow to (Python ignores SIGXFSZ)
        size = (len(arrays) + len(text)) / 2**20
        reason = f"results of {size:.0f} MB (all test cases) are too large to send: {exc}"
        text, arrays = ds1000_data.dumps({"unsendable": reason[:500]})
        Path("../results.npz").write_bytes(arrays)
        Path("../results.json").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
