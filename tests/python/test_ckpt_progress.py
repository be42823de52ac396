# SPDX-License-Identifier: MIT
"""A checkpoint's progress (issue 11): while the daemon copies, the status
document's session entry says checkpoint "copying" with
checkpoint_bytes_done rising to checkpoint_bytes_total, which is what the
result's bytes and bytes_total end at; `spillwayctl checkpoint` draws a
progress line on a terminal (bytes so far of the total, then 100%) and
prints only its result line when stdout is not a terminal; `spillwayctl
restore` ends its line at 100% of the restore's bytes_total.

The daemon runs with SPILLWAY_CHECKPOINT_STALL_MS (fault-injection builds:
a sleep after each page copied), so the copy lasts long enough to be seen
whatever the machine's speed.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import spwtest
import torch
import torch.nn as nn
import spillway
from spillway.torch import OffloadAdamW

sys.path.insert(0, os.path.join(spwtest.SRC, "tests"))
from ptyrun import run_on_pty  # noqa: E402

CTL = os.environ.get("SPILLWAYCTL") or os.path.join(os.path.dirname(spillway.library_path()), "spillwayctl")
SESSION = "py/ckprogress"


class ProgressTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        os.environ["SPILLWAY_CHECKPOINT_STALL_MS"] = "15"
        try:
            cls.d = spwtest.Daemon(swap=True)
        finally:
            del os.environ["SPILLWAY_CHECKPOINT_STALL_MS"]
        cls.tmp = tempfile.mkdtemp(prefix="spw-ckprog-")
        torch.manual_seed(0)
        torch.set_num_threads(1)
        # About 100 pages of 64 KiB (p, m, v and exact mode's gradients).
        cls.m = nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 256))
        cls.opt = OffloadAdamW(cls.m.parameters(), mode="exact", tier="nvme", socket=cls.d.control,
                               page_size=64 << 10, session=SESSION, persistent=True, lease=60)
        cls.m(torch.randn(4, 256)).sum().backward()
        cls.opt.step()

    @classmethod
    def tearDownClass(cls):
        cls.opt.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert cls.d.stop() == 0, "spillwayd did not shut down cleanly"

    def entry(self):
        return [s for s in spillway.status(socket=self.d.control)["sessions"] if s["name"] == SESSION][0]

    def test_status_figure(self):
        res, seen = {}, []
        t = threading.Thread(target=lambda: res.update(
            spillway.checkpoint(SESSION, os.path.join(self.tmp, "status"), socket=self.d.control)))
        t.start()
        while t.is_alive():
            s = self.entry()
            if s["checkpoint"] == "copying":
                seen.append((s["checkpoint_bytes_done"], s["checkpoint_bytes_total"]))
            time.sleep(0.02)
        t.join()
        self.assertTrue(res, "the checkpoint failed")
        self.assertGreater(res["bytes_total"], 0)
        self.assertEqual(res["bytes"], res["bytes_total"])
        self.assertTrue(seen, "the checkpoint was never seen copying")
        self.assertTrue(all(total == res["bytes_total"] and 0 <= done <= total for done, total in seen), seen)
        self.assertTrue(any(0 < done < total for done, total in seen), seen)
        self.assertEqual([a for a, _ in seen], sorted(a for a, _ in seen), "bytes_done went backwards")
        s = self.entry()
        self.assertEqual((s["checkpoint"], s["checkpoint_bytes_done"], s["checkpoint_bytes_total"]), ("none", 0, 0))
        self.assertEqual((s["restore_bytes_done"], s["restore_bytes_total"]), (0, 0))

    def test_terminal(self):
        where = os.path.join(self.tmp, "tty")
        rc, err, term = run_on_pty([CTL, "--socket-dir", self.d.dir, "checkpoint", SESSION, where], stream="stdout")
        self.assertEqual(rc, 0, err)
        lines = [ln for ln in term.replace("\r\n", "\n").split("\r") if ln]
        partial = [ln for ln in lines if ln.startswith("\x1b[Kcheckpoint %s: " % SESSION) and "(100%)" not in ln]
        self.assertTrue(partial, "no progress line before the end: %r" % term)
        self.assertIn("checkpoint %s: " % SESSION, term)
        self.assertIn("(100%)\n", term.replace("\r\n", "\n"))
        self.assertIn("checkpoint of %s at step 1" % SESSION, term)

    def test_restore_on_a_terminal(self):
        where = os.path.join(self.tmp, "for-restore")
        spillway.checkpoint(SESSION, where, socket=self.d.control)
        rc, err, term = run_on_pty([CTL, "--socket-dir", self.d.dir, "restore", "py/ckprogress-b", where],
                                   stream="stdout")
        self.assertEqual(rc, 0, err)
        self.assertRegex(term.replace("\r\n", "\n"), r"restore py/ckprogress-b: [0-9.]+ [KMG]iB of [0-9.]+ [KMG]iB "
                                                        r"\(100%\)\n")
        self.assertIn("restored py/ckprogress-b at step 1", term)
        spillway.drop("py/ckprogress-b", socket=self.d.control)

    def test_not_a_terminal(self):
        where = os.path.join(self.tmp, "pipe")
        p = subprocess.run([CTL, "--socket-dir", self.d.dir, "checkpoint", SESSION, where], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("\r", p.stdout)
        self.assertNotIn("%)", p.stdout)
        self.assertEqual(len(p.stdout.splitlines()), 1, p.stdout)
        self.assertTrue(p.stdout.startswith("checkpoint of %s at step 1" % SESSION), p.stdout)


if __name__ == "__main__":
    unittest.main()
