#!/usr/bin/env bash
# Checks attend as a dependency, the way a server team adopts it:
#  1. cmake --install into a fresh prefix; find_package(attend) from examples/ (an outside project,
#     -Wall -Wextra -Werror) builds and runs the embedding-server example;
#  2. pkg-config --static finds attend.pc and a program links with its flags;
#  3. every public header compiles on its own under -Wall -Wextra -Werror and includes nothing
#     from oneDNN, xsimd or OpenMP;
#  4. add_subdirectory (FetchContent's path) builds with tests, bench and tools off.
# usage: check_package.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$(cd "$1" && pwd)"
build="$(cd "$2" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== install + find_package from examples/"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/examples" -B "$work/examples" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/examples" -j "$(nproc)" >/dev/null
"$work/examples/embedding_server"

echo "== pkg-config"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
pkg-config --exists attend
g++ -std=c++20 -Wall -Wextra -Werror "$src/tests/package/subdir_consumer/consumer.cpp" -o "$work/pc_consumer" \
  $(pkg-config --cflags --libs --static attend)
"$work/pc_consumer"

echo "== public headers"
for h in "$work/prefix/include/attend/"*.hpp; do
  if grep -nE '#include *[<"](oneapi/|dnnl|xsimd|omp\.h)' "$h"; then
    echo "error: $h includes a private dependency" >&2
    exit 1
  fi
  echo "#include <attend/$(basename "$h")>" > "$work/one_header.cpp"
  g++ -std=c++20 -Wall -Wextra -Werror -fsyntax-only -I"$work/prefix/include" "$work/one_header.cpp"
done
echo "all $(ls "$work/prefix/include/attend/"*.hpp | wc -l) headers are self-contained"

echo "== add_subdirectory"
cmake -S "$src/tests/package/subdir_consumer" -B "$work/subdir" -DATTEND_SOURCE_DIR="$src" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/subdir" -j "$(nproc)" >/dev/null
"$work/subdir/consumer"
echo "package checks passed"
