# SPDX-License-Identifier: MIT
"""The trainer test_ride_through restarts spillwayd under: a small torch
model trained with OffloadAdamW(mode='exact'), clipping with
opt.clip_grad_norm_(1.0) and/or stepping through GradScaler; the batch of
step N is a function of N. It prints "step N norm X" after each step (X:
what clip_grad_norm_ returned, or "-"), and at the end "reconnects N"
(opt.reconnects) and saves the model's and the optimizer's state_dict to
OUT.

    ride_worker.py SOCKET SESSION VARIANT TIER STEPS PERSISTENT OUT [PAUSE:K [flush:F]] [given-session]

VARIANT: clip (backward, opt.clip_grad_norm_(1.0), opt.step()), scaler
(GradScaler: scaler.scale(loss).backward(), scaler.step(opt), the
gradients unscaled by the optimizer) or scaler-clip (scaler.unscale_(opt),
opt.clip_grad_norm_(1.0), scaler.step(opt)). The GradScaler is
test_amp's CpuGradScaler (torch 1.13's is CUDA-only).

PAUSE:K: at step K the trainer stops at PAUSE, prints "paused K" and
waits for a line on stdin (the test restarts the daemon meanwhile), then
goes on with the call PAUSE names, which meets the daemon gone:
  backward    just before backward (its hooks hand gradients over)
  clip        just before opt.clip_grad_norm_ (after backward)
  in-clip     inside opt.clip_grad_norm_, the gradients handed over and
              the step not yet ended
  step        just before opt.step() / scaler.step(opt) (after
              clip_grad_norm_ ended the step)
  scaler      just before scaler.step(opt) (variant scaler)

flush:F: opt.flush() after step F ("flushed S"); a RewoundError (the
daemon came back from a kill -9 at the flushed step) sends the loop back
there ("rewound S"), the GradScaler to its state_dict of then.

given-session (with PERSISTENT 1): the worker makes the session itself,
spillway.Session(SESSION, persistent=True), and passes it to OffloadAdamW
(session=); at the end it prints "given session committed N reattached R"
from that very object's info(), which holds what its last attach found:
after a restart, the takeover (R 1) at the step the daemon saved (the
optimizer's session is that object: the caller's handle was reconnected
in place).
"""
import sys

import spwtest  # noqa: F401  (import path)
import torch
import torch.nn as nn
import spillway
from spillway.torch import OffloadAdamW, RewoundError
from test_amp import CpuGradScaler


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 10))


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)


def pause(step):
    print("paused %d" % step, flush=True)
    sys.stdin.readline()


def pause_inside_clip(opt, step):
    """Stops the next clip_grad_norm_ after its gradients are handed over,
    just before it ends the step (a test-only wrapper of _end)."""
    end = opt._end

    def paused_end():
        del opt._end  # once
        pause(step)
        return end()
    opt._end = paused_end


def main():
    sock, session, variant, tier, steps, persistent, out = sys.argv[1:8]
    where, at, flush_at, given = "", 0, 0, None
    for arg in sys.argv[8:]:
        if arg.startswith("flush:"):
            flush_at = int(arg.split(":")[1])
        elif arg == "given-session":
            given = spillway.Session(session, region_bytes=8 << 20, page_size=64 << 10, socket=sock,
                                     swap_bytes=0 if tier == "cpu" else None, persistent=True, lease_s=120)
        else:
            where, at = arg.split(":")
    at, steps = int(at), int(steps)
    torch.set_num_threads(1)
    m = model()
    kw = dict(session=session, persistent=True, lease=120) if persistent == "1" else {}
    if given is not None:
        kw = dict(session=given, persistent=True)  # the Session's own lease_s
    opt = OffloadAdamW(m.named_parameters(), lr=1e-2, mode="exact", tier=tier, socket=sock,
                       page_size=64 << 10, **kw)
    scaler = CpuGradScaler(init_scale=2.0 ** 10, growth_interval=3) if variant != "clip" else None
    flushed_scaler = None
    step = 0
    while step < steps:
        step += 1
        x, y = batch(step)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(m(x), y)
        if step == at and where == "backward":
            pause(step)
        (scaler.scale(loss) if scaler else loss).backward()
        if variant == "scaler-clip":
            scaler.unscale_(opt)
        norm = "-"
        try:
            if variant != "scaler":
                if step == at and where == "clip":
                    pause(step)
                if step == at and where == "in-clip":
                    pause_inside_clip(opt, step)
                norm = repr(float(opt.clip_grad_norm_(1.0)))
            if step == at and where in ("step", "scaler"):
                pause(step)
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
        except RewoundError as e:
            # The daemon came back at the last flush: the loop goes back
            # there, and so does the GradScaler (the trainer's state).
            if scaler:
                scaler.update()
                scaler.load_state_dict(flushed_scaler)
            print("rewound %d" % e.resumed_step, flush=True)
            step = e.resumed_step
            continue
        print("step %d norm %s" % (step, norm), flush=True)
        if step == flush_at:
            print("flushed %d" % opt.flush(), flush=True)
            flushed_scaler = scaler.state_dict() if scaler else None
    print("reconnects %d" % getattr(opt, "reconnects", 0), flush=True)
    if given is not None:
        info = given.info()
        assert opt.session is given
        print("given session committed %d reattached %d" % (info["committed_step"], info["reattached"]),
              flush=True)
    torch.save({"model": m.state_dict(), "opt": opt.state_dict(),
                "scale": float(scaler.get_scale()) if scaler else 1.0}, out)
    opt.close()
    if given is not None:
        given.close()


if __name__ == "__main__":
    main()
