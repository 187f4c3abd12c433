# Sourced by the build scripts (from the repository root): compile through
# ccache when it is installed, so an unchanged file is not compiled again by
# the next build of the same kind, in this checkout or another (CI's fresh
# clone on a machine that built before). CCACHE_BASEDIR makes the cached paths
# relative to the checkout; the sloppiness lets precompiled headers hit.
# The cache is ccache's default, outside the tree (~/.cache/ccache), so a
# fresh clone of the next run finds it; 20 GB holds every build of
# scripts/run-tests (the LibTorch PCHs and the -g objects of the sanitizer
# builds are large; at ccache's default 5 GB the last builds would evict the
# first ones' objects). Without ccache nothing changes: cache_args stays empty.
# CCACHE_NOHASHDIR: ccache adds the working directory to the hash of every -g
# compile (the sanitizer, TSan and fuzz builds) so that debug info names the
# right directory; with it, those builds missed the cache in every new clone
# (CI's) and compiled cold, ~30 of CI's minutes. Without the directory in the
# hash, an object compiled in one clone serves the next; its debug info then
# names the directory it was first compiled in (file and line stay right:
# only that prefix differs in a sanitizer report or gdb).
cache_args=()
if command -v ccache > /dev/null; then
  cache_args=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-20G}
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
fi
