# Sourced by the examples' tests (run_example.sh, run_regression.sh): what a
# user outside this repository does before running a program on the runtime.
# install_and_build BUILD_DIR EXAMPLE_SOURCE WORK_DIR [cmake args...] installs
# BUILD_DIR (cmake --install) into WORK_DIR/prefix and builds the example
# against it into WORK_DIR/build with find_package(ddp_worker). The cmake
# args must put WORK_DIR/prefix on CMAKE_PREFIX_PATH, with the LibTorch the
# build used (tests/examples/CMakeLists.txt).
install_and_build() {
  local build=$1 example=$2 work=$3
  shift 3
  rm -rf "$work"
  mkdir -p "$work"
  cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
  cmake -S "$example" -B "$work/build" -DCMAKE_BUILD_TYPE=Release "$@" \
    >"$work/configure.log" || { cat "$work/configure.log"; return 1; }
  # The package this example installed, not another example's (whose test
  # may delete and reinstall it meanwhile).
  grep -q "^ddp_worker_DIR:PATH=$work/prefix/" "$work/build/CMakeCache.txt" || {
    grep '^ddp_worker_DIR' "$work/build/CMakeCache.txt"
    echo "install_and_build: the example found ddp_worker outside its own prefix $work/prefix" >&2
    return 1
  }
  cmake --build "$work/build" -j2
}
