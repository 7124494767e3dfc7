"""The domain-agent runtime: a LangGraph graph built from a Scaffold, with a trajectory recorder."""

from recreate.agent.factory import build_domain_agent, create_domain_agent, resolve_model
from recreate.agent.graph import DomainAgent
from recreate.agent.middleware import ScaffoldMiddleware
from recreate.agent.recorder import recover_trajectory
from recreate.agent.state import AgentContext, AgentInput, AgentOutput, AgentState

__all__ = [
    "AgentContext",
    "AgentInput",
    "AgentOutput",
    "AgentState",
    "DomainAgent",
    "ScaffoldMiddleware",
    "build_domain_agent",
    "create_domain_agent",
    "recover_trajectory",
    "resolve_model",
]
