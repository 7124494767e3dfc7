"""A small LangGraph app with an optimized domain agent as one of its nodes.

    router ──► chat    (plain questions: the model answers directly)
           └─► agent   (work that needs commands: the scaffold's domain agent, in a sandbox)

Run it:  python examples/langgraph_app/app.py "Compute the 20th Fibonacci number" \
             --scaffold scaffolds/minimal --model openai:gpt-4.1-mini
Serve it: langgraph dev --port 8123
          (graph "router_app" in langgraph.json; set RECREATE_MODEL, optionally RECREATE_SCAFFOLD)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Literal, NotRequired

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from recreate import create_domain_agent
from recreate.agent import resolve_model

ROUTER_PROMPT = (
    "Classify the user's last request. Answer with one word: `agent` if it needs running code or shell "
    "commands to answer, `chat` if you can answer it directly."
)
SEED = Path(__file__).resolve().parents[2] / "scaffolds" / "minimal"


class AppState(MessagesState):
    route: NotRequired[str]
    submission: NotRequired[str | None]  # shared with the domain agent's state: its answer


def build_app(
    scaffold: str | Path, model: str | BaseChatModel, *, sandbox: str = "bwrap", checkpointer=None
) -> CompiledStateGraph:
    chat_model, _ = resolve_model(model)
    agent = create_domain_agent(scaffold, model=chat_model, sandbox=sandbox, name="domain_agent")

    def router(state: AppState) -> dict:
        verdict = chat_model.invoke([SystemMessage(ROUTER_PROMPT), state["messages"][-1]]).text.lower()
        return {"route": "agent" if "agent" in verdict else "chat"}

    def chat(state: AppState) -> dict:
        return {"messages": [chat_model.invoke(state["messages"])]}

    def answer(state: AppState) -> dict:
        """The agent's submission becomes the app's reply."""
        return {"messages": [AIMessage(state.get("submission") or "The agent stopped without an answer.")]}

    def pick(state: AppState) -> Literal["agent", "chat"]:
        return "agent" if state["route"] == "agent" else "chat"

    graph = StateGraph(AppState)
    graph.add_node("router", router)
    graph.add_node("chat", chat)
    graph.add_node("agent", agent)
    graph.add_node("answer", answer)
    graph.add_edge(START, "router")
    graph.add_conditional_edges("router", pick, ["agent", "chat"])
    graph.add_edge("agent", "answer")
    graph.add_edge("answer", END)
    graph.add_edge("chat", END)
    return graph.compile(checkpointer=checkpointer, name="router_app")


async def make_app(config: RunnableConfig) -> CompiledStateGraph:
    """Factory for langgraph.json: the server supplies the checkpointer. It calls factories on its event
    loop, and building the agent reads files (blocking calls), so that happens in a worker thread."""
    return await asyncio.to_thread(app_from_config, config)


def app_from_config(config: RunnableConfig) -> CompiledStateGraph:
    configurable = (config or {}).get("configurable") or {}
    scaffold = configurable.get("scaffold") or os.environ.get("RECREATE_SCAFFOLD") or str(SEED)
    model = configurable.get("model") or os.environ.get("RECREATE_MODEL")
    if not model:
        raise ValueError("set RECREATE_MODEL or pass configurable.model")
    return build_app(scaffold, model, sandbox=os.environ.get("RECREATE_SANDBOX", "bwrap"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("request")
    parser.add_argument("--scaffold", default=str(SEED))
    parser.add_argument("--model", default=os.environ.get("RECREATE_MODEL"))
    parser.add_argument("--sandbox", default="bwrap")
    parser.add_argument("--thread", default="demo", help="conversation id (kept in app.sqlite)")
    args = parser.parse_args()
    from langgraph.checkpoint.sqlite import SqliteSaver

    with sqlite3.connect("app.sqlite", check_same_thread=False) as conn:
        app = build_app(args.scaffold, args.model, sandbox=args.sandbox, checkpointer=SqliteSaver(conn))
        out = app.invoke({"messages": [("user", args.request)]}, {"configurable": {"thread_id": args.thread}})
        print(out["messages"][-1].content)


if __name__ == "__main__":
    main()
