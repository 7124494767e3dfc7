"""A small LangGraph app with an optimized domain agent as one of its nodes.

    router ──► chat    (plain questions: the model answers directly)
           └─► agent   (work that needs commands: the scaffold's domain agent, in a sandbox)

The conversation holds the user's messages and the answers only: the agent adds one AIMessage (named
after its scaffold), its prompts and steps stay in its trajectory, so the chat model and the router see
a plain conversation on every turn.

Run it:  python examples/langgraph_app/app.py "Compute the 20th Fibonacci number" \
             --scaffold scaffolds/minimal --model openai:gpt-4.1-mini
         (--model defaults to RECREATE_MODEL, or `model` in recreate.toml; a problem is one line on stderr,
         exit code 2; --debug shows its traceback)
Serve it: langgraph dev --port 8123
          (graph "router_app" in langgraph.json; set RECREATE_MODEL, optionally RECREATE_SCAFFOLD, or
          pass scaffold/model/sandbox as the run's context)
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path
from typing import Literal, NotRequired

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import SystemMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from recreate import create_domain_agent
from recreate.agent import AgentContext, resolve_model
from recreate.agent.server import server_factory
from recreate.config import load_settings
from recreate.errors import one_line

ROUTER_PROMPT = (
    "Classify the user's last request. Answer with one word: `agent` if it needs running code or shell "
    "commands to answer, `chat` if you can answer it directly."
)
SEED = Path(__file__).resolve().parents[2] / "scaffolds" / "minimal"
NO_MODEL = "no model: pass --model PROVIDER:MODEL (e.g. openai:gpt-4.1-mini) or set RECREATE_MODEL"


class AppState(MessagesState):
    route: NotRequired[str]


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

    def pick(state: AppState) -> Literal["agent", "chat"]:
        return "agent" if state["route"] == "agent" else "chat"

    # callers send and get a conversation; the route stays inside; the settings are the server's context
    graph = StateGraph(
        AppState, context_schema=AgentContext, input_schema=MessagesState, output_schema=MessagesState
    )
    graph.add_node("router", router)
    graph.add_node("chat", chat)
    graph.add_node("agent", agent)
    graph.add_edge(START, "router")
    graph.add_conditional_edges("router", pick, ["agent", "chat"])
    graph.add_edge("agent", END)
    graph.add_edge("chat", END)
    return graph.compile(checkpointer=checkpointer, name="router_app")


# Factory for langgraph.json: the server supplies the checkpointer, and the run's context the settings.
make_app = server_factory(lambda scaffold, model, sandbox: build_app(scaffold, model, sandbox=sandbox))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("request")
    parser.add_argument("--scaffold", default=str(SEED))
    parser.add_argument("--model", help="PROVIDER:MODEL (default: RECREATE_MODEL)")
    parser.add_argument("--sandbox", default="bwrap")
    parser.add_argument("--thread", default="demo", help="conversation id (kept in app.sqlite)")
    parser.add_argument("--debug", action="store_true", help="show a problem's traceback")
    args = parser.parse_args()
    try:
        print(answer(args))
    except Exception as exc:  # what the user fixes (model, scaffold, sandbox, endpoint): one line
        if args.debug:
            raise
        print(f"error: {one_line(exc)}", file=sys.stderr)
        sys.exit(2)


def answer(args: argparse.Namespace) -> str:
    model = args.model or load_settings().model
    if not model:
        raise ValueError(NO_MODEL)  # before anything is built or written
    from langgraph.checkpoint.sqlite import SqliteSaver

    with sqlite3.connect("app.sqlite", check_same_thread=False) as conn:
        app = build_app(args.scaffold, model, sandbox=args.sandbox, checkpointer=SqliteSaver(conn))
        out = app.invoke({"messages": [("user", args.request)]}, {"configurable": {"thread_id": args.thread}})
    return out["messages"][-1].content


if __name__ == "__main__":
    main()
