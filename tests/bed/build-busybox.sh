#!/usr/bin/env bash
# Builds BusyBox $BUSYBOX_VERSION from its upstream source with upstream's default configuration,
# statically linked, into ${PYKUBELET_CACHE:-/var/cache/pykubelet}/e2e/busybox-$BUSYBOX_VERSION/busybox:
# the program of the e2e test image registry.k8s.io/e2e-test-images/busybox:1.37.0-1 (which is the
# official busybox:1.37.0 image) and of the BusyBox userland the other test images stand on.
#
# No upstream site is reachable here; Debian's archive is, and it keeps the pristine upstream
# tarball of every source package (<name>_<version>.orig.tar.*, checked by apt against the signed
# archive). Debian's own busybox binaries are built with Debian's configuration, whose shell
# drops environment variables whose names are not shell identifiers (data-1=...); upstream's
# keeps them, and specs read them. Idempotent; about a minute of compiling on 2 cores.
set -euo pipefail

BUSYBOX_VERSION=${BUSYBOX_VERSION:-1.37.0}
# A Debian release whose busybox source package is this upstream version.
SOURCE_SUITE=${BUSYBOX_SOURCE_SUITE:-trixie}
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
OUT=$CACHE/e2e/busybox-$BUSYBOX_VERSION
say() { echo "[build-busybox $(date +%T)] $*"; }

[[ -x $OUT/busybox ]] && { echo "busybox $BUSYBOX_VERSION already built in $OUT"; exit 0; }
mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9
[[ -x $OUT/busybox ]] && { echo "busybox $BUSYBOX_VERSION already built in $OUT"; exit 0; }

missing=()
for tool in make gcc bzip2; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
  say "installing build tools: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" libc6-dev >/dev/null
fi

# apt with a source list and state of its own: the machine's apt configuration is left alone.
apt_dir=$OUT/apt
mkdir -p "$apt_dir/lists/partial" "$OUT/src"
echo "deb-src http://deb.debian.org/debian $SOURCE_SUITE main" >"$apt_dir/sources.list"
: >"$apt_dir/status"
apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=- -o Debug::NoLocking=1
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::State::status=$apt_dir/status")
say "fetching the busybox $BUSYBOX_VERSION upstream source through Debian $SOURCE_SUITE's archive"
apt-get "${apt_opts[@]}" update -q >/dev/null
cd "$OUT/src"
apt-get "${apt_opts[@]}" source --download-only -q busybox >/dev/null 2>&1
tarball=$(ls "$OUT/src/busybox_$BUSYBOX_VERSION".orig.tar.* 2>/dev/null | head -n1)
[[ -n $tarball ]] || { echo "Debian $SOURCE_SUITE has no busybox $BUSYBOX_VERSION source (ls $OUT/src)" >&2; exit 1; }

rm -rf "busybox-$BUSYBOX_VERSION"
tar xf "$tarball"
cd "busybox-$BUSYBOX_VERSION"
make -s defconfig >/dev/null
sed -i 's/^# CONFIG_STATIC is not set$/CONFIG_STATIC=y/' .config
t0=$SECONDS
say "compiling busybox $BUSYBOX_VERSION (defconfig, static)"
make -s -j"$(nproc)" >"$OUT/build.log" 2>&1 || { tail -n 30 "$OUT/build.log" >&2; exit 1; }
cp busybox "$OUT/.busybox.new"
mv -f "$OUT/.busybox.new" "$OUT/busybox"
cd "$OUT" && rm -rf "$OUT/src/busybox-$BUSYBOX_VERSION"
say "built $("$OUT/busybox" | head -n1) in $((SECONDS - t0))s"
