"""`create_domain_agent(..., model="local")` from Python: the embedded model served for a with-block
(the real llama.cpp engine and model), and stopped after it."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.graph.state import CompiledStateGraph

from recreate import create_domain_agent
from recreate.errors import ArgumentError
from recreate.local.server import is_alive, running_servers
from recreate.scaffold import load_scaffold
from tests.agent.conftest import MINIMAL


def test_the_embedded_model_serves_the_agent_for_the_block_and_stops_after(
    local_extra, recreate_home: Path, bwrap
) -> None:
    seed = load_scaffold(MINIMAL)
    one_step = seed.model_copy(update={"limits": seed.limits.model_copy(update={"max_steps": 1})})
    served = create_domain_agent(one_step, model="local", sandbox=bwrap, max_tokens=24)
    with pytest.raises(AttributeError, match="with create_domain_agent"):
        served.invoke({"task": "outside the block"})  # a clear hint, not a server left running
    assert not running_servers(recreate_home)

    with served as agent:
        pid = served.server.pid
        assert isinstance(agent, CompiledStateGraph) and is_alive(pid)
        out = agent.invoke({"task": "Reply with the word: Alpha"})
        assert out["exit_status"]  # the run ended on the served model (within its one step)
        assert running_servers(recreate_home)[0].pid == pid
    assert not is_alive(pid) and not running_servers(recreate_home)
    assert served.server is None


@pytest.mark.parametrize("spec", ["local:/no/such/model.gguf", "local:/tmp"])
def test_local_weights_that_cannot_be_served_are_refused_naming_the_argument(spec: str) -> None:
    with pytest.raises(ArgumentError) as caught:
        create_domain_agent(MINIMAL, model=spec)
    assert "model='local:PATH'" in str(caught.value) and "--model local:PATH" in caught.value.for_cli()
