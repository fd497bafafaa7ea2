"""Load: launch AIPerf for a step or the warm-up, await its end (task token), check it, stop it (abort path)."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(event, {"launch": campaign.LAUNCH_LOAD, "check": campaign.CHECK_LOAD,
                       "await": campaign.AWAIT_LOAD_END,
                       "warmup": campaign.LAUNCH_WARMUP, "check_warmup": campaign.CHECK_WARMUP,
                       "stop": campaign.STOP_LOAD_AFTER_FAILURE})
