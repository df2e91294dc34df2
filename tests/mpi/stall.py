"""A rank that stops answering, for the MPI tests (issue #22 item 11, #25).

run_stalled(launch, tmp, n, args, target, action, ...) starts `strata train`
under `launch` (an mpirun argument list builder) through a wrapper that
records each rank's pid, waits until rank 0's metrics file shows a few
steps, then acts on the target: SIGSTOP its process (`action="stop"`) or
calls `action` (a function) itself (for instance, taking a host's link
down). It returns (returncode, stderr, seconds from the action to the end),
or None for the returncode when the job outlived `hang_s` (it is then
killed, stopped processes included).
"""
import os
import signal
import subprocess
import time


def _steps(path):
    try:
        with open(path) as f:
            return sum(1 for line in f if '"type":"step"' in line)
    except OSError:
        return 0


def run_stalled(cmd_prefix, env, exe, tmp, tag, args, target, action="stop", after_steps=3,
                hang_s=60):
    wrapper = os.path.join(tmp, f"{tag}-wrap.sh")
    piddir = os.path.join(tmp, f"{tag}-pids")
    os.makedirs(piddir, exist_ok=True)
    with open(wrapper, "w") as f:
        f.write(f'#!/bin/sh\necho $$ > "{piddir}/$OMPI_COMM_WORLD_RANK"\n'
                f'exec "{exe}" train "$@"\n')
    os.chmod(wrapper, 0o755)
    metrics = os.path.join(tmp, f"{tag}.jsonl")
    cmd = cmd_prefix + [wrapper] + args + ["--metrics", metrics]
    errf = open(os.path.join(tmp, f"{tag}.err"), "w+")
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=errf, text=True)
    t_act = None
    pids = []
    try:
        deadline = time.monotonic() + hang_s
        while p.poll() is None and time.monotonic() < deadline:
            if t_act is None and _steps(metrics) >= after_steps:
                if action == "stop":
                    with open(os.path.join(piddir, str(target))) as f:
                        pid = int(f.read())
                    pids.append(pid)
                    os.kill(pid, signal.SIGSTOP)
                else:
                    action()
                t_act = time.monotonic()
            time.sleep(0.05)
        rc = p.poll()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        else:
            pids = []  # the launcher ended them
        for pid in pids:  # a hung job: nothing stays stopped
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
    errf.seek(0)
    err = errf.read()
    errf.close()
    dt = time.monotonic() - t_act if t_act is not None else None
    return rc, err, dt, t_act is not None
