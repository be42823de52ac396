# SPDX-License-Identifier: MIT
"""A kill -9 of spillwayd under a torch trainer after opt.flush() at step
10: the next daemon (same state directory, same socket path) brings the
session back at step 10; the trainer's step() reconnects and raises
spillway.torch.RewoundError(resumed_step=10), the trainer's loop goes back
to step 11's data (the three lines docs/persistent.md shows), and the same
process ends with a state_dict torch.equal to an uninterrupted run's.
"""
import os
import subprocess
import sys
import time
import unittest

import spwtest
from test_reconnect import Restarts, STEPS, WORKER


class CrashTest(Restarts):

    def test_crash(self):
        d = spwtest.Daemon(swap=True, extra=self.extra, sock_dir=self.sock)
        ref, run = os.path.join(self.tmp, "ref.pt"), os.path.join(self.tmp, "run.pt")
        p = self.spawn(d.control, "pyrc/ref", "cpu", False, ref)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err)
        q = subprocess.Popen([sys.executable, WORKER, d.control, "pyrc/crash", "exact", "cpu", str(STEPS), "1",
                              run, "flush:10"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = ""
        while not seen.endswith("step 14\n"):
            line = q.stdout.readline()
            self.assertTrue(line, q.stderr.read() if q.poll() is not None else "")
            seen += line
        d.proc.kill()  # kill -9: no save; the flush at step 10 is what is left
        d.proc.wait()
        d.cleanup()
        time.sleep(0.3)
        d = spwtest.Daemon(swap=True, extra=self.extra, sock_dir=self.sock)
        try:
            out, err = q.communicate(timeout=120)
            out = seen + out
            self.assertEqual(q.returncode, 0, err)
            self.assertIn("flushed 10\n", out)
            self.assertIn("rewound 10", out, err)
            self.assertIn("reconnects 1", out, err)
            self.same(ref, run)
        finally:
            self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    unittest.main()
