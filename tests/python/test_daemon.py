# SPDX-License-Identifier: MIT
"""OffloadAdamW when spillwayd stops answering or dies.

- SIGSTOP: with timeout=2 (seconds), the training step fails with
  SpillwayError(ETIMEDOUT) in bounded time, the message naming what was
  waited for and the daemon's pid; close() is bounded too; state_dict()
  then says what is lost; after SIGCONT the daemon shuts down cleanly.
- SIGKILL: state_dict() says what was lost (the moments lived in the
  daemon) and what the trainer still has.
"""
import errno
import os
import signal
import time
import unittest

import spwtest
import spillway
import torch
import torch.nn as nn
from spillway.torch import OffloadAdamW


def model():
    torch.manual_seed(51)
    return nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 64))


def train_step(m, opt):
    x = torch.randn(8, 64)
    opt.zero_grad()
    m(x).pow(2).mean().backward()
    opt.step()


class Trouble(unittest.TestCase):
    def test_stopped_daemon(self):
        d = spwtest.Daemon(swap=False)
        stopped = False
        try:
            m = model()
            # 2 s, not less: the step before SIGSTOP runs under the same
            # timeout, and a loaded machine may keep a running daemon from
            # answering for a while.
            opt = OffloadAdamW(m.named_parameters(), mode="exact", timeout=2.0, window=1,
                               page_size=64 << 10, socket=d.control)
            train_step(m, opt)
            os.kill(d.proc.pid, signal.SIGSTOP)
            stopped = True
            t0 = time.monotonic()
            with self.assertRaises(spillway.SpillwayError) as cm:
                train_step(m, opt)
            took = time.monotonic() - t0
            self.assertLess(took, 20.0)  # bounded: the timeout and some, not a hang
            self.assertEqual(cm.exception.errno, errno.ETIMEDOUT)
            msg = str(cm.exception)
            self.assertIn("pid %d" % d.proc.pid, msg)
            self.assertIn("no progress for 2000 ms", msg)
            with self.assertRaises(RuntimeError) as cm:
                opt.state_dict()
            self.assertIn("lost", str(cm.exception))
            t0 = time.monotonic()
            opt.close()
            self.assertLess(time.monotonic() - t0, 20.0)
            print("stopped daemon: failed after %.2f s: %s" % (took, msg))
        finally:
            if stopped:
                os.kill(d.proc.pid, signal.SIGCONT)
            self.assertEqual(d.stop(), 0)

    def test_killed_daemon_state_dict(self):
        d = spwtest.Daemon(swap=False)
        try:
            m = model()
            opt = OffloadAdamW(m.named_parameters(), socket=d.control)
            train_step(m, opt)
            train_step(m, opt)
            d.proc.kill()
            d.proc.wait()
            with self.assertRaises(RuntimeError) as cm:
                opt.state_dict()
            msg = str(cm.exception)
            self.assertIn("4 parameters", msg)
            self.assertIn("step 2", msg)
            self.assertIn("model.state_dict()", msg)
            opt.close()
        finally:
            d.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
