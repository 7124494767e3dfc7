"""The domain-agent runtime: a LangGraph graph built from a Scaffold, with a trajectory recorder."""

from recreate.agent.factory import build_domain_agent, create_domain_agent, resolve_model
from recreate.agent.graph import AgentContext, AgentState, DomainAgent

__all__ = [
    "AgentContext",
    "AgentState",
    "DomainAgent",
    "build_domain_agent",
    "create_domain_agent",
    "resolve_model",
]
