# SPDX-License-Identifier: MIT
"""OffloadAdamW.attach_ddp: DistributedDataParallel's averaged gradients.

DDP's reducer copies each parameter's local gradient into a bucket when
backward has produced it, all-reduces the bucket, and at the end of
backward copies the averages back into .grad. A hook on .grad alone sees
the local gradient, so each rank would step with its own: the ranks drift
apart. attach() registers a DDP communication hook instead: the bucket is
averaged as torch's default hook does (divide, all_reduce), and when the
all-reduce completes its future hands each parameter's slice of the
averaged bucket to spillway, so transfers and Adam (overlapped mode) still
run while backward goes on. After DDP has written the averages into .grad
(a callback at the end of backward, queued twice so that it runs after
DDP's own), what is in .grad becomes what step() checks, as for any other
gradient: changed later (clipping, unscale_) means handed over again in
exact mode, an error in overlapped mode.

For gradient accumulation under DDP use ddp_model.no_sync() for all but
the last micro-batch, as with any optimizer: only the last one reduces.

A daemon restart rides out under DDP as under the backward hooks
(persistent=True, reconnect > 0; spillway._torch_persist): a hand-over
that meets spillwayd gone inside an all-reduce future's callback does not
fail the future (DDP would raise it out of backward); the callback keeps
it for step(), the later buckets are not handed over, DDP goes on writing
the averages into .grad, and step() (or clip_grad_norm_, GradScaler.step)
reconnects and redoes the step from .grad: the same average on every
rank, so the ranks stay equal.
"""
import threading
import weakref

import torch

from . import SpillwayError
from ._torch_persist import hook_failed


class DdpState:
    """The comm hook's state: the optimizer (weakly), the group, and a
    lock, since all-reduce futures may complete on several threads."""

    def __init__(self, opt, group, world):
        self.opt = weakref.ref(opt)
        self.group = group
        self.world = world
        self.lock = threading.Lock()
        self.queued = False      # the end-of-backward callback of this backward
        self.handed = []         # entries handed over from buckets this backward


def attach(opt, ddp_model):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    if not isinstance(ddp_model, DistributedDataParallel):
        raise TypeError("OffloadAdamW.attach_ddp takes the DistributedDataParallel wrapper, not %s"
                        % type(ddp_model).__name__)
    if opt._ddp is not None:
        raise RuntimeError("OffloadAdamW.attach_ddp: already attached to a DDP model")
    if opt.data_parallel_group not in (None, False):
        raise ValueError("OffloadAdamW.attach_ddp: data_parallel_group averages gradients in a hook "
                         "of its own; with DDP, which averages them already, leave it None")
    if opt._in_step:
        raise RuntimeError("OffloadAdamW.attach_ddp: between backward and step(); attach before "
                           "training")
    mine = {id(e.p) for e in opt._entries}
    if not any(id(p) in mine for p in ddp_model.parameters()):
        raise ValueError("OffloadAdamW.attach_ddp: none of this optimizer's parameters is in the "
                         "DDP model")
    group = ddp_model.process_group
    state = DdpState(opt, group, dist.get_world_size(group))
    ddp_model.register_comm_hook(state, _comm_hook)
    opt._ddp = state


def _comm_hook(state, bucket):
    import torch.distributed as dist
    buf = bucket.buffer()
    # The average, as torch's allreduce_hook computes it.
    buf.div_(state.world)
    fut = dist.all_reduce(buf, group=state.group, async_op=True).get_future()
    params, grads = bucket.parameters(), bucket.gradients()

    def reduced(f):
        out = f.value()[0]
        opt = state.opt()
        if opt is not None:
            with state.lock:
                try:
                    bucket_ready(opt, state, params, grads)
                except SpillwayError as err:
                    # An exception here would fail the future, and DDP's
                    # finalize would raise it out of backward (torch wraps
                    # it: "Got the following error when running the
                    # callback"), leaving the reducer mid-iteration. The
                    # daemon gone under a persistent optimizer is kept for
                    # step() instead, which reconnects and redoes the step
                    # from p.grad: DDP still writes the averages there.
                    if not hook_failed(opt, err):
                        raise
        return out
    return fut.then(reduced)


def bucket_ready(opt, state, params, grads):
    """Hands each parameter's averaged slice of a bucket over (lock held).
    Nothing more once a hand-over met the daemon gone this step (step()
    reconnects and takes every gradient from p.grad)."""
    if opt._opt is None or opt._failed or getattr(opt, "_gone", None) is not None:
        return
    for p, g in zip(params, grads):
        e = opt._entry_of(p)
        if e is None:
            continue
        if opt._ended is not None:
            raise RuntimeError("OffloadAdamW: DDP reduced parameter %s after clip_grad_norm_() "
                               "ended the step; call step() first" % e.name)
        if e.src is not None or e in state.handed:
            if opt.mode == "overlapped":
                raise RuntimeError(
                    "OffloadAdamW: DDP reduced parameter %s a second time this step after spillway "
                    "applied it (mode='overlapped'); accumulate micro-batches under "
                    "ddp_model.no_sync(), or use mode='exact'" % e.name)
            opt._grad_none(e)
        opt._open_step()
        opt._hand_over(e, g)
        state.handed.append(e)


def on_accumulated(opt, state):
    """From an AccumulateGrad hook (the autograd thread): queue, once per
    backward, the callback that takes .grad as DDP leaves it."""
    if state.queued:
        return
    state.queued = True
    engine = torch.autograd.Variable._execution_engine
    # DDP queues its finalize (which waits for the buckets and writes the
    # averages into .grad) during backward; a callback queued from a
    # callback runs after every one queued before, so this runs after it.
    engine.queue_callback(lambda: engine.queue_callback(lambda: after_ddp(opt, state)))


def after_ddp(opt, state):
    with state.lock:
        state.queued = False
        handed, state.handed = state.handed, []
        for e in handed:
            g = e.p.grad
            if g is None or e.handed is None:
                continue
            # .grad now holds the average spillway got: that is the
            # gradient step() compares with from here on.
            e.src, e.src_version = g, g._version


def check_data_parallel(opt):
    """Before the first step: with several ranks, the optimizer must know
    how gradients are averaged (attach_ddp or data_parallel_group)."""
    if opt._dp_checked:
        return
    opt._dp_checked = True
    if opt._ddp is not None or opt.data_parallel_group is not None:
        return
    try:
        import torch.distributed as dist
        multi = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    except Exception:
        multi = False
    if multi:
        opt._dp_checked = False
        raise RuntimeError(
            "OffloadAdamW: torch.distributed runs %d ranks, but this optimizer does not know "
            "how their gradients are averaged, and would see each rank's own: with "
            "DistributedDataParallel call opt.attach_ddp(ddp_model); without it pass "
            "data_parallel_group='world' (or a group); data_parallel_group=False says this "
            "rank's gradients are its own" % dist.get_world_size())
