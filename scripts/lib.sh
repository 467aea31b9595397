# shellcheck shell=bash disable=SC2034  # variables here are used by the scripts that source it
# Helpers shared by scripts/*: the repository root, logging, the build parallelism, the CUDA
# toolkit on PATH and the installation of missing Debian packages. Source it, do not run it:
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Environment: MOE_EP_JOBS (parallel build/test jobs, default nproc), MOE_EP_NO_INSTALL=1 (never
# call apt-get; fail with the list of missing packages instead).

MOE_EP_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The scripts' own MOE_EP_* settings stay shell variables but are not passed on: the library
# warns about every MOE_EP_* variable it does not know, and tests may inspect the environment.
export -n MOE_EP_JOBS MOE_EP_BUILD_DIR MOE_EP_NO_INSTALL MOE_EP_CTEST_ARGS MOE_EP_CUDA_ARCH MOE_EP_PYTHON \
  MOE_EP_GPU_CTEST_ARGS MOE_EP_GPU_TEST_TIMEOUT \
  2>/dev/null || true
MOE_EP_SCRIPT="${MOE_EP_SCRIPT:-$(basename "$0")}"

# Debian packages a build with tests needs. Each has a file that proves it is usable without
# asking dpkg, because on some machines (the GPU images) the same files come from elsewhere.
MOE_EP_DEB_PACKAGES=(cmake ninja-build g++ git libgtest-dev libcli11-dev nlohmann-json3-dev
  libfmt-dev clang-format python3-dev pybind11-dev python3-numpy python3-pytest python3-venv
  python3-setuptools python3-matplotlib libopenmpi-dev openmpi-bin)

moe_ep_log() { printf '[%s] %s\n' "$MOE_EP_SCRIPT" "$*" >&2; }
moe_ep_die() {
  moe_ep_log "error: $*"
  exit 1
}

# Parallel jobs for builds and ctest: MOE_EP_JOBS, else the number of cores.
moe_ep_jobs() { echo "${MOE_EP_JOBS:-$(nproc 2>/dev/null || echo 2)}"; }

# True when the package's files are there (dpkg says installed, or its marker file exists).
moe_ep_have_package() {
  local pkg=$1 status=""
  if command -v dpkg-query >/dev/null 2>&1; then
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] && return 0
  fi
  case $pkg in
    cmake) command -v cmake >/dev/null 2>&1 ;;
    ninja-build) command -v ninja >/dev/null 2>&1 ;;
    g++) command -v g++ >/dev/null 2>&1 ;;
    git) command -v git >/dev/null 2>&1 ;;
    clang-format) command -v clang-format-14 >/dev/null 2>&1 || command -v clang-format >/dev/null 2>&1 ;;
    libgtest-dev) [[ -e /usr/include/gtest/gtest.h ]] ;;
    libcli11-dev) [[ -e /usr/include/CLI/CLI.hpp ]] ;;
    nlohmann-json3-dev) [[ -e /usr/include/nlohmann/json.hpp ]] ;;
    libfmt-dev) [[ -e /usr/include/fmt/format.h ]] ;;
    pybind11-dev) [[ -e /usr/include/pybind11/pybind11.h ]] ;;
    python3-matplotlib) [[ -e /usr/lib/python3/dist-packages/matplotlib/__init__.py ]] ;;
    libopenmpi-dev) command -v mpicxx >/dev/null 2>&1 ;;
    openmpi-bin) command -v mpirun >/dev/null 2>&1 ;;
    *) return 1 ;;
  esac
}

# Runs a command as root: directly when we are root (CI), else through sudo when there is one.
moe_ep_as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    moe_ep_die "not root and no sudo: cannot run '$*'; install the packages by hand"
  fi
}

# Installs the packages among "$@" that are missing: apt-get update once, then one quiet
# apt-get install. Does nothing (and needs no network or root) when everything is there.
moe_ep_ensure_packages() {
  local missing=() pkg
  for pkg in "$@"; do
    moe_ep_have_package "$pkg" || missing+=("$pkg")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if [[ ${MOE_EP_NO_INSTALL:-0} == 1 ]] || ! command -v apt-get >/dev/null 2>&1; then
    moe_ep_die "missing packages: ${missing[*]} (install them; MOE_EP_NO_INSTALL=${MOE_EP_NO_INSTALL:-0})"
  fi
  moe_ep_log "installing missing packages: ${missing[*]}"
  local apt_log
  apt_log=$(mktemp)
  # Wait up to 5 minutes for another apt/dpkg to release its lock instead of failing at once.
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=300)
  if ! moe_ep_as_root "${apt[@]}" update >"$apt_log" 2>&1 ||
    ! moe_ep_as_root "${apt[@]}" install --no-install-recommends "${missing[@]}" \
      >>"$apt_log" 2>&1 </dev/null; then
    cat "$apt_log" >&2
    rm -f "$apt_log"
    moe_ep_die "apt-get failed to install: ${missing[*]}"
  fi
  rm -f "$apt_log"
  for pkg in "${missing[@]}"; do
    moe_ep_have_package "$pkg" || moe_ep_die "package $pkg still missing after apt-get install"
  done
}

# Puts the CUDA toolkit's bin/ on PATH when nvcc is not there yet, so that CMake's CUDA
# detection (MOE_EP_ENABLE_CUDA=AUTO) finds the compiler in non-login shells such as CI's.
moe_ep_cuda_path() {
  command -v nvcc >/dev/null 2>&1 && return 0
  local dir
  for dir in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
    if [[ -n $dir && -x $dir/bin/nvcc ]]; then
      export PATH="$dir/bin:$PATH"
      return 0
    fi
  done
  return 0
}

# Configures and builds the CUDA backend with its tests in $1 (the GPU machines' build: CUDA
# required, Release, MOE_EP_CUDA_ARCH or sm_90), with Open MPI from build/mpi when it is there
# (scripts/mpi-bundle); the logs configure.log and build.log go to $2. Used by scripts/gpu-test
# and scripts/multi-gpu-bench.
moe_ep_gpu_build() {
  local build_dir=$1 log_dir=$2
  local generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  if [[ -d build/mpi/usr/bin ]]; then
    # shellcheck source=scripts/mpi-env
    . scripts/mpi-env build/mpi
  fi
  cmake -S . -B "$build_dir" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DMOE_EP_ENABLE_CUDA=ON \
    -DPython3_EXECUTABLE="$(command -v python3)" \
    -DCMAKE_CUDA_ARCHITECTURES="${MOE_EP_CUDA_ARCH:-90}" \
    -DMOE_EP_BUILD_TESTS=ON 2>&1 | tee "$log_dir/configure.log"
  cmake --build "$build_dir" -j "$(moe_ep_jobs)" 2>&1 | tee "$log_dir/build.log"
}
