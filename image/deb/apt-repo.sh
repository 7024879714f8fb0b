#!/usr/bin/env bash
# apt-repo.sh DIR DEB...: publishes the .debs into the apt repository at DIR
# (created when missing) and re-signs it:
#
#   DIR/pool/main/p/perch/perch_<version>_<arch>.deb   every version published
#   DIR/dists/stable/main/binary-{amd64,arm64,armhf}/Packages{,.gz}
#   DIR/dists/stable/{Release,InRelease,Release.gpg}
#   DIR/perch-archive-keyring.gpg                       the key to trust
#
# Indexes come from apt-ftparchive and signatures from gpg, never written by
# hand. Earlier versions stay in the pool and the indexes, as in any
# archive: apt picks the newest, and `apt-get install perch=<version>` can
# go back.
#
# The signing key is the armored private key in PERCH_REPO_KEY (passphrase,
# if any, in PERCH_REPO_KEY_PASSPHRASE), imported into a temporary keyring
# removed afterwards. Without it, a throwaway key is made once and kept in
# build/apt-key/ (a private GNUPGHOME), so that repeated publishing keeps
# the key boards already trust; `rm -rf build/apt-key` makes a new one.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 DIR DEB..." >&2; exit 2; }
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$1; shift
suite=stable component=main arches=(amd64 arm64 armhf)

for tool in apt-ftparchive gpg gpgv dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "apt-repo: $tool is missing: run .ci/deps-pkg (apt-utils, gnupg, gpgv, dpkg)" >&2; exit 1; }
done

# --- the pool ---
pool=$out/pool/$component/p/perch
mkdir -p "$pool"
for deb in "$@"; do
  [ -f "$deb" ] || { echo "apt-repo: $deb does not exist: run make deb" >&2; exit 1; }
  name=$(basename "$deb")
  version=$(dpkg-deb -f "$deb" Version)
  if [ -e "$pool/$name" ] && ! cmp -s "$deb" "$pool/$name"; then
    case $version in
      *~git*)
        # The same development number means the same commit: a rebuild.
        echo "apt-repo: replacing $name (a rebuild of the same development version)" >&2 ;;
      *)
        echo "apt-repo: $pool/$name was published with other contents; a released version must never change (apt clients would refuse it with a hash mismatch): publish a new version (bump VERSION), or remove the file if it never left this machine" >&2
        exit 1 ;;
    esac
  fi
  cp "$deb" "$pool/$name.tmp" && mv "$pool/$name.tmp" "$pool/$name"
  echo "apt-repo: published $name"
done

# --- the indexes ---
# MD5 and SHA1 are left out: apt ignores them, SHA256 and SHA512 are what it checks.
nohash=(-o APT::FTPArchive::MD5=false -o APT::FTPArchive::SHA1=false)
dist=$out/dists/$suite
for arch in "${arches[@]}"; do
  dir=$dist/$component/binary-$arch
  mkdir -p "$dir"
  # Filename: fields are relative to the repository's top, hence the cd.
  (cd "$out" && apt-ftparchive "${nohash[@]}" --arch "$arch" packages "pool/$component") >"$dir/Packages"
  gzip -9n <"$dir/Packages" >"$dir/Packages.gz"
done
rm -f "$dist/Release" "$dist/InRelease" "$dist/Release.gpg"
apt-ftparchive "${nohash[@]}" \
  -o APT::FTPArchive::Release::Origin=Perch \
  -o APT::FTPArchive::Release::Label=Perch \
  -o APT::FTPArchive::Release::Suite="$suite" \
  -o APT::FTPArchive::Release::Codename="$suite" \
  -o APT::FTPArchive::Release::Architectures="${arches[*]}" \
  -o APT::FTPArchive::Release::Components="$component" \
  -o APT::FTPArchive::Release::Description="Perch AI agent gateway" \
  release "$dist" >"$dist/Release.tmp"
mv "$dist/Release.tmp" "$dist/Release"

# --- the key ---
cleanup=()
trap 'for c in "${cleanup[@]}"; do eval "$c"; done' EXIT
if [ -n "${PERCH_REPO_KEY:-}" ]; then
  export GNUPGHOME
  GNUPGHOME=$(mktemp -d)
  cleanup+=("gpgconf --kill gpg-agent 2>/dev/null || true; rm -rf '$GNUPGHOME'")
  printf '%s\n' "$PERCH_REPO_KEY" | gpg --batch --quiet --import 2>/dev/null \
    || { echo "apt-repo: PERCH_REPO_KEY holds no importable key: it must be an armored private key (gpg --armor --export-secret-keys KEYID)" >&2; exit 1; }
else
  export GNUPGHOME=$top/build/apt-key
  mkdir -p "$GNUPGHOME"; chmod 0700 "$GNUPGHOME"
  cleanup+=("gpgconf --kill gpg-agent 2>/dev/null || true")
  if [ -z "$(gpg --batch --list-secret-keys --with-colons 2>/dev/null | grep '^sec')" ]; then
    echo "apt-repo: PERCH_REPO_KEY is unset: making a throwaway signing key in $GNUPGHOME" >&2
    gpg --batch --quiet --pinentry-mode loopback --passphrase '' \
      --quick-gen-key "Perch throwaway repository key (built on $(hostname))" ed25519 sign never
  fi
fi
fpr=$(gpg --batch --list-secret-keys --with-colons | awk -F: '$1 == "sec" {want = 1} want && $1 == "fpr" {print $10; exit}')
[ -n "$fpr" ] || { echo "apt-repo: no secret key to sign with" >&2; exit 1; }
sign=(gpg --batch --yes --quiet --pinentry-mode loopback --local-user "$fpr" --digest-algo SHA512)
if [ -n "${PERCH_REPO_KEY_PASSPHRASE:-}" ]; then
  sign+=(--passphrase-fd 3)
else
  sign+=(--passphrase '')
fi

# --- the signatures ---
"${sign[@]}" --clearsign --output "$dist/InRelease" "$dist/Release" 3<<<"${PERCH_REPO_KEY_PASSPHRASE:-}"
"${sign[@]}" --detach-sign --armor --output "$dist/Release.gpg" "$dist/Release" 3<<<"${PERCH_REPO_KEY_PASSPHRASE:-}"
gpg --batch --yes --export "$fpr" >"$out/perch-archive-keyring.gpg.tmp"
mv "$out/perch-archive-keyring.gpg.tmp" "$out/perch-archive-keyring.gpg"

# What apt will check, checked here first.
gpgv --quiet --keyring "$(realpath "$out/perch-archive-keyring.gpg")" "$dist/InRelease" 2>/dev/null \
  || { echo "apt-repo: InRelease does not verify against perch-archive-keyring.gpg" >&2; exit 1; }
gpgv --quiet --keyring "$(realpath "$out/perch-archive-keyring.gpg")" "$dist/Release.gpg" "$dist/Release" 2>/dev/null \
  || { echo "apt-repo: Release.gpg does not verify against perch-archive-keyring.gpg" >&2; exit 1; }
echo "apt-repo: $out signed by $fpr"
