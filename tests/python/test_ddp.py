# SPDX-License-Identifier: MIT
"""OffloadAdamW under DistributedDataParallel (gloo, two ranks, one shared
spillwayd), through opt.attach_ddp(ddp_model).

Proves: each rank's parameters are bit-identical to the other's after
training (the ranks step on DDP's averages, not their own gradients),
and close to DDP + torch.optim.AdamW (torch.allclose(rtol=1e-5,
atol=1e-6)), in overlapped mode and in exact mode with no_sync
micro-batches and clip_grad_norm_ (also with gradient_as_bucket_view);
and that with two ranks and neither
attach_ddp nor data_parallel_group, step() refuses (see ddp_worker.py).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import spwtest
import torch

STEPS = 8


class Ddp(unittest.TestCase):
    def setUp(self):
        self.d = spwtest.Daemon(swap=False)
        self.store = tempfile.mkdtemp(prefix="spw-py-ddp-")

    def tearDown(self):
        shutil.rmtree(self.store, ignore_errors=True)
        self.assertEqual(self.d.stop(), 0)

    def test_two_ranks(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        procs = [subprocess.Popen([sys.executable, os.path.join(spwtest.HERE, "ddp_worker.py"),
                                   str(r), "2", self.store, self.d.control, str(STEPS)], env=env)
                 for r in range(2)]
        try:
            for p in procs:
                self.assertEqual(p.wait(100), 0, "a rank failed")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        for mode in ("overlapped", "exact", "exact-bucket-view"):
            r0, r1 = (torch.load(os.path.join(self.store, "rank%d-%s.pt" % (r, mode)))
                      for r in range(2))
            self.assertGreater(r0["handed"], 0)
            worst = 0.0
            for i, (a, b, t) in enumerate(zip(r0["offload"], r1["offload"], r0["torch"])):
                self.assertTrue(torch.equal(a, b), "%s: ranks differ by %g at parameter %d"
                                % (mode, (a - b).abs().max().item(), i))
                d = (a - t).abs().max().item()
                worst = max(worst, d)
                self.assertTrue(torch.allclose(a, t, rtol=1e-5, atol=1e-6),
                                "%s: parameter %d vs DDP + torch.optim.AdamW: %g" % (mode, i, d))
            # the torch reference itself moved the same way on both ranks
            for a, b in zip(r0["torch"], r1["torch"]):
                self.assertTrue(torch.equal(a, b))
            print("parity DDP 2 ranks, %-17s max |offload - torch| = %.3g" % (mode, worst))


if __name__ == "__main__":
    unittest.main(verbosity=2)
