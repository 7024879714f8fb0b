#!/usr/bin/env bash
# rootfs.sh SUITE ARCH [PACKAGE...]: prints the path of a tarball holding a
# minimal Debian root (mmdebstrap --variant=apt) of SUITE for ARCH with the
# extra PACKAGEs, building it first when the cache lacks it.
#
# The cache lives outside the repository (PERCH_BUILD_CACHE, default
# /var/cache/perch-build) so that `git clean` or a fresh worktree keeps it,
# keyed by suite, architecture and package list so that a changed list never
# reuses a stale root. A root older than PERCH_ROOT_MAX_DAYS (default 30) is
# rebuilt: the archive moves on, and a month-old root would test the package
# against a Debian nobody runs any more. Builds of the same key are
# serialised with flock; different keys build in parallel.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 SUITE ARCH [PACKAGE...]" >&2; exit 2; }
suite=$1 arch=$2; shift 2
pkgs=$(printf '%s\n' "$@" | sed '/^$/d' | sort -u | paste -sd, -)
cache=${PERCH_BUILD_CACHE:-/var/cache/perch-build}/pkg-roots
max_days=${PERCH_ROOT_MAX_DAYS:-30}
# v1: bump when the way roots are made changes.
key=$(printf 'v1 %s %s %s' "$suite" "$arch" "$pkgs" | sha256sum | cut -c1-12)
tar=$cache/$suite-$arch-$key.tar
# The .tar suffix tells mmdebstrap to write a tarball, not a directory.
tmp=$cache/$suite-$arch-$key.partial.tar
mkdir -p "$cache"

exec 9>"$tar.lock"
flock 9
if [ -s "$tar" ] && [ -z "$(find "$tar" -mtime +"$max_days")" ]; then
  echo "$tar"; exit 0
fi

# The host's Debian mirror, as .ci/deps-cgo reads it.
mirror=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
  | grep -v security | head -n1 | awk '{print $2}' || true)
mirror=${mirror:-http://deb.debian.org/debian}

if [ "$arch" != "$(dpkg --print-architecture)" ] && [ ! -e "/proc/sys/fs/binfmt_misc/qemu-$(case $arch in arm64) echo aarch64 ;; armhf) echo arm ;; *) echo "$arch" ;; esac)" ]; then
  echo "rootfs: a $arch root needs qemu-user binfmt: run .ci/deps (qemu-user-static, binfmt-support)" >&2
  exit 1
fi

echo "rootfs: building $suite/$arch${pkgs:+ with $pkgs} (cached as $tar)" >&2
rm -f "$tmp"
include=()
[ -z "$pkgs" ] || include=(--include="$pkgs")
# Retried: the archive is the one thing here that is outside the machine.
for try in 1 2 3; do
  if timeout 1800 mmdebstrap --quiet --mode=root --variant=apt --architectures="$arch" \
      --components=main "${include[@]}" \
      --aptopt='Acquire::Retries "3"' \
      "$suite" "$tmp" "deb $mirror $suite main" >&2; then
    mv "$tmp" "$tar"
    echo "$tar"
    exit 0
  fi
  echo "rootfs: mmdebstrap failed (try $try of 3)" >&2
  rm -f "$tmp"; sleep $((try * 10))
done
exit 1
