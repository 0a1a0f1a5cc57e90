"""`gpufabric fleet sbatch`: the sbatch line that asks Slurm for what a profile's acceptance needs.

examples/fleet-acceptance.sbatch carries the options every fleet run wants (one task per node, `--exclusive`,
`--mem=0`) and, in its own `#SBATCH` lines, the GPUs and time of the default profile; this prints the options
that depend on the profile, given on sbatch's command line (where they override the script's lines):

- `--gpus-per-node` = the profile's `gpus.count`: where slurm.conf confines devices to what a job asked for
  (`ConstrainDevices=yes`), a step that asked for none sees no GPU at all;
- `--time` = the time limit, in minutes, rounded up to the next 5:

      1.5 x (SUITES_S + 60 x GPUs + burn-in + one burn-in chunk) + FLEET_REPORT_S

  SUITES_S + 60 s per GPU stands for the suites themselves (80 s on 2x H100 SXM 80GB, benchmarks/
  acceptance_time.last.json; 4 min for 2 GPUs leaves room for cold caches and slower file systems); the
  burn-in's duration, plus one chunk (the profile's `burn_in.chunk_s`, 60 s by default) for what runs around its
  GEMM chunks: start-up, the collectives and memory workloads (a 60 s burn-in took 74 s there); 1.5 is the
  margin a time limit needs, and FLEET_REPORT_S the fleet report at the end of the job (100,000 nodes' files in
  about 2 minutes, docs/fleet.md).
"""

from __future__ import annotations

import math
import shlex

from ..profile.model import Profile

__all__ = ["SUITES_S", "PER_GPU_S", "FLEET_REPORT_S", "MARGIN", "allocation_problem", "requested_gpus",
           "sbatch_line", "slurm_time", "time_limit_s"]

SUITES_S = 120
PER_GPU_S = 60
FLEET_REPORT_S = 300
MARGIN = 1.5
SCRIPT = "examples/fleet-acceptance.sbatch"


def time_limit_s(profile: Profile, burn_in_s: float | None) -> int:
    """The job's time limit in seconds, by the formula of this module's docstring, rounded up to 5 minutes."""
    running = SUITES_S + PER_GPU_S * profile.gpu_count
    if profile.has_burn_in and burn_in_s:
        running += burn_in_s + float(profile.burn_in.get("chunk_s", 60))
    seconds = MARGIN * running + FLEET_REPORT_S
    return int(math.ceil(seconds / 300) * 300)


def slurm_time(seconds: int) -> str:
    """Slurm's `--time` form `hours:minutes:seconds` (a bare `30:00` would be minutes:seconds), `days-` first
    past a day."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    text = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def sbatch_line(profile_spec: str, profile: Profile, burn_in: str | None, burn_in_s: float | None,
                nodes: int | None, script: str = SCRIPT) -> str:
    """`sbatch --nodes=N --gpus-per-node=G --time=T SCRIPT PROFILE BURN_IN`, quoted for a shell (BURN_IN `none`:
    the run leaves the burn-in out). Raises ValueError for a burn-in the profile does not promise."""
    if burn_in_s and not profile.has_burn_in:
        raise ValueError(f"--burn-in {burn_in}: profile {profile.name} promises no burn-in (it has no burn_in: "
                         "section); give --burn-in none")
    argv = ["sbatch"]
    if nodes:
        argv.append(f"--nodes={nodes}")
    argv += [f"--gpus-per-node={profile.gpu_count}", f"--time={slurm_time(time_limit_s(profile, burn_in_s))}",
             script, profile_spec, burn_in if burn_in_s else "none"]
    return shlex.join(argv)


def requested_gpus(env: dict[str, str]) -> int | None:
    """GPUs per node the job asked for, as its batch script sees it: SLURM_GPUS_PER_NODE (`2`, `h200:2`,
    `h200:1,l40s:1`), else SLURM_GPUS_ON_NODE; None where Slurm granted no GPU as GRES (a cluster without a `gpu`
    GRES) or says it in a form not known here. The request is what a step gets: an `--exclusive` job holds every
    GPU of its nodes (SLURM_GPUS_ON_NODE says so in the batch script), but its steps only those it asked for."""
    given = env.get("SLURM_GPUS_PER_NODE") or env.get("SLURM_GPUS_ON_NODE")
    if not given:
        return None
    counts = [part.rsplit(":", 1)[-1].strip() for part in given.split(",")]
    return sum(int(count) for count in counts) if all(c.isascii() and c.isdigit() for c in counts) else None


def allocation_problem(profile: Profile, env: dict[str, str]) -> str | None:
    """Inside the job: why its steps cannot accept a node against the profile (asked for other GPUs per node than
    the profile's count), or None."""
    granted = requested_gpus(env)
    if granted is None or granted == profile.gpu_count:
        return None
    return (f"the job asked for {granted} GPU(s) per node and profile {profile.name} promises "
            f"{profile.gpu_count}: every node would be judged on {granted}; submit it with "
            f"--gpus-per-node={profile.gpu_count} (gpufabric fleet sbatch --profile {profile.name})")
