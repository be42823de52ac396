# SPDX-License-Identifier: MIT
"""Two data-parallel ranks (torch.distributed, gloo, one machine), each with
its own session on one shared spillwayd.

Proves: both ranks step through spillway and end with identical
parameters, equal to a single-process torch.optim.AdamW fed the averaged
gradients; status shows both sessions; SIGKILLing rank 1 removes its
session only, while the daemon and rank 0's session stay and rank 0 goes
on stepping through spillway; the daemon then shuts down cleanly.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import spwtest
import spillway
import torch
import torch.nn as nn

sys.path.insert(0, spwtest.HERE)
import rank_worker  # noqa: E402

STEPS = 8


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


class TwoRanks(unittest.TestCase):
    def setUp(self):
        self.d = spwtest.Daemon(swap=False)
        self.store = tempfile.mkdtemp(prefix="spw-py-dp-")
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(self.store, ignore_errors=True)
        self.d.stop()

    def sessions(self):
        return {s["name"] for s in spillway.status(self.d.control).get("sessions", [])}

    def test_two_ranks(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        for r in range(2):
            self.procs.append(subprocess.Popen(
                [sys.executable, os.path.join(spwtest.HERE, "rank_worker.py"), str(r), "2",
                 self.store, self.d.control, str(STEPS)], env=env))
        ready = lambda: all(os.path.exists(os.path.join(self.store, "ready%d" % r)) for r in range(2))
        def alive_or_fail():
            for p in self.procs:
                if p.poll() not in (None, 0):
                    raise AssertionError("a rank exited with %s" % p.returncode)
            return ready()
        wait_for(alive_or_fail, 90, "both ranks to train")

        p0 = torch.load(os.path.join(self.store, "rank0.pt"))
        p1 = torch.load(os.path.join(self.store, "rank1.pt"))
        for a, b in zip(p0, p1):
            self.assertTrue(torch.equal(a, b), "ranks diverged by %g" % (a - b).abs().max().item())

        # the same training in one process with torch.optim.AdamW
        m = rank_worker.model()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)
        for step in range(STEPS):
            grads = []
            for r in range(2):
                m.zero_grad()
                x, y = rank_worker.batch(r, step)
                nn.functional.mse_loss(m(x), y).backward()
                grads.append([p.grad.clone() for p in m.parameters()])
            for p, g0, g1 in zip(m.parameters(), *grads):
                p.grad = (g0 + g1) / 2
            opt.step()
        for a, b in zip(p0, m.parameters()):
            self.assertTrue(torch.allclose(a, b, rtol=1e-5, atol=1e-6),
                            "rank 0 vs torch.optim.AdamW: %g" % (a - b).abs().max().item())

        self.assertTrue({"dp/rank0", "dp/rank1"} <= self.sessions())

        self.procs[1].send_signal(signal.SIGKILL)
        self.procs[1].wait()
        wait_for(lambda: "dp/rank1" not in self.sessions(), 10, "rank 1's session to end")
        self.assertTrue(self.d.alive())
        self.assertIn("dp/rank0", self.sessions())

        open(os.path.join(self.store, "go"), "w").close()
        self.assertEqual(self.procs[0].wait(60), 0)
        after = torch.load(os.path.join(self.store, "after0.pt"))
        self.assertTrue(any(not torch.equal(a, b) for a, b in zip(after, p0)),
                        "rank 0's step after the kill changed nothing")
        self.assertNotIn("dp/rank0", self.sessions())
        self.assertTrue(self.d.alive())
        self.assertEqual(self.d.stop(), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
