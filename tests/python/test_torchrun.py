"""torchrun --nproc-per-node 2 and 4 (gloo, CPU): strata's owner sharding over the
process group (strata/dist.py), flat and HSDP (shard_group_size), is
bit-identical to one process stepping the accumulated mean of the same
micro-batch gradients."""
import os
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


@pytest.mark.skipif(not torch.distributed.is_available() or
                    not torch.distributed.is_gloo_available(), reason="no gloo")
@pytest.mark.parametrize("cases,nproc", [
    # HSDP with K = 1 (two groups of one rank: replicas only) rides along, and
    # torch.distributed.checkpoint's save/load: 2 -> 2, 1 -> 2, 2 -> 1
    (["shampoo:sync", "shampoo:hsdp1", "shampoo:dcp"], 2), (["muon:sync"], 2), (["shampoo:async1"], 2),
    # HSDP: shard_group_size 2 of 4 ranks (shipped refreshes: Shampoo, SOAP);
    # ZeRO-3 with HSDP over a small model (2 ranks: torchrun_hooks.py)
    (["shampoo:sync", "shampoo:hsdp2", "soap:hsdp2", "soap:zero3hsdp2"], 4)])
def test_torchrun_bit_identical(cases, nproc):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    port = 29500 + (os.getpid() % 1000) * 4 % 4000 + ("muon:sync" in cases) + \
        2 * (nproc == 4) + ("shampoo:async1" in cases)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--master-port", str(port), os.path.join(HERE, "torchrun_check.py")] + cases
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("bit-identical") == nproc * len(cases), out.stdout


@pytest.mark.skipif(not torch.distributed.is_available() or
                    not torch.distributed.is_gloo_available(), reason="no gloo")
def test_torchrun_hooks_and_failures():
    """attach()'s reduce-to-owner in the gradient hooks bit-identical to one
    process (no_sync accumulation too); DDP parameters refused; a step refused
    on one rank refused on both; a collective failing on one rank aborts the
    group so that no rank waits; ZeRO-3 resumed through dcp.load and load(dir)
    (torchrun_hooks.py). A hang fails by the subprocess timeout."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    port = 29500 + (os.getpid() % 1000) * 4 % 4000 + 3001
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(port), os.path.join(HERE, "torchrun_hooks.py")]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("hooks ok") == 2, out.stdout
