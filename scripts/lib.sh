# scripts/lib.sh: shared by scripts/test and scripts/demo. Sourced, not run.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"

say() { printf '\n==> %s\n' "$*"; }

# Debian packages the build and the test suite need. The CUDA toolkit is not
# among them: it comes from /usr/local/cuda when present and is optional.
# python3-torch is Debian's PyTorch 1.13 (CPU), for the Python binding's tests
# and the PyTorch example; it runs under /usr/bin/python3, and uses OpenBLAS
# when libopenblas0-pthread is there (20x faster than the reference BLAS).
# tmux drives spillwayctl top on a real terminal; mandoc lints the man
# pages; prometheus (promtool) and python3-prometheus-client check the
# metrics endpoint's exposition format with the ecosystem's own parsers;
# python3-matplotlib draws spillway-bench --plot (bench/plot.py);
# python3-tqdm draws the attach progress bar of spillway.Session(progress=True);
# xfsprogs makes the XFS (on a loop device) where checkpoints reflink.
spw_packages=(
	gcc pkg-config meson ninja-build
	liburing-dev libnuma-dev libuv1-dev libcjson-dev libsystemd-dev
	systemd util-linux fio
	python3 python3-cffi python3-torch python3-numpy libopenblas0-pthread
	tmux mandoc prometheus python3-prometheus-client python3-matplotlib
	python3-tqdm xfsprogs
)

# For the fuzz step of scripts/test and for scripts/fuzz (libFuzzer comes
# with clang's runtime). Optional: without them (and not root to install
# them) scripts/test skips fuzzing, saying so; the corpus replays anyway.
spw_fuzz_packages=(clang-14 libclang-rt-14-dev)

# Installs whatever of "$@" is missing, once; prints what it does.
install_missing() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if [ ${#missing[@]} -eq 0 ]; then
		say "packages: all ${#} present"
		return 0
	fi
	if [ "$(id -u)" -ne 0 ]; then
		echo "missing Debian packages: ${missing[*]}" >&2
		echo "run as root, or: sudo apt-get install ${missing[*]}" >&2
		exit 1
	fi
	say "installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# configure_build DIR [meson options...]: sets up DIR once, reconfigures
# when the options change, then builds.
configure_build() {
	local dir=$1; shift
	local stamp="$dir/.spw-options"
	if [ -f "$dir/build.ninja" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$*" ]; then
		say "build: $dir (configured)"
	else
		say "configure: meson setup $dir $*"
		rm -rf "$dir"
		meson setup "$dir" "$@"
		echo "$*" >"$stamp"
	fi
	say "build: ninja -C $dir"
	ninja -C "$dir"
}
