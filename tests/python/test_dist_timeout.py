"""strata's torch.distributed comm (strata/dist.py) bounds every wait (issue
#22 item 11): a rank that stops answering makes the other's collectives fail
with STRATA_ERR_TIMEOUT after timeout_s, not hang."""
import os
import socket
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


@pytest.mark.skipif(not torch.distributed.is_available() or
                    not torch.distributed.is_gloo_available(), reason="no gloo")
def test_stalled_rank_times_out():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), OMP_NUM_THREADS="1")
    script = os.path.join(HERE, "dist_timeout_check.py")
    other = subprocess.Popen([sys.executable, script, "1", port], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        out = subprocess.run([sys.executable, script, "0", port], env=env, capture_output=True,
                             text=True, timeout=60)
    finally:
        other.kill()
        other.wait()
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    assert "STRATA_ERR_TIMEOUT" in out.stdout
