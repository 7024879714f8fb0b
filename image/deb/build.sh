#!/usr/bin/env bash
# build.sh VERSION ARCH...: makes dist/perch_VERSION_ARCH.deb for each ARCH
# (amd64, arm64, armhf) from the binaries `make deb` built:
#   amd64 dist/perch_linux_amd64, arm64 dist/perch_linux_arm64,
#   armhf dist/perch_linux_armv6 (ARMv6 code runs on every Raspberry Pi;
#   Debian's armhf baseline is ARMv7, which the Pi Zero and Pi 1 lack).
# bin/perch (this machine's build of the same source) is run to generate
# the man page and completion from the CLI's own definitions.
#
# Run from `make deb`; the package layout is in nfpm.yaml.in.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: $0 VERSION ARCH..." >&2; exit 2; }
version=$1; shift
work=build/deb
rm -rf "$work"
mkdir -p "$work/bin" dist

# The package's date: the commit's (reproducible) unless SOURCE_DATE_EPOCH
# says otherwise.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH
mtime=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

go build -o "$work/bin/gencopyright" ./image/deb/gencopyright

# Man page and completion, from the CLI's own command definitions (the
# host binary; the page dates from SOURCE_DATE_EPOCH for reproducibility).
bin/perch man >"$work/perch.1"
bin/perch completion bash >"$work/perch.bash"
gzip -9n <"$work/perch.1" >"$work/perch.1.gz"

# Changelog. A release must have its entry in image/deb/changelog; any
# other build gets an entry of its own on top, so the package's changelog
# names the version it came with.
top=$(sed -n '1s/^perch (\([^)]*\)).*/\1/p' image/deb/changelog)
maintainer=$(sed -n '0,/^ -- /s/^ -- \(.*>\)  .*/\1/p' image/deb/changelog)
[ -n "$top" ] && [ -n "$maintainer" ] || { echo "build.sh: image/deb/changelog does not start with a Debian changelog entry" >&2; exit 1; }
case $version in
  "$top") cp image/deb/changelog "$work/changelog" ;;
  [0-9]*.[0-9]*.[0-9]*[!0-9.]*)
    # Not a release number (X.Y.Z~git…, or a test build): an entry of its own.
    {
      printf 'perch (%s) UNRELEASED; urgency=medium\n\n' "$version"
      printf '  * Development build of commit %s; see the git history.\n\n' "$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
      printf ' -- %s  %s\n\n' "$maintainer" "$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
      cat image/deb/changelog
    } >"$work/changelog"
    ;;
  *)
    echo "build.sh: this is release $version but image/deb/changelog starts with $top: add an entry for $version" >&2
    exit 1 ;;
esac
gzip -9n <"$work/changelog" >"$work/changelog.gz"

for arch in "$@"; do
  case $arch in
    amd64) goarch=amd64 bin=dist/perch_linux_amd64 magic='x86-64' ;;
    arm64) goarch=arm64 bin=dist/perch_linux_arm64 magic='ARM aarch64' ;;
    armhf) goarch=arm bin=dist/perch_linux_armv6 magic='ARM, EABI5' ;;
    *) echo "build.sh: unknown architecture $arch (amd64, arm64, armhf)" >&2; exit 2 ;;
  esac
  [ -x "$bin" ] || { echo "build.sh: $bin is missing: run make deb (it builds it)" >&2; exit 1; }
  if command -v file >/dev/null && ! file -b "$bin" | grep -q "$magic"; then
    echo "build.sh: $bin is not a $magic binary: $(file -b "$bin")" >&2; exit 1
  fi
  mkdir -p "$work/$arch"
  "$work/bin/gencopyright" -goarch "$goarch" -o "$work/$arch/copyright" ./cmd/perch
  sed -e "s|@ARCH@|$arch|g" -e "s|@VERSION@|$version|g" -e "s|@BINARY@|$bin|g" \
      -e "s|@WORK@|$work|g" -e "s|@MAINTAINER@|$maintainer|g" -e "s|@MTIME@|$mtime|g" \
      image/deb/nfpm.yaml.in >"$work/$arch/nfpm.yaml"
  out=dist/perch_${version}_${arch}.deb
  rm -f "$out"
  go tool -modfile=gotools/go.mod nfpm package --config "$work/$arch/nfpm.yaml" --packager deb --target "$out" >/dev/null
  echo "$out"
done
