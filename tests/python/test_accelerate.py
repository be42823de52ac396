"""OffloadAdamW in a HuggingFace accelerate loop (CPU): prepared with its
model and an LR scheduler, accelerator.backward, accelerator.clip_grad_norm_
(torch's clip on .grad), step and zero_grad through AcceleratedOptimizer,
against torch.optim.AdamW in the same loop without accelerate; then
save_state/load_state round-trip the optimizer's state. Registered only
where the test python has accelerate (scripts/test-torch2 installs it;
Debian has no package)."""
import copy
import tempfile
import unittest

import spwtest
import torch
import torch.nn as nn
from accelerate import Accelerator
from spillway.torch import OffloadAdamW


class Accelerate(spwtest.DaemonCase):
    def test_loop_and_state(self):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
        ref = copy.deepcopy(m)
        acc = Accelerator(cpu=True)
        opt = OffloadAdamW(m.parameters(), lr=1e-2, mode="exact", socket=self.d.control)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
        m, aopt, sched = acc.prepare(m, opt, sched)
        ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
        rsched = torch.optim.lr_scheduler.LambdaLR(ropt, lambda s: 1.0 / (1 + s))
        gen = torch.Generator().manual_seed(1)
        try:
            for step in range(10):
                x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 2, generator=gen)
                acc.backward(nn.functional.mse_loss(m(x), y))
                acc.clip_grad_norm_(m.parameters(), 0.5)
                aopt.step()
                sched.step()
                aopt.zero_grad()
                nn.functional.mse_loss(ref(x), y).backward()
                nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
                ropt.step()
                rsched.step()
                ropt.zero_grad()
                for pa, pb in zip(acc.unwrap_model(m).parameters(), ref.parameters()):
                    self.assertTrue(torch.allclose(pa, pb, rtol=1e-5, atol=1e-6),
                                    "step %d: %g" % (step, (pa - pb).abs().max()))
            self.assertFalse(aopt.step_was_skipped)
            before = opt.state_dict()
            with tempfile.TemporaryDirectory() as t:
                acc.save_state(t)
                x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 2, generator=gen)
                acc.backward(nn.functional.mse_loss(m(x), y))
                aopt.step()  # moves the state on, so that load_state has something to undo
                acc.load_state(t)
            after = opt.state_dict()
            for i, st in before["state"].items():
                for k in ("exp_avg", "exp_avg_sq"):
                    self.assertTrue(torch.equal(st[k], after["state"][i][k]), "%d %s" % (i, k))
        finally:
            opt.close()


if __name__ == "__main__":
    unittest.main()
