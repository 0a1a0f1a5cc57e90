"""A private, single-host Slurm cluster for the tests: Debian's munged, slurmctld and slurmd, started and stopped
by the tests themselves.

Everything lives below one fresh temporary directory (slurm.conf, the munge key and socket, state, spool, logs,
pid files); every daemon and client command is pointed at it (`-f`, `SLURM_CONF`, `AuthInfo=socket=`), and the
ports are picked free at run time. A system Slurm or munge on the same machine, or the leftovers of an earlier
run, are never touched nor used.

One node stands for the fleet: `srun -n N` runs N tasks on it, each with its own SLURM_PROCID, as N nodes
would. It is configured as a production GPU cluster's node is, as far as a container allows:

- its NodeName (`gpu-st-p5-1`, what the job's nodelist and SLURMD_NODENAME say) is not its host name
  (`NodeHostname=$(hostname -s)`), as clouds name their nodes;
- it offers 2 GPUs as the `gpu` GRES (`GresTypes=gpu`; gres.conf `AutoDetect=off` and `File=` two character
  devices 195:0 and 195:1, the NVIDIA driver's numbers, made with mknod below the cluster's directory: no driver
  answers behind them, so opening one says "No such device or address"; where mknod is not allowed, plain files,
  which Slurm counts as GPUs without setting CUDA_VISIBLE_DEVICES or confining anything);
- `ConstrainDevices=yes` (task/cgroup on the cgroup v1 devices controller, where this machine has one: this
  container has): a step sees only the GPUs it asked for, and opening another says "Operation not permitted".

The node is configured with `cpus` CPUs (64 by default) whatever the machine has:
`SlurmdParameters=config_overrides` makes slurmd take slurm.conf's word for it, and nothing binds tasks to CPUs
(task/cgroup with `ConstrainCores=no`, or task/none), so the extra CPUs are only slots. `srun --overcommit` goes
past them.

Use it as a context manager, `with slurm_cluster() as cluster: ...`, or as the session fixture `slurm`:

    from slurm_cluster import slurm_fixture  # noqa: F401  (provides the fixture `slurm`)

    def test_ranks(slurm):
        result = slurm.srun(["-n", "4", "printenv", "SLURM_PROCID"], check=True)

Without Slurm installed (or not as root) the fixture skips; with CI=true in the environment it fails instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

INSTALL_HINT = "apt-get install slurmctld slurmd slurm-client munge"
PREFIX = "gpufabric-slurm-"
NODENAME = "gpu-st-p5-1"
#: GPUs the node offers as the `gpu` GRES: device files made below the cluster's directory (char 195:N, the
#: NVIDIA driver's numbers; no driver behind them), so `--gpus-per-node` is granted as on a GPU cluster
GPUS = 2
NVIDIA_MAJOR = 195
_PR_SET_PDEATHSIG = 1
_BINARIES = ("munged", "slurmctld", "slurmd", "slurmstepd", "srun", "sbatch", "sinfo", "scontrol", "squeue", "scancel")
# what a surrounding Slurm job or the user's defaults would otherwise slip into the client commands
_CLIENT_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_", "SCANCEL_", "SACCT_")
TERMINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"}
)


class SlurmUnavailable(RuntimeError):
    """Slurm cannot run here at all (not installed, not root): a reason to skip, not a failure."""


class SlurmStartError(RuntimeError):
    """The daemons were started and did not come up."""


def missing() -> str | None:
    """Why this machine cannot run the private cluster, or None when it can."""
    absent = [name for name in _BINARIES if shutil.which(name) is None]
    if absent:
        return f"Slurm is not installed ({INSTALL_HINT}): no {', '.join(absent)}"
    if os.geteuid() != 0:
        return "Slurm tests need root (slurmd starts the tasks)"
    return None


def hostname() -> str:
    """This host's short host name (what `hostname -s` says)."""
    return socket.gethostname().split(".")[0]


def nodename() -> str:
    """What slurmctld and slurmd call this host: a Slurm NodeName other than its host name, as clouds name their
    nodes (`NodeHostname` says which host it is), so that nothing may take one for the other."""
    return NODENAME if NODENAME != hostname() else NODENAME + "-x"


def devices_cgroup() -> Path | None:
    """The cgroup v1 devices controller, when this machine has one Slurm's task/cgroup can write to."""
    path = Path("/sys/fs/cgroup/devices")
    return path if (path / "devices.allow").exists() and os.access(path, os.W_OK) else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def client_env(conf: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CLIENT_ENV_PREFIXES)}
    env["SLURM_CONF"] = str(conf)
    return env


def _die_with_parent() -> None:
    """Runs in the daemon's child before exec: SIGTERM it when the test process dies, even by SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, starttime


def _holders(root: Path) -> list[int]:
    """Processes (other than this one) with their cwd, executable or an open file below root, like `fuser -m`:
    the daemons, slurmstepd (it keeps the slurmd log open) and the tasks of jobs that ran from there."""
    prefix = str(root) + os.sep
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            links = [entry / "cwd", entry / "exe", *(entry / "fd").iterdir()]
        except OSError:
            continue
        for link in links:
            try:
                target = os.readlink(link)
            except OSError:
                continue
            if target == str(root) or target.startswith(prefix):
                found.append(int(entry.name))
                break
    return found


def _kill(pids: Sequence[int], grace: float) -> None:
    """SIGTERM, then SIGKILL whatever is still there after grace seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
                alive.append(pid)
        deadline = time.monotonic() + grace
        while alive and time.monotonic() < deadline:
            alive = [pid for pid in alive if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
            time.sleep(0.05)
        if not alive:
            return
        pids = alive


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def sweep_stale(tmp: Path | None = None) -> list[Path]:
    """Removes the directories of earlier runs whose test process is gone (a crashed or killed run), after
    killing whatever still holds them. Returns what it removed."""
    removed = []
    for root in Path(tmp or tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            pid, started = (root / "owner").read_text().split()
        except (OSError, ValueError):
            # no owner file: written right after mkdtemp, so only a run killed in that instant, or not ours
            continue
        if _start_time(int(pid)) == started:
            continue  # its run is still going
        _kill(_holders(root), grace=2)
        shutil.rmtree(root, ignore_errors=True)
        removed.append(root)
    return removed


class SlurmCluster:
    """A running private cluster. `env` is what every Slurm client command must run with (SLURM_CONF)."""

    def __init__(self, root: Path, cpus: int):
        self.root = root
        self.cpus = cpus
        self.nodename = nodename()
        self.hostname = hostname()
        self.gpus = GPUS
        self.devices = [root / "dev" / f"nvidia{i}" for i in range(GPUS)]
        self.device_nodes = True  # character devices (False: plain files, where mknod is not allowed)
        self.constrain_devices = devices_cgroup() is not None
        # job ids of its own: two clusters at once keep their job cgroups (slurm/uid_0/job_N) apart
        self.first_job_id = secrets.randbelow(6 * 10**7) + 10**6  # Slurm's MaxJobId is 67,043,328
        self.partition = "fleet"
        self.conf = root / "etc" / "slurm.conf"
        self.logs = root / "log"
        self.jobs = root / "jobs"
        self.munge_socket = root / "munge" / "munge.socket"
        self.env = client_env(self.conf)
        self.ctld_port = free_port()
        self.slurmd_port = free_port()
        while self.slurmd_port == self.ctld_port:
            self.slurmd_port = free_port()
        self._daemons: dict[str, subprocess.Popen] = {}

    # -- client commands -------------------------------------------------------------------------------------

    def run(
        self, args: Sequence[str], *, timeout: float = 120, check: bool = False, **kw
    ) -> subprocess.CompletedProcess:
        """Any Slurm client command (`["scontrol", "show", "node"]`) against this cluster; text output captured.
        `env` in kw is laid over `self.env`."""
        env = {**self.env, **kw.pop("env", {})}
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("cwd", self.jobs)
        return subprocess.run(list(args), env=env, timeout=timeout, check=check, **kw)

    def srun(self, args: Sequence[str], **kw) -> subprocess.CompletedProcess:
        """`srun ARGS` (e.g. `["-n", "8", "python3", "-c", ...]`); kw as for run()."""
        return self.run(["srun", *args], **kw)

    def sbatch(self, script: str | Path, args: Sequence[str] = ()) -> str:
        """Submits a batch script (its text, or a path) and returns the job id. Its output goes to
        `self.output(job_id)` unless args say otherwise."""
        if isinstance(script, str):
            path = self.jobs / f"script-{secrets.token_hex(4)}.sh"
            path.write_text(script)
            script = path
        result = self.run(["sbatch", "--parsable", f"--output={self.jobs}/slurm-%j.out", *args, str(script)])
        if result.returncode != 0:
            raise RuntimeError(f"sbatch failed ({result.returncode}): {result.stderr.strip()}")
        return result.stdout.strip().split(";")[0]

    def output(self, job_id: str) -> Path:
        """Where a batch job submitted with sbatch() writes its output by default."""
        return self.jobs / f"slurm-{job_id}.out"

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (values that hold spaces are cut at the first one)."""
        result = self.run(["scontrol", "show", "job", "-o", str(job_id)], check=True)
        return dict(re.findall(r"(\w+)=(\S*)", result.stdout))

    def wait(self, job_id: str, timeout: float = 60) -> dict[str, str]:
        """Waits until the job has ended; returns its `scontrol show job` fields (JobState, ExitCode, ...).
        Raises TimeoutError, with the daemons' logs, when it has not ended in time."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job(job_id)
            if fields.get("JobState") in TERMINAL_STATES:
                return fields
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"job {job_id} still {fields.get('JobState')} after {timeout:g}s\n{self.log_tails()}"
                )
            time.sleep(0.2)

    def log_tails(self, lines: int = 20) -> str:
        parts = []
        for log in sorted(self.logs.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name} (last {len(text)} lines)\n" + "\n".join(text))
        return "\n".join(parts)

    # -- the daemons -------------------------------------------------------------------------------------------

    def write_config(self) -> None:
        # munged wants execute permission for all on the directories down to its socket
        self.root.chmod(0o711)
        (self.root / "munge").mkdir(mode=0o755)
        for sub in ("etc", "state", "spool", "log", "run", "jobs"):
            (self.root / sub).mkdir(mode=0o700)
        key = self.root / "munge" / "munge.key"
        key.touch(mode=0o600)
        key.write_bytes(secrets.token_bytes(1024))
        (self.root / "etc" / "plugstack.conf").write_text("")
        (self.root / "dev").mkdir(mode=0o755)
        for minor, device in enumerate(self.devices):
            try:
                os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(NVIDIA_MAJOR, minor))
            except PermissionError:  # a container without CAP_MKNOD: Slurm counts files as GPUs, names none
                device.touch(mode=0o666)
                self.device_nodes = self.constrain_devices = False
        # no NVML here to detect GPUs: the devices are listed, as a site without autodetection lists them
        (self.root / "etc" / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName={self.nodename} Name=gpu File={self.root}/dev/nvidia[0-{self.gpus - 1}]\n")
        # a job's step sees only the GPUs it was granted (the devices controller of cgroup v1)
        (self.root / "etc" / "cgroup.conf").write_text(
            "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nConstrainDevices=yes\nConstrainCores=no\n"
            "ConstrainRAMSpace=no\nConstrainSwapSpace=no\n")
        r = self.root
        node = (f"NodeName={self.nodename} NodeHostname={self.hostname} NodeAddr=127.0.0.1 CPUs={self.cpus} "
                f"Gres=gpu:{self.gpus} State=UNKNOWN")
        self.conf.write_text(
            f"""\
# private test cluster: {r}
ClusterName=gpufabric
SlurmctldHost={self.hostname}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={r}/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin={"task/cgroup" if self.constrain_devices else "task/none"}
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# the node has {self.cpus} CPUs because slurm.conf says so, whatever the machine has (task/none binds nothing)
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=600
SlurmdTimeout=60
FirstJobId={self.first_job_id}
GresTypes=gpu
{node}
PartitionName={self.partition} Nodes={self.nodename} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""
        )

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.logs / f"{name}.out", "wb") as out:
            self._daemons[name] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.root,
                start_new_session=True,  # a Ctrl-C of the test run reaches them through stop(), in order
                preexec_fn=_die_with_parent,
            )

    def _check_alive(self, what: str) -> None:
        for name, proc in self._daemons.items():
            if proc.poll() is not None:
                raise SlurmStartError(f"{name} exited ({proc.returncode}) while {what}\n{self.all_logs()}")

    def all_logs(self, lines: int = 30) -> str:
        parts = [self.log_tails(lines)]
        for out in sorted(self.logs.glob("*.out")):
            text = out.read_text(errors="replace").strip()
            if text:
                parts.append(f"--- {out.name}\n{text[-3000:]}")
        return "\n".join(parts)

    def start(self, timeout: float = 60) -> None:
        self.write_config()
        munge_dir = self.root / "munge"
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                f"--socket={self.munge_socket}",
                f"--key-file={munge_dir / 'munge.key'}",
                f"--pid-file={self.root / 'run' / 'munged.pid'}",
                f"--log-file={self.logs / 'munged.log'}",
                f"--seed-file={munge_dir / 'munged.seed'}",
            ],
        )
        deadline = time.monotonic() + timeout
        while not self.munge_socket.exists():
            self._check_alive("starting munged")
            if time.monotonic() > deadline:
                raise SlurmStartError(f"munged made no socket in {timeout:g}s\n{self.all_logs()}")
            time.sleep(0.05)
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-N", self.nodename, "-f", str(self.conf)])
        state = ""
        while True:
            self._check_alive("waiting for the node")
            try:
                result = self.run(["sinfo", "-h", "-N", "-n", self.nodename, "-o", "%T"], timeout=10)
            except subprocess.TimeoutExpired:
                state = "sinfo timed out"
            else:
                state = result.stdout.strip() or result.stderr.strip()
                if result.returncode == 0 and state == "idle":
                    return
            if time.monotonic() > deadline:
                raise SlurmStartError(
                    f"node {self.nodename} not idle after {timeout:g}s (sinfo: {state!r})\n{self.all_logs()}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        """Cancels what still runs, stops slurmd, slurmctld and munged (SIGTERM, then SIGKILL), kills whatever
        else still holds the directory (slurmstepd, stray tasks) and removes it."""
        if "slurmctld" in self._daemons and self._daemons["slurmctld"].poll() is None:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self.run(["scancel", f"--partition={self.partition}"], timeout=10)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self._daemons.get(name)
            if proc is None:
                continue
            if proc.poll() is None:
                _kill([proc.pid], grace=10)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        _kill(_holders(self.root), grace=5)
        shutil.rmtree(self.root, ignore_errors=True)
        if self.constrain_devices:
            # slurmstepd removes its jobs' cgroups; the node's own is left (kept while another cluster uses it)
            with contextlib.suppress(OSError):
                (Path("/sys/fs/cgroup/devices") / f"slurm_{self.nodename}").rmdir()


@contextlib.contextmanager
def slurm_cluster(cpus: int = 64, timeout: float = 60) -> Iterator[SlurmCluster]:
    """A fresh private cluster for the block; raises SlurmUnavailable when this machine cannot run one."""
    reason = missing()
    if reason:
        raise SlurmUnavailable(reason)
    sweep_stale()
    for attempt in (1, 2):
        root = Path(tempfile.mkdtemp(prefix=PREFIX))
        (root / "owner").write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
        cluster = SlurmCluster(root, cpus)
        try:
            cluster.start(timeout=timeout)
            break
        except SlurmStartError as exc:
            cluster.stop()
            # the free ports were taken by someone else between picking and binding: once more, with new ones
            if attempt == 2 or "Address already in use" not in str(exc):
                raise
        except BaseException:
            cluster.stop()
            raise
    try:
        yield cluster
    finally:
        cluster.stop()


_shared: dict[str, object] = {"users": 0}


@pytest.fixture(scope="session", name="slurm")
def slurm_fixture() -> Iterator[SlurmCluster]:
    """One cluster for the whole test session (shared by every module that imports this fixture). Skips when
    Slurm cannot run here, except on CI (CI=true), where that is a failure."""
    if not _shared["users"]:
        try:
            manager = slurm_cluster()
            _shared["cluster"] = manager.__enter__()
            _shared["manager"] = manager
        except SlurmUnavailable as exc:
            if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
                pytest.fail(f"CI must run the Slurm tests: {exc}", pytrace=False)
            pytest.skip(str(exc))
    _shared["users"] += 1
    try:
        yield _shared["cluster"]
    finally:
        _shared["users"] -= 1
        if not _shared["users"]:
            _shared.pop("cluster")
            _shared.pop("manager").__exit__(None, None, None)
