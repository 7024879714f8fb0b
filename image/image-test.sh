#!/usr/bin/env bash
# `make image-test`: builds the .debs the images need (two versions for the
# upgrade test), then runs image/imagetest (build tag imagetest), which
# builds the amd64 and Raspberry Pi images, inspects them and boots them in
# QEMU. Prints the figures the tests measured.
#
# The .debs come from `make deb` when the tree has it (image/deb/build.sh),
# else from image/imagetest/testdeb.sh (a test-only stand-in with the same
# layout); the apt repository from image/deb/apt-repo.sh, else
# image/imagetest/testrepo.sh. IMAGE_TEST_RUN selects tests (go test -run).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
[ "$(id -u)" -eq 0 ] || { echo "image-test: needs root (mmdebstrap, image files owned by root)" >&2; exit 1; }
.ci/image-deps

work=$top/build/image-test
rm -rf "$work"; mkdir -p "$work"
base=${VERSION:-$( [ -x image/deb/version.sh ] && image/deb/version.sh || echo 0.0.0~imagetest)}
next="$base+upgrade1" # sorts after $base for dpkg: the upgrade

debs() { # debs VERSION ARCH... -> prints the .deb paths
  local v=$1; shift
  if [ -x image/deb/build.sh ]; then
    make --no-print-directory deb VERSION="$v" DEB_ARCHES="$*" >&2
    for a in "$@"; do echo "$top/dist/perch_${v}_$a.deb"; done
  else
    for a in "$@"; do
      local bin=$work/perch_${v}_$a
      CGO_ENABLED=0 GOOS=linux GOARCH=$a go build -trimpath \
        -ldflags "-s -w -X github.com/perchhq/perch/appliance/version.Version=$v" -o "$bin" ./cmd/perch
      image/imagetest/testdeb.sh "$bin" "$v" "$a" "$work/perch_${v}_$a.deb" >&2
      echo "$work/perch_${v}_$a.deb"
    done
  fi
}
mapfile -t first < <(debs "$base" amd64 arm64)
mapfile -t second < <(debs "$next" amd64)
repo_tool=$top/image/imagetest/testrepo.sh
[ -x image/deb/apt-repo.sh ] && repo_tool=$top/image/deb/apt-repo.sh

results=$work/results.txt
: > "$results"
set +e
PERCH_IMAGE_DEB=${first[0]} PERCH_IMAGE_DEB_ARM64=${first[1]} PERCH_IMAGE_DEB_NEXT=${second[0]} \
PERCH_IMAGE_REPO_TOOL=$repo_tool PERCH_IMAGE_RESULTS=$results PERCH_IMAGE_LOGS=$work/logs TMPDIR=$work \
  go test -tags imagetest -count=1 -v -timeout 100m -run "${IMAGE_TEST_RUN:-.}" ./image/imagetest/ 2>&1 | tee "$work/go-test.log"
rc=${PIPESTATUS[0]}
set -e
if grep -q -- '--- SKIP' "$work/go-test.log" && [ "${CI:-}" = true ]; then
  echo "image-test: CI=true: a skipped test is a failure" >&2; rc=1
fi
echo "==> image-test figures"
cat "$results"
exit "$rc"
