"""The meshgate-plan binary (harness/runner, the planner of lib/plan alone) that `meshgate plan`
drives: built when needed like the runner (MESHGATE_PLAN names a built one instead), started
with the planner's own arguments, its output and exit code passed through, so the driver and
the runner always agree on what a plan is."""

from __future__ import annotations

import subprocess
from typing import Optional, Sequence

from ..core import files
from . import build


def planner_command(preset: Optional[str] = None) -> list[str]:
    """The command that starts meshgate-plan (built first when stale); BuildError when it
    cannot be had."""
    return build.runner_command(files.source_root(), preset, target=build.PLAN_TARGET,
                                override="MESHGATE_PLAN")


def run_planner(arguments: Sequence[str], preset: Optional[str] = None) -> int:
    """Runs meshgate-plan with `arguments`, its output going where ours goes; its exit code.
    BuildError when the binary cannot be had."""
    return subprocess.run(planner_command(preset) + list(arguments), check=False).returncode
