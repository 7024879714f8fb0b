#!/usr/bin/env bash
# TEST-ONLY FALLBACK. A signed apt repository in the layout of `make
# apt-repo` (image/deb/apt-repo.sh): DIR/dists/stable/main/binary-<arch>/,
# DIR/pool/, InRelease signed with a throwaway key kept in DIR.gnupg, and the
# public key in DIR/perch-archive-keyring.gpg. Used by image/image-test.sh
# when image/deb/apt-repo.sh does not exist yet.
#
#   testrepo.sh DIR DEB...
set -euo pipefail
out=$1; shift
export GNUPGHOME=$out.gnupg
mkdir -p "$GNUPGHOME" && chmod 700 "$GNUPGHOME"
if ! gpg --batch --list-secret-keys perch-test >/dev/null 2>&1; then
  gpg --batch --quiet --passphrase '' --quick-gen-key 'perch-test <perch-test@localhost>' ed25519 sign never
fi
mkdir -p "$out/pool/main"
cp "$@" "$out/pool/main/"
dist=$out/dists/stable
for arch in amd64 arm64; do
  mkdir -p "$dist/main/binary-$arch"
  (cd "$out" && apt-ftparchive --arch "$arch" packages pool/main) > "$dist/main/binary-$arch/Packages"
  gzip -9nf -k "$dist/main/binary-$arch/Packages"
done
apt-ftparchive -o APT::FTPArchive::Release::Suite=stable -o APT::FTPArchive::Release::Codename=stable \
  -o APT::FTPArchive::Release::Components=main -o "APT::FTPArchive::Release::Architectures=amd64 arm64" \
  release "$dist" > "$dist/Release.tmp" && mv "$dist/Release.tmp" "$dist/Release"
rm -f "$dist/InRelease" "$dist/Release.gpg"
gpg --batch --yes --local-user perch-test --clearsign -o "$dist/InRelease" "$dist/Release"
gpg --batch --yes --export perch-test > "$out/perch-archive-keyring.gpg"
echo "testrepo: $out"
