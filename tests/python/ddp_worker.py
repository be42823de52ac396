# SPDX-License-Identifier: MIT
"""One DistributedDataParallel rank for test_ddp.py (not a test by itself).

usage: ddp_worker.py RANK WORLD STOREDIR CONTROL_SOCKET STEPS

First checks that OffloadAdamW under torch.distributed with two ranks, told
neither attach_ddp nor data_parallel_group, refuses to step. Then trains
the same model twice per mode, DDP + OffloadAdamW (attach_ddp) and DDP +
torch.optim.AdamW, on this rank's own data: overlapped mode plainly;
exact mode with two micro-batches per step (the first under no_sync) and
torch.nn.utils.clip_grad_norm_ between backward and step, also with
gradient_as_bucket_view=True (.grad is then a view of DDP's bucket). Saves
both models' parameters to STOREDIR/rank<RANK>-<run>.pt.
"""
import os
import sys

import spwtest  # noqa: F401  (import path)
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from spillway.torch import OffloadAdamW


def model():
    torch.manual_seed(41)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 2))


def batch(rank, step, k=0):
    g = torch.Generator().manual_seed(10000 * step + 100 * rank + k)
    return torch.randn(12, 8, generator=g), torch.randn(12, 2, generator=g)


def train(ddp, opt, rank, steps, mode):
    for step in range(steps):
        opt.zero_grad()
        if mode == "exact":
            with ddp.no_sync():
                x, y = batch(rank, step, 1)
                (nn.functional.mse_loss(ddp(x), y) / 2).backward()
            x, y = batch(rank, step, 2)
            (nn.functional.mse_loss(ddp(x), y) / 2).backward()
            nn.utils.clip_grad_norm_(ddp.parameters(), 0.1)
        else:
            x, y = batch(rank, step)
            nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()


def main():
    rank, world, store, control, steps = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                          sys.argv[4], int(sys.argv[5]))
    dist.init_process_group("gloo", init_method="file://" + os.path.join(store, "rendezvous"),
                            rank=rank, world_size=world)
    # neither attach_ddp nor data_parallel_group: refused, naming both
    m = model()
    opt = OffloadAdamW(m.parameters(), socket=control, session="ddp/refuse%d" % rank)
    m(torch.randn(2, 8)).sum().backward()
    try:
        opt.step()
        raise SystemExit("step() without attach_ddp/data_parallel_group did not refuse")
    except RuntimeError as e:
        if "attach_ddp" not in str(e) or "data_parallel_group" not in str(e):
            raise
    opt.close()

    for run in ("overlapped", "exact", "exact-bucket-view"):
        mode = run.split("-")[0]
        view = run.endswith("bucket-view")
        a, b = model(), model()
        da, db = DDP(a, gradient_as_bucket_view=view), DDP(b, gradient_as_bucket_view=view)
        oa = OffloadAdamW(a.named_parameters(), lr=1e-2, weight_decay=0.01, mode=mode,
                          socket=control, session="ddp/rank%d-%s" % (rank, run))
        oa.attach_ddp(da)
        # Gradient bytes handed over (bytes_d2h counts only copies: exact
        # mode on CPU reads them by reference).
        handed, grad_ready = [0], oa._opt.grad_ready
        oa._opt.grad_ready = lambda t, ptr, n, *a, **k: handed.append(n) or grad_ready(t, ptr, n, *a, **k)
        ob = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.01)
        train(da, oa, rank, steps, mode)
        train(db, ob, rank, steps, mode)
        torch.save({"offload": [p.detach().clone() for p in a.parameters()],
                    "torch": [p.detach().clone() for p in b.parameters()],
                    "handed": sum(handed)},
                   os.path.join(store, "rank%d-%s.pt" % (rank, run)))
        oa.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
