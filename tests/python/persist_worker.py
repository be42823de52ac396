# SPDX-License-Identifier: MIT
"""The trainer test_persist kills: a small torch model trained with
OffloadAdamW(persistent=True); the batch of step N is a function of N.
Started again after a SIGKILL it goes on from opt.resumed_step + 1, as
docs/persistent.md tells a trainer to. At the end it saves the model's
and the optimizer's state_dict to OUT.

    persist_worker.py SOCKET SESSION MODE TIER STEPS PERSISTENT OUT [wide|raise5]

wide: another model (a wider hidden layer); raise5: an exception in the
training loop before step 5 ends the process the way a bug would;
ckpt:K:DIR: opt.save_checkpoint(DIR) after step K ("checkpoint S"); a
further dtype:D trains with state_dtype=D.
slow: 20 ms between steps, and "reconnects N" at the end (opt.reconnects:
daemon restarts ridden out in this process); flush:K: slow, and
opt.flush() after step K ("flushed S"); a RewoundError (the daemon came
back from a crash at the flushed step) sends the loop back there
("rewound S").

load:K:PATH: after step K the optimizer state is saved to PATH with its
moments halved (another checkpoint), then loaded (opt.load_state_dict,
"loaded K"); started with nothing resumed while PATH exists, the worker
does what a restart script does: it loads PATH again and goes on from
step K + 1 ("reloaded K"). SPILLWAY_TEST_KILL_AT_WRITE_PAGE=N in the
environment kills it inside that load.

Exit status 3: the session was left mid-update (ESTALE), nothing resumed.
"""
import errno
import os
import sys
import time

import spwtest  # noqa: F401  (import path)
import torch
import torch.nn as nn
import spillway
import spillway.torch
from spillway.torch import OffloadAdamW


def model(wide):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 96 if wide else 64), nn.Tanh(), nn.Linear(96 if wide else 64, 10))


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)


def main():
    sock, session, mode, tier, steps, persistent, out = sys.argv[1:8]
    extra = sys.argv[8] if len(sys.argv) > 8 else ""
    # dtype:D (a last argument): state_dtype=D; dtype:D/G also grad_store_dtype=G.
    dtype = sys.argv[9].split(":", 1)[1] if len(sys.argv) > 9 and sys.argv[9].startswith("dtype:") else "fp32"
    dtype, _, gstore = dtype.partition("/")
    wide = extra == "wide"
    steps, persistent = int(steps), persistent == "1"
    torch.set_num_threads(1)
    m = model(wide)
    kw = dict(session=session, persistent=True, lease=120) if persistent else {}
    try:
        opt = OffloadAdamW(m.named_parameters(), lr=1e-2, mode=mode, tier=tier, socket=sock,
                           page_size=64 << 10, state_dtype=dtype, grad_store_dtype=gstore or "fp32", **kw)
    except spillway.SpillwayError as e:
        if e.errno == errno.ESTALE:
            print("stale: %s" % e, file=sys.stderr)
            sys.stdout.flush()
            os._exit(3)
        raise
    if opt.resumed_step:
        print("resumed %d" % opt.resumed_step, flush=True)
    if extra.startswith("flush:"):
        return flushing(m, opt, steps, int(extra.split(":")[1]), out)
    first = opt.resumed_step + 1
    load_at, load_path = (int(extra.split(":")[1]), extra.split(":", 2)[2]) if extra.startswith("load:") \
        else (0, None)
    if load_at and not opt.resumed_step and os.path.exists(load_path):
        # Nothing resumed: the restart code loads the checkpoint.
        ck = torch.load(load_path)
        m.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        first = load_at + 1
        print("reloaded %d" % load_at, flush=True)
    # The three lines a trainer needs: start after the committed step.
    for step in range(first, steps + 1):
        if extra == "raise5" and step == 5:
            raise RuntimeError("a bug in the training loop")
        x, y = batch(step)
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
        print("step %d" % step, flush=True)
        if step == load_at:
            sd = opt.state_dict()
            for st in sd["state"].values():
                st["exp_avg"] = st["exp_avg"] * 0.5
            torch.save({"model": m.state_dict(), "opt": sd}, load_path)
            opt.load_state_dict(torch.load(load_path)["opt"])
            print("loaded %d" % step, flush=True)
        if extra.startswith("ckpt:") and step == int(extra.split(":")[1]):
            r = opt.save_checkpoint(extra.split(":", 2)[2])
            print("checkpoint %d" % r["committed_step"], flush=True)
        time.sleep(0.02 if extra == "slow" else 0.002)  # the data loader's turn
    if extra == "slow":
        print("reconnects %d" % getattr(opt, "reconnects", 0), flush=True)
    torch.save({"model": m.state_dict(), "opt": opt.state_dict()}, out)
    opt.close()


def flushing(m, opt, steps, flush_at, out):
    step = opt.resumed_step
    while step < steps:
        step += 1
        x, y = batch(step)
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(m(x), y).backward()
        try:
            opt.step()
        except spillway.torch.RewoundError as e:  # the three lines docs/persistent.md shows
            print("rewound %d" % e.resumed_step, flush=True)
            step = e.resumed_step
            continue
        print("step %d" % step, flush=True)
        if step == flush_at:
            print("flushed %d" % opt.flush(), flush=True)
        time.sleep(0.02)
    torch.save({"model": m.state_dict(), "opt": opt.state_dict()}, out)
    print("reconnects %d" % getattr(opt, "reconnects", 0), flush=True)
    opt.close()


if __name__ == "__main__":
    main()
