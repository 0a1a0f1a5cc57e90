"""What a node of a fleet run is told by the scheduler that started it: where its results go and which run they
belong to. The scheduler launches (``srun``, a Kubernetes Indexed Job, ``mpirun``); this only reads its
environment.

``--gpu-report-dir reports/fleet/{node}`` gives every node its own folder, named as the fleet report names the
node. Placeholders:

- ``{node}``: the scheduler's name for the node: Slurm's ``SLURMD_NODENAME`` (the NodeName, which the job's
  nodelist names, and which differs from the host name where slurm.conf sets ``NodeHostname``), else
  ``NODE_NAME`` (a Kubernetes pod's node, which a Job passes down from ``spec.nodeName``), else ``{host}``;
- ``{host}``: the node's short host name (``node17`` of ``node17.cluster.local``);
- ``{task}``: the task's index in the job (Slurm's ``SLURM_PROCID``, a Kubernetes Indexed Job's
  ``JOB_COMPLETION_INDEX``, Open MPI's ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, torch's ``RANK``): for several
  tasks on one host, as in a test or a node that accepts each GPU tray separately;
- ``{fleet}``: the fleet run's id (below).

The fleet run's id is ``--gpu-fleet-id``, else Slurm's ``SLURM_JOB_ID`` (every task of one ``srun``/``sbatch``
shares it), else none.
"""

from __future__ import annotations

import socket
import string

__all__ = ["NODE_VARIABLES", "TASK_VARIABLES", "expand_report_dir", "fleet_id", "node_name"]

#: where launchers put a task's index, first match wins
TASK_VARIABLES = ("SLURM_PROCID", "JOB_COMPLETION_INDEX", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK")
#: where schedulers put the name they know the node by, first match wins (else the short host name)
NODE_VARIABLES = ("SLURMD_NODENAME", "NODE_NAME")
PLACEHOLDERS = "{node}, {host}, {task} and {fleet}"


def fleet_id(given: str | None, env: dict[str, str]) -> str | None:
    return given or env.get("SLURM_JOB_ID") or None


def node_name(env: dict[str, str], hostname: str | None = None) -> str:
    """The scheduler's name for this node, else its short host name."""
    given = next((env[name] for name in NODE_VARIABLES if env.get(name)), None)
    return given or (hostname or socket.gethostname()).split(".")[0]


def expand_report_dir(template: str, env: dict[str, str], given_fleet_id: str | None = None,
                      hostname: str | None = None) -> str:
    """``template`` with its placeholders filled. Raises ValueError for an unknown placeholder, or one this
    environment cannot fill (``{task}`` outside any launcher, ``{fleet}`` without an id)."""
    values = {"node": node_name(env, hostname), "host": (hostname or socket.gethostname()).split(".")[0],
              "task": next((env[name] for name in TASK_VARIABLES if env.get(name)), None),
              "fleet": fleet_id(given_fleet_id, env)}
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as exc:
        raise ValueError(f"{template!r}: {exc} (placeholders are {PLACEHOLDERS})") from None
    for field in fields:
        if field not in values:
            raise ValueError(f"{template!r}: unknown placeholder {{{field}}} (known: {PLACEHOLDERS})")
        if values[field] is None:
            why = ("no launcher variable (" + ", ".join(TASK_VARIABLES) + ") is set" if field == "task"
                   else "neither --gpu-fleet-id nor SLURM_JOB_ID is set")
            raise ValueError(f"{template!r}: {{{field}}} cannot be filled here: {why}")
    return template.format(**values)
