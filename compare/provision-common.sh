# Sourced (not run) by compare/provision-*.sh as `. "$(dirname "$0")/provision-common.sh"
# TAG`, TAG being the name the script's messages start with: what every provisioning script
# does the same way. Where the scripts are, the cache directory, the messages, the "already
# built" check, and cmake steps whose log is shown only on failure.
#
#   POCKET_CACHE   cache directory (default ~/.cache/pocket)

tag="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${POCKET_CACHE:-$HOME/.cache/pocket}"

say() { echo "[$tag] $*" >&2; }

# have DIR TOOLS...: every tool built and BUILD_INFO written.
have() {
  local dir="$1"; shift
  [ -f "$dir/BUILD_INFO" ] || return 1
  for t in "$@"; do [ -x "$dir/bin/$t" ] || return 1; done
}

# exit_if_built DIR TOOLS...: a later run finds the build complete and returns at once.
exit_if_built() {
  if have "$@"; then
    say "already built: $(cat "$1/BUILD_INFO")"
    exit 0
  fi
}

# need_cmake: cmake on PATH, or an exit saying how to get it.
need_cmake() {
  command -v cmake >/dev/null \
    || { say "cmake not found: install cmake (apt-get install cmake / dnf install cmake / brew install cmake)"; exit 1; }
}

# The compiler launcher flags for cmake: ccache where it is installed (a rebuild is short).
ccache_launcher=()
command -v ccache >/dev/null \
  && ccache_launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# cpu_cores: the number of cores (Linux and macOS), 2 when neither tool answers.
cpu_cores() {
  nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2
}

# logged LOG LINES COMMAND...: runs the command with its output in LOG; on failure shows
# the log's last LINES lines and exits (a build's own output is too long to show whole).
logged() {
  local log="$1" lines="$2"; shift 2
  "$@" >"$log" 2>&1 || { tail -n "$lines" "$log"; exit 1; }
}

# cmake_build DIR JOBS TARGETS...: builds the targets of a configured build, logged to
# DIR.build.log.
cmake_build() {
  local dir="$1" jobs="$2"; shift 2
  logged "$dir.build.log" 40 cmake --build "$dir" --config Release -j "$jobs" --target "$@"
}
