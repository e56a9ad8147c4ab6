#!/usr/bin/env bash
# Cross-compiles the NEON kernel test for aarch64 and runs it under qemu-user.
# usage: run_neon.sh SOURCE_DIR BUILD_DIR   (exit 77 when the cross toolchain or qemu is missing)
set -euo pipefail
src="$1"
build="$2/neon"
command -v aarch64-linux-gnu-g++ >/dev/null || { echo "SKIPPED: g++-aarch64-linux-gnu not installed"; exit 77; }
command -v qemu-aarch64 >/dev/null || { echo "SKIPPED: qemu-user not installed"; exit 77; }
cmake -S "$src/tests/neon" -B "$build" >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null
qemu-aarch64 "$build/neon_kernel_test"
