"""Fixtures of the repo domain tests (the bwrap sandbox and open_tmp come from ../conftest.py)."""

from tests.domains.repo.helpers import repo_envs, tiny_dataset  # noqa: F401 - fixtures
from tests.podman import docker_host  # noqa: F401 - the docker test
