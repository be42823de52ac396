# SPDX-License-Identifier: MIT
"""contrib/grafana/spillway.json: a Grafana dashboard (the JSON model's
shape: panels on the 24-column grid without overlap, unique ids, a
Prometheus datasource variable, every $variable defined), whose PromQL
uses only what a real spillwayd exports: every metric name in a panel or a
variable query is a sample name in a scrape of a test daemon with a session
stepping on the NVMe tier, every label a selector, a `by` clause or a
legend names is a label of those samples (or instance/job, added by
Prometheus), and literal label values exist. With promtool (Debian:
prometheus), every expression also parses as PromQL."""
import ctypes
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import urllib.request

import spwtest
import spillway
from spillway import _lib as L

DASHBOARD = os.path.join(spwtest.SRC, "contrib", "grafana", "spillway.json")
PANEL_TYPES = {"row", "timeseries", "stat", "gauge", "bargauge", "table"}
SCRAPE_LABELS = {"instance", "job"}  # added by the Prometheus server
SELECTOR = re.compile(r"\b(spillway_[A-Za-z0-9_:]+)\s*(\{([^}]*)\})?")
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def parse_scrape(text):
    """{sample name: [labels dict, ...]} from the text exposition format."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})? ", line)
        assert m, line
        labels = dict((k, v) for k, v in re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                                     m.group(3) or ""))
        samples.setdefault(m.group(1), []).append(labels)
    return samples


def expressions(dash):
    """(where, PromQL) for every panel target and every query variable."""
    for p in dash["panels"]:
        for t in p.get("targets", []):
            yield "panel %r" % p["title"], t["expr"], t.get("legendFormat", "")
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            yield "variable %r" % v["name"], q, ""


def step_session(d):
    """A session on the NVMe tier, its state 2x its region, a few steps."""
    s = spillway.Session("grafana/0", region_bytes=1 << 20, page_size=64 << 10, socket=d.control)
    opt = spillway.Optimizer(s, [dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0)],
                             tier="nvme", device="host")
    n = 65536  # 4 tensors: 3 MiB of state through a 1 MiB region
    bufs, ids = [], []
    for k in range(4):
        init, dev, grad = (ctypes.c_float * n)(), (ctypes.c_float * n)(), (ctypes.c_float * n)(*([1e-3] * n))
        bufs.append((init, dev, grad))
        ids.append(opt.add("w%d" % k, 0, n, ctypes.addressof(init), ctypes.addressof(dev), L.TYPE_F32))
    for step in range(1, 5):
        opt.begin(step)
        for t, (_, dev, grad) in zip(reversed(ids), reversed(bufs)):
            opt.grad_ready(t, ctypes.addressof(grad), 4 * n, L.TYPE_F32)
        opt.end()
        for t in ids:
            opt.wait_params(t)
    opt.sync()  # the step's figures (adam seconds, clip coefficient) are in
    return s, opt, bufs


class Dashboard(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DASHBOARD, encoding="utf-8") as f:
            cls.dash = json.load(f)
        # Port 0: the kernel picks a free one; the status says which.
        cls.d = spwtest.Daemon(extra={"metrics": {"listen": "127.0.0.1:0"}})
        try:
            port = spwtest.metrics_port(cls.d)
            s, opt, bufs = step_session(cls.d)
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
                cls.scrape = r.read().decode()
            opt.close()
            s.close()
        finally:
            cls.d.stop()
        cls.samples = parse_scrape(cls.scrape)

    def test_scrape_has_the_session(self):
        # the check below is only as good as the scrape: the session and
        # its traffic are in it
        steps = [l for l in self.samples["spillway_steps_total"] if l.get("session") == "grafana/0"]
        self.assertEqual(len(steps), 1)
        for series in ("spillway_session_read_bytes_total", "spillway_session_write_bytes_total",
                       "spillway_steps_total"):
            m = re.search(r'^%s\{session="grafana/0"\} (\S+)$' % series, self.scrape, re.M)
            self.assertTrue(m, series)
            self.assertGreater(float(m.group(1)), 0, series)

    def test_dashboard_shape(self):
        d = self.dash
        self.assertIsInstance(d["title"], str)
        self.assertRegex(d["uid"], r"^[A-Za-z0-9_-]{1,40}$")
        self.assertIsInstance(d["schemaVersion"], int)
        self.assertGreaterEqual(d["schemaVersion"], 30)
        self.assertIn("from", d["time"])
        self.assertIsInstance(d["templating"]["list"], list)
        self.assertIsInstance(d["panels"], list)
        self.assertGreater(len(d["panels"]), 5)
        ids, boxes = set(), []
        for p in d["panels"]:
            with self.subTest(panel=p.get("title")):
                self.assertIn(p["type"], PANEL_TYPES)
                self.assertNotIn(p["id"], ids)
                ids.add(p["id"])
                g = p["gridPos"]
                for k in ("x", "y", "w", "h"):
                    self.assertIsInstance(g[k], int)
                self.assertTrue(0 <= g["x"] and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, g)
                for b in boxes:  # no two panels on the same cells
                    self.assertFalse(g["x"] < b["x"] + b["w"] and b["x"] < g["x"] + g["w"] and
                                     g["y"] < b["y"] + b["h"] and b["y"] < g["y"] + g["h"], (g, b))
                boxes.append(g)
                if p["type"] == "row":
                    continue
                self.assertEqual(p["datasource"], {"type": "prometheus", "uid": "${datasource}"})
                refs = [t["refId"] for t in p["targets"]]
                self.assertTrue(refs and len(refs) == len(set(refs)), refs)
                for t in p["targets"]:
                    self.assertTrue(t["expr"].strip())

    def test_variables_defined(self):
        names = {v["name"]: v for v in self.dash["templating"]["list"]}
        self.assertEqual(names["datasource"]["type"], "datasource")
        self.assertEqual(names["datasource"]["query"], "prometheus")
        builtin = {"__rate_interval", "__interval", "__range"}
        for where, expr, _ in expressions(self.dash):
            for v in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expr):
                self.assertTrue(v in names or v in builtin, (where, v))

    def test_the_panels_this_issue_asks_for(self):
        exprs = " ".join(e for _, e, _ in expressions(self.dash))
        for name in ("spillway_pool_bytes", "spillway_steps_total", "spillway_session_read_bytes_total",
                     "spillway_session_write_bytes_total", "spillway_session_adam_seconds",
                     "spillway_session_clip_coefficient", "spillway_swap_io_seconds_bucket"):
            self.assertIn(name, exprs)

    def test_metrics_exist_in_a_real_scrape(self):
        used = set()
        for where, expr, legend in expressions(self.dash):
            with self.subTest(where=where, expr=expr):
                # every identifier used as a selector is one of ours
                for ident in re.findall(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\s*[\{\[]", expr):
                    self.assertTrue(ident.startswith("spillway_"), ident)
                found = SELECTOR.findall(expr)
                self.assertTrue(found, "no spillway metric in " + expr)
                labels = set(SCRAPE_LABELS)
                for name, _, matchers in found:
                    used.add(name)
                    self.assertIn(name, self.samples, "%s: %s is not in the scrape" % (where, name))
                    have = set().union(*(set(l) for l in self.samples[name]))
                    labels |= have
                    for label, op, value in MATCHER.findall(matchers):
                        self.assertIn(label, have | SCRAPE_LABELS, (name, label))
                        if op == "=" and "$" not in value and label not in SCRAPE_LABELS:
                            self.assertIn(value, {l.get(label) for l in self.samples[name]}, (name, label))
                        if op == "=~" and "$" not in value and label not in SCRAPE_LABELS:
                            for alt in value.split("|"):
                                self.assertIn(alt, {l.get(label) for l in self.samples[name]}, (name, alt))
                for group in re.findall(r"\bby\s*\(([^)]*)\)", expr):
                    for label in (x.strip() for x in group.split(",")):
                        self.assertIn(label, labels, (where, label))
                for label in re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", legend):
                    self.assertIn(label, labels, (where, label))
        self.assertGreater(len(used), 15)

    def test_promql_parses(self):
        promtool = shutil.which("promtool")
        if not promtool:
            self.skipTest("promtool is not installed (Debian: prometheus)")
        rules = []
        for i, (where, expr, _) in enumerate(expressions(self.dash)):
            if expr.startswith("label_values("):
                continue  # Grafana's, not PromQL
            e = expr.replace("$__rate_interval", "1m").replace("$instance", ".*").replace("$session", ".*")
            rules.append({"record": "spillway:dashboard_%d" % i, "expr": e})
        self.assertGreater(len(rules), 20)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rules.yml")
            with open(path, "w") as f:
                # YAML is a superset of JSON
                json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
            r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("%d rules found" % len(rules), r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
