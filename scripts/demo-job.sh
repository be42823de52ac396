# scripts/demo-job.sh: sourced by scripts/demo once spillwayd runs and
# SPILLWAY_SOCKET names it. Trains the example MLP with its AdamW state on
# the NVMe tier, in a region under a quarter of that state, and shows the
# daemon's view while it trains and after.
#
# The model: 64-1024-1024-1024-10, about 2.2 M parameters, 25 MiB of
# optimizer state; the region is 6 MiB (24%) of 1 MiB pages.

demo_tier=swappable
demo_args=(--steps 60 --batch 32 --hidden 1024 --layers 3 --tier "$demo_tier" --region-bytes $((6 << 20))
	   --page-size $((1 << 20)))
# The optimizer's timeline (Chrome trace events), kept after the demo.
demo_trace=/var/tmp/spillway-demo-trace.json
say "train: SPILLWAY_TRACE=$demo_trace build-demo/examples/train-mlp --tier $demo_tier --region-bytes 6 MiB (state ~25 MiB)"
SPILLWAY_TRACE=$demo_trace build-demo/examples/train-mlp "${demo_args[@]}" --every 5 --check 1.5 \
	--losses "$demo_dir/ref.losses" &
demo_train_pid=$!

# The daemon's view mid-run: the session, its pages by state, the disk.
sleep 2
if kill -0 "$demo_train_pid" 2>/dev/null; then
	say "while training: spillwayctl status"
	build-demo/client/spillwayctl status || true
	say "while training: spillwayctl top --iterations 2 (off a terminal: a table a second)"
	build-demo/client/spillwayctl top --iterations 2 || true
	say "while training: spillwayctl trace demo/train-mlp --seconds 1 (the daemon's disk I/O of the session)"
	build-demo/client/spillwayctl trace demo/train-mlp --seconds 1 -o "$demo_dir/io-trace.json" || true
fi

wait "$demo_train_pid" && demo_rc=0 || demo_rc=$?
say "after training: spillwayctl status"
build-demo/client/spillwayctl status || true
if [ "$demo_rc" -ne 0 ]; then
	echo "train-mlp failed with status $demo_rc" >&2
	exit 1
fi

# The same counters as Prometheus scrapes them (metrics.listen in the
# demo's config is a unix socket; a TCP address such as 127.0.0.1:9464
# works the same with curl).
say "metrics: GET /metrics on $demo_dir/metrics.sock (a few of the families)"
/usr/bin/python3 - "$demo_dir/metrics.sock" <<'PY' || true
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n")
data = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
head, _, body = data.decode().partition("\r\n\r\n")
print(head.splitlines()[0], "-", len(body.splitlines()), "lines")
want = ("spillway_pool_bytes", "spillway_swap_read_bytes_total", "spillway_swap_write_bytes_total",
        "spillway_prefetch_hits_total", "spillway_evictions_total", "spillway_sessions")
for line in body.splitlines():
    if line.startswith(want):
        print("  " + line)
PY

say "trace: $demo_trace, the last 20 steps (SPILLWAY_TRACE_STEPS); open it in https://ui.perfetto.dev or chrome://tracing"
/usr/bin/python3 - "$demo_trace" <<'PY' || true
import collections, json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
spans = collections.Counter(e["name"] for e in ev if e.get("ph") == "X")
print("  %d spans: %s" % (sum(spans.values()), ", ".join("%s %d" % kv for kv in spans.most_common())))
peak = collections.defaultdict(int)
for e in ev:
    if e.get("ph") == "C":
        peak[e["name"]] = max(peak[e["name"]], e["args"]["value"])
print("  counters (peak): %s" % ", ".join("%s %d" % kv for kv in sorted(peak.items())))
PY

# Kill and resume: the same run on a persistent session, SIGKILLed half
# way; a new trainer of the same session name takes the state over from
# spillwayd and goes on after the last committed step.
# Waits (at most a minute) until the resumable run has logged $1 losses.
demo_wait_losses() {
	for _ in $(seq 1 1200); do
		[ "$(cat "$demo_dir/run.losses" 2>/dev/null | wc -l)" -ge "$1" ] && break
		sleep 0.05
	done
}

say "kill and resume: the same 60 steps with --persistent --session demo/resume, SIGKILLed half way"
# A persistent overlapped optimizer also keeps an update journal and an
# undo copy of the weights it updates (docs/persistent.md): 10 MiB of region.
demo_resume=(build-demo/examples/train-mlp "${demo_args[@]}" --region-bytes $((10 << 20)) --every 20
	     --session demo/resume --persistent
	     --losses "$demo_dir/run.losses")
"${demo_resume[@]}" &
demo_train_pid=$!
demo_wait_losses 30
kill -KILL "$demo_train_pid" 2>/dev/null || true
wait "$demo_train_pid" 2>/dev/null || true
say "killed (kill -9) after step $(wc -l <"$demo_dir/run.losses"); the daemon keeps the session, orphaned:"
build-demo/client/spillwayctl status | sed -n '/^SESSION/,/^$/p' || true
say "restart: the same command"
# Wherever the kill landed (inside a step's updates too: the journal
# repairs a torn tile and the step is finished or redone), it goes on.
"${demo_resume[@]}" &
demo_train_pid=$!
# While it trains: its state as files, written by the daemon at the next
# commit point (no byte through the trainer, which trains on while the
# pages are copied), against cp of the same files.
demo_wait_losses 36
say "checkpoint while it trains: spillwayctl checkpoint demo/resume $demo_dir/ckpt"
build-demo/client/spillwayctl checkpoint demo/resume "$demo_dir/ckpt" || true
if [ -d "$demo_dir/ckpt" ]; then
	demo_t0=$(date +%s%N)
	cp -r "$demo_dir/ckpt" "$demo_dir/ckpt-cp" && sync -f "$demo_dir/ckpt-cp"
	say "for comparison, cp -r of those files and sync: $(( ($(date +%s%N) - demo_t0) / 1000000 )) ms"
fi
wait "$demo_train_pid" && demo_rc=0 || demo_rc=$?
if [ "$demo_rc" -ne 0 ]; then
	echo "the resumed train-mlp failed with status $demo_rc" >&2
	exit 1
fi
# demo_same_losses FILE WHAT: FILE's 60 losses are the uninterrupted
# run's, bit for bit, or the demo fails.
demo_same_losses() {
	if cmp -s "$demo_dir/ref.losses" "$1"; then
		say "$2, the 60 losses equal the uninterrupted run's, bit for bit"
	else
		echo "$2, the losses differ from the uninterrupted run's:" >&2
		diff "$demo_dir/ref.losses" "$1" | head >&2
		exit 1
	fi
}
demo_same_losses "$demo_dir/run.losses" "killed and resumed"

# A daemon restart (an upgrade, systemctl restart) under a persistent
# trainer: SIGTERM saves the session at its next commit point into
# persist.state_dir, writing only what is in memory (its swap files are
# linked into the save, not copied); the next spillwayd brings it back
# as an orphan that reads those pages where they are.
say "daemon restart: demo/restart trains (--persistent); SIGTERM to spillwayd half way"
demo_restart=(build-demo/examples/train-mlp "${demo_args[@]}" --region-bytes $((10 << 20)) --every 20
	      --session demo/restart --persistent --losses "$demo_dir/restart.losses")
"${demo_restart[@]}" >"$demo_dir/restart.out" 2>&1 &
demo_train_pid=$!
for _ in $(seq 1 1200); do
	[ "$(cat "$demo_dir/restart.losses" 2>/dev/null | wc -l)" -ge 30 ] && break
	sleep 0.05
done
demo_t0=$(date +%s%N)
kill -TERM "$daemon_pid"
wait "$daemon_pid" || { echo "spillwayd exited with status $? at SIGTERM" >&2; exit 1; }
say "spillwayd saved and exited in $(( ($(date +%s%N) - demo_t0) / 1000000 )) ms:"
grep -E "shutdown:|stopping daemon's save" "$demo_dir/spillwayd.log" | tail -n 3 | sed 's/^/    /'
wait "$demo_train_pid" || true
echo "  the trainer: $(grep -m1 -iE 'spillwayd|connection' "$demo_dir/restart.out" || tail -n 1 "$demo_dir/restart.out")"
demo_start_daemon
say "the session is back, orphaned, its pages read from the save's links (tier.backed_bytes):"
build-demo/client/spillwayctl status | sed -n '/^SESSION/,/^$/p' || true
build-demo/client/spillwayctl status --json | /usr/bin/python3 -c '
import json, sys
for s in json.load(sys.stdin)["sessions"]:
    if s["name"] == "demo/restart":
        print("  demo/restart: committed step %d, %.1f MiB read from the save where it lies" %
              (s["committed_step"], s["tier"]["backed_bytes"] / 2**20))' || true
say "restart: the same command"
"${demo_restart[@]}" || { echo "the trainer resumed after the daemon restart failed" >&2; exit 1; }
demo_same_losses "$demo_dir/restart.losses" "across the daemon restart too"
