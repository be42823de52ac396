# SPDX-License-Identifier: MIT
"""OffloadAdamW(persistent=True): a trainer killed with SIGKILL at random
points resumes in a new process, and the final model and optimizer state
equal an uninterrupted run's (torch.equal), for mode x tier; none is
refused, and one killed inside a tile update (SPILLWAY_TEST_KILL_AT_TILE)
resumes too. A new process
whose model differs is refused naming the difference, and the orphan is
left as it was; spillway.drop() ends it.
"""
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import spwtest
import torch
import spillway

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "persist_worker.py")
STEPS = 40


class PersistTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon(swap=True)
        cls.tmp = tempfile.mkdtemp(prefix="spw-persist-")

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0, "spillwayd did not shut down cleanly"

    def spawn(self, session, mode, tier, persistent, out, *extra, env=None):
        return subprocess.Popen([sys.executable, WORKER, self.d.control, session, mode, tier, str(STEPS),
                                 "1" if persistent else "0", out] + list(extra),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, **(env or {})))

    def finish(self, p):
        out, err = p.communicate(timeout=120)
        return p.returncode, out, err

    def reference(self, mode, tier):
        """The uninterrupted run's state file, made once per mode x tier."""
        ref = os.path.join(self.tmp, "ref-%s-%s.pt" % (mode, tier))
        if not os.path.exists(ref):
            rc, _, err = self.finish(self.spawn("py/ref-%s-%s" % (mode, tier), mode, tier, False, ref))
            self.assertEqual(rc, 0, err)
        return ref

    def storm(self, mode, tier, kills):
        ref = self.reference(mode, tier)
        run = os.path.join(self.tmp, "run-%s-%s.pt" % (mode, tier))
        session = "py/%s-%s" % (mode, tier)
        rng = random.Random()
        done = resumed = stale = 0
        while True:
            p = self.spawn(session, mode, tier, True, run)
            if done < kills:
                # Wait for its first step, then kill it anywhere within
                # the next few steps: mid-backward, mid-Adam, between.
                line = p.stdout.readline()
                resumed += line.startswith("resumed")
                time.sleep(rng.uniform(0.0, 0.15))
                p.send_signal(signal.SIGKILL)
            rc, out, err = self.finish(p)
            if rc == 0:
                resumed += out.startswith("resumed")
                break
            if rc == 3:
                stale += 1
                spillway.drop(session, socket=self.d.control)
                continue
            self.assertEqual(rc, -signal.SIGKILL, err)
            done += 1
        print("# %s/%s: %d kills, %d resumed, %d refused" % (mode, tier, done, resumed, stale))
        self.assertGreater(resumed, 0)
        # Every kill resumes, one inside a step's updates too.
        self.assertEqual(stale, 0)
        self.same_state(ref, run)
        st = spillway.status(self.d.control)
        self.assertFalse([s["name"] for s in st["sessions"] if s["name"] == session])

    def same_state(self, ref, run):
        a, b = torch.load(ref), torch.load(run)
        for k, v in a["model"].items():
            self.assertTrue(torch.equal(v, b["model"][k]), "model %s differs" % k)
        for i, st in a["opt"]["state"].items():
            for k, v in st.items():
                self.assertTrue(torch.equal(torch.as_tensor(v), torch.as_tensor(b["opt"]["state"][i][k])),
                                "optimizer state %s of parameter %s differs" % (k, i))

    def kill_inside_update(self, mode, tier):
        """The library kills the trainer half way through its 22nd journal
        unit update (step 6, of 4 units a step); the next trainer resumes the
        session left inside step 6's updates, and ends bit-identical."""
        ref = self.reference(mode, tier)
        run = os.path.join(self.tmp, "trun-%s-%s.pt" % (mode, tier))
        session = "py/tile-%s-%s" % (mode, tier)
        rc, _, err = self.finish(self.spawn(session, mode, tier, True, run,
                                            env={"SPILLWAY_TEST_KILL_AT_TILE": "22"}))
        self.assertEqual(rc, -signal.SIGKILL, err)
        st = {session: spwtest.wait_orphaned(self.d.control, session)}
        self.assertEqual(st[session]["state"], "orphaned")
        self.assertEqual(st[session]["committed_step"], 5)
        self.assertTrue(st[session]["step_open"])
        rc, out, err = self.finish(self.spawn(session, mode, tier, True, run))
        self.assertEqual(rc, 0, err)
        # Exact mode finished step 6 at the takeover; overlapped redoes it.
        self.assertTrue(out.startswith("resumed %d" % (6 if mode == "exact" else 5)), out)
        self.same_state(ref, run)

    def kill_inside_load(self, mode, tier):
        """The trainer loads a checkpoint after step 5 (opt.load_state_dict)
        and is killed by the library after the 5th of the 8 moment tensors
        it writes (SPILLWAY_TEST_KILL_AT_WRITE_PAGE). The next trainer
        attaches (no refusal, no spillwayctl drop), finds nothing resumed
        (resumed_step 0), loads the checkpoint again as its restart code
        says, and ends bit-identical to an uninterrupted run that did the
        same load."""
        ref, run = (os.path.join(self.tmp, "l%s-%s-%s.pt" % (w, mode, tier)) for w in ("ref", "run"))
        ref_ck, run_ck = ref + ".ckpt", run + ".ckpt"
        session = "py/load-%s-%s" % (mode, tier)
        rc, out, err = self.finish(self.spawn("py/lref-%s-%s" % (mode, tier), mode, tier, False, ref,
                                              "load:5:" + ref_ck))
        self.assertEqual(rc, 0, err)
        self.assertIn("loaded 5", out)
        rc, out, err = self.finish(self.spawn(session, mode, tier, True, run, "load:5:" + run_ck,
                                              env={"SPILLWAY_TEST_KILL_AT_WRITE_PAGE": "5"}))
        self.assertEqual(rc, -signal.SIGKILL, err)
        self.assertIn("step 5", out)
        self.assertNotIn("loaded", out)  # it died inside the load
        st = {session: spwtest.wait_orphaned(self.d.control, session)}
        self.assertEqual(st[session]["state"], "orphaned")
        rc, out, err = self.finish(self.spawn(session, mode, tier, True, run, "load:5:" + run_ck))
        self.assertEqual(rc, 0, err)
        self.assertNotIn("resumed", out)  # nothing resumed: opt.resumed_step is 0
        self.assertTrue(out.startswith("reloaded 5"), out)
        self.same_state(ref, run)

    def test_kill_inside_load_exact_cpu(self):
        self.kill_inside_load("exact", "cpu")

    def test_kill_inside_load_overlapped_nvme(self):
        self.kill_inside_load("overlapped", "nvme")

    def test_kill_inside_update_overlapped_cpu(self):
        self.kill_inside_update("overlapped", "cpu")

    def test_kill_inside_update_exact_nvme(self):
        self.kill_inside_update("exact", "nvme")

    def test_overlapped_cpu(self):
        self.storm("overlapped", "cpu", 6)

    def test_exact_nvme(self):
        self.storm("exact", "nvme", 6)

    def test_exception_keeps_state(self):
        """An exception that ends the trainer is not a detach: the
        interpreter's clean-up leaves the session orphaned at the last
        committed step, and the next trainer goes on from there."""
        session, run = "py/raise", os.path.join(self.tmp, "raise.pt")
        ref = os.path.join(self.tmp, "raise-ref.pt")
        self.assertEqual(self.finish(self.spawn("py/raise-ref", "exact", "cpu", False, ref))[0], 0)
        rc, _, err = self.finish(self.spawn(session, "exact", "cpu", True, run, "raise5"))
        self.assertEqual(rc, 1)
        self.assertIn("a bug in the training loop", err)
        st = {session: spwtest.wait_orphaned(self.d.control, session)}
        self.assertEqual(st[session]["state"], "orphaned")
        self.assertEqual(st[session]["committed_step"], 4)
        rc, out, err = self.finish(self.spawn(session, "exact", "cpu", True, run))
        self.assertEqual(rc, 0, err)
        self.assertTrue(out.startswith("resumed 4"), out)
        a, b = torch.load(ref), torch.load(run)
        for k, v in a["model"].items():
            self.assertTrue(torch.equal(v, b["model"][k]), "model %s differs" % k)

    def test_other_model_refused(self):
        session = "py/mismatch"
        run = os.path.join(self.tmp, "mismatch.pt")
        p = self.spawn(session, "exact", "cpu", True, run)
        # Let it commit a few steps, then kill it.
        for _ in range(3):
            p.stdout.readline()
        p.send_signal(signal.SIGKILL)
        self.finish(p)
        st = {session: spwtest.wait_orphaned(self.d.control, session)}
        self.assertEqual(st[session]["state"], "orphaned")
        before = st[session]["committed_step"]
        self.assertGreater(before, 0)
        rc, _, err = self.finish(self.spawn(session, "exact", "cpu", True, run, "wide"))
        self.assertNotEqual(rc, 0)
        self.assertIn("differs", err)
        self.assertIn("spillwayctl drop %s" % session, err)
        st = {s["name"]: s for s in spillway.status(self.d.control)["sessions"]}
        self.assertEqual(st[session]["state"], "orphaned")
        self.assertEqual(st[session]["committed_step"], before)
        spillway.drop(session, socket=self.d.control)
        with self.assertRaises(spillway.SpillwayError):
            spillway.drop(session, socket=self.d.control)

    def test_arguments(self):
        from spillway.torch import OffloadAdamW
        p = [torch.nn.Parameter(torch.zeros(4))]
        with self.assertRaisesRegex(ValueError, "session="):
            OffloadAdamW(p, persistent=True, socket=self.d.control)
        with self.assertRaisesRegex(ValueError, "lease"):
            OffloadAdamW(p, persistent=True, session="x/y", lease=0, socket=self.d.control)


if __name__ == "__main__":
    unittest.main()
