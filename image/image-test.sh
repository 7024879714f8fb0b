#!/usr/bin/env bash
# `make image-test`: builds Perch's .debs with `make deb` (two versions, the
# second for the upgrade test) and runs image/imagetest (build tag
# imagetest), which builds the amd64 and Raspberry Pi images with
# image/build.sh, inspects them and boots them in QEMU. Prints each step's
# time and the figures the tests measured.
#
# IMAGE_TEST_RUN selects tests (go test -run); IMAGE_TEST_TIMEOUT bounds the
# whole go test run (default 45m: every QEMU run inside has its own bound
# and is killed by its PID). Under CI=true a skipped test is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
[ "$(id -u)" -eq 0 ] || { echo "image-test: needs root (mmdebstrap, image files owned by root); run as root" >&2; exit 1; }
t0=$(date +%s)
step() { echo "==> image-test: $* (+$(( $(date +%s) - t0 ))s)"; }

step "host tools (.ci/image-deps)"
.ci/image-deps

work=$top/build/image-test
rm -rf "$work"; mkdir -p "$work"
base=${VERSION:-$(image/deb/version.sh)}
next="$base+upgrade1" # sorts after $base for dpkg: the upgrade

step "make deb $base (amd64 arm64) and $next (amd64)"
make --no-print-directory deb VERSION="$base" DEB_ARCHES="amd64 arm64" >"$work/deb.log" 2>&1 ||
  { tail -30 "$work/deb.log" >&2; echo "image-test: make deb failed (log: $work/deb.log)" >&2; exit 1; }
cp "dist/perch_${base}_amd64.deb" "dist/perch_${base}_arm64.deb" "$work/"
make --no-print-directory deb VERSION="$next" DEB_ARCHES="amd64" >>"$work/deb.log" 2>&1 ||
  { tail -30 "$work/deb.log" >&2; echo "image-test: make deb failed (log: $work/deb.log)" >&2; exit 1; }
cp "dist/perch_${next}_amd64.deb" "$work/"

# fail_messages prints the failing tests and every message a test wrote
# (t.Error, t.Fatal, t.Log, with their continuation lines), without the
# figures it recorded.
fail_messages() {
  awk '
    /^ *--- FAIL/ { print; keep = 0; next }
    /^ +[A-Za-z0-9_]+_test\.go:[0-9]+: / { keep = ($0 !~ /: measured: /); if (keep) print; next }
    /^        / { if (keep) print; next }
    { keep = 0 }' "$1"
}

results=$work/results.txt
: > "$results"
step "go test -tags imagetest ./image/imagetest/"
set +e
PERCH_IMAGE_DEB=$work/perch_${base}_amd64.deb PERCH_IMAGE_DEB_ARM64=$work/perch_${base}_arm64.deb \
PERCH_IMAGE_DEB_NEXT=$work/perch_${next}_amd64.deb PERCH_IMAGE_REPO_TOOL=$top/image/deb/apt-repo.sh \
PERCH_IMAGE_RESULTS=$results PERCH_IMAGE_LOGS=$work/logs TMPDIR=$work \
  go test -tags imagetest -count=1 -v -timeout "${IMAGE_TEST_TIMEOUT:-45m}" -run "${IMAGE_TEST_RUN:-.}" ./image/imagetest/ 2>&1 | tee "$work/go-test.log"
rc=${PIPESTATUS[0]}
# A go test killed by its -timeout runs no cleanups: end every QEMU it
# started, by the PID it logged (and only if that PID is still a QEMU).
for pid in $(sed -n 's/.*qemu-system-[a-z0-9_]* started, pid \([0-9]*\),.*/\1/p' "$work/go-test.log"); do
  if grep -qa qemu-system "/proc/$pid/cmdline" 2>/dev/null; then
    echo "image-test: QEMU pid $pid outlived the test; killing it" >&2
    kill -KILL "$pid" || true
  fi
done
set -e
if grep -q -- '--- SKIP' "$work/go-test.log" && [ "${CI:-}" = true ]; then
  echo "image-test: CI=true: a skipped test is a failure" >&2; rc=1
fi
step "done (exit $rc)"
echo "==> image-test figures"
cat "$results"
echo "image-test: total $(( $(date +%s) - t0 ))s; logs in $work"
if [ "$rc" != 0 ]; then
  # Last, so that a CI summary showing the output's tail shows why.
  echo "==> image-test failures (the tests' own messages; whole log: $work/go-test.log)"
  fail_messages "$work/go-test.log" | tail -n 80
fi
exit "$rc"
