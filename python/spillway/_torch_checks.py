# SPDX-License-Identifier: MIT
"""Checks of spillway.torch's arguments, and small tensor helpers."""
import math

import torch

from . import _lib as L

_TYPES = {torch.float32: L.TYPE_F32, torch.bfloat16: L.TYPE_BF16, torch.float16: L.TYPE_F16}
_OFF_FLAGS = {
    "amsgrad": "spillway's kernels keep no max of exp_avg_sq",
    "maximize": "spillway's kernels descend",
    "capturable": "the update runs on CPU threads, outside any CUDA graph",
    "differentiable": "the update runs outside autograd",
    "foreach": "spillway runs its own fused kernels",
    "fused": "spillway runs its own fused kernels (on the CPU)",
}


def f32(t):
    return t.detach().to("cpu", torch.float32).contiguous().view(-1)


def check_flags(d, where):
    for k, why in _OFF_FLAGS.items():
        if d.get(k):
            raise ValueError("%s: %s=%r is not supported (%s); leave it %s"
                             % (where, k, d[k], why, "None" if k in ("foreach", "fused") else "False"))


def check_param(name, p):
    label = "%s %s" % (name, tuple(p.shape))
    if p.layout != torch.strided:
        raise ValueError("OffloadAdamW: parameter %s is sparse (%s); spillway serves dense "
                         "parameters" % (label, p.layout))
    if not p.is_floating_point():
        raise ValueError("OffloadAdamW: parameter %s is %s, not floating point; Adam updates "
                         "float32, bfloat16 and float16 parameters" % (label, p.dtype))
    if p.dtype not in _TYPES:
        raise ValueError("OffloadAdamW: parameter %s is %s; libspillway serves float32, bfloat16 "
                         "and float16 parameters" % (label, p.dtype))
    if p.device.type not in ("cpu", "cuda"):
        raise ValueError("OffloadAdamW: parameter %s is on device %s; libspillway serves cpu "
                         "(host backend) and cuda" % (label, p.device))
    if not p.is_leaf:
        raise ValueError("OffloadAdamW: parameter %s is not a leaf tensor" % label)
    if not p.is_contiguous():
        raise ValueError("OffloadAdamW: parameter %s is not contiguous; spillway writes updated "
                         "parameters into one contiguous buffer" % label)


def check_hparams(lr, betas, eps, weight_decay, where):
    try:
        b1, b2 = betas
        ok = (0.0 <= float(lr) and math.isfinite(float(lr)) and 0.0 <= float(b1) < 1.0
              and 0.0 <= float(b2) < 1.0 and 0.0 <= float(eps) and 0.0 <= float(weight_decay))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError("OffloadAdamW: %s: invalid hyperparameters lr=%r betas=%r eps=%r "
                         "weight_decay=%r" % (where, lr, betas, eps, weight_decay))


def spw_name(idx, name):
    """The tensor name spillway shows for parameter idx: its torch name made
    to fit the name rule (docs/api.md, Names: visible ASCII but '"' and '\\',
    no "..", at most 200 bytes). The index keeps names apart that map alike."""
    s = "%d:%s" % (idx, name)
    s = "".join(ch if 32 < ord(ch) < 127 and ch not in '"\\' else "_" for ch in s)[:200]
    while ".." in s:
        s = s.replace("..", "._")
    return s


def trace_flush(opt):
    """OffloadAdamW.trace_flush(): writes the timeline (trace= or
    $SPILLWAY_TRACE) to its file now. True, or False when tracing is off.
    The file is also written when the optimizer is closed."""
    if opt is None:
        raise RuntimeError("trace_flush: nothing traced yet (the optimizer is built at its first step)")
    return opt.trace_flush()
