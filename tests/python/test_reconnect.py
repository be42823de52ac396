# SPDX-License-Identifier: MIT
"""OffloadAdamW(persistent=True) rides out a daemon restart in the same
process: two trainers train on one spillwayd with persist.state_dir; it
gets SIGTERM (it saves both sessions at their commit points and exits),
stays down a moment, and a new spillwayd on the same state directory and
socket path restores them. Each trainer's step() meets the daemon gone,
reconnects (spw_client_reconnect), takes its session over and goes on: the
same processes end with a model and optimizer state_dict torch.equal to an
uninterrupted run's, and each says it reconnected once; in exact mode on
the cpu tier and in overlapped mode (the daemon goes away under backward's
hooks) on the nvme tier.
"""
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import spwtest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "persist_worker.py")
STEPS = 40


class Restarts(unittest.TestCase):
    """A state directory and a socket directory a restarted daemon keeps
    (test_crash shares this)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="spw-reconnect-")
        self.state = os.path.join(self.tmp, "state")
        self.sock = os.path.join(self.tmp, "sock")
        self.extra = {"persist": {"state_dir": self.state}}

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def spawn(self, control, session, tier, persistent, out, mode="exact"):
        return subprocess.Popen([sys.executable, WORKER, control, session, mode, tier, str(STEPS),
                                 "1" if persistent else "0", out, "slow"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def restart(self, d, kill=False):
        """Stops d (SIGTERM: it saves its persistent sessions; kill: a
        kill -9, after which only what was flushed comes back), keeps it
        down a moment, and returns a new daemon on the same state
        directory and socket path."""
        if kill:
            d.proc.kill()
            d.proc.wait()
            d.cleanup()
        else:
            self.assertEqual(d.stop(), 0)
        time.sleep(0.3)  # down a while
        return spwtest.Daemon(swap=True, extra=self.extra, sock_dir=self.sock)

    def same(self, ref, run):
        a, b = torch.load(ref), torch.load(run)
        for key, v in a["model"].items():
            self.assertTrue(torch.equal(v, b["model"][key]), "model %s differs" % key)
        for i, s in a["opt"]["state"].items():
            for key, v in s.items():
                self.assertTrue(torch.equal(torch.as_tensor(v), torch.as_tensor(b["opt"]["state"][i][key])),
                                "optimizer state %s of parameter %s differs" % (key, i))


class ReconnectTest(Restarts):

    def stop_at(self, ps, step):
        """Reads each trainer's output as it comes and stops it (SIGSTOP)
        once it printed "step STEP", so that none gets far ahead while the
        other is still starting (on a loaded machine one may start seconds
        after the other: importing torch, attaching): one that finished its
        STEPS before the restart would have nothing to ride through."""
        want = b"step %d" % step
        left = {q.stdout.fileno(): q for q in ps}
        seen = {fd: b"" for fd in left}
        deadline = time.monotonic() + 120
        while left:
            wait = deadline - time.monotonic()
            self.assertGreater(wait, 0, "the trainers did not all reach step %d" % step)
            ready, _, _ = select.select(list(left), [], [], wait)
            for fd in ready:
                data = os.read(fd, 65536)
                if not data:
                    q = left[fd]
                    q.wait()
                    self.fail("a trainer ended (status %d) before step %d: %s" % (q.returncode, step,
                                                                                   q.stderr.read()))
                seen[fd] += data
                if want in seen[fd].split(b"\n")[:-1]:
                    os.kill(left.pop(fd).pid, signal.SIGSTOP)

    @staticmethod
    def kill_all(ps):
        for q in ps:
            if q.poll() is None:
                q.kill()  # a stopped one too
                q.wait()

    def run_tier(self, tier, mode):
        d = spwtest.Daemon(swap=True, extra=self.extra, sock_dir=self.sock)
        ref = os.path.join(self.tmp, "ref.pt")
        p = self.spawn(d.control, "pyrc/ref", tier, False, ref, mode)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err)
        runs = [os.path.join(self.tmp, "run%d.pt" % k) for k in range(2)]
        ps = [self.spawn(d.control, "pyrc/%s%d" % (tier, k), tier, True, runs[k], mode) for k in range(2)]
        self.addCleanup(self.kill_all, ps)
        self.stop_at(ps, 5)  # each past its fifth step, held there
        # SIGTERM, and the trainers go on: the daemon goes away under them
        # as they train. (Its stop() would send a second SIGTERM.)
        d.proc.send_signal(signal.SIGTERM)
        for q in ps:
            os.kill(q.pid, signal.SIGCONT)
        self.assertEqual(d.proc.wait(60), 0)
        d.cleanup()
        time.sleep(0.3)  # down a while: the trainers keep dialling
        for q in ps:
            if q.poll() is not None:
                self.fail("a trainer ended (status %d) while the daemon was down: %s" % (q.returncode, q.stderr.read()))
        d = spwtest.Daemon(swap=True, extra=self.extra, sock_dir=self.sock)
        try:
            for k, q in enumerate(ps):
                out, err = q.communicate(timeout=120)
                self.assertEqual(q.returncode, 0, err)
                self.assertIn("reconnects 1", out, err)
                self.same(ref, runs[k])
        finally:
            self.assertEqual(d.stop(), 0)

    def test_cpu_exact(self):
        self.run_tier("cpu", "exact")

    def test_nvme_overlapped(self):
        # The daemon goes away under backward's hooks (overlapped mode
        # hands each gradient over there): step() still rides it out.
        self.run_tier("nvme", "overlapped")


if __name__ == "__main__":
    unittest.main()
