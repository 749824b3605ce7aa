"""The bundled example workflow (``mailrun demo`` deploys it as ``counter:main``).

It counts the mails its run receives and remembers their subjects in
``ctx.state``; a mail with the subject "stop" completes the run with both as
the result. ``ctx.state`` is persisted with each mail, so the count survives
any restart of the sidecar or the hub.
"""

from __future__ import annotations

from typing import Any


async def main(ctx: Any, item: Any) -> None:
    ctx.state["count"] = ctx.state.get("count", 0) + 1
    ctx.state.setdefault("subjects", []).append(item.subject)
    if item.subject == "stop":
        ctx.complete({"count": ctx.state["count"], "subjects": ctx.state["subjects"]})
