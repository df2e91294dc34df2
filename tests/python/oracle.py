"""The C API driven directly (ctypes, no strata.torch): the oracle the
binding's steps are compared with, bit for bit."""
import ctypes
from ctypes import byref, c_int32, c_void_p

import torch

from strata import _lib as L


class CRun:
    """strata_create / param_add / commit over private float32 buffers; step(grads)
    copies the gradients in and calls strata_hook_backward(0) + strata_step."""

    def __init__(self, matrix: str, weights, names, fields=None, requested=None, roles=None):
        self.lib = L.lib()
        cfg = L.default_config()
        cfg.matrix_optimizer = L.OPTIMIZERS[matrix]
        for path, v in (fields or {}).items():
            obj = cfg
            parts = path.split(".")
            for p in parts[:-1]:
                obj = getattr(obj, p)
            setattr(obj, parts[-1], v)
        self.cfg = cfg
        rt = c_void_p()
        L.check(self.lib.strata_create(byref(cfg), byref(rt)), "create")
        self.rt = rt
        self.w = [w.detach().clone().contiguous() for w in weights]
        self.g = [torch.zeros_like(w) for w in self.w]
        for i, w in enumerate(self.w):
            d = L.ParamDesc()
            d.name = names[i].encode()
            d.ndim = w.dim()
            for k, s in enumerate(w.shape):
                d.shape[k] = s
            d.layer = 0
            d.role = L.ROLES[(roles or {}).get(names[i], "auto")]
            d.optimizer = L.OPTIMIZERS[(requested or {}).get(names[i], "default")]
            d.data = ctypes.cast(w.data_ptr(), ctypes.POINTER(ctypes.c_float))
            d.grad = ctypes.cast(self.g[i].data_ptr(), ctypes.POINTER(ctypes.c_float))
            L.check(self.lib.strata_param_add(rt, byref(d), byref(c_int32())), "param_add")
        L.check(self.lib.strata_commit(rt), "commit")

    def step(self, grads, lr_scale=None):
        for g, src in zip(self.g, grads):
            g.copy_(src)
        if lr_scale is not None:
            L.check(self.lib.strata_set_lr_scale(self.rt, ctypes.c_float(lr_scale)), "lr")
        L.check(self.lib.strata_hook_backward(self.rt, 0), "hook")
        L.check(self.lib.strata_step(self.rt), "step")

    def hyper(self, i, lr, weight_decay):
        L.check(self.lib.strata_param_set_hyper(self.rt, i, ctypes.c_float(lr),
                                                ctypes.c_float(weight_decay)), "set_hyper")

    def active(self, i, on):
        L.check(self.lib.strata_param_set_active(self.rt, i, bool(on)), "set_active")

    def __del__(self):
        self.lib.strata_destroy(self.rt)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(torch.int32)


def same_bits(a, b) -> bool:
    return all(torch.equal(bits(x), bits(y)) for x, y in zip(a, b))
