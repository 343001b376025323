"""The workflow on a real Slurm cluster: a one-node cluster from Debian's packages (munge, slurmctld, slurmd) runs a
small grid through workflow/profiles/slurm, and what it makes equals what a local run of the same grid makes.

Slow; skipped where the packages are not installed (`apt-get install slurm-wlm munge`; .ci/run installs them where
it can), where the tests do not run as root (the daemons and /etc/slurm need it), and where a Slurm configuration
exists already (a real cluster's, which a test must not touch). The cluster keeps no accounting database, so Snakemake
asks squeue for the jobs' states (MinJobAge keeps finished jobs listed) and the jobs' end states are read from
Slurm's job-completion log."""

import os
import re
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.test_workflow import ROOT, SMOKE, keep_a_calibration, snakemake

CONF = Path("/etc/slurm/slurm.conf")  # where srun, inside a job, looks for it
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue")
GRID = Path("runs/smoke+smoke_panel")
CONFIG = [*SMOKE, "seeds=1", "domains=[synthetic_linear]"]  # the smoke grid, one seed: the suite's time is short

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    any(shutil.which(d) is None for d in DAEMONS) or os.geteuid() != 0 or CONF.exists(),
    reason="needs Debian's slurm-wlm and munge, root, and no Slurm configuration of a real cluster")]


def _wait(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {seconds:.0f} s")
        time.sleep(0.5)


def _munge_running() -> bool:
    found = subprocess.run(["munge", "-n"], capture_output=True)
    return found.returncode == 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A one-node Slurm cluster on this machine (its configuration at /etc/slurm/slurm.conf, removed after); the
    path of its job-completion log."""
    tmp = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "log"):
        (tmp / sub).mkdir()
    started = []
    if not _munge_running():
        for folder in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
            Path(folder).mkdir(parents=True, exist_ok=True)
            shutil.chown(folder, "munge", "munge")
        subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True)
        started.append("munged")
        _wait(_munge_running, 20, "munged did not start")
    host = socket.gethostname().split(".")[0]
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 * 8 // 10  # MB the node offers
    completed = tmp / "log" / "jobcomp.txt"
    CONF.parent.mkdir(parents=True, exist_ok=True)
    CONF.write_text(f"""ClusterName=acgate-test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={tmp}/state
SlurmdSpoolDir={tmp}/spool
SlurmctldPidFile={tmp}/slurmctld.pid
SlurmdPidFile={tmp}/slurmd.pid
SlurmctldLogFile={tmp}/log/slurmctld.log
SlurmdLogFile={tmp}/log/slurmd.log
SlurmctldPort=46817
SlurmdPort=46818
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={completed}
MinJobAge=600
ReturnToService=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
NodeName={host} CPUs={os.cpu_count()} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    try:
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([daemon], check=True)
        _wait(lambda: subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True).stdout.strip()
              == "idle", 60, "the node did not come up idle")
        yield completed
    finally:
        for daemon in ("slurmd", "slurmctld"):
            pid = tmp / f"{daemon}.pid"
            if pid.is_file():
                subprocess.run(["kill", pid.read_text().strip()])
        if started:
            subprocess.run(["pkill", "-x", "munged"])
        CONF.unlink(missing_ok=True)


def test_a_grid_runs_on_slurm_as_it_runs_locally(cluster, tmp_path):
    # snakemake() schedules with a 1-s timespan (the tests' own), over the profiles' 20 s; both grids keep a
    # calibration of the current rules, so none runs (the HTML view is the multi-threaded job Slurm is given). The
    # local grid runs while the Slurm one waits on its status checks, whose interval grows by 10 s each time no job
    # has finished (about 33 s a job here)
    on_slurm, local = tmp_path / "slurm", tmp_path / "local"
    for workdir in (on_slurm, local):
        keep_a_calibration(workdir)
    with ThreadPoolExecutor(2) as pool:
        slurm_run = pool.submit(
            snakemake, on_slurm, "--profile", str(ROOT / "workflow" / "profiles" / "slurm"),
            "--default-resources", "slurm_partition=debug", "mem_mb=500", "runtime=30",
            "--slurm-status-command", "squeue", "--latency-wait", "5",
            "--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "2",
            "--set-threads", "calibrate=2", "panel_matched=2", "html=2",  # the profile's 8 do not fit the node
            "--set-resources", "calibrate:cpus_per_task=2", "panel_matched:cpus_per_task=2", "html:cpus_per_task=2",
            cores="", config=CONFIG)
        local_run = pool.submit(snakemake, local, config=CONFIG)
        done, ran_here = slurm_run.result(), local_run.result()
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+)", log)
    states = dict(re.findall(r"JobId=(\d+) .*?JobState=(\w+)", cluster.read_text()))
    print(f"{len(submitted)} jobs submitted to Slurm; end states: {sorted(set(states.values()))}")
    assert len(submitted) >= 5 and all(states.get(job) == "COMPLETED" for job in submitted), (submitted, states)
    assert "workflow finished in" in log
    assert ran_here.returncode == 0, (ran_here.stdout + ran_here.stderr)[-4000:]
    runs = sorted(p.relative_to(local) for p in (local / GRID).glob("synthetic_linear/seed*/*/lags.csv"))
    assert len(runs) >= 4
    for lags in runs:  # the same seeds, code and machine, one thread each: the same numbers
        for name in ("lags.csv", "predictions.csv"):
            assert (on_slurm / lags.parent / name).read_bytes() == (local / lags.parent / name).read_bytes(), lags
    verdicts = GRID / "synthetic_linear" / "audit" / "verdicts.json"
    found = [re.sub(r'"created_utc": "[^"]*"', "", (root / verdicts).read_text()) for root in (on_slurm, local)]
    assert found[0] == found[1]
    assert (on_slurm / GRID / "tables" / "verdict_matrix.csv").read_text() == \
        (local / GRID / "tables" / "verdict_matrix.csv").read_text()
