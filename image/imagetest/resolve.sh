#!/usr/bin/env bash
# resolve.sh TARGET: the Debian packages (name version) that apt, reading
# the archive's current indexes in a private state directory, installs for
# image/build.sh's package list: Essential packages, apt and the list,
# without recommends, as mmdebstrap --variant=apt does. The image test
# compares it with the packages in a built image: two resolutions of the
# same inputs must name the same packages.
set -euo pipefail
target=$1
top=$(cd "$(dirname "$0")/../.." && pwd)
case $target in rpi-arm64) arch=arm64 ;; amd64) arch=amd64 ;; *) echo "resolve: unknown target $target" >&2; exit 2 ;; esac
mirror=${MIRROR:-http://deb.debian.org/debian}
security=${SECURITY_MIRROR:-http://deb.debian.org/debian-security}
pkgs=$("$top/image/build.sh" --target "$target" --list-packages | tr , ' ')
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
mkdir -p "$d/lists/partial" "$d/archives/partial" "$d/etc/preferences.d" "$d/etc/sources.list.d"
: > "$d/status"
cat > "$d/etc/sources.list" <<EOF2
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main non-free-firmware
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie-updates main non-free-firmware
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $security trixie-security main non-free-firmware
EOF2
opts=(-o "Dir::Etc=$d/etc" -o "Dir::State::Lists=$d/lists" -o "Dir::State::status=$d/status"
      -o "Dir::Cache=$d" -o "Dir::Cache::archives=$d/archives" -o "APT::Architecture=$arch"
      -o "APT::Architectures=$arch" -o APT::Sandbox::User=root
      -o APT::Install-Recommends=false -o Debug::NoLocking=1
      -o Acquire::Retries=3)
apt-get "${opts[@]}" -qq update
essential=$(/usr/lib/apt/apt-helper cat-file "$d"/lists/*_Packages* | awk 'BEGIN{RS=""} /\nEssential: yes/ { for (i = 1; i <= NF; i++) if ($i == "Package:") { print $(i+1); break } }' | sort -u)
apt-get "${opts[@]}" -s install $essential apt $pkgs |
  awk '/^Inst / { v = $3; gsub(/[()]/, "", v); print $2, v }' | sort
