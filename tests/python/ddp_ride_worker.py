# SPDX-License-Identifier: MIT
"""One DistributedDataParallel rank that test_ride_ddp restarts spillwayd
under (not a test by itself): a small model wrapped in DDP (gloo, CPU),
trained with OffloadAdamW through opt.attach_ddp; the batch of step N on
rank R is a function of N and R, so the ranks' gradients differ and only
DDP's average keeps them in step. DDP's buckets are made small (about a
parameter each) so that a backward hands several over, one by one, from
the all-reduce futures' callbacks. It prints "step N buckets B" after
each step (B: the buckets handed over in that step's backward), at the
end "reconnects N" (opt.reconnects), and saves the model's and the
optimizer's state_dict to OUT.

    ddp_ride_worker.py RANK WORLD STOREDIR SOCKET SESSION MODE STEPS PERSISTENT OUT [WHERE:K [flush:F]]

SESSION: the rank's session is SESSION/rankR. PERSISTENT 1: persistent=True.

WHERE:K: at step K the rank stops, prints "paused K" and waits for a line
on stdin (the test restarts the daemon meanwhile), then goes on:
  bucket   inside backward, in the all-reduce future's callback just
           after the first bucket was handed over to spillway; the next
           bucket's hand-over meets the daemon gone ("gone in bucket" when
           one did: the hand-over failed inside the future's callback)
  first    inside backward, in the first all-reduce future's callback
           before its bucket is handed over (nothing of step K is in
           spillway yet, in either mode); that hand-over meets the
           daemon gone
  step     after backward, just before opt.step()

flush:F: opt.flush() after step F ("flushed S"): the test kills the daemon
(kill -9, nothing saved) instead of stopping it, and the next one brings
the session back at step F.
"""
import os
import sys

import spwtest  # noqa: F401  (import path)
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
import spillway._torch_ddp as ddp_hook
from spillway.torch import OffloadAdamW


def model():
    torch.manual_seed(41)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 2))


def batch(rank, step):
    g = torch.Generator().manual_seed(10000 * step + 100 * rank)
    return torch.randn(12, 8, generator=g), torch.randn(12, 2, generator=g)


def pause(step):
    print("paused %d" % step, flush=True)
    sys.stdin.readline()


def count_buckets(opt, at, where):
    """Wraps spillway._torch_ddp.bucket_ready (which the comm hook's
    callback looks up at each call): counts the buckets handed over this
    step, pauses before (where == "first") or after (where == "bucket")
    the first one of step `at`, and notes a hand-over that raised."""
    real = ddp_hook.bucket_ready
    seen = {"n": 0, "gone": False}

    def wrapped(o, state, params, grads):
        if o is not opt or getattr(o, "_gone", None) is not None:
            return real(o, state, params, grads)
        if seen["n"] == 0 and where == "first" and o._step_no + 1 == at:
            pause(at)
        try:
            real(o, state, params, grads)
        except Exception:
            seen["gone"] = True  # the comm hook's callback decides what it means
            raise
        seen["n"] += 1
        if seen["n"] == 1 and where == "bucket" and o._step_no + 1 == at:
            pause(at)
    ddp_hook.bucket_ready = wrapped
    return seen


def main():
    rank, world, store, sock, session, mode, steps, persistent, out = sys.argv[1:10]
    rank, world, steps = int(rank), int(world), int(steps)
    where, at = (sys.argv[10].split(":") + ["0"])[:2] if len(sys.argv) > 10 else ("", "0")
    flush_at = int(sys.argv[11].split(":")[1]) if len(sys.argv) > 11 else 0
    at = int(at)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + os.path.join(store, "rendezvous"),
                            rank=rank, world_size=world)
    # Buckets of about a parameter each, from the second step on (DDP
    # rebuilds them after the first, the first bucket capped separately).
    dist._DEFAULT_FIRST_BUCKET_BYTES = 1024
    m = model()
    ddp = DDP(m, bucket_cap_mb=1024 / (1 << 20))
    kw = dict(persistent=True, lease=120) if persistent == "1" else {}
    opt = OffloadAdamW(m.named_parameters(), lr=1e-2, weight_decay=0.01, mode=mode, socket=sock,
                       session="%s/rank%d" % (session, rank), page_size=64 << 10, **kw)
    opt.attach_ddp(ddp)
    seen = count_buckets(opt, at, where)
    for step in range(1, steps + 1):
        opt.zero_grad(set_to_none=True)
        seen["n"] = 0
        x, y = batch(rank, step)
        nn.functional.mse_loss(ddp(x), y).backward()
        if step == at and where == "step":
            pause(step)
        if seen["gone"]:
            # A bucket's hand-over raised inside the future's callback,
            # and backward went on (the callback kept it for step()).
            print("gone in bucket", flush=True)
            seen["gone"] = False
        opt.step()
        print("step %d buckets %d" % (step, seen["n"]), flush=True)
        if step == flush_at:
            print("flushed %d" % opt.flush(), flush=True)
    print("reconnects %d" % getattr(opt, "reconnects", 0), flush=True)
    torch.save({"model": m.state_dict(), "opt": opt.state_dict()}, out)
    opt.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
