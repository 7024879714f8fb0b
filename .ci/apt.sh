# Sourced by the .ci scripts: apt with retries, and a guard that keeps the
# host's own packages as they are.
#
# A test run may add packages to the host (a compiler, a browser), never
# upgrade, downgrade or remove one: the machine is somebody's, and a changed
# -dev package can break their builds. apt_install simulates first and
# refuses any plan that touches an installed package.

export DEBIAN_FRONTEND=noninteractive

# retry N CMD...: runs CMD up to N times, waiting 5, 10, 20… s between tries.
retry() {
  local n=$1 i=1 wait=5; shift
  while true; do
    "$@" && return 0
    [ "$i" -ge "$n" ] && { echo "apt: '$*' failed $n times" >&2; return 1; }
    echo "apt: '$*' failed (try $i of $n); again in ${wait}s" >&2
    sleep "$wait"; i=$((i + 1)); wait=$((wait * 2))
  done
}

# apt_update: refreshes the host's indexes. A secondary index that is
# mid-sync reports an error although the main archive is fine, so errors are
# reported and the install that follows decides.
apt_update() {
  retry 3 apt-get update -qq || echo "apt: apt-get update reported errors; continuing with the indexes there are" >&2
}

# apt_install PKG...: installs PKG (as root), only as additions.
apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "apt: missing packages $*; run as root or: sudo apt-get install --no-install-recommends $*" >&2
    return 1
  fi
  local plan changes
  if ! plan=$(apt-get -s install --no-install-recommends "$@" 2>&1); then
    apt_update
    plan=$(apt-get -s install --no-install-recommends "$@" 2>&1) || { echo "$plan" >&2; return 1; }
  fi
  # "Inst pkg [old] (new …)" is an upgrade or downgrade; "Remv" a removal.
  changes=$(grep -E '^(Inst [^ ]+ \[|Remv )' <<<"$plan" || true)
  if [ -n "$changes" ]; then
    echo "apt: installing $* would change packages already on this machine:" >&2
    echo "$changes" >&2
    echo "apt: refusing; install them yourself if that is what you want" >&2
    return 1
  fi
  echo "apt: installing $*"
  local i
  for i in 1 2 3; do
    apt-get install -y -qq --no-install-recommends --no-remove "$@" && return 0
    echo "apt: install failed (try $i of 3); refreshing the indexes" >&2
    sleep $((i * 5)); apt_update
  done
  return 1
}
# apt_utils_pinned: the apt-utils package to install (for apt-ftparchive),
# pinned to the installed apt's version, or nothing when it is there.
# Unpinned, apt would upgrade apt itself whenever the archive (usually the
# security archive) is ahead of the host.
apt_utils_pinned() {
  command -v apt-ftparchive >/dev/null 2>&1 || echo "apt-utils=$(dpkg-query -W -f='${Version}' apt)"
}
