# SPDX-License-Identifier: MIT
"""Portable checkpoints (issue 11): `python -m spillway.checkpoint
to-torch DIR OUT.pt` and `from-torch IN.pt DIR`, with no daemon involved.

- checkpoint -> to-torch -> from-torch gives the same data files byte for
  byte and the same per-page CRCs, for fp32, bf16 and int8 moments, and a
  restore of the converted checkpoint resumes training bit-identical to
  an uninterrupted run;
- the torch file holds exactly the state spillway holds at that step (the
  master weights, exp_avg, exp_avg_sq and step as OffloadAdamW's own
  state_dict reads them out of the daemon, and the param groups'
  hyperparameters), it loads into a real torch.optim.AdamW, and a step of
  that AdamW lands where spillway's next step does (within the two
  implementations' float rounding);
- torch's own AdamW state comes in with --like (a checkpoint of the same
  model for the layout) and resumes with exactly its weights and moments;
- an fp32 run's checkpoint comes back as int8 moments with --like an int8
  checkpoint of the same model, and resumes under state_dtype="int8";
- a checkpoint without the client's meta converts with flat tensors and
  AdamW's defaults, saying so;
- a damaged page is refused naming tensor, page and file;
- importing spillway.checkpoint (the CLI's module) leaves
  spillway.checkpoint(session, dir) working.
"""
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

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "persist_worker.py")
AT = 4


def cli(*args):
    return subprocess.run([sys.executable, "-m", "spillway.checkpoint"] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)


def files_of(directory):
    with open(os.path.join(directory, "manifest.json")) as f:
        m = json.load(f)
    data = {}
    for t in m["tensors"]:
        with open(os.path.join(directory, t["file"]), "rb") as f:
            data[t["name"]] = f.read()
    return m, data


class Base(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon(swap=True)
        cls.tmp = tempfile.mkdtemp(prefix="spw-portable-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert cls.d.stop() == 0, "spillwayd did not shut down cleanly"

    def worker(self, session, persistent, steps, out, extra="-", dtype="fp32"):
        p = subprocess.run([sys.executable, WORKER, self.d.control, session, "exact", "nvme", str(steps),
                            "1" if persistent else "0", out, extra, "dtype:" + dtype],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def same(self, a_path, b_path):
        a, b = torch.load(a_path), torch.load(b_path)
        for k, v in a["model"].items():
            self.assertTrue(torch.equal(v, b["model"][k]), "model %s differs" % k)
        for i, st in a["opt"]["state"].items():
            for k, v in st.items():
                self.assertTrue(torch.equal(torch.as_tensor(v), torch.as_tensor(b["opt"]["state"][i][k])),
                                "optimizer state %s of parameter %s differs" % (k, i))


class RoundTrip(Base):
    """checkpoint -> to-torch -> from-torch is exact; the result resumes."""

    def roundtrip(self, dtype, by_cli, gstore=None):
        steps = AT + 3
        wdtype = dtype + "/" + gstore if gstore else dtype  # the worker's argument
        dtype = wdtype.replace("/", "-")  # names of sessions and files
        run, rest = (os.path.join(self.tmp, "%s-%s.pt" % (w, dtype)) for w in ("run", "rest"))
        ck = os.path.join(self.tmp, "ck-" + dtype)
        pt, back = ck + ".pt", ck + "-back"
        # It goes on after the checkpoint: the uninterrupted run (that it
        # equals a run that never checkpointed is python-checkpoint's).
        out = self.worker("py/prun-" + dtype, True, steps, run, "ckpt:%d:%s" % (AT, ck), dtype=wdtype)
        self.assertIn("checkpoint %d\n" % AT, out)
        if by_cli:
            p = cli("to-torch", ck, pt)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("state dtype %s" % wdtype.split("/")[0], p.stdout)
            p = cli("from-torch", pt, back)
            self.assertEqual(p.returncode, 0, p.stderr)
            from spillway.checkpoint import CheckpointError, from_torch
            with self.assertRaises(CheckpointError) as e:  # never over a checkpoint
                from_torch(pt, back)
            self.assertIn("exists", str(e.exception))
        else:
            from spillway.checkpoint import from_torch, to_torch
            doc = to_torch(ck, pt)
            self.assertEqual(doc["spillway"]["layout"]["state_dtype"], wdtype.split("/")[0])
            self.assertEqual(doc["spillway"]["layout"]["grad_store"], gstore or "fp32")
            from_torch(pt, back)
        m1, d1 = files_of(ck)
        m2, d2 = files_of(back)
        self.assertEqual(m1, m2, "the manifests differ")
        self.assertEqual(sorted(d1), sorted(d2))
        for name in d1:
            self.assertTrue(d1[name] == d2[name], "tensor %s: the data differs after the round trip" % name)
        self.assertFalse([f for f in os.listdir(self.tmp) if ".tmp-" in f], "a temporary directory was left")
        r = spillway.restore("py/prest-" + dtype, back, socket=self.d.control, lease=60)
        self.assertEqual(r["committed_step"], AT)
        self.assertEqual(r["bytes"], r["bytes_total"])
        self.assertEqual(r["bytes_total"], sum(t["bytes"] for t in m2["tensors"]))
        out = self.worker("py/prest-" + dtype, True, steps, rest, dtype=wdtype)
        self.assertTrue(out.startswith("resumed %d\n" % AT), out)
        self.same(run, rest)

    def test_fp32(self):
        self.roundtrip("fp32", True)

    def test_bf16(self):
        self.roundtrip("bf16", False)

    def test_int8(self):
        self.roundtrip("int8", False)

    def test_grad_store_bf16(self):
        """A bf16 gradient store (its bit in the layout's mode word) converts
        and resumes like the rest."""
        self.roundtrip("fp32", False, gstore="bf16")

    def test_int8_scale_pages(self):
        """int8 block scales live in the optimizer's scale pages, one slot
        a chunk handed out in the order tensors are added: with 64 KiB
        pages (16384-element chunks, 128 a scale page) a tensor of 129.5
        chunks added after small ones spans two scale pages, the second
        part-used. to-torch reads each tensor's moments with the scales
        at the right slots (the same values OffloadAdamW's state_dict
        reads out of spillway), and from-torch makes every code and both
        scale pages again byte for byte. Frozen tensors take no slot
        (client/tensors.c, q8_assign)."""
        from spillway.torch import OffloadAdamW
        from spillway.checkpoint import from_torch, to_torch
        from spillway._portable import q8_slots
        lay = {"chunk_elems": 100, "tensors": [{"name": "a", "count": 250, "frozen": False},
                                               {"name": "f", "count": 50, "frozen": True},
                                               {"name": "b", "count": 1, "frozen": False}]}
        self.assertEqual(q8_slots(lay), ({"a": 0, "b": 3}, 4))
        torch.manual_seed(3)
        m = nn.Sequential(nn.Linear(1030, 2060), nn.Linear(2060, 3), nn.Linear(3, 2))
        opt = OffloadAdamW(m.named_parameters(), lr=1e-2, mode="exact", tier="nvme", socket=self.d.control,
                           session="py/pq8pages", persistent=True, lease=60, page_size=64 << 10, state_dtype="int8")
        try:
            for n in range(1, 3):
                x = torch.randn(8, 1030, generator=torch.Generator().manual_seed(n))
                opt.zero_grad(set_to_none=True)
                m(x).square().sum().backward()
                opt.step()
            ck = os.path.join(self.tmp, "ck-q8pages")
            opt.save_checkpoint(ck)
            ref = opt.state_dict()
        finally:
            opt.close()
        _, d1 = files_of(ck)
        self.assertEqual(sorted(n for n in d1 if n.startswith("spw.opt.q8_scales.")),
                         ["spw.opt.q8_scales.0", "spw.opt.q8_scales.1"])
        doc = to_torch(ck)
        self.assertNotIn("spw.opt.q8_scales.0", doc["spillway"]["raw"])  # made again from the moments
        self.assertEqual(sorted(doc["optimizer"]["state"]), sorted(ref["state"]))
        for i, st in ref["state"].items():
            for k in ("exp_avg", "exp_avg_sq"):
                self.assertTrue(torch.equal(doc["optimizer"]["state"][i][k], torch.as_tensor(st[k])),
                                "state %s of %d" % (k, i))
                self.assertTrue(st[k].abs().sum() > 0)
        back = ck + "-back"
        from_torch(doc, back)
        _, d2 = files_of(back)
        self.assertEqual(sorted(d1), sorted(d2))
        for name in d1:
            self.assertTrue(d1[name] == d2[name], "tensor %s: the data differs after the round trip" % name)

    def test_old_int8_layout_refused(self):
        """A checkpoint whose layout record is version 1 with int8 moments
        (an older spillway's three chunks a page) is refused by both
        directions, saying why; version 2 is int8's only."""
        from spillway.checkpoint import CheckpointError, from_torch, to_torch
        from spillway._portable import crc32c, parse_layout
        ck = os.path.join(self.tmp, "ck-int8")
        if not os.path.exists(ck):
            self.roundtrip("int8", False)
        doc = to_torch(ck)
        old = os.path.join(self.tmp, "ck-int8-v1")
        shutil.copytree(ck, old)
        m, d = files_of(old)
        t = [t for t in m["tensors"] if t["name"] == "spw.opt.layout"][0]
        rec = bytearray(d["spw.opt.layout"])
        self.assertEqual(rec[4], 2)
        rec[4] = 1
        path = os.path.join(old, t["file"])
        os.chmod(path, 0o600)
        with open(path, "wb") as f:
            f.write(rec)
        t["crc32c"][0] = crc32c(rec[:m["page_size"]])
        with open(os.path.join(old, "manifest.json"), "w") as f:
            json.dump(m, f)
        with self.assertRaises(CheckpointError) as e:
            to_torch(old)
        self.assertIn("older spillway", str(e.exception))
        doc["spillway"]["raw"]["spw.opt.layout"] = torch.frombuffer(rec, dtype=torch.uint8).clone()
        with self.assertRaises(CheckpointError) as e:
            from_torch(doc, old + "-back")
        self.assertIn("older spillway", str(e.exception))
        self.assertFalse(os.path.exists(old + "-back"))
        rec[4], rec[10] = 2, 0  # version 2 with fp32 moments
        with self.assertRaises(CheckpointError) as e:
            parse_layout(rec)
        self.assertIn("version 2 is int8's", str(e.exception))


    def test_orphan_save_refused(self):
        """A save in persist.state_dir of a session whose trainer died inside
        a step's updates (manifest version 2, opened_step past
        committed_step) mixes two steps: to-torch refuses it, saying so and
        what to do, before it reads a data file."""
        from spillway.checkpoint import CheckpointError, to_torch
        torn = os.path.join(self.tmp, "torn-save")
        os.mkdir(torn)
        with open(os.path.join(torn, "manifest.json"), "w") as f:
            json.dump({"format": "spillway-checkpoint", "version": 2, "committed_step": 6, "opened_step": 7,
                       "page_size": 65536, "tensors": []}, f)
        with self.assertRaises(CheckpointError) as e:
            to_torch(torn)
        self.assertIn("died inside step 7's updates", str(e.exception))
        self.assertIn("take the session over", str(e.exception))

    def test_linked_save_refused(self):
        """A stopping daemon's save in persist.state_dir (manifest version 3)
        keeps its swap pages in the daemon's linked swap files: to-torch
        refuses it, saying what it is, before it reads a data file."""
        from spillway.checkpoint import CheckpointError, to_torch
        linked = os.path.join(self.tmp, "linked-save")
        os.mkdir(linked)
        with open(os.path.join(linked, "manifest.json"), "w") as f:
            json.dump({"format": "spillway-checkpoint", "version": 3, "session": "job/rank0", "committed_step": 6,
                       "page_size": 65536, "links": ["s00.swap"], "tensors": []}, f)
        with self.assertRaises(CheckpointError) as e:
            to_torch(linked)
        self.assertIn("stopping spillwayd's save", str(e.exception))
        self.assertIn("job/rank0", str(e.exception))


class Torch(Base):
    """The torch file against spillway's own state and a real AdamW;
    damaged pages; the module beside the function."""

    def test_torch_adamw(self):
        ck = os.path.join(self.tmp, "ck-adamw")
        nxt, at = os.path.join(self.tmp, "adamw-next.pt"), os.path.join(self.tmp, "adamw-at.pt")
        self.worker("py/padamw", True, AT + 1, nxt, "ckpt:%d:%s" % (AT, ck))
        # The state at AT as OffloadAdamW's own state_dict reads it out of
        # spillway: a trainer that resumes the checkpoint and stops there.
        spillway.restore("py/padamw-at", ck, socket=self.d.control, lease=60)
        self.assertTrue(self.worker("py/padamw-at", True, AT, at).startswith("resumed %d\n" % AT))
        ref = torch.load(at)
        from spillway.checkpoint import to_torch
        doc = to_torch(ck)
        self.assertEqual(doc["spillway"]["hyperparameters"], "checkpoint")
        for k, v in ref["model"].items():
            self.assertTrue(torch.equal(doc["params"][k], v), "master weights of %s" % k)
        sd = doc["optimizer"]
        self.assertEqual(sorted(sd["state"]), sorted(ref["opt"]["state"]))
        for i, st in ref["opt"]["state"].items():
            for k in ("step", "exp_avg", "exp_avg_sq"):
                self.assertTrue(torch.equal(torch.as_tensor(st[k]), sd["state"][i][k]), "state %s of %d" % (k, i))
                self.assertEqual(sd["state"][i][k].dtype, torch.float32)
        for g, h in zip(sd["param_groups"], ref["opt"]["param_groups"]):
            for k in ("lr", "betas", "eps", "weight_decay", "params"):
                self.assertEqual(tuple(g[k]) if k == "betas" else g[k], tuple(h[k]) if k == "betas" else h[k])
        # Into a real AdamW, and one step of it.
        torch.set_num_threads(1)
        m = persist_worker.model(False)
        with torch.no_grad():
            for k, p in m.named_parameters():
                p.copy_(doc["params"][k])
        opt = torch.optim.AdamW(m.parameters(), lr=0.5)
        opt.load_state_dict(sd)
        self.assertEqual(opt.param_groups[0]["lr"], ref["opt"]["param_groups"][0]["lr"])
        for i, p in enumerate(m.parameters()):
            self.assertTrue(torch.equal(opt.state[p]["exp_avg"], sd["state"][i]["exp_avg"]))
        x, y = persist_worker.batch(AT + 1)
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
        want = torch.load(nxt)
        for k, p in m.named_parameters():
            torch.testing.assert_close(p.detach(), want["model"][k], rtol=1e-5, atol=1e-6)
        for i, p in enumerate(m.parameters()):
            for k in ("exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(opt.state[p][k], want["opt"]["state"][i][k], rtol=1e-5, atol=1e-9)
            self.assertEqual(float(opt.state[p]["step"]), float(want["opt"]["state"][i]["step"]))

    def test_without_meta(self):
        """A checkpoint taken from outside the trainer (spillwayctl) carries
        no shapes or hyperparameters: flat tensors (named from spillway's
        "INDEX:name"), AdamW's defaults, and the file says so."""
        ck, ck2 = os.path.join(self.tmp, "ck-meta"), os.path.join(self.tmp, "ck-nometa")
        self.worker("py/pmeta", True, 2, os.path.join(self.tmp, "meta.pt"), "ckpt:2:%s" % ck)
        spillway.restore("py/pnometa", ck, socket=self.d.control, lease=60)
        with self.assertRaises(spillway.SpillwayError) as e:
            spillway.checkpoint("py/pnometa", ck2, socket=self.d.control, meta=[1])
        self.assertIn("JSON object", str(e.exception))
        spillway.checkpoint("py/pnometa", ck2, socket=self.d.control)
        spillway.drop("py/pnometa", socket=self.d.control)
        from spillway.checkpoint import to_torch
        a, b = to_torch(ck), to_torch(ck2)
        self.assertEqual(a["spillway"]["hyperparameters"], "checkpoint")
        self.assertEqual(b["spillway"]["hyperparameters"], "torch.optim.AdamW defaults")
        self.assertEqual(b["optimizer"]["param_groups"][0]["lr"], 1e-3)
        self.assertEqual(a["optimizer"]["param_groups"][0]["lr"], 1e-2)
        self.assertEqual(sorted(a["params"]), sorted(dict(persist_worker.model(False).named_parameters())))
        for k, v in a["params"].items():
            flat = b["params"][k]
            self.assertEqual(flat.dim(), 1)
            self.assertTrue(torch.equal(flat, v.view(-1)))
        for i, st in a["optimizer"]["state"].items():
            for k in ("step", "exp_avg", "exp_avg_sq"):
                self.assertTrue(torch.equal(st[k].view(-1), b["optimizer"]["state"][i][k].view(-1)))

    def test_from_torch_state(self):
        """torch's own AdamW state (trained by torch) into spillway, laid out
        as a checkpoint of the same model and settings (--like): the
        restored session resumes at torch's step with exactly its weights
        and moments."""
        tpl = os.path.join(self.tmp, "ck-tpl")
        self.worker("py/ptpl", True, 1, os.path.join(self.tmp, "tpl.pt"), "ckpt:1:%s" % tpl)
        torch.set_num_threads(1)
        m = persist_worker.model(False)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        for n in range(1, AT + 1):
            x, y = persist_worker.batch(n)
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
        src, dst, out = (os.path.join(self.tmp, f) for f in ("torch-own.pt", "ck-from-torch", "from-torch.pt"))
        torch.save({"optimizer": opt.state_dict(), "params": {k: v.detach() for k, v in m.named_parameters()}}, src)
        p = cli("from-torch", src, dst)
        self.assertEqual(p.returncode, 1)
        self.assertIn("--like", p.stderr)
        p = cli("from-torch", src, dst, "--like", tpl)
        self.assertEqual(p.returncode, 0, p.stderr)
        spillway.restore("py/pfromtorch", dst, socket=self.d.control, lease=60)
        self.assertTrue(self.worker("py/pfromtorch", True, AT, out).startswith("resumed %d\n" % AT))
        got = torch.load(out)
        for k, v in m.named_parameters():
            self.assertTrue(torch.equal(got["model"][k], v.detach()), "weights of %s" % k)
        for i, p in enumerate(m.parameters()):
            for k in ("step", "exp_avg", "exp_avg_sq"):
                self.assertTrue(torch.equal(torch.as_tensor(got["opt"]["state"][i][k]), opt.state[p][k]),
                                "state %s of %d" % (k, i))

    def test_other_state_dtype(self):
        """An fp32 run's checkpoint -> to-torch -> from-torch --like an int8
        checkpoint of the same model: the restored session resumes under
        state_dtype="int8" at the fp32 run's step, with its master weights
        exactly and its moments as int8 codes them (what encode_moment
        gives, decoded)."""
        from spillway._portable import decode_moment, encode_moment
        from spillway.checkpoint import from_torch, to_torch
        ck32, tpl8, dst = (os.path.join(self.tmp, f) for f in ("ck-dt32", "ck-dt8-tpl", "ck-dt32-as-int8"))
        self.worker("py/pdt32", True, AT, os.path.join(self.tmp, "dt32.pt"), "ckpt:%d:%s" % (AT, ck32))
        self.worker("py/pdt8tpl", True, 1, os.path.join(self.tmp, "dt8tpl.pt"), "ckpt:1:%s" % tpl8, dtype="int8")
        doc = to_torch(ck32)
        self.assertEqual(doc["spillway"]["layout"]["state_dtype"], "fp32")
        from_torch(doc, dst, like=tpl8)
        self.assertEqual(to_torch(dst)["spillway"]["layout"]["state_dtype"], "int8")
        spillway.restore("py/pdt8", dst, socket=self.d.control, lease=60)
        out = os.path.join(self.tmp, "dt8.pt")
        self.assertTrue(self.worker("py/pdt8", True, AT, out, dtype="int8").startswith("resumed %d\n" % AT))
        got = torch.load(out)
        for k, v in doc["params"].items():
            self.assertTrue(torch.equal(got["model"][k], v), "weights of %s" % k)
        for i, st in doc["optimizer"]["state"].items():
            self.assertEqual(int(float(got["opt"]["state"][i]["step"])), int(float(st["step"])))
            for role in ("exp_avg", "exp_avg_sq"):
                m = st[role].reshape(-1).numpy()
                codes, scales = encode_moment(m, role, "int8", m.size)
                want = torch.from_numpy(decode_moment(bytes(codes), role, "int8", m.size, scales))
                self.assertTrue(torch.equal(got["opt"]["state"][i][role].reshape(-1), want),
                                "%s of %s: not the int8 coding of the fp32 run's" % (role, i))

    def test_damaged_page(self):
        ck = os.path.join(self.tmp, "ck-bad")
        self.worker("py/pbad", True, 2, os.path.join(self.tmp, "bad.pt"), "ckpt:2:%s" % ck)
        m, _ = files_of(ck)
        t = [t for t in m["tensors"] if t["name"].endswith(".exp_avg")][0]
        path = os.path.join(ck, t["file"])
        os.chmod(path, 0o600)
        with open(path, "r+b") as f:
            f.seek(5)
            b = f.read(1)
            f.seek(5)
            f.write(bytes([b[0] ^ 0x10]))
        p = cli("to-torch", ck, os.path.join(self.tmp, "bad-out.pt"))
        self.assertEqual(p.returncode, 1)
        self.assertIn("tensor %s page 0" % t["name"], p.stderr)
        self.assertIn(path, p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "bad-out.pt")))
        p = cli("to-torch", ck)
        self.assertEqual(p.returncode, 2)
        self.assertIn("usage", p.stderr)

    def test_callable_after_import(self):
        fn = spillway.checkpoint
        import spillway.checkpoint as mod
        # The submodule replaced the attribute; calling it is the function.
        self.assertIs(spillway.checkpoint, mod)
        self.assertTrue(callable(spillway.checkpoint))
        self.assertEqual(mod.to_torch.__module__, "spillway._portable")
        for f in (fn, spillway.checkpoint):
            with self.assertRaises(spillway.SpillwayError) as e:
                f("py/nosuch", os.path.join(self.tmp, "nosuch"), socket=self.d.control)
            self.assertIn("no such session", str(e.exception))


if __name__ == "__main__":
    unittest.main()
