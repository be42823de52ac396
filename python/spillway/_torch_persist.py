# SPDX-License-Identifier: MIT
"""OffloadAdamW on a persistent session (docs/persistent.md).

With persistent=True the optimizer's state outlives the trainer: when the
process dies (SIGKILL, OOM, an exception that ends it), spillwayd keeps
the session for `lease` seconds, and an OffloadAdamW of the same session
name in the next process takes it over: the model's parameters get the
master weights of the last committed step, and `opt.resumed_step` says
which step that was, so the trainer goes on with the data of the next.
"""
import torch

from . import Session
from . import _lib as L

LEASE_MAX_S = 7 * 24 * 3600


def check(persistent, lease, session):
    """The arguments checked; returns (persistent, lease, resumed_step 0)."""
    if not isinstance(persistent, bool):
        raise TypeError("persistent must be True or False, not %r" % (persistent,))
    if lease is not None and not (isinstance(lease, (int, float)) and 1 <= lease <= LEASE_MAX_S):
        raise ValueError("lease must be seconds in [1, %d] (7 days) or None for the daemon's 900, not %r"
                         % (LEASE_MAX_S, lease))
    if lease is not None and not persistent:
        raise ValueError("lease= is for persistent=True sessions")
    if persistent and session is None:
        raise ValueError("persistent=True needs session='job/rank0': the name the restarted trainer "
                         "attaches again to find its state")
    if isinstance(session, Session) and persistent != session.persistent:
        raise ValueError("persistent=%s, but Session %s was made with persistent=%s; make them agree"
                         % (persistent, session.name, session.persistent))
    return persistent, lease, 0


def session_args(opt):
    """What OffloadAdamW's own Session gets."""
    if not opt._persistent:
        return {}
    return {"persistent": True, "lease_s": int(opt._lease or 0)}


def resume(opt, spw, entries):
    """Right after the build: on a taken-over session, the parameters get
    the committed master weights and the step count and loss scale go on
    from the committed step. Returns that step (0: a fresh start)."""
    step = spw.resumed_step if opt._persistent else 0
    if not step:
        return 0
    with torch.no_grad():
        for e in entries:
            master = torch.empty(e.numel, dtype=torch.float32)
            spw.read(e.tid, L.STATE_PARAM, master.data_ptr())
            e.p.copy_(master.view(e.p.shape))
    info = opt._session.info()
    # A skipped step (inf/nan) did not count: its number comes again.
    opt._step_no = step - 1 if info["skipped"] else step
    for e in entries:
        e.steps = opt._step_no
    if opt._dynamic and info["loss_scale"] > 0:
        opt._scale = float(info["loss_scale"])
    return step


def before_rebuild(opt):
    """A rebuild (new parameters or groups) on a persistent session starts
    a new session: the state is carried by the rebuild's snapshot, and the
    old tensors must not stay beside the new ones."""
    if not opt._persistent or opt._session is None:
        return
    if not opt._own_session:
        raise NotImplementedError("OffloadAdamW: changing the parameters or param groups of an optimizer "
                                  "on a persistent Session you passed in is not supported; let OffloadAdamW "
                                  "make the session (session='name')")
    opt._session.close()
    opt._session = None


def abandon(opt):
    """Garbage collection of a persistent optimizer (the trainer is going
    away, perhaps by an exception): the connection is closed without a
    detach, so the state waits for the next trainer. True when done."""
    s = getattr(opt, "_session", None)
    if not getattr(opt, "_persistent", False) or s is None:
        return False
    if opt._own_session:
        s._disconnect()
        opt._session = None
    opt._opt = None
    return True
