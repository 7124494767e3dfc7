"""Round-trip properties of the DS-1000 result codec, run where the codec runs: in the pinned DS-1000
environment, with this project's Hypothesis (and only it) put on that interpreter's path."""

import importlib.metadata
import os
import subprocess
from pathlib import Path

from recreate.domains.ds1000.env import MPL_CACHE, env_python
from recreate.domains.ds1000.judge import CHECKS_DIR

PROPERTIES = Path(__file__).with_name("ds1000_codec_properties.py")


def _link_distributions(folder: Path, names: tuple[str, ...]) -> None:
    """Link the top-level modules of these installed distributions into `folder`."""
    for name in names:
        distribution = importlib.metadata.distribution(name)
        tops = {Path(f).parts[0] for f in distribution.files or () if not str(f).startswith("..")}
        for top in tops - {"__pycache__"}:
            if not top.endswith(".dist-info"):
                (folder / top).symlink_to(distribution.locate_file(top))


def test_codec_round_trips_every_kind(ds1000_env, tmp_path):
    _link_distributions(tmp_path, ("hypothesis", "sortedcontainers"))
    done = subprocess.run(
        [str(env_python(ds1000_env)), str(PROPERTIES)],
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": f"{CHECKS_DIR}{os.pathsep}{tmp_path}",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": str(ds1000_env / MPL_CACHE),
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
