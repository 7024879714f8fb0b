#!/bin/sh
# version.sh [DIR]: prints the version of the Perch tree at DIR (default: the
# repository holding this script), as the Makefile stamps it into the binary
# and the .deb file names.
#
# The release number lives in the file VERSION at the top (X.Y.Z), so a
# clone without tags, or a tarball without .git, still knows what it is.
#
#   1. No git work tree (a release tarball, an export): exactly X.Y.Z. Such
#      trees are only ever made from a release tag.
#   2. HEAD carries the tag vX.Y.Z and the tracked files are unchanged:
#      exactly X.Y.Z (the release build).
#   3. The tag vX.Y.Z is an ancestor of HEAD, or is HEAD with local changes
#      (commits or edits after the release, VERSION not bumped yet):
#      X.Y.(Z+1)~git<yyyymmdd>.<hash>, a build of the next number.
#   4. Otherwise (the release is still ahead, or the clone has no tags):
#      X.Y.Z~git<yyyymmdd>.<hash>.
#
# <yyyymmdd> is HEAD's commit date in UTC (not the build date: rebuilding a
# commit gives the same number) and <hash> its abbreviated id. `~` sorts
# before anything, so under dpkg --compare-versions
#   0.2.0~git20261120.ab12cd3 < 0.2.0 < 0.2.1~git20261124.ef45ab6 < 0.2.1,
# and development builds sort by commit day. Two builds of the same day
# compare by hash, i.e. arbitrarily: publish at most one development build a
# day, or bump VERSION.
#
# Release procedure, which keeps even a tagless clone ordered right: commit
# VERSION=X.Y.Z, tag it vX.Y.Z, build and publish; then bump VERSION to the
# next number. Rule 3 covers the commits made before the bump.
set -eu
dir=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
file=$dir/VERSION
[ -r "$file" ] || { echo "version.sh: $file is missing: it holds the release number X.Y.Z" >&2; exit 1; }
v=$(tr -d ' \t\r\n' <"$file")
case $v in
  *[!0-9.]* | .* | *. | *..* | '') bad=1 ;;
  *.*.*.*) bad=1 ;;
  *.*.*) bad= ;;
  *) bad=1 ;;
esac
[ -z "$bad" ] || { echo "version.sh: $file says '$v'; it must hold X.Y.Z (three numbers, e.g. 0.2.0)" >&2; exit 1; }

g() { git -C "$dir" "$@"; }
if ! command -v git >/dev/null 2>&1 || [ "$(g rev-parse --is-inside-work-tree 2>/dev/null)" != true ]; then
  echo "$v"; exit 0
fi
hash=$(g rev-parse --short=7 HEAD)
day=$(TZ=UTC g log -1 --format=%cd --date=format-local:%Y%m%d HEAD)
# Tracked files only: build outputs and editor files do not make a tree dirty.
dirty=
g diff --quiet HEAD -- 2>/dev/null || dirty=1

tag=v$v
if g rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
  if [ "$(g rev-parse "$tag^{commit}")" = "$(g rev-parse HEAD)" ] && [ -z "$dirty" ]; then
    echo "$v"; exit 0
  fi
  if g merge-base --is-ancestor "$tag" HEAD; then
    next=${v%.*}.$((${v##*.} + 1))
    echo "$next~git$day.$hash"; exit 0
  fi
fi
echo "$v~git$day.$hash"
