"""The domain-agent runtime: a LangGraph graph built from a Scaffold, with a trajectory recorder."""

from recreate.agent.factory import build_domain_agent, create_domain_agent, resolve_model
from recreate.agent.graph import AgentContext, AgentState, DomainAgent
from recreate.agent.middleware import ScaffoldMiddleware
from recreate.agent.recorder import recover_trajectory

__all__ = [
    "AgentContext",
    "AgentState",
    "DomainAgent",
    "ScaffoldMiddleware",
    "build_domain_agent",
    "create_domain_agent",
    "recover_trajectory",
    "resolve_model",
]
