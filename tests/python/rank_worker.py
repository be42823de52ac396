# SPDX-License-Identifier: MIT
"""One data-parallel rank for test_multirank.py (not a test by itself).

usage: rank_worker.py RANK WORLD STOREDIR CONTROL_SOCKET STEPS

Trains a small model with OffloadAdamW (session "dp/rank<RANK>"), its
gradients averaged across ranks by torch.distributed (gloo) before spillway
gets them, on data of its own; saves its parameters to
STOREDIR/rank<RANK>.pt, writes STOREDIR/ready<RANK> and waits for
STOREDIR/go. Then rank 0 (whose partner may be dead by now) steps once more
on its own and saves STOREDIR/after0.pt.
"""
import os
import sys
import time

import spwtest  # noqa: F401  (import path)
import torch
import torch.distributed as dist
import torch.nn as nn
from spillway.torch import OffloadAdamW


def model():
    torch.manual_seed(11)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(12, 8, generator=g), torch.randn(12, 2, generator=g)


def main():
    rank, world, store, control, steps = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                          sys.argv[4], int(sys.argv[5]))
    dist.init_process_group("gloo", init_method="file://" + os.path.join(store, "rendezvous"),
                            rank=rank, world_size=world)
    m = model()
    opt = OffloadAdamW(m.parameters(), lr=1e-2, weight_decay=0.01, socket=control,
                       session="dp/rank%d" % rank, data_parallel_group="world")
    for step in range(steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    torch.save([p.detach().clone() for p in m.parameters()], os.path.join(store, "rank%d.pt" % rank))
    open(os.path.join(store, "ready%d" % rank), "w").close()
    while not os.path.exists(os.path.join(store, "go")):
        time.sleep(0.02)
    if rank == 0:
        opt.data_parallel_group = None  # the partner is gone: go on alone
        x, y = batch(0, steps)
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
        torch.save([p.detach().clone() for p in m.parameters()], os.path.join(store, "after0.pt"))
        opt.close()


if __name__ == "__main__":
    main()
