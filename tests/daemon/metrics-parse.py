#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Reads a scrape with prometheus_client's own parser (Debian:
python3-prometheus-client): every family with a TYPE line comes back with
that type, the session's region is there, and the swap directory's label
value, escaped by the daemon, reads back as the directory's real path.
Usage: metrics-parse.py SCRAPE SESSION DIR; exit 77 without the module."""
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("prometheus_client is not installed (Debian: python3-prometheus-client)")
    sys.exit(77)

path, session, swapdir = sys.argv[1:4]
text = open(path, encoding="utf-8").read()
types = {}
for line in text.splitlines():
    if line.startswith("# TYPE "):
        _, _, name, kind = line.split(" ")
        types[name] = kind
families = {f.name: f for f in text_string_to_metric_families(text)}
# the parser drops a counter's _total from the family name
seen = {}
for name, f in families.items():
    full = name + "_total" if f.type == "counter" and name + "_total" in types else name
    seen[full] = f.type
assert seen == types, (sorted(set(seen.items()) ^ set(types.items())))
region = [s for s in families["spillway_session_region_bytes"].samples if s.labels.get("session") == session]
assert len(region) == 1 and region[0].value > 0, region
dirs = {s.labels["dir"] for s in families["spillway_swap_dir_max_bytes"].samples}
assert dirs == {swapdir}, (dirs, swapdir)
print(f"prometheus_client: {len(families)} families, "
      f"{sum(len(f.samples) for f in families.values())} samples read back")
