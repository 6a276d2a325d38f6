#!/usr/bin/env bash
# Every cached build of the test bed, run the way a machine that has none of the caches runs it,
# then `make run` until the example pods are Running. A warm cache skips each build script's
# whole path; this runs those paths, into a cache directory of its own that starts empty
# (the machine's cache, ${PYKUBELET_CACHE:-/var/cache/pykubelet}, is never touched).
#
#   fresh-check.sh              the rehearsal (`make fresh-check`): Go's module and build caches
#                               start empty too, and the agent runs from a new virtualenv; as
#                               slow as a new machine (tens of minutes on 2 cores)
#   fresh-check.sh --link-only  what CI runs every time (tests/cache_miss/): the same steps, reusing the
#                               machine's Go module and build caches, so the compiler finds its work
#                               done and only the linker runs (minutes)
# Options: --keep (leave the work directory, and the cache in it, for a look afterwards);
# --only STEP (repeatable: only those steps, e.g. --only control-plane).
# At the end it prints each step's time; the work directory is removed unless --keep.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
warm="${PYKUBELET_CACHE:-/var/cache/pykubelet}"
mode=fresh keep='' only=()
while [ $# -gt 0 ]; do
  case $1 in
    --link-only) mode=link-only ;;
    --keep) keep=1 ;;
    --only) only+=("${2:?--only needs a step}"); shift ;;
    *) echo "usage: fresh-check.sh [--link-only] [--keep] [--only STEP]..." >&2; exit 2 ;;
  esac
  shift
done

work="$(mktemp -d /var/tmp/pykubelet-fresh-check.XXXXXX)"
vm_lane=''
# kill_tree PID: PID and every process under it (the VM lane's builds), children first
kill_tree() {
  local child
  for child in $(pgrep -P "$1" || true); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
cleanup() {
  if [ -n "$vm_lane" ] && kill -0 "$vm_lane" 2>/dev/null; then  # a step failed or a signal came mid-lane
    kill_tree "$vm_lane"
    wait "$vm_lane" 2>/dev/null || true
  fi
  if [ -n "$keep" ]; then echo "fresh-check: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
export PYKUBELET_CACHE="$work/cache"
if [ "$mode" = link-only ]; then
  export PYKUBELET_GO_CACHE="$warm/go"   # k8s-module.sh: the module and build caches
  venv="$repo/.venv"                     # created by CI's own `make test` from a clean clone
else
  venv="$work/venv"                      # a newcomer's: nothing installed yet
fi
mkdir -p "$PYKUBELET_CACHE"

say() { echo "[fresh-check $(date +%T)] $*" >&2; }
times="$work/times"  # one line per step done (a file: the VM lane's steps run in a subshell)
# step NAME CMD...: runs CMD in the repository, timed; any failure ends the check (or its lane).
step() {
  local name=$1 t0=$SECONDS rc=0
  shift
  if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then return 0; fi
  say "$name: $*"
  (cd "$repo" && "$@") || rc=$?
  if [ "$rc" -ne 0 ]; then
    say "$name FAILED (exit $rc) after $((SECONDS - t0))s"
    exit 1
  fi
  printf '%-22s %6ds\n' "$name" $((SECONDS - t0)) >>"$times"
  say "$name done in $((SECONDS - t0))s"
}

say "$mode check of the test bed's builds into $PYKUBELET_CACHE"
t_all=$SECONDS
# `make run` first: on a new machine it is the first command, and its setup does the rest's.
# (The check reads the manifests and CRI with the virtualenv's packages: `make venv` is the
# first thing `make run` would do anyway.)
step make-run      bash -c 'make --no-print-directory VENV="$1" venv &&
                            "$1/bin/python" tests/bed/make_run_check.py --venv "$1"' make-run "$venv"
# The VM lane (the Debian image from Debian's packages, the Vagrant box) is disk and dpkg work, the
# steps below it mostly Go's linker: on two cores the lane runs beside them, its output interleaved.
# The box goes into a Vagrant home of the check's own: the machine's boxes are left as they are.
(
  step vm-setup    make --no-print-directory vm-setup
  step vagrant-box env VAGRANT_HOME="$work/vagrant.d" bash tests/bed/vagrant_box.sh
) &
vm_lane=$!
step control-plane make --no-print-directory control-plane
step kube-proxy    bash tests/bed/build-kube-proxy.sh
step containerd2   make --no-print-directory containerd2
step e2e           make --no-print-directory e2e
step registry      make --no-print-directory registry
step images        "$venv/bin/python" tests/bed/images_control_plane.py --no-import --cache "$PYKUBELET_CACHE"
step e2e-images    "$venv/bin/python" tests/bed/images_e2e.py --no-import --cache "$PYKUBELET_CACHE"
step addons        bash tests/bed/build-addons.sh --no-import --manifests "$work/addons"
step wheelhouse    "$venv/bin/python" tests/bed/wheelhouse.py --dir "$PYKUBELET_CACHE/wheels"
wait "$vm_lane" || { say "the VM lane failed (above)"; exit 1; }

say "every build ran its cache-miss path ($mode); seconds per step:"
sed 's/^/  /' "$times" >&2
say "total $((SECONDS - t_all))s"
