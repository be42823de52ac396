#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Train a GPT whose weights never sit whole in memory: built on the meta
device, its parameters streamed into spillway, at most a budget of them
materialised at once (--budget-ratio times less than all of them).

    /usr/bin/python3 examples/param_offload_gpt.py --spawn-daemon
    /usr/bin/python3 examples/param_offload_gpt.py --socket /run/spillway/control.sock \\
        --layers 24 --dim 1024 --tier nvme

What it does:
  1. builds the model on torch.device("meta"): shapes, no memory;
  2. spillway.torch.offload_parameters(model, tier=..., max_live_bytes=...):
     every parameter gets a home in spillway (the fp32 master that AdamW
     updates), the module keeps empty placeholders;
  3. spillway.torch.load_into(model, weights()): weights() makes one tensor
     at a time (GPT-2's initialisation), each written into spillway and
     dropped: a checkpoint read tensor by tensor works the same way;
  4. trains with OffloadAdamW on the same page set (no second copy); the
     loop is the usual one. Forward and backward fetch each module's
     weights just before it runs, prefetching along the order recorded in
     the first step.
At the end it prints the peak of materialised parameters against the
budget and the prefetch hit rate. Runs on CPU with Debian's torch 1.13.
"""
import argparse
import math
import os
import shutil
import signal
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from finetune_tiny_gpt import corpus, spawn_daemon  # noqa: E402  (the same text, the same daemon)
import spillway.torch as spt  # noqa: E402  (finetune_tiny_gpt put a source checkout on the path)
from spillway.torch import OffloadAdamW  # noqa: E402


class Block(nn.Module):
    def __init__(self, dim, heads, device):
        super().__init__()
        kw = dict(device=device)
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim, **kw), nn.LayerNorm(dim, **kw)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim, **kw), nn.Linear(dim, dim, **kw)
        self.fc, self.out = nn.Linear(dim, 4 * dim, **kw), nn.Linear(4 * dim, dim, **kw)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool).tril()  # no buffer: nothing to load
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, ctx, dim, layers, heads, device=None):
        super().__init__()
        kw = dict(device=device)
        self.ctx = ctx
        self.tok, self.pos = nn.Embedding(vocab, dim, **kw), nn.Embedding(ctx, dim, **kw)
        self.blocks = nn.ModuleList(Block(dim, heads, device) for _ in range(layers))
        self.ln = nn.LayerNorm(dim, **kw)
        self.head = nn.Linear(dim, vocab, bias=False, **kw)
        self.head.weight = self.tok.weight  # tied, as GPT-2

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def weights(shapes, seed=0):
    """GPT-2's initialisation, one tensor at a time: (name, tensor)."""
    g = torch.Generator().manual_seed(seed)
    for name, shape in shapes:
        if name.endswith("bias"):
            yield name, torch.zeros(shape)
        elif ".ln" in name or name.startswith("ln."):
            yield name, torch.ones(shape)
        else:
            yield name, torch.empty(shape).normal_(0.0, 0.02, generator=g)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--tier", choices=["cpu", "nvme"], default="nvme")
    ap.add_argument("--budget-ratio", type=float, default=8.0,
                    help="parameters / max_live_bytes (default 8)")
    ap.add_argument("--prefetch-layers", type=int, default=2)
    ap.add_argument("--socket", help="spillwayd's control socket (default: $SPILLWAY_SOCKET)")
    ap.add_argument("--spawn-daemon", action="store_true", help="start a private spillwayd")
    ap.add_argument("--check", type=float, default=0.0,
                    help="exit 1 unless the loss fell by this factor and the budget held (tests)")
    args = ap.parse_args()

    text = corpus()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)

    model = GPT(len(chars), args.ctx, args.dim, args.layers, args.heads, device="meta")
    shapes = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    nbytes = sum(4 * p.numel() for p in model.parameters())
    budget = int(nbytes / args.budget_ratio)

    daemon = None
    if args.spawn_daemon:
        daemon, args.socket, dirs = spawn_daemon()
    losses = []
    try:
        spt.offload_parameters(model, tier=args.tier, max_live_bytes=budget,
                               prefetch_layers=args.prefetch_layers, socket=args.socket,
                               session="example/param-offload-gpt/params")
        spt.load_into(model, weights(shapes))
        opt = OffloadAdamW(model.named_parameters(), lr=args.lr, betas=(0.9, 0.95),
                           weight_decay=0.1, tier=args.tier, mode="exact", max_grad_norm=1.0,
                           socket=args.socket, session="example/param-offload-gpt/opt")
        print("GPT on meta: %d parameters (%.1f MB fp32) in spillway (tier %s), at most %.1f MB "
              "materialised (1/%g)" % (nbytes // 4, nbytes / 1e6, args.tier, budget / 1e6,
                                       args.budget_ratio), flush=True)
        g = torch.Generator().manual_seed(1)
        for step in range(1, args.steps + 1):
            starts = torch.randint(len(data) - args.ctx - 1, (args.batch,), generator=g)
            x = torch.stack([data[s:s + args.ctx] for s in starts])
            y = torch.stack([data[s + 1:s + args.ctx + 1] for s in starts])
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x).view(-1, len(chars)), y.view(-1))
            loss.backward()
            opt.step()
            losses.append(loss.item())
            print("step %3d  loss %.4f  %.0f ms" % (step, losses[-1], 1e3 * (time.perf_counter() - t0)),
                  flush=True)
        f = spt.offload_stats(model)
        print("parameters: peak %.2f MB materialised (budget %.2f MB, largest tensor %.2f MB), "
              "%d fetches, prefetch hit rate %.2f"
              % (f["peak_materialised_bytes"] / 1e6, budget / 1e6, f["largest_param_bytes"] / 1e6,
                 f["fetches"], f["prefetch_hit_rate"]))
        opt.close()
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(10)
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
    if args.check:
        first, last = losses[0], sum(losses[-3:]) / len(losses[-3:])
        ok = last * args.check <= first
        # one module (a block's fc, weight and bias) may go over
        ok = ok and f["peak_materialised_bytes"] <= budget + f["largest_param_bytes"] + 16 * args.dim
        print("loss fell from %.4f to %.4f%s" % (first, last, "" if ok else ": check failed"))
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
