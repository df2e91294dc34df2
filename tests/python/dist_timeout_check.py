"""Run by test_dist_timeout.py: 2 ranks on gloo; rank 1 stops answering (a
long sleep standing for a stuck computation) while rank 0 waits in strata's
torch.distributed comm with timeout_s=2: rank 0's barrier and reduction
fail with STRATA_ERR_TIMEOUT naming the call. Prints one line per check."""
import ctypes
import os
import sys
import time

import torch.distributed as dist

from strata import _lib as L
from strata.dist import TorchComm

rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
comm = TorchComm(timeout_s=2.0)
if rank == 1:
    time.sleep(12)
    os._exit(0)
timeout = L.STATUS_NAMES.index("STRATA_ERR_TIMEOUT")
t0 = time.monotonic()
rc = comm._cb.barrier(None)
msg = L.lib().strata_last_error().decode()
print(f"barrier rc={L.STATUS_NAMES[rc]} after {time.monotonic() - t0:.1f} s: {msg}", flush=True)
buf = (ctypes.c_float * 4)(1, 2, 3, 4)
rc2 = comm._cb.reduce_to_owner(None, buf, 4, 0)
msg2 = L.lib().strata_last_error().decode()
print(f"reduce_to_owner rc={L.STATUS_NAMES[rc2]}: {msg2}", flush=True)
ok = rc == timeout and "barrier" in msg and rc2 == timeout and "gather" in msg2
print("OK" if ok else "BAD", flush=True)
os._exit(0 if ok else 1)
