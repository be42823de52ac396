# scripts/demo-job.sh: sourced by scripts/demo once spillwayd runs and
# SPILLWAY_SOCKET names it. Trains the example MLP with its AdamW state on
# the NVMe tier, in a region under a quarter of that state, and shows the
# daemon's view while it trains and after.
#
# The model: 64-1024-1024-1024-10, about 2.2 M parameters, 25 MiB of
# optimizer state; the region is 6 MiB (24%) of 1 MiB pages.

demo_tier=swappable
say "train: build-demo/examples/train-mlp --tier $demo_tier --region-bytes 6 MiB (state ~25 MiB)"
build-demo/examples/train-mlp --steps 60 --batch 32 --hidden 1024 --layers 3 \
	--tier "$demo_tier" --region-bytes $((6 << 20)) --page-size $((1 << 20)) \
	--every 5 --check 1.5 &
demo_train_pid=$!

# The daemon's view mid-run: the session, its pages by state, the disk.
sleep 2
if kill -0 "$demo_train_pid" 2>/dev/null; then
	say "while training: spillwayctl status"
	build-demo/client/spillwayctl status || true
fi

wait "$demo_train_pid" && demo_rc=0 || demo_rc=$?
say "after training: spillwayctl status"
build-demo/client/spillwayctl status || true
if [ "$demo_rc" -ne 0 ]; then
	echo "train-mlp failed with status $demo_rc" >&2
	exit 1
fi
