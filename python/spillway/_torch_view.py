# SPDX-License-Identifier: MIT
"""OffloadAdamW on tier='cpu' with CPU fp32 parameters: each parameter's
storage becomes its master weights in spillway's region
(spw_optimizer_param_view), so the trainer keeps one fp32 copy, not two.

The Parameter objects stay (their .grad, hooks, and the model's and any
scheduler's references); only p.data is swapped, once the initial weights
are in. Adam writes the parameters in place and nothing is copied back.
When the optimizer is freed, libspillway turns each view into private
memory holding the last values, so the parameters go on as ordinary
tensors (unmapped by libspillway when torch lets go of them). Anything not
eligible keeps its own storage and the copy-out, as before."""
import ctypes
import os

import torch
import torch.utils.dlpack

from . import _lib as L


def _own_storage(p):
    """Whether p is the whole of its storage: swapping its storage then
    cuts no tie to another tensor (a flat buffer, a view of a bigger one)."""
    st = p.untyped_storage() if hasattr(p, "untyped_storage") else p.storage()
    return p.is_contiguous() and p.storage_offset() == 0 and st.nbytes() == p.numel() * 4


def eligible(opt, e):
    # Not on a persistent session: its state outlives spillwayd's death or
    # restart, but a view does not (the daemon releases the region it maps,
    # and a step under way would go on with those weights gone), and an
    # overlapped redo after a kill needs the weights before the step in the
    # model while the master holds the new ones of the chunks done. Nor
    # with bf16 master weights: a view shows fp32 ones.
    return (opt.tier == "cpu" and e.p.device.type == "cpu" and e.p.dtype == torch.float32
            and not opt._persistent and opt.master_dtype == "fp32"
            and e.numel > 0 and _own_storage(e.p) and L.has("spw_optimizer_param_view_dlpack")
            and os.environ.get("SPILLWAY_PARAM_VIEW", "1") != "0")


def viewed(e):
    """Whether e's parameter still lies in its view (p.data not replaced since)."""
    return e.view is not None and e.p.data_ptr() == e.view


def attach(opt, spw, entries):
    """After the build (and a takeover's resume): the eligible parameters'
    storage swapped for their master weights, whose values they already
    hold (the initial weights, or the session's on a takeover)."""
    swapped = False
    for e in entries:
        e.view = None
        if not eligible(opt, e):
            continue
        cap = spw.param_view(e.tid)
        if cap is None:
            continue  # the library refused (its reason is in its last error): keep the copy-out
        # Through DLPack, not torch.frombuffer: the storage's deleter is
        # then libspillway's C, not a Python decref that would hang a
        # tensor freed after the interpreter (e.g. saved by a failed backward).
        t = torch.utils.dlpack.from_dlpack(cap).view(e.p.shape)
        with torch.no_grad():
            e.p.data = t
        e.view = e.p.data_ptr()
        swapped = True
    if swapped:
        _release_freed()


def _release_freed():
    """The parameters' old storage was freed, but glibc keeps freed blocks
    inside its heap (all but the top) mapped: hand them back to the system,
    or the trainer's resident memory keeps the second copy the view saved."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):
        pass  # not glibc
