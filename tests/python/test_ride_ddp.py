# SPDX-License-Identifier: MIT
"""A daemon restart (SIGTERM) under DistributedDataParallel is ridden out
on both ranks (issue 11): two gloo ranks (ddp_ride_worker.py), each with
OffloadAdamW(persistent=True) on its own session of one spillwayd
(pyddpride/rank0, pyddpride/rank1) and opt.attach_ddp(ddp_model), stop at
a known point of step AT and wait; the test stops spillwayd, keeps it down
a moment, starts a new one on the same state directory and socket path,
and lets both ranks go on:

- inside backward, in the all-reduce future's callback just after the
  first bucket was handed over: the next bucket's hand-over meets the
  daemon gone inside the future's callback; it is kept for step(), which
  reconnects and redoes the step from p.grad (DDP's average, the same on
  both ranks); in exact mode, and in overlapped mode, where the first
  bucket's updates ran before the pause, so step AT is open and a SIGTERM
  would wait for its commit: there the daemon is killed (kill -9) after
  each rank's opt.flush() at step AT - 1 instead;
- inside backward, in the first all-reduce future's callback before its
  bucket is handed over (overlapped mode; nothing of step AT is open, so
  a SIGTERM saves step AT - 1 at once): that hand-over meets the daemon
  gone;
- after backward, before step(): step() meets the daemon gone.

Each rank ends with a model and an optimizer state_dict torch.equal to an
uninterrupted DDP run of the same data, both ranks equal to each other,
and says it reconnected once.
"""
import os
import subprocess
import sys
import unittest

import spwtest

from test_reconnect import Restarts

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "ddp_ride_worker.py")
STEPS = 8
AT = 5
WORLD = 2


class RideDdp(Restarts):

    def spawn_ranks(self, control, session, mode, persistent, tag, *extra):
        """Both ranks of one run; returns (procs, outs, errs)."""
        store = os.path.join(self.tmp, tag)
        os.makedirs(store)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        procs, outs, errs = [], [], []
        for r in range(WORLD):
            outs.append(os.path.join(store, "rank%d.pt" % r))
            errs.append(open(os.path.join(store, "rank%d.err" % r), "w+"))
            procs.append(subprocess.Popen(
                [sys.executable, WORKER, str(r), str(WORLD), store, control, session, mode, str(STEPS),
                 "1" if persistent else "0", outs[r]] + list(extra),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errs[r], text=True, env=env))
        self.addCleanup(self.reap, procs, errs)
        return procs, outs, errs

    def reap(self, procs, errs):
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in errs:
            f.close()

    def err(self, f):
        f.seek(0)
        return f.read()

    def finish(self, procs, errs, stdin=None):
        """Each rank's stdout once it exited 0 (stdin: a line every rank
        gets first; a rank waits for the other in each all-reduce)."""
        if stdin is not None:
            for p in procs:
                p.stdin.write(stdin)
                p.stdin.flush()
        res = []
        for r, p in enumerate(procs):
            out, _ = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, "rank %d: %s" % (r, self.err(errs[r])))
            res.append(out)
        return res

    def ride(self, mode, where, flush=0):
        """flush: each rank flushes after that step and the daemon is
        killed (kill -9: no save) instead of stopped; the next one brings
        the sessions back at the flushed step."""
        d = spwtest.Daemon(swap=True, extra=self.extra, sock_dir=self.sock)
        ps, refs, errs = self.spawn_ranks(d.control, "pyddpride/ref", mode, False, "ref")
        ref_outs = self.finish(ps, errs)
        want = [s for s in ref_outs[0].splitlines(True) if s.startswith("step")]
        self.assertEqual(len(want), STEPS, ref_outs[0])
        # Several buckets in step AT's backward: the restart lands between two.
        self.assertGreaterEqual(int(want[AT - 1].split()[3]), 2, want[AT - 1])

        ps, runs, errs = self.spawn_ranks(d.control, "pyddpride", mode, True, "run", "%s:%d" % (where, AT),
                                          *(["flush:%d" % flush] if flush else []))
        lines = [[] for _ in ps]
        for r, q in enumerate(ps):
            while True:
                line = q.stdout.readline()
                if not line:
                    self.fail("rank %d ended before its pause: %s" % (r, self.err(errs[r])))
                if line.startswith("paused"):
                    break
                lines[r].append(line)
            self.assertEqual(line.split(), ["paused", str(AT)])
        if flush:
            for r in range(WORLD):
                self.assertIn("flushed %d\n" % flush, lines[r])
        d = self.restart(d, kill=bool(flush))
        try:
            outs = self.finish(ps, errs, "go\n")
            for r, out in enumerate(outs):
                self.assertIn("reconnects 1\n", out, "rank %d: %s" % (r, self.err(errs[r])))
                if where in ("first", "bucket"):
                    # The restart was met where it was meant to be: in a
                    # bucket's hand-over, inside the future's callback.
                    self.assertIn("gone in bucket\n", out, "rank %d" % r)
                # Every step once, the one under the restart included.
                got = [s.split()[:2] for s in lines[r] + out.splitlines() if s.startswith("step")]
                self.assertEqual(got, [s.split()[:2] for s in want], "rank %d" % r)
                self.same(refs[r], runs[r])
            self.same(runs[0], runs[1])  # and the ranks agree
        finally:
            self.assertEqual(d.stop(), 0)

    def test_exact_inside_backward(self):
        self.ride("exact", "bucket")

    def test_overlapped_inside_backward(self):
        # mode='overlapped' runs the first bucket's updates as it is
        # handed over, so step AT's updates are open at the pause: a
        # SIGTERM would wait for its commit point (which the paused ranks
        # never reach) and save nothing. A kill -9 after a flush at AT - 1
        # brings the sessions back at AT - 1, and step AT is redone.
        self.ride("overlapped", "bucket", flush=AT - 1)

    def test_overlapped_first_bucket(self):
        # Paused before the first bucket's hand-over: nothing of step AT
        # is open, so the SIGTERM saves step AT - 1 at once.
        self.ride("overlapped", "first")

    def test_exact_before_step(self):
        self.ride("exact", "step")


if __name__ == "__main__":
    unittest.main()
