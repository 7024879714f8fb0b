#!/usr/bin/env bash
# TEST-ONLY FALLBACK. Builds a minimal perch .deb with dpkg-deb, laid out as
# the real package of `make deb` (image/deb/) is, so `make image-test` runs
# on a branch where `make deb` does not exist yet:
#
#   testdeb.sh BINARY VERSION ARCH OUT.deb
#
# /usr/bin/perch, perch.service, sysusers and tmpfiles entries; postinst
# makes the user and /etc/perch, creates the config with `perch onboard` as
# the perch user when absent, and enables the unit. When image/deb/build.sh
# exists, image/image-test.sh uses the real package instead.
set -euo pipefail
bin=$1 version=$2 arch=$3 out=$4
top=$(cd "$(dirname "$0")/../.." && pwd)
pkg=$(mktemp -d)
trap 'rm -rf "$pkg"' EXIT
install -D -m 0755 "$bin" "$pkg/usr/bin/perch"
install -D -m 0644 "$top/systemd/perch.service" "$pkg/usr/lib/systemd/system/perch.service"
install -D -m 0644 "$top/systemd/perch.sysusers" "$pkg/usr/lib/sysusers.d/perch.conf"
install -D -m 0644 "$top/systemd/perch.tmpfiles" "$pkg/usr/lib/tmpfiles.d/perch.conf"
mkdir -p "$pkg/DEBIAN"
cat > "$pkg/DEBIAN/control" <<CTL
Package: perch
Version: $version
Architecture: $arch
Maintainer: Perch test build <perch@localhost>
Depends: adduser, systemd
Section: net
Priority: optional
Description: Perch AI agent gateway (test build for the image tests)
 Built by image/imagetest/testdeb.sh; not a release package.
CTL
cat > "$pkg/DEBIAN/postinst" <<'SH'
#!/bin/sh
set -e
[ "$1" = configure ] || exit 0
systemd-sysusers perch.conf
systemd-tmpfiles --create perch.conf
install -d -m 0750 -o perch -g perch /var/lib/perch
if [ ! -e /etc/perch/config.json ]; then
	(umask 077 && cd / && setpriv --reuid=perch --regid=perch --init-groups \
		env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/var/lib/perch PERCH_HOME=/var/lib/perch \
		/usr/bin/perch onboard --config /etc/perch/config.json >/dev/null)
fi
deb-systemd-helper enable perch.service >/dev/null || true
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload
	deb-systemd-invoke try-restart perch.service || true
fi
SH
cat > "$pkg/DEBIAN/prerm" <<'SH'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
	deb-systemd-invoke stop perch.service || true
fi
SH
chmod 0755 "$pkg/DEBIAN/postinst" "$pkg/DEBIAN/prerm"
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$out" >/dev/null
echo "testdeb: $out"
