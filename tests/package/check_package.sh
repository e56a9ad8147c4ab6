#!/usr/bin/env bash
# Checks attend as a dependency, the way a server team adopts it:
#  1. cmake --install into a fresh prefix; find_package(attend) from examples/ (an outside project,
#     -Wall -Wextra -Werror) builds and runs the embedding-server example;
#  2. pkg-config --static finds attend.pc and a program links with its flags;
#  3. every public header compiles on its own under -Wall -Wextra -Werror and includes nothing
#     from oneDNN, xsimd or OpenMP;
#  4. add_subdirectory (FetchContent's path) builds with tests, bench and tools off;
#  5. the installed CMake files never mention OpenCL (Debian's dnnl package requires it; attend
#     does not, and must not impose it on consumers);
#  6. a shared build: versioned sonames, only the public API (and attend::detail, the interface
#     between attend's own two libraries) exported, and the example runs against it;
#  7. attend_core alone (ATTEND_LAYER=OFF: no oneDNN at all) builds, installs and serves sdpa;
#  8. the C API (attend/attend.h) from a C11 program built with gcc and the installed attend.pc;
#  9. the Python module installed where /usr/bin/python3 finds it under the prefix.
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

echo "== the C API from C11 (gcc -std=c11 -Wall -Wextra -Werror, pkg-config --static attend)"
gcc -std=c11 -Wall -Wextra -Werror -pedantic "$src/tests/c_api/c_api_test.c" -o "$work/c_api_test" \
  $(pkg-config --cflags --libs --static attend) -lm
OMP_NUM_THREADS=2 "$work/c_api_test"
echo '#include <attend/attend.h>' > "$work/one_header.c"
gcc -std=c11 -Wall -Wextra -Werror -pedantic -fsyntax-only -I"$work/prefix/include" "$work/one_header.c"
g++ -std=c++20 -Wall -Wextra -Werror -fsyntax-only -x c++ -I"$work/prefix/include" "$work/one_header.c"

echo "== the Python module, installed where /usr/bin/python3 looks under the prefix"
if [[ -e "$build/python" ]] && ls "$build/python"/attend*.so >/dev/null 2>&1; then
  pydir="$(/usr/bin/python3 -c 'import sys; print(f"lib/python3.{sys.version_info.minor}/dist-packages")')"
  [[ -e "$work/prefix/$pydir/$(basename "$build/python"/attend*.so)" ]] || {
    echo "error: the module is not installed in $work/prefix/$pydir" >&2
    exit 1
  }
  # With the default prefix (/usr/local) that directory is on Debian python3's sys.path.
  /usr/bin/python3 -c 'import sys; assert "/usr/local/'"$pydir"'" in sys.path, sys.path'
  (cd "$work" && PYTHONPATH="$work/prefix/$pydir" OMP_NUM_THREADS=2 /usr/bin/python3 -c '
import attend, numpy as np
q = np.random.rand(1, 2, 5, 8).astype(np.float32)
o = attend.scaled_dot_product_attention(q, q, q, is_causal=True)
assert o.shape == (1, 2, 5, 8) and attend.__file__.startswith("'"$work/prefix"'"), attend.__file__
print("installed module:", attend.__file__.replace("'"$work"'/", ""), attend.__version__, attend.active_isa())')
else
  echo "(the build has no Python module: pybind11 or python3-dev missing)"
fi

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
echo "== no OpenCL in the CMake package"
if grep -rlE "OpenCL::|(find_dependency|find_package)\(OpenCL" "$work/prefix/lib/cmake/attend"; then
  echo "error: the installed CMake package mentions OpenCL" >&2
  exit 1
fi
g++ -std=c++20 -Wall -Wextra -Werror "$src/tests/package/subdir_consumer/consumer.cpp" -o "$work/pc_core_consumer" \
  $(pkg-config --cflags --libs --static attend-core)
"$work/pc_core_consumer"

echo "== shared libraries"
cmake -S "$src" -B "$work/shared" -DBUILD_SHARED_LIBS=ON -DATTEND_BUILD_TESTS=OFF -DATTEND_BUILD_TOOLS=OFF \
  -DATTEND_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/shared" -j "$(nproc)" >/dev/null
cmake --install "$work/shared" --prefix "$work/shared-prefix" >/dev/null
for lib in attend_core attend_layer; do
  so="$work/shared-prefix/lib/lib$lib.so"
  soname="$(readelf -d "$so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')"
  [[ "$soname" == "lib$lib.so.0" ]] || { echo "error: $so has soname '$soname'" >&2; exit 1; }
  # Every exported attend symbol is public API or attend::detail; kernels, exec, plan, parallel,
  # dispatch, gemm and numeric stay hidden.
  leaked="$(nm -DC --defined-only "$so" | grep -E '^[0-9a-f]+ [A-Za-z] attend::(kernels|exec|plan|parallel|dispatch|gemm|numeric)::' || true)"
  if [[ -n "$leaked" ]]; then
    echo "error: $so exports internals:" >&2
    echo "$leaked" | head >&2
    exit 1
  fi
  echo "$lib: soname $soname, $(nm -DC --defined-only "$so" | grep -c ' attend::') attend symbols exported"
done
cmake -S "$src/examples" -B "$work/examples-shared" -DCMAKE_PREFIX_PATH="$work/shared-prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/examples-shared" -j "$(nproc)" >/dev/null
"$work/examples-shared/embedding_server"

echo "== attend_core without oneDNN"
cmake -S "$src" -B "$work/core" -DATTEND_LAYER=OFF -DATTEND_BUILD_TESTS=OFF -DATTEND_BUILD_TOOLS=OFF \
  -DATTEND_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/core" -j "$(nproc)" >/dev/null
cmake --install "$work/core" --prefix "$work/core-prefix" >/dev/null
[[ ! -e "$work/core-prefix/lib/libattend_layer.a" ]] || { echo "error: ATTEND_LAYER=OFF built the layer" >&2; exit 1; }
PKG_CONFIG_PATH="$work/core-prefix/lib/pkgconfig" g++ -std=c++20 -Wall -Wextra -Werror \
  "$src/tests/package/subdir_consumer/consumer.cpp" -o "$work/core_consumer" \
  $(PKG_CONFIG_PATH="$work/core-prefix/lib/pkgconfig" pkg-config --cflags --libs --static attend-core)
"$work/core_consumer"
echo "package checks passed"
