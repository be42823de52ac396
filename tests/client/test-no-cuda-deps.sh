#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/client/test-no-cuda-deps.sh LIBSPILLWAY [PLUGIN]
#
# libspillway.so must load where there is no CUDA runtime and must not bring
# a second libcudart into a process that has its own: no NEEDED entry and no
# dynamic symbol of a CUDA library. The cuda backend lives in the plugin,
# which, when built, is checked the other way (it does need libcudart), so
# a readelf whose output this script misreads fails the test rather than
# passing it.
set -eu
lib=$1
plugin=${2:-}
cuda_re='^(libcuda|libcudart|libnvrtc|libcublas|libnvidia)'

needed() {
	readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p'
}

[ -f "$lib" ] || { echo "no library at $lib"; exit 1; }
n=$(needed "$lib" | wc -l)
[ "$n" -gt 0 ] || { echo "readelf lists no NEEDED entry in $lib: cannot check it"; exit 1; }
bad=$(needed "$lib" | grep -E "$cuda_re" || true)
if [ -n "$bad" ]; then
	echo "$lib needs CUDA libraries: $bad (the cuda backend belongs in libspillway-cuda.so)"
	exit 1
fi
syms=$(readelf --dyn-syms -W "$lib" | awk '{print $8}' | grep -E '^(cuda|cu[A-Z])' || true)
if [ -n "$syms" ]; then
	echo "$lib has CUDA symbols in its dynamic table: $syms"
	exit 1
fi
echo "$lib: $n NEEDED entries, none of CUDA"

if [ -n "$plugin" ]; then
	needed "$plugin" | grep -Eq "$cuda_re" || {
		echo "the cuda plugin $plugin lists no CUDA library: readelf's output was misread"
		exit 1
	}
	exported=$(readelf --dyn-syms -W "$plugin" | awk '$7 != "UND" && $5 == "GLOBAL" {print $8}' | grep -v '^_' || true)
	if [ "$exported" != "spw__cuda_plugin" ]; then
		echo "the cuda plugin $plugin must export spw__cuda_plugin alone, exports: $exported"
		exit 1
	fi
	echo "$plugin: needs libcudart, exports spw__cuda_plugin alone"
fi
