#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a result:
#   tools/bootstrap.sh bench   install what is missing, build Release, run the quick benchmark suite
#   tools/bootstrap.sh test    install what is missing, build Release, run the whole test suite
#   tools/bootstrap.sh build   install what is missing and build only
# Extra arguments after the verb go to attend-bench (bench) or ctest (test).
# Environment: BUILD_DIR (default build), JOBS (default nproc).
set -euo pipefail

verb="${1:-}"
case "$verb" in bench | test | build) shift ;; *)
  echo "usage: $0 bench|test|build [args...]" >&2
  exit 2
  ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

# Debian packages attend needs to build and benchmark. OpenMP comes with g++ (libgomp).
# (oneDNN is used through its library and headers, so OpenCL's development files are not needed.)
packages=(g++ cmake make libdnnl-dev libxsimd-dev libgtest-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev
  python3-dev pybind11-dev python3-numpy)
# The test suite also compares with PyTorch (Debian's torch belongs to /usr/bin/python3; without
# OpenMP OpenBLAS it falls back to a reference BLAS ~10x slower), fuzzes with clang's libFuzzer,
# checks the pkg-config file, renders attend-report's page in headless Chromium, and CI cross-builds
# the NEON path for aarch64 and runs it under qemu, and runs the tensor-parallel example under
# mpirun (Open MPI). (python3-dev, pybind11-dev: the `attend` module.)
if [[ "$verb" == test ]]; then
  packages+=(python3 python3-torch python3-numpy libopenblas0-openmp clang libclang-rt-14-dev pkg-config
    g++-aarch64-linux-gnu qemu-user chromium libopenmpi-dev openmpi-bin libnuma-dev)
fi

missing=()
for p in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)"
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "bootstrap: installing missing Debian packages: ${missing[*]}"
  sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null || { echo "bootstrap: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"

case "$verb" in
  bench) exec "$build/bin/attend-bench" "$@" ;;
  test) exec ctest --test-dir "$build" --output-on-failure -j "$jobs" "$@" ;;
  build) ;;
esac
