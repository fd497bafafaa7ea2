"""Load: launch AIPerf for a step or the warm-up, check it, stop it (abort path)."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def _stop(p: Any, ctx: campaign.Ctx, ev: dict[str, Any]) -> dict[str, Any]:
    campaign.stop_load(p, ctx, ev["experiment"], ev["step"])
    name, cause = campaign._error_of(ev.get("error"))
    return {"error": name, "cause": cause}


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(
        event,
        {
            "launch": lambda p, ctx, ev: campaign.launch_step(p, ctx, ev["experiment"], ev["step"]),
            "check": lambda p, ctx, ev: campaign.check_load(p, ctx, ev["experiment"], ev["step"]),
            "warmup": lambda p, ctx, ev: campaign.launch_warmup(p, ctx, ev["experiment"]),
            "check_warmup": lambda p, ctx, ev: campaign.check_load(p, ctx, ev["experiment"], "warmup"),
            "stop": _stop,
        },
        cleanup=("stop",),
    )
