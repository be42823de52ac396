# SPDX-License-Identifier: MIT
"""A daemon restart (SIGTERM) landing in opt.clip_grad_norm_(), in step()
after clip_grad_norm_ ended the step, and in GradScaler.step(opt) is
ridden out as under step() (test_reconnect): the trainer (ride_worker.py)
stops at a known point of step 6 and waits; the test stops spillwayd,
keeps it down a moment, starts a new one on the same state directory and
socket path, and lets the trainer go on into the call, which meets the
daemon gone. The same process ends with a model and optimizer state_dict
torch.equal to an uninterrupted run's, the same GradScaler scale, the
same gradient norm from every clip_grad_norm_ (the one of the redone step
included), and says it reconnected once. After a kill -9 instead, the
session comes back at the trainer's last opt.flush(): at the step before,
the step is redone in place as well; at an earlier one, the call raises
RewoundError and the trainer's loop goes back there. The same with a
spillway.Session(persistent=True) the trainer made and passed in
(session=): the optimizer reconnects that very object, whose info() then
says the session was taken over.
"""
import os
import subprocess
import sys
import unittest

import spwtest
import torch

from test_reconnect import Restarts, STEPS

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "ride_worker.py")
AT = 6


class RideThrough(Restarts):

    def spawn_worker(self, control, session, variant, tier, persistent, out, *extra):
        return subprocess.Popen([sys.executable, WORKER, control, session, variant, tier, str(STEPS),
                                 "1" if persistent else "0", out] + list(extra),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def ride(self, variant, where, tier="cpu", flush=0, given=False):
        """flush: the trainer flushes after that step and the daemon is
        killed (kill -9: no save) instead of stopped; the next one brings
        the session back at the flushed step. given: the trainer passes a
        spillway.Session(persistent=True) of its own making to OffloadAdamW."""
        d = spwtest.Daemon(swap=True, extra=self.extra, sock_dir=self.sock)
        ref = os.path.join(self.tmp, "ref.pt")
        p = self.spawn_worker(d.control, "pyride/ref", variant, tier, False, ref)
        ref_out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err)
        run = os.path.join(self.tmp, "run.pt")
        q = self.spawn_worker(d.control, "pyride/run", variant, tier, True, run,
                              "%s:%d" % (where, AT), *(["flush:%d" % flush] if flush else []),
                              *(["given-session"] if given else []))
        lines = []
        while True:
            line = q.stdout.readline()
            if not line:
                self.fail("the trainer ended before its pause: %s" % q.stderr.read())
            if line.startswith("paused"):
                break
            lines.append(line)
        self.assertEqual(line.split(), ["paused", str(AT)])
        if flush:
            self.assertIn("flushed %d\n" % flush, lines)
        d = self.restart(d, kill=bool(flush))
        try:
            out, err = q.communicate("go\n", timeout=120)
            self.assertEqual(q.returncode, 0, err)
            self.assertIn("reconnects 1", out, err)
            if given:
                # The caller's Session object was reconnected in place: its
                # info() is the takeover's, at the step the daemon saved.
                took = [s.split() for s in out.splitlines() if s.startswith("given session")]
                self.assertEqual(len(took), 1, out)
                self.assertEqual(took[0][4:], ["reattached", "1"])
                self.assertIn(int(took[0][3]), (AT - 1, AT))
            out = lines + out.splitlines(True)
            rewound = flush and flush < AT - 1  # else step AT is redone in place
            self.assertEqual([s for s in out if s.startswith("rewound")], ["rewound %d\n" % flush] if rewound else [])
            # Every step's gradient norm, those of the steps taken again included.
            want = [s for s in ref_out.splitlines(True) if s.startswith("step")]
            if rewound:
                want = want[:AT - 1] + want[flush:]
            self.assertEqual([s for s in out if s.startswith("step")], want,
                             "the steps and gradient norms differ from the uninterrupted run's")
            self.same(ref, run)
            self.assertEqual(torch.load(ref)["scale"], torch.load(run)["scale"], "GradScaler's scale differs")
        finally:
            self.assertEqual(d.stop(), 0)

    def test_backward_then_clip(self):
        # The hooks meet the daemon gone (or not: the library may notice
        # it only at end); clip_grad_norm_ rides it out either way.
        self.ride("clip", "backward")

    def test_backward_then_scaler_step(self):
        self.ride("scaler", "backward")

    def test_before_clip(self):
        self.ride("clip", "clip")

    def test_inside_clip(self):
        self.ride("clip", "in-clip")

    def test_step_after_clip(self):
        self.ride("clip", "step")

    def test_step_after_clip_nvme(self):
        self.ride("clip", "step", tier="nvme")

    def test_scaler_step(self):
        self.ride("scaler", "scaler")

    def test_scaler_inside_clip(self):
        self.ride("scaler-clip", "in-clip")

    def test_scaler_step_after_clip(self):
        self.ride("scaler-clip", "step")

    # A Session the trainer made (persistent=True) and passed in rides
    # out the restart as one OffloadAdamW made: reconnected in place.
    def test_given_session_backward(self):
        self.ride("clip", "backward", given=True)

    def test_given_session_step_after_clip(self):
        self.ride("clip", "step", given=True)

    # A kill -9 after a flush at step AT - 1: the step AT that
    # clip_grad_norm_ ended is redone inside step() (or scaler.step(opt)),
    # clipped to the same max_norm.
    def test_crash_redo_step_after_clip(self):
        self.ride("clip", "step", flush=AT - 1)

    def test_crash_redo_scaler_step_after_clip(self):
        self.ride("scaler-clip", "step", flush=AT - 1)

    # A kill -9 after a flush at an earlier step: RewoundError out of
    # clip_grad_norm_ and scaler.step(opt); the loop goes back there.
    def test_crash_rewound_in_clip(self):
        self.ride("clip", "in-clip", flush=AT - 2)

    def test_crash_rewound_in_scaler_step(self):
        self.ride("scaler", "scaler", flush=AT - 2)


if __name__ == "__main__":
    unittest.main()
