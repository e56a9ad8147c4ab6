# Finds attend's dependencies. Each one that is missing stops configure with the name of the
# Debian 12 package that provides it, so a user knows exactly what to install.

macro(attend_require pkg debian_pkg)
  find_package(${pkg} ${ARGN} QUIET)
  if(NOT ${pkg}_FOUND)
    message(FATAL_ERROR
      "attend: dependency '${pkg}' not found. On Debian 12 install it with:\n"
      "    sudo apt-get install ${debian_pkg}\n"
      "(or run tools/bootstrap.sh, which installs everything attend needs).")
  endif()
endmacro()

attend_require(OpenMP "g++ (GCC's libgomp)" COMPONENTS CXX)
attend_require(xsimd libxsimd-dev CONFIG)
# oneDNN (attend_layer, the bench's baseline) is found by runtime/CMakeLists.txt from its library
# and headers: Debian's dnnl CMake package requires OpenCL, which attend never uses.
if(ATTEND_BUILD_TESTS)
  attend_require(GTest libgtest-dev)
endif()
if(ATTEND_BUILD_TOOLS)
  attend_require(nlohmann_json nlohmann-json3-dev CONFIG)
  attend_require(CLI11 libcli11-dev CONFIG)
endif()
if(ATTEND_BUILD_BENCH)
  attend_require(benchmark libbenchmark-dev CONFIG)
endif()
