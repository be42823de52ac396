# SPDX-License-Identifier: MIT
"""OffloadAdamW(trace=path): the timeline (client/trace.c) from Python.

A few steps of a small model with trace= set: trace_flush() writes a file
that json loads, with X spans for the steps and for each chunk's gradient
copy, kernels and parameter copy; closing writes it again. Without trace=
(and no $SPILLWAY_TRACE) trace_flush() says tracing is off and nothing is
written, and the environment is left as it was.
"""
import json
import os
import tempfile
import unittest

import spwtest  # noqa: F401  (import path)
import torch
import torch.nn as nn
from spillway.torch import OffloadAdamW


class TraceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon(swap=False)

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0, "spillwayd did not shut down cleanly"

    def train(self, **kw):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 4))
        opt = OffloadAdamW(m.parameters(), lr=1e-2, socket=self.d.control, **kw)
        for _ in range(3):
            opt.zero_grad()
            m(torch.randn(8, 32)).square().mean().backward()
            opt.step()
        return opt

    def spans(self, path):
        with open(path) as f:
            doc = json.load(f)
        xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        for e in xs:
            for k in ("name", "ts", "dur", "pid", "tid"):
                self.assertIn(k, e)
            self.assertGreaterEqual(e["dur"], 0)
        return xs

    def test_trace(self):
        os.environ.pop("SPILLWAY_TRACE", None)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.json")
            opt = self.train(trace=path)
            self.assertNotIn("SPILLWAY_TRACE", os.environ)
            self.assertTrue(opt.trace_flush())
            names = [e["name"] for e in self.spans(path)]
            self.assertEqual(names.count("step"), 3)
            for n in ("d2h grad", "pin wait", "adam"):
                self.assertIn(n, names)
            # The CPU model's fp32 parameters are the region's master copy
            # (spw_optimizer_param_view): nothing is copied back.
            self.assertNotIn("h2d params", names)
            os.remove(path)
            opt.close()
            self.assertEqual(len([e for e in self.spans(path) if e["name"] == "step"]), 3)

    def test_copies_without_the_view(self):
        os.environ.pop("SPILLWAY_TRACE", None)
        os.environ["SPILLWAY_PARAM_VIEW"] = "0"
        try:
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "t.json")
                opt = self.train(trace=path)
                opt.close()
                names = [e["name"] for e in self.spans(path)]
                self.assertIn("h2d params", names)
        finally:
            del os.environ["SPILLWAY_PARAM_VIEW"]

    def test_off(self):
        os.environ.pop("SPILLWAY_TRACE", None)
        with tempfile.TemporaryDirectory() as d:
            opt = self.train()
            self.assertFalse(opt.trace_flush())
            opt.close()
            self.assertEqual(os.listdir(d), [])


if __name__ == "__main__":
    unittest.main()
