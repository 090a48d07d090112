"""A research assistant: a tool that thinks with the client's own model (sampling).

    mrtr call research question='Why is ice slick?' -- python examples/research_assistant/server.py

`research` asks the model to split a question into sub-questions, asks it each of them (all in
one round), and asks it once more to write the answer from those notes. The server has no model
and no API key: every completion is the client's, so its user sees and approves what is sent.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from pydantic import Field

from mrtr import CreateMessageResult, RequestContext, Server, TextContent, ToolError

server = Server(
    "research-assistant",
    version="1.0.0",
    instructions="Answers research questions by reasoning with the client's model.",
)

MAX_SUBQUESTIONS = 4


def text_of(result: CreateMessageResult) -> str:
    """The text of a completion, or a ToolError when the model answered with something else."""
    if not isinstance(result.content, TextContent):
        raise ToolError("the model answered without text; try another model")
    return result.content.text.strip()


@server.tool()
async def research(
    ctx: RequestContext,
    question: Annotated[str, Field(description="what to find out")],
    depth: Annotated[int, Field(ge=1, le=MAX_SUBQUESTIONS, description="sub-questions")] = 3,
) -> str:
    """Research a question with the client's model: plan, investigate, then write it up."""
    plan = await ctx.sample(
        f"Split this question into at most {depth} short sub-questions, one per line, "
        f"nothing else:\n{question}",
        max_tokens=200,
        system_prompt="You plan research. Reply with questions only.",
        key="plan",
    )
    subquestions = [line.strip("-• ").strip() for line in text_of(plan).splitlines()]
    subquestions = [line for line in subquestions if line][:depth]
    if not subquestions:
        raise ToolError("the model proposed no sub-questions; ask a more specific question")
    await ctx.report_progress(1, 3, "planned")
    # Asked together, so they go to the client in one round; each key names its sub-question.
    notes = await asyncio.gather(
        *(
            ctx.sample(sub, max_tokens=300, key=f"note-{number}")
            for number, sub in enumerate(subquestions, 1)
        )
    )
    await ctx.report_progress(2, 3, "investigated")
    findings = "\n".join(
        f"Q: {sub}\nA: {text_of(note)}" for sub, note in zip(subquestions, notes, strict=True)
    )
    report = await ctx.sample(
        f"Answer the question '{question}' in one paragraph, from these notes:\n{findings}",
        max_tokens=500,
        key="report",
    )
    await ctx.report_progress(3, 3, "written")
    return text_of(report)


if __name__ == "__main__":
    server.run()
