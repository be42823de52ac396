# SPDX-License-Identifier: MIT
"""OffloadAdamW in mode='exact' on CPU parameters: the gradients by
reference (spw_optimizer_opts.grad_store = SPW_GRAD_BY_REFERENCE).

Exact mode keeps a step's gradients until the global norm is known. With a
store, libspillway copies each p.grad into an fp32 page in the daemon's
region: a second .grad, 4 bytes per parameter. On the host device it can
read p.grad where it is instead: the hand-over sums its squares there, and
the updates after end() read it there. The same kernels read the same
values, so the bits are the store's.

The price is the contract: every gradient handed over stays alive and
unchanged until the step's updates are done. OffloadAdamW keeps what it
handed over (e.handed) until _finish() has waited for them; a gradient
changed in place before step() (another backward accumulating into it,
GradScaler's unscale_, torch's clip_grad_norm_) is taken back (grad_none,
which waits for its square sum and drops it: one summed while the change
was under way is never used) and handed over again, as with the store;
clip_grad_norm_, which ends the step before step(), waits for the updates
itself.

SPILLWAY_GRAD_BY_REFERENCE=0 keeps the store."""
import os

from . import SpillwayError


def eligible(opt, entries):
    """Whether opt's gradients can be read by reference: exact mode
    (overlapped mode keeps none), CPU parameters (the host device), and no
    persistent session (a takeover finishes a step killed inside its
    updates from the stored gradients; the dead trainer's are gone).
    OffloadAdamW hands libspillway one gradient per step (accumulation is
    torch's, in p.grad), as by reference needs."""
    return (opt.mode == "exact" and bool(entries) and entries[0].p.device.type == "cpu"
            and not opt._persistent and os.environ.get("SPILLWAY_GRAD_BY_REFERENCE", "1") != "0")


def after_early_end(opt):
    """clip_grad_norm_ ended the step before step(): the updates read
    p.grad, so they are waited for here, before the trainer may touch it."""
    if getattr(opt, "_grad_ref", False):
        try:
            opt._opt.sync()
        except SpillwayError as err:
            opt._broken(err)
            raise
