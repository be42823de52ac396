#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Train a tiny GPT on the repository's own documentation with OffloadAdamW.

    spillwayd --config /etc/spillway/spillwayd.json &      # with swap.dirs set
    /usr/bin/python3 examples/finetune_tiny_gpt.py --steps 50

or, with no daemon running, let the example start one on a temporary
directory (its swap under /var/tmp):

    /usr/bin/python3 examples/finetune_tiny_gpt.py --spawn-daemon

The model (a character-level GPT: token and position embeddings, pre-norm
blocks of causal self-attention and an MLP, a head tied to the token
embedding) is defined below. Its AdamW state lives in spillway on the NVMe
tier (--tier cpu keeps it in pinned memory); the loss is printed every step.
Runs on CPU with Debian's python3-torch 1.13.
"""
import argparse
import glob
import json
import math
import os
import shutil
import signal
import socket as _socket
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
try:
    import spillway
    from spillway.torch import OffloadAdamW
except ImportError:  # run from a source checkout
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import spillway
    from spillway.torch import OffloadAdamW


class Block(nn.Module):
    def __init__(self, dim, heads, ctx):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)
        self.register_buffer("mask", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)))

    def attend(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab, ctx=64, dim=64, layers=2, heads=4):
        super().__init__()
        self.ctx = ctx
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, ctx) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as GPT-2
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def corpus():
    """The repository's own prose; generated text when it is not there."""
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    text = "".join(open(f, encoding="utf-8", errors="replace").read() for f in files if os.path.exists(f))
    if len(text) < 10000:
        g = torch.Generator().manual_seed(0)
        words = ["spill", "way", "page", "slot", "pin", "adam", "tensor", "swap", "ring", "daemon"]
        text = " ".join(words[int(i)] for i in torch.randint(len(words), (20000,), generator=g))
    return text


def groups(model, weight_decay):
    """Weight decay on matrices, none on biases, norms and embeddings (as nanoGPT)."""
    decay, plain = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and "pos" not in name else plain).append((name, p))
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": plain, "weight_decay": 0.0}]


def find_daemon():
    """$SPILLWAYD, the spillwayd built beside the library in use (a build tree),
    the installed one, or PATH."""
    if os.environ.get("SPILLWAYD"):
        return os.environ["SPILLWAYD"]
    libdir = os.path.dirname(spillway.library_path() or "")
    for rel in ("../daemon/spillwayd", "../sbin/spillwayd", "../../sbin/spillwayd"):
        cand = os.path.normpath(os.path.join(libdir, rel))
        if libdir and os.access(cand, os.X_OK):
            return cand
    found = shutil.which("spillwayd") or next(
        (p for p in ("/usr/local/sbin/spillwayd", "/usr/sbin/spillwayd") if os.access(p, os.X_OK)), None)
    if not found:
        sys.exit("--spawn-daemon: no spillwayd found (set SPILLWAYD=path/to/spillwayd, "
                 "or build it: meson setup build && ninja -C build)")
    return found


def spawn_daemon():
    """spillwayd on a temporary directory, as the tests do; returns (proc, socket, dirs)."""
    binary = find_daemon()  # before making anything that would need cleaning up
    tmp = tempfile.mkdtemp(prefix="spw-gpt-")
    swap = tempfile.mkdtemp(prefix="spw-gpt-swap-", dir="/var/tmp")
    cfg = {"socket": {"dir": tmp}, "log": {"level": "warn"},
           "pool": {"max_bytes": "512MiB", "session_max_bytes": "256MiB", "require_locked": False},
           "swap": {"dirs": [{"path": swap, "max_bytes": "1GiB"}]}}
    with open(os.path.join(tmp, "spillwayd.json"), "w") as f:
        json.dump(cfg, f)
    proc = subprocess.Popen([binary, "--config", os.path.join(tmp, "spillwayd.json")])
    control = os.path.join(tmp, "control.sock")
    for _ in range(500):
        s = _socket.socket(_socket.AF_UNIX)
        try:
            s.connect(control)
            break
        except OSError:
            if proc.poll() is not None:
                sys.exit("spillwayd exited at start (%s)" % proc.returncode)
            time.sleep(0.02)
        finally:
            s.close()
    return proc, control, (tmp, swap)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--tier", choices=["cpu", "nvme"], default="nvme")
    ap.add_argument("--mode", choices=["overlapped", "exact"], default="exact")
    ap.add_argument("--clip", type=float, default=1.0, help="max grad norm (exact mode); 0: off")
    ap.add_argument("--socket", help="spillwayd's control socket (default: $SPILLWAY_SOCKET)")
    ap.add_argument("--spawn-daemon", action="store_true", help="start a private spillwayd")
    ap.add_argument("--state-dtype", choices=["fp32", "bf16", "int8"], default="fp32",
                    help="the moments' type in spillway (docs/pipeline.md, State dtypes)")
    ap.add_argument("--master-dtype", choices=["fp32", "bf16"], default="fp32",
                    help="the master weights' type in spillway (bf16: stochastic rounding)")
    ap.add_argument("--check", type=float, default=0.0,
                    help="exit 1 unless the loss fell by this factor (for tests)")
    args = ap.parse_args()

    torch.manual_seed(0)
    text = corpus()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    model = TinyGPT(len(chars))

    daemon = None
    if args.spawn_daemon:
        daemon, args.socket, dirs = spawn_daemon()
    try:
        opt = OffloadAdamW(groups(model, 0.1), lr=args.lr, betas=(0.9, 0.95), tier=args.tier,
                           mode=args.mode,
                           max_grad_norm=args.clip if args.mode == "exact" and args.clip > 0 else None,
                           socket=args.socket, session="example/tiny-gpt", state_dtype=args.state_dtype,
                           master_dtype=args.master_dtype)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
        nparams = sum(p.numel() for p in model.parameters())
        print("tiny GPT: %d parameters, %d characters of text, vocabulary %d; "
              "OffloadAdamW tier=%s mode=%s state_dtype=%s master_dtype=%s"
              % (nparams, len(data), len(chars), args.tier, args.mode, args.state_dtype, args.master_dtype))
        g = torch.Generator().manual_seed(1)
        losses = []
        for step in range(1, args.steps + 1):
            starts = torch.randint(len(data) - model.ctx - 1, (args.batch,), generator=g)
            x = torch.stack([data[s:s + model.ctx] for s in starts])
            y = torch.stack([data[s + 1:s + model.ctx + 1] for s in starts])
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x).view(-1, len(chars)), y.view(-1))
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            r = opt.last_result
            print("step %3d  loss %.4f  grad norm %.3f  clip %.3f  %.0f ms"
                  % (step, losses[-1], r.grad_norm, r.clip_coef, 1e3 * (time.perf_counter() - t0)),
                  flush=True)
        st = opt.stats()
        print("spillway: %d steps, %d chunk updates, %.1f MB of gradients out, %d pins (%d fast)"
              % (st["steps"], st["chunks"], st["bytes_d2h"] / 1e6, st["pins"], st["fast_pins"]))
        opt.close()
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(10)
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
    if args.check:
        first, last = losses[0], sum(losses[-3:]) / len(losses[-3:])
        if not last * args.check <= first:
            print("loss fell from %.4f to %.4f: less than %gx" % (first, last, args.check))
            return 1
        print("loss fell from %.4f to %.4f" % (first, last))
    return 0


if __name__ == "__main__":
    sys.exit(main())
