# SPDX-License-Identifier: MIT
"""Models for the parameter-offload tests, and the paired run: the same
model trained by OffloadAdamW with and without offload_parameters."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as ckpt

import spillway.torch as st
from spillway.torch import OffloadAdamW


class MLP(nn.Module):
    def __init__(self, d=24, twice=False, frozen=False):
        super().__init__()
        self.fc1 = nn.Linear(12, d)
        self.fc2 = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 5)
        self.twice = twice
        if frozen:
            for p in self.fc1.parameters():
                p.requires_grad_(False)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        h = torch.tanh(self.fc2(h))
        if self.twice:  # the same module twice in one forward
            h = torch.tanh(self.fc2(h))
        return self.head(self.norm(h))


class Deep(nn.Module):
    """Many equal layers: a model many times a small live budget."""

    def __init__(self, layers=32, d=128):
        super().__init__()
        self.inp = nn.Linear(12, d)
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))

    def forward(self, x):
        h = self.inp(x)
        for f in self.layers:
            h = torch.tanh(f(h))
        return h


class Block(nn.Module):
    def __init__(self, d, heads, dropout, device=None):
        super().__init__()
        kw = dict(device=device)
        self.ln1, self.ln2 = nn.LayerNorm(d, **kw), nn.LayerNorm(d, **kw)
        self.qkv, self.proj = nn.Linear(d, 3 * d, **kw), nn.Linear(d, d, **kw)
        self.fc, self.out = nn.Linear(d, 4 * d, **kw), nn.Linear(4 * d, d, **kw)
        self.heads, self.drop = heads, nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        a = a.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (a @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    """A decoder with the lm head tied to the token embedding."""

    def __init__(self, vocab=64, d=32, layers=3, heads=4, ctx=16, checkpoint=None, dropout=0.0,
                 device=None):
        super().__init__()
        kw = dict(device=device)
        self.wte, self.wpe = nn.Embedding(vocab, d, **kw), nn.Embedding(ctx, d, **kw)
        self.blocks = nn.ModuleList(Block(d, heads, dropout, device) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, **kw)
        self.lm_head = nn.Linear(d, vocab, bias=False, **kw)
        self.lm_head.weight = self.wte.weight
        self.checkpoint = checkpoint   # None, "reentrant" or "non-reentrant"

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            if self.checkpoint and self.training and torch.is_grad_enabled():
                x = ckpt.checkpoint(b, x, use_reentrant=self.checkpoint == "reentrant")
            else:
                x = b(x)
        return self.lm_head(self.ln_f(x))


def batches(kind, steps, seed=2):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        if kind == "gpt":
            x = torch.randint(0, 64, (2, 16), generator=g)
            out.append((x, torch.randint(0, 64, (2, 16), generator=g)))
        else:
            out.append((torch.randn(8, 12, generator=g), torch.randint(0, 5, (8,), generator=g)))
    return out


def loss_of(kind, out, y):
    if kind == "gpt":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return F.cross_entropy(out, y)


def full_params(model, offloaded):
    """name -> a copy of each parameter's values (each tensor once)."""
    if offloaded:
        with st.gather_parameters(model):
            return {n: p.detach().clone() for n, p in model.named_parameters()}
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def train(model, kind, data, offload, socket, eval_every=0, switch=False, mode="exact", clip=None,
          accum=1, dtype=None, **okw):
    """Trains model on data with OffloadAdamW (exact mode, cpu tier), with
    or without parameter offload. Returns what a test compares: outputs,
    losses, gradients and parameters per step."""
    if offload:
        st.offload_parameters(model, socket=socket, mode=mode, accumulation_steps=accum, **okw)
    # two param groups (by name: an offloaded parameter's shape is a
    # placeholder's) and a schedule, as a real loop has
    named = list(model.named_parameters())
    is_plain = [n.endswith("bias") or ".ln" in n or "norm" in n for n, _ in named]
    plain = [np for np, x in zip(named, is_plain) if x]
    decay = [np for np, x in zip(named, is_plain) if not x]
    opt = OffloadAdamW([{"params": decay}, {"params": plain, "weight_decay": 0.0, "lr": 2e-2}],
                       lr=1e-2, weight_decay=0.01, mode=mode, accumulation_steps=accum,
                       tier=okw.get("tier", "cpu"), socket=socket)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    rec = {"out": [], "loss": [], "grads": [], "params": [], "eval": [], "norm": []}
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    if offload:
        h = model.__dict__["_spillway_offload"]
        h.store.grad_log = {}
    try:
        for i, (x, y) in enumerate(data):
            if switch:
                model.train(i % 2 == 0)
            torch.manual_seed(100 + i)
            opt.zero_grad(set_to_none=True)
            # accum backwards per step, on slices of the batch
            if dtype is not None and x.is_floating_point():
                x = x.to(dtype)
            for xs, ys in zip(x.chunk(accum), y.chunk(accum)):
                out = model(xs)
                loss = loss_of(kind, out, ys)
                loss.backward()
            if offload:  # what went to spillway, summed as torch sums p.grad
                log = h.store.grad_log
                grads = {}
                for n in names:
                    for g in log.get(h.names[n].name, []):
                        grads[n] = g if n not in grads else grads[n] + g
                h.store.grad_log = {}
            else:
                grads = {n: p.grad.clone() for n, p in model.named_parameters()
                         if p.grad is not None}
            if clip:  # torch's clip_grad_norm_, computed in spillway's pass
                rec["norm"].append(opt.clip_grad_norm_(clip))
            opt.step()
            sched.step()
            rec["out"].append(out.detach().clone())
            rec["loss"].append(loss.detach().clone())
            rec["grads"].append(grads)
            rec["params"].append(full_params(model, offload))
            if eval_every and i % eval_every == 0:
                model.eval()
                with torch.no_grad():
                    rec["eval"].append(model(data[0][0]).clone())
                model.train()
        rec["state"] = opt.state_dict()
    finally:
        opt.close()
    return rec


def pair(test, make, kind, steps=4, **kw):
    """Trains make() twice, resident and offloaded, and asserts every
    output, loss, gradient and parameter equal bit for bit."""
    torch.manual_seed(1)
    a = make()
    b = copy.deepcopy(a)
    data = batches(kind, steps)
    okw = {k: kw.pop(k) for k in list(kw) if k in ("max_live_bytes", "prefetch_layers", "tier",
                                                        "prefetch_bytes")}
    ra = train(a, kind, data, False, test.d.control, tier=okw.get("tier", "cpu"), **kw)
    rb = train(b, kind, data, True, test.d.control, **okw, **kw)
    for what in ("out", "loss", "eval", "norm"):
        test.assertEqual(len(ra[what]), len(rb[what]))
        for i, (u, v) in enumerate(zip(ra[what], rb[what])):
            test.assertTrue(torch.equal(u, v), "%s of step %d differs: %s" % (what, i, (u - v).abs().max()))
    for i in range(steps):
        test.assertEqual(sorted(ra["grads"][i]), sorted(rb["grads"][i]), "gradients of step %d" % i)
        for n in ra["grads"][i]:
            test.assertTrue(torch.equal(ra["grads"][i][n], rb["grads"][i][n]),
                            "gradient of %s at step %d differs" % (n, i))
        test.assertEqual(sorted(ra["params"][i]), sorted(rb["params"][i]))
        for n in ra["params"][i]:
            test.assertTrue(torch.equal(ra["params"][i][n], rb["params"][i][n]),
                            "parameter %s after step %d differs" % (n, i))
    # the optimizer's state (read out of spillway) is the same too
    sa, sb = ra["state"], rb["state"]
    test.assertEqual(sorted(sa["state"]), sorted(sb["state"]))
    for i in sa["state"]:
        for k in ("step", "exp_avg", "exp_avg_sq"):
            test.assertTrue(torch.equal(sa["state"][i][k], sb["state"][i][k]), "state %d %s" % (i, k))
    # the run changed the parameters (so equality means something)
    first = ra["params"][0]
    test.assertTrue(any(not torch.equal(first[n], ra["params"][-1][n]) for n in first))
    return b, rb
