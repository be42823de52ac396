#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""spillway-bench torch --param-offload: a GPT-shaped model whose
parameters live in spillway (spillway.torch.offload_parameters) against the
same model resident, both trained by OffloadAdamW in exact mode.

    spillway-bench torch --param-offload [--json] [--quick] [--layers L]
        [--width W] [--heads H] [--vocab V] [--seq T] [--batch B]
        [--steps S] [--warmup N] [--tiers cpu,nvme] [--budget-ratio R]
        [--prefetch-layers K] [--device cpu|cuda] [--socket PATH]

For each tier, two trainers (each a process of its own, same seed, same
data): "resident" (the model's parameters in torch, OffloadAdamW's state in
spillway) and "param-offload" (the parameters too in spillway, at most
params/R bytes of them materialised: --budget-ratio, default 6). They step
in turns, one at a time, each round starting one trainer later (timings
drift between runs on these machines: compare inside one run). The
offloaded trainer's counters are reset after the warm-up steps, so the
prefetch figures are those of steps that had a recorded order.

One JSON line per trainer (with --json):
  step_s                 median step time (zero_grad, forward, backward, step)
  resident_step_s        the same for the resident trainer of that tier
  ratio_vs_resident      step_s / resident_step_s
  peak_live_param_bytes  most bytes of parameters the store held at once
                         (budget plus at most one module's parameters)
  peak_materialised_bytes  the same counted by what was really alive
  max_live_bytes         the budget; param_bytes: all parameters
  prefetch_hit_rate      fetches that found the prefetch done or under way,
                         over all fetches that needed the parameter anew
plus the model and the load average.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_step as ts  # noqa: E402  (the shared Daemon, median, load figures)

QUICK = dict(layers=2, width=64, heads=4, vocab=256, seq=32, batch=2, steps=3, warmup=2)
DEFAULT = dict(layers=8, width=256, heads=8, vocab=4096, seq=128, batch=2, steps=6, warmup=2)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="spillway-bench torch --param-offload", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--param-offload", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true")
    for k in DEFAULT:
        ap.add_argument("--" + k, type=int, default=None)
    ap.add_argument("--tiers", default="cpu,nvme")
    ap.add_argument("--budget-ratio", type=float, default=6.0)
    ap.add_argument("--prefetch-layers", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--socket", default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    for k, v in (QUICK if a.quick else DEFAULT).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.tiers = [t for t in a.tiers.split(",") if t]
    if any(t not in ("cpu", "nvme") for t in a.tiers):
        ap.error("--tiers: cpu and/or nvme")
    if a.width % a.heads or a.budget_ratio <= 1:
        ap.error("--width must be a multiple of --heads; --budget-ratio must be > 1")
    return a


def param_count(a):
    w = a.width
    return a.layers * (12 * w * w + 13 * w) + a.vocab * w + a.seq * w + 2 * w


def worker(a, cfg):
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    try:
        import spillway.torch as st
    except ImportError:
        sys.path.insert(0, os.path.join(HERE, "..", "python"))
        import spillway.torch as st

    class Block(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(w), nn.LayerNorm(w)
            self.qkv, self.proj = nn.Linear(w, 3 * w), nn.Linear(w, w)
            self.fc, self.out = nn.Linear(w, 4 * w), nn.Linear(4 * w, w)

        def forward(self, x, mask):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, a.heads, c // a.heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (c // a.heads) ** -0.5
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(a.vocab, a.width), nn.Embedding(a.seq, a.width)
            self.blocks = nn.ModuleList(Block(a.width) for _ in range(a.layers))
            self.ln = nn.LayerNorm(a.width)
            self.head = nn.Linear(a.width, a.vocab, bias=False)
            self.head.weight = self.tok.weight

        def forward(self, idx, mask):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x, mask)
            return self.head(self.ln(x))

    torch.manual_seed(0)
    model = GPT()
    nbytes = sum(p.numel() * 4 for p in model.parameters())
    budget = int(nbytes / a.budget_ratio)
    device = torch.device(a.device)
    if cfg["kind"] == "offload":
        st.offload_parameters(model, tier=cfg["tier"], max_live_bytes=budget, socket=cfg["socket"],
                              prefetch_layers=a.prefetch_layers, device=device,
                              session="bench/params-%s-%d" % (cfg["tier"], os.getpid()))
    else:
        model.to(device)
    opt = st.OffloadAdamW(model.named_parameters(), lr=a.lr, weight_decay=0.01, mode="exact",
                          tier=cfg["tier"], socket=cfg["socket"],
                          session="bench/opt-%s-%s-%d" % (cfg["kind"], cfg["tier"], os.getpid()))
    g = torch.Generator().manual_seed(1)
    data = torch.randint(a.vocab, (a.batch, a.seq + 1), generator=g).to(device)
    x, y = data[:, :-1], data[:, 1:]
    mask = ~torch.tril(torch.ones(a.seq, a.seq, dtype=torch.bool, device=device))

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def answer(obj):
        out.write(json.dumps(obj) + "\n")

    answer({"ready": True, "param_bytes": nbytes, "budget": budget})
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "step":
            sync()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x, mask).reshape(-1, a.vocab), y.reshape(-1))
            loss.backward()
            opt.step()
            sync()
            answer({"step_s": time.perf_counter() - t0, "loss": float(loss)})
        elif cmd == "reset":
            if cfg["kind"] == "offload":
                model.__dict__["_spillway_offload"].store.reset_peaks()
            answer({})
        elif cmd == "stats":
            answer(st.offload_stats(model) if cfg["kind"] == "offload" else {})
        elif cmd == "quit":
            break
    opt.close()
    return 0


class Trainer(ts.Trainer):
    def __init__(self, argv, cfg):
        self.cfg = cfg
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(cfg)] + argv,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.info = self.read()


def main(argv):
    a = parse_args(argv)
    if a.worker:
        return worker(a, json.loads(a.worker))
    params = param_count(a)
    cfgs = [{"kind": k, "tier": t} for t in a.tiers for k in ("resident", "offload")]
    session_bytes = 2 * 16 * params + (256 << 20)
    daemon, socket = None, a.socket
    if socket is None:
        n = 2 * len(cfgs)  # the offloaded trainer holds two sessions
        daemon = ts.Daemon(pool_bytes=session_bytes * n, session_bytes=session_bytes,
                           swap_session_bytes=session_bytes,
                           swap_bytes=session_bytes * n + (256 << 20))
        socket = daemon.control
    trainers = []
    load0 = os.getloadavg()
    try:
        for c in cfgs:
            c["socket"] = socket
            c["label"] = "%s/%s" % (c["kind"], c["tier"])
            c["mode"] = "exact"
            trainers.append(Trainer(argv, c))
        times = [[] for _ in trainers]
        for _ in range(a.warmup):
            for t in trainers:
                t.ask("step")
        for t in trainers:
            t.ask("reset")
        for r in range(a.steps):
            for k in range(len(trainers)):
                i = (r + k) % len(trainers)
                times[i].append(trainers[i].ask("step")["step_s"])
        stats = [t.ask("stats") for t in trainers]
    finally:
        for t in trainers:
            t.close()
        if daemon:
            daemon.stop()
    load1 = os.getloadavg()
    resident = {c["tier"]: ts.median(times[i]) for i, c in enumerate(cfgs) if c["kind"] == "resident"}
    for i, c in enumerate(cfgs):
        step, f = ts.median(times[i]), stats[i]
        row = {"bench": "torch-param-offload", "trainer": c["kind"], "tier": c["tier"],
               "mode": "exact", "device": a.device, "layers": a.layers, "width": a.width,
               "vocab": a.vocab, "seq": a.seq, "batch": a.batch, "warmup": a.warmup,
               "steps": a.steps, "param_bytes": trainers[i].info["param_bytes"],
               "step_s": round(step, 4), "step_s_each": [round(t, 4) for t in times[i]],
               "resident_step_s": round(resident[c["tier"]], 4),
               "ratio_vs_resident": round(step / resident[c["tier"]], 3)}
        if c["kind"] == "offload":
            row.update(max_live_bytes=f["max_live_bytes"], peak_live_param_bytes=f["peak_live_bytes"],
                       peak_materialised_bytes=f["peak_materialised_bytes"],
                       largest_param_bytes=f["largest_param_bytes"],
                       prefetch_layers=a.prefetch_layers,
                       prefetch_hit_rate=round(f["prefetch_hit_rate"], 4),
                       prefetch_hits=f["prefetch_hits"], demand_fetches=f["demand_fetches"],
                       fetches=f["fetches"])
        row["loadavg"] = [round(load0[0], 2), round(load1[0], 2)]
        if a.json:
            print(json.dumps(row), flush=True)
        else:
            print("%-22s step %7.3f s  x%-6s vs resident%s" % (
                c["label"], step, row["ratio_vs_resident"],
                "  peak live %d of %d B, prefetch hits %.2f" % (
                    f["peak_live_bytes"], f["max_live_bytes"], f["prefetch_hit_rate"])
                if c["kind"] == "offload" else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
