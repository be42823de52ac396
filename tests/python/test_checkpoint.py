# SPDX-License-Identifier: MIT
"""Checkpoints from Python (issue 11): OffloadAdamW.save_checkpoint(dir)
after step K while the trainer goes on; spillway.restore(name, dir) and a
new process's OffloadAdamW(persistent=True, session=name) resumes at K and
ends equal to an uninterrupted run (torch.equal on the model's and the
optimizer's state_dict), for the cpu and nvme tiers. opt.load_checkpoint
(dir) in the same process puts the model and the optimizer back at K, and
the run from there ends equal too. save_checkpoint on a non-persistent
optimizer is refused saying why; a restore into a name in use, or from a
directory that is not a checkpoint, is refused; load_checkpoint refuses a
cut or damaged checkpoint, or one of another model, with the optimizer
untouched; a restore the daemon refuses after the optimizer's state is
released (another client took the name) says the optimizer is closed and
how to go on from the checkpoint, which restores once the name is free.
"""
import copy
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import persist_worker
import spwtest
import torch
import torch.nn as nn
import spillway
from spillway.checkpoint import CheckpointError
from spillway.torch import OffloadAdamW

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "persist_worker.py")
STEPS = 12
AT = 5


class CheckpointTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon(swap=True)
        cls.tmp = tempfile.mkdtemp(prefix="spw-ckpt-")

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0, "spillwayd did not shut down cleanly"

    def run_worker(self, session, tier, persistent, out, *extra):
        p = subprocess.run([sys.executable, WORKER, self.d.control, session, "exact", tier, str(STEPS),
                            "1" if persistent else "0", out] + list(extra),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def stepped_once(self, model, session):
        """A persistent OffloadAdamW of model on the nvme tier, one step taken."""
        opt = OffloadAdamW(model.parameters(), lr=1e-2, mode="exact", tier="nvme", socket=self.d.control,
                           page_size=64 << 10, session=session, persistent=True, lease=60)
        x, y = persist_worker.batch(1)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        return opt

    def same(self, a_path, b_path):
        a, b = torch.load(a_path), torch.load(b_path)
        for k, v in a["model"].items():
            self.assertTrue(torch.equal(v, b["model"][k]), "model %s differs" % k)
        self.assertEqual(len(a["opt"]["state"]), len(b["opt"]["state"]))
        for i, st in a["opt"]["state"].items():
            for k, v in st.items():
                self.assertTrue(torch.equal(torch.as_tensor(v), torch.as_tensor(b["opt"]["state"][i][k])),
                                "optimizer state %s of parameter %s differs" % (k, i))

    def roundtrip(self, tier):
        ref = os.path.join(self.tmp, "ref-%s.pt" % tier)
        run = os.path.join(self.tmp, "run-%s.pt" % tier)
        rest = os.path.join(self.tmp, "rest-%s.pt" % tier)
        ck = os.path.join(self.tmp, "ck-%s" % tier)
        self.run_worker("py/ckref-" + tier, tier, False, ref)
        out = self.run_worker("py/ckrun-" + tier, tier, True, run, "ckpt:%d:%s" % (AT, ck))
        self.assertIn("checkpoint %d\n" % AT, out)
        self.same(ref, run)
        self.assertTrue(os.path.isfile(os.path.join(ck, "manifest.json")))
        r = spillway.restore("py/ckrest-" + tier, ck, socket=self.d.control, lease=60)
        self.assertEqual(r["committed_step"], AT)
        self.assertGreater(r["bytes"], 0)
        with self.assertRaises(spillway.SpillwayError) as e:
            spillway.restore("py/ckrest-" + tier, ck, socket=self.d.control)
        self.assertEqual(e.exception.errno, errno.EEXIST)
        # A checkpoint of the restored orphan: every byte accounted for by
        # how it was written (resident pages from memory, direct on this
        # disk; swap pages reflinked where the filesystem can, else read
        # and written with O_DIRECT too).
        c = spillway.checkpoint("py/ckrest-" + tier, ck + "-again", socket=self.d.control)
        self.assertEqual(c["committed_step"], AT)
        self.assertEqual(c["bytes"], c["copied_bytes"] + c["direct_bytes"] + c["buffered_bytes"])
        if tier == "cpu":
            self.assertEqual(c["copied_bytes"], 0)
            self.assertGreater(c["direct_bytes"] + c["buffered_bytes"], 0)
        self.assertEqual(c["stall_seconds"], c["stall_seconds"])  # a number, not NaN
        # No one trains the orphan: no page waited for the copy; the new
        # fields are there (under the default checkpoint.priority "normal"
        # the copy never holds back, so yields is 0 by construction).
        self.assertEqual((c["cow_waits"], c["cow_moved_bytes"], c["yields"]), (0, 0, 0))
        self.assertEqual(c["yield_seconds"], 0.0)
        out = self.run_worker("py/ckrest-" + tier, tier, True, rest)
        self.assertTrue(out.startswith("resumed %d\n" % AT), out)
        self.same(ref, rest)

    def test_cpu(self):
        self.roundtrip("cpu")

    def test_nvme(self):
        self.roundtrip("nvme")

    def test_load_checkpoint(self):
        ref = os.path.join(self.tmp, "ref-load.pt")
        ck = os.path.join(self.tmp, "ck-load")
        self.run_worker("py/ckref-load", "nvme", False, ref)
        torch.set_num_threads(1)
        m = persist_worker.model(False)
        opt = OffloadAdamW(m.named_parameters(), lr=1e-2, mode="exact", tier="nvme", socket=self.d.control,
                           page_size=64 << 10, session="py/load", persistent=True, lease=60)

        def step(n):
            x, y = persist_worker.batch(n)
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(m(x), y).backward()
            opt.step()

        for n in range(1, AT + 1):
            step(n)
        model_at = {k: v.clone() for k, v in m.state_dict().items()}
        opt_at = copy.deepcopy(opt.state_dict())
        # Reading the state opens no step: the checkpoint finds step AT
        # committed (and does not wait for the next one).
        st = [s for s in spillway.status(socket=self.d.control)["sessions"] if s["name"] == "py/load"][0]
        self.assertEqual((st["committed_step"], st["step_open"]), (AT, False))
        self.assertEqual(opt.save_checkpoint(ck)["committed_step"], AT)
        for n in range(AT + 1, AT + 4):
            step(n)
        self.assertFalse(torch.equal(m[0].weight, model_at["0.weight"]))
        # A directory that is not a checkpoint, one cut short, one with a
        # damaged byte (the sizes all right: only the CRCs tell), and the
        # checkpoint of another model (wider, the same page size): each
        # refused before anything is released, naming what is wrong; the
        # optimizer trains on.
        cut = ck + "-cut"
        shutil.copytree(ck, cut)
        data = sorted(f for f in os.listdir(cut) if f.endswith(".bin"))[0]
        os.truncate(os.path.join(cut, data), 10)
        bent = ck + "-bent"
        shutil.copytree(ck, bent)
        big = max((f for f in os.listdir(bent) if f.endswith(".bin")),
                  key=lambda f: os.path.getsize(os.path.join(bent, f)))
        with open(os.path.join(bent, big), "r+b") as fh:
            fh.seek(os.path.getsize(os.path.join(bent, big)) // 2)
            b = fh.read(1)
            fh.seek(-1, os.SEEK_CUR)
            fh.write(bytes([b[0] ^ 0x40]))
        # A stopping daemon's save (format version 3: its swap pages are
        # in the daemon's linked swap files, not in the data files): no
        # checkpoint, for the portable reader and for the library's check.
        linked = ck + "-linked"
        shutil.copytree(ck, linked)
        with open(os.path.join(linked, "manifest.json")) as fh:
            man = json.load(fh)
        man["version"] = 3
        with open(os.path.join(linked, "manifest.json"), "w") as fh:
            json.dump(man, fh)
        self.assertIn("format version 3", opt._opt.checkpoint_check(linked))
        other = ck + "-other"
        o2 = self.stepped_once(persist_worker.model(True), "py/load-other")
        o2.save_checkpoint(other)
        o2.close()  # its session goes with it (a clean detach)
        now = {k: v.clone() for k, v in m.state_dict().items()}
        for bad, why in ((ck + "-none", "manifest"), (cut, data), (bent, "CRC-32C"), (bent, big),
                         (other, "another model"), (linked, "stopping spillwayd's save")):
            with self.assertRaises(CheckpointError) as e:
                opt.load_checkpoint(bad)
            self.assertIn(why, str(e.exception))
            for k, v in now.items():
                self.assertTrue(torch.equal(v, m.state_dict()[k]), "a refused load changed %s" % k)
        step(AT + 4)
        self.assertEqual(opt.load_checkpoint(ck), AT)
        self.assertEqual(opt.resumed_step, AT)
        for k, v in model_at.items():
            self.assertTrue(torch.equal(v, m.state_dict()[k]), "model %s is not the checkpoint's" % k)
        for i, st in opt_at["state"].items():
            for k, v in st.items():
                self.assertTrue(torch.equal(torch.as_tensor(v), torch.as_tensor(opt.state_dict()["state"][i][k])),
                                "optimizer state %s of parameter %s is not the checkpoint's" % (k, i))
        for n in range(AT + 1, STEPS + 1):
            step(n)
        out = os.path.join(self.tmp, "load.pt")
        torch.save({"model": m.state_dict(), "opt": opt.state_dict()}, out)
        opt.close()
        self.same(ref, out)

    def test_load_refused_after_release(self):
        # The daemon refuses the restore only after the optimizer's state
        # is released: here another client takes the session's name in
        # between. The error says the optimizer is closed and how to go
        # on from the checkpoint, which is intact and restores later.
        from spillway import _checkpoint
        torch.set_num_threads(1)
        opt = self.stepped_once(persist_worker.model(False), "py/load-race")
        ck = os.path.join(self.tmp, "ck-race")
        opt.save_checkpoint(ck)
        real, taker = _checkpoint.restore, []

        def restore_after_a_taker(name, directory, **kw):
            taker.append(spillway.Session(name, region_bytes=1 << 20, page_size=64 << 10,
                                          socket=self.d.control))
            return real(name, directory, **kw)

        _checkpoint.restore = restore_after_a_taker
        try:
            with self.assertRaises(spillway.SpillwayError) as e:
                opt.load_checkpoint(ck)
        finally:
            _checkpoint.restore = real
        msg = str(e.exception)
        for what in ("py/load-race", "closed", ck, "spillway.restore"):
            self.assertIn(what, msg)
        self.assertEqual(e.exception.errno, errno.EEXIST, msg)
        with self.assertRaises(RuntimeError):
            opt.step()
        taker[0].close()
        self.assertEqual(spillway.restore("py/load-race", ck, socket=self.d.control, lease=60)["committed_step"], 1)
        spillway.drop("py/load-race", socket=self.d.control)

    def test_refusals(self):
        torch.manual_seed(0)
        m = nn.Linear(8, 4)
        opt = OffloadAdamW(m.parameters(), socket=self.d.control)
        m(torch.randn(2, 8)).sum().backward()
        opt.step()
        with self.assertRaises(ValueError) as e:
            opt.save_checkpoint(os.path.join(self.tmp, "never"))
        self.assertIn("persistent=True", str(e.exception))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "never")))
        opt.close()
        with self.assertRaises(spillway.SpillwayError) as e:
            spillway.restore("py/notackpt", self.tmp, socket=self.d.control)
        self.assertIn("manifest.json", str(e.exception))
        with self.assertRaises(spillway.SpillwayError) as e:
            spillway.checkpoint("py/nosuch", os.path.join(self.tmp, "x"), socket=self.d.control)
        self.assertEqual(e.exception.errno, errno.ENOENT)


if __name__ == "__main__":
    unittest.main()
