#!/usr/bin/env bash
# Builds a flashable Perch image: Debian 13 "trixie" with Perch's .deb,
# made with mmdebstrap into a directory and assembled without loop devices
# (mkfs.vfat -C + mcopy, mkfs.ext4 -d, sfdisk on a file, dd at offsets).
#
#   image/build.sh --target rpi-arm64|amd64 --deb PERCH.deb --out DIR [options]
#
# The Debian part of the root tree depends only on the target and the
# package lists below; it is cached outside the repository under
# $CACHE/base-<target>-<key> (key: a hash of everything that shapes it) and
# reused until it is IMAGE_CACHE_DAYS old, so a second build on the same
# machine skips the slow part (an arm64 initramfs built under emulation).
# Perch's .deb, the image's own files (image/rootfs) and the settings are
# applied to a copy of it on every build.
#
# Options (or the environment variables in capitals):
#   --target T         rpi-arm64 (Raspberry Pi 3, 4, 400, Zero 2 W) or amd64 (UEFI PCs)
#   --deb FILE         Perch's .deb for the target's architecture (DEB)
#   --version V        Perch's version for the file names (default: the .deb's)
#   --out DIR          where the image and its manifest go (OUT, default dist)
#   --apt-url URL      Perch's apt repository (APT_URL), configured with signed-by
#   --apt-key FILE     its public key, armored or binary (APT_KEY); no key, no repository
#   --apt-suite S      its suite (APT_SUITE, default stable)
#   --seed DIR         files to put on the boot partition (tests: perch-setup.json, ...)
#   --no-xz            leave the image uncompressed (NO_XZ=1)
#   --name NAME        file name without extension (default perch-<version>-<target>)
#   --list-packages    print the Debian packages asked for (comma-separated) and exit
# Environment: MIRROR, SECURITY_MIRROR, CACHE (/var/cache/perch-build),
# IMAGE_CACHE_DAYS (7), IMAGE_REFRESH=1 (rebuild the cached tree).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

TARGET=${TARGET:-} DEB=${DEB:-} VERSION=${VERSION:-} OUT=${OUT:-dist} SEED=${SEED:-} NAME=${NAME:-}
APT_URL=${APT_URL:-} APT_KEY=${APT_KEY:-} APT_SUITE=${APT_SUITE:-stable} NO_XZ=${NO_XZ:-}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${SECURITY_MIRROR:-http://deb.debian.org/debian-security}
CACHE=${CACHE:-/var/cache/perch-build}
IMAGE_CACHE_DAYS=${IMAGE_CACHE_DAYS:-7}
SUITE=trixie
while [ $# -gt 0 ]; do
  case $1 in
    --target) TARGET=$2; shift ;;
    --deb) DEB=$2; shift ;;
    --version) VERSION=$2; shift ;;
    --out) OUT=$2; shift ;;
    --apt-url) APT_URL=$2; shift ;;
    --apt-key) APT_KEY=$2; shift ;;
    --apt-suite) APT_SUITE=$2; shift ;;
    --seed) SEED=$2; shift ;;
    --name) NAME=$2; shift ;;
    --no-xz) NO_XZ=1 ;;
    --list-packages) LIST_PACKAGES=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "image: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

die() { echo "image: $*" >&2; exit 1; }
t0=$(date +%s)
step() { echo "==> image [$TARGET] $* (+$(( $(date +%s) - t0 ))s)"; }

case $TARGET in
  rpi-arm64) ARCH=arm64 ;;
  amd64) ARCH=amd64 ;;
  *) die "--target must be rpi-arm64 or amd64, not '${TARGET}'" ;;
esac
# ---- the Debian root tree (cached) -------------------------------------
# Packages from Debian's archive only. Recommends are not installed: every
# package is named here, so two builds of the same list install the same
# packages. Perch is a static binary; what it needs from the system is CA
# certificates, time zones and systemd.
common=(
  systemd-sysv udev dbus systemd-timesyncd systemd-resolved  # init, devices, clock, DNS + mDNS
  ca-certificates tzdata netbase                              # HTTPS to providers, zones, /etc/services
  openssh-server                                              # off until a key is given
  wpasupplicant wireless-regdb                                # Wi-Fi (networkd runs the network)
  iproute2 e2fsprogs fdisk dosfstools adduser passwd zstd     # admin, grow root, check the FAT, accounts, initramfs
)
case $TARGET in
  rpi-arm64) board=(linux-image-arm64 raspi-firmware firmware-brcm80211) ;;
  amd64) board=(linux-image-amd64 systemd-boot-efi) ;;
esac
packages=$(printf '%s\n' "${common[@]}" "${board[@]}" | sort -u | paste -sd, -)
components=main,non-free-firmware
sources=("deb $MIRROR $SUITE main non-free-firmware"
         "deb $MIRROR $SUITE-updates main non-free-firmware"
         "deb $SECURITY_MIRROR $SUITE-security main non-free-firmware")
if [ -n "${LIST_PACKAGES:-}" ]; then
  echo "$packages"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || die "needs root (mmdebstrap --mode=root, file ownership in the image); run as root"
[ -n "$DEB" ] && [ -f "$DEB" ] || die "--deb: Perch's .deb for $ARCH is missing ('${DEB}'); build it with 'make deb'"
deb_arch=$(dpkg-deb -f "$DEB" Architecture)
[ "$deb_arch" = "$ARCH" ] || die "--deb $DEB is for $deb_arch, the $TARGET image needs $ARCH"
[ "$(dpkg-deb -f "$DEB" Package)" = perch ] || die "--deb $DEB is not the perch package"
VERSION=${VERSION:-$(dpkg-deb -f "$DEB" Version)}
NAME=${NAME:-perch-$VERSION-$TARGET}
if [ -n "$APT_URL" ] && [ -z "$APT_KEY" ]; then die "--apt-url needs --apt-key (the repository is configured with signed-by)"; fi
if [ -n "$APT_KEY" ] && [ ! -f "$APT_KEY" ]; then die "--apt-key $APT_KEY does not exist"; fi
for tool in mmdebstrap mkfs.vfat mcopy mkfs.ext4 e2fsck sfdisk xz systemctl dtc; do
  command -v "$tool" >/dev/null || die "$tool is missing; run .ci/image-deps"
done
if [ "$ARCH" != "$(dpkg --print-architecture)" ] && [ ! -e "/proc/sys/fs/binfmt_misc/qemu-$(echo $ARCH | sed 's/arm64/aarch64/')" ]; then
  die "building for $ARCH needs qemu-user binfmt; run .ci/image-deps"
fi

# Anything that changes the tree changes the key.
key=$( { echo "$TARGET $SUITE $components $packages"; printf '%s\n' "${sources[@]}";
         sed -n '/^  # >>> tree recipe/,/^  # <<< tree recipe/p' "$0";
         mmdebstrap --version; } | sha256sum | cut -c1-16)
base=$CACHE/base-$TARGET-$key
mkdir -p "$CACHE"
if [ -d "$base" ] && [ -z "${IMAGE_REFRESH:-}" ] && \
   [ -z "$(find "$base/.built" -mtime +"$IMAGE_CACHE_DAYS" 2>/dev/null)" ] && [ -e "$base/.built" ]; then
  step "Debian tree from the cache: $base"
else
  step "Debian tree: mmdebstrap $SUITE $ARCH (cache key $key)"
  rm -rf "$base.tmp"
  # >>> tree recipe (hashed into the cache key)
  # The initramfs is built once, at the end, instead of after each package
  # that triggers it (twice or more under emulation otherwise).
  mmdebstrap --mode=root --variant=apt --architectures="$ARCH" --components="$components" \
    --aptopt='Acquire::Retries "3"' \
    --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --essential-hook='chroot "$1" dpkg-divert --quiet --local --rename --add /usr/sbin/update-initramfs' \
    --essential-hook='printf "#!/bin/sh\necho update-initramfs: deferred to the end of the build >&2\n" > "$1/usr/sbin/update-initramfs"; chmod 755 "$1/usr/sbin/update-initramfs"' \
    --customize-hook='rm "$1/usr/sbin/update-initramfs"; chroot "$1" dpkg-divert --quiet --local --rename --remove /usr/sbin/update-initramfs' \
    --customize-hook='chroot "$1" update-initramfs -c -k all' \
    "$SUITE" "$base.tmp" "${sources[@]}"
  # <<< tree recipe
  date -u +%FT%TZ > "$base.tmp/.built"
  rm -rf "$base"
  mv "$base.tmp" "$base"
fi
# ---- end of the Debian root tree ----------------------------------------

work=$(mktemp -d "${TMPDIR:-/tmp}/perch-image.XXXXXX")
root=$work/root
mounts=()
cleanup() {
  local m
  for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null || true; done
  # Never delete through a mount point that is still there.
  if grep -q " $work/" /proc/mounts; then
    echo "image: $work still has mounts; not removing it" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
step "copy the tree"
cp -a "$base" "$root"
rm -f "$root/.built"
# Maintainer scripts (systemd-tmpfiles, systemd-sysusers) need /proc.
mount -t proc proc "$root/proc" && mounts+=("$root/proc")

# ---- Perch and the image's own files --------------------------------------
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

step "install $(basename "$DEB")"
# Services are not started inside the build tree.
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"; chmod 755 "$root/usr/sbin/policy-rc.d"
cp "$DEB" "$root/tmp/perch.deb"
if ! in_root dpkg -i /tmp/perch.deb; then
  die "dpkg -i $(basename "$DEB") failed in the $SUITE tree; if it names missing dependencies, add them to the package lists in $0"
fi
rm -f "$root/tmp/perch.deb" "$root/usr/sbin/policy-rc.d"
[ -x "$root/usr/bin/perch" ] || die "the .deb did not install /usr/bin/perch"
# The config (and its API token) is made on each board at first boot, never
# shipped: every board flashed from this image would share it otherwise.
rm -f "$root/etc/perch/config.json"

step "the image's files"
# Owned by root whoever checked the repository out.
cp -a --no-preserve=ownership "$here/rootfs/common/." "$root/"
cp -a --no-preserve=ownership "$here/rootfs/$TARGET/." "$root/"
echo perch > "$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tperch\n::1\t\tlocalhost ip6-localhost ip6-loopback\nff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n' > "$root/etc/hosts"
# Per-board identity is made at first boot: machine id (this value marks the
# first boot for systemd), SSH host keys (sshd-keygen and first boot make
# them), the random seed.
echo uninitialized > "$root/etc/machine-id"
ln -sf /etc/machine-id "$root/var/lib/dbus/machine-id"
rm -f "$root"/etc/ssh/ssh_host_*_key* "$root/var/lib/systemd/random-seed"
# SSH stays off until first boot is given a key (Debian's own switch).
: > "$root/etc/ssh/sshd_not_to_be_run"
echo 'LANG=C.UTF-8' > "$root/etc/default/locale"
ln -sf /usr/share/zoneinfo/Etc/UTC "$root/etc/localtime"; echo Etc/UTC > "$root/etc/timezone"

# Debian's sources in deb822 form, and Perch's signed repository.
rm -f "$root/etc/apt/sources.list"
cat > "$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
if [ -n "$APT_URL" ]; then
  # apt reads armored keys from .asc files and binary ones from .gpg.
  keyring=/usr/share/keyrings/perch-archive-keyring.gpg
  if grep -q -- '-----BEGIN PGP PUBLIC KEY BLOCK-----' "$APT_KEY"; then
    keyring=/usr/share/keyrings/perch-archive-keyring.asc
  fi
  install -m 0644 "$APT_KEY" "$root$keyring"
  cat > "$root/etc/apt/sources.list.d/perch.sources" <<EOF
Types: deb
URIs: $APT_URL
Suites: $APT_SUITE
Components: main
Signed-By: $keyring
EOF
else
  echo "image: no --apt-url/--apt-key: the image has no Perch repository configured (updates by hand only)" >&2
fi

# Units: networkd with mDNS instead of ifupdown; Wi-Fi per interface when
# configured; the image's own units; nothing that would prompt on a console
# nobody watches.
sysd() { systemctl --root="$root" --quiet "$@"; }
sysd enable systemd-networkd.service systemd-resolved.service systemd-timesyncd.service \
  systemd-time-wait-sync.service perch-firstboot.service perch-growroot.service perch.service
sysd disable wpa_supplicant.service
sysd mask systemd-firstboot.service
mkdir -p "$root/etc/systemd/system/sys-subsystem-net-devices-wlan0.device.wants"
ln -sf /usr/lib/systemd/system/wpa_supplicant@.service \
  "$root/etc/systemd/system/sys-subsystem-net-devices-wlan0.device.wants/wpa_supplicant@wlan0.service"
in_root systemd-sysusers
in_root systemd-tmpfiles --create --exclude-prefix=/dev --exclude-prefix=/proc --exclude-prefix=/sys --exclude-prefix=/run >/dev/null 2>&1 || true

# The boot files: Raspberry Pi firmware (raspi-firmware's own hook, with our
# settings) or systemd-boot for UEFI PCs.
step "boot files"
case $TARGET in
  rpi-arm64)
    # Boot by label (the card may be mmcblk0 or a USB disk), console on the
    # serial header and, last so it gets /dev/console, on the screen.
    sed -i 's|^#\?ROOTPART=.*|ROOTPART="LABEL=perch-root"|; s|^#\?CONSOLES=.*|CONSOLES="ttyS1,115200 tty0"|' \
      "$root/etc/default/raspi-firmware"
    mkdir -p "$root/boot/firmware/overlays"
    dtc -@ -q -I dts -O dtb -o "$root/boot/firmware/overlays/perch-spi0.dtbo" "$here/rpi/perch-spi0.dts"
    in_root env DEB_MAINT_PARAMS=configure /etc/kernel/postinst.d/z50-raspi-firmware
    ;;
  amd64)
    mkdir -p "$root/boot/firmware/EFI/BOOT"
    cp "$root/usr/lib/systemd/boot/efi/systemd-bootx64.efi" "$root/boot/firmware/EFI/BOOT/BOOTX64.EFI"
    in_root env DEB_MAINT_PARAMS=configure /etc/kernel/postinst.d/z50-perch-esp
    ;;
esac
cat > "$root/boot/firmware/user-data" <<'EOF'
#cloud-config
# Raspberry Pi Imager's "OS customisation" replaces this file with your
# settings (its presence tells Imager this image reads cloud-init files).
# Perch applies hostname, SSH keys, time zone and Wi-Fi from it at first
# boot, then deletes it. See also perch-setup.example.json.
EOF
cp "$here/perch-setup.example.json" "$root/boot/firmware/perch-setup.example.json"
if [ -n "$SEED" ]; then
  step "seed files from $SEED"
  cp -a "$SEED/." "$root/boot/firmware/"
fi

for m in "${mounts[@]}"; do umount "$m"; done
mounts=()

step "trim"
in_root apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/debconf/*-old \
  "$root"/var/log/*.log "$root"/var/log/apt/* "$root"/tmp/* "$root"/var/tmp/* "$root/root/.bash_history"
find "$root/var/log" -type f -name '*.gz' -delete

# ---- manifest ---------------------------------------------------------------
mkdir -p "$OUT"
manifest=$OUT/$NAME.manifest
dpkg-query --admindir="$root/var/lib/dpkg" -W -f '${Package} ${Version} ${Architecture}\n' | sort > "$work/packages"

# ---- assemble ---------------------------------------------------------------
step "assemble"
fat=$work/boot.vfat ext=$work/root.ext4 img=$work/$NAME.img
boot_mib=256
offset_mib=4
mv "$root/boot/firmware" "$work/bootfiles"; mkdir -m 0755 "$root/boot/firmware"
used_kib=$(du -sk --apparent-size "$root" | cut -f1)
root_mib=$(( (used_kib * 5 / 4) / 1024 + 256 ))
mkfs.vfat -F 32 -n PERCHBOOT -i 50455243 -C "$fat" $((boot_mib * 1024)) >/dev/null
mcopy -s -m -i "$fat" "$work"/bootfiles/* ::/
mkfs.ext4 -q -F -L perch-root -m 1 -d "$root" "$ext" "${root_mib}M"
e2fsck -fn "$ext" >/dev/null || die "the root file system does not check clean"
total_mib=$((offset_mib + boot_mib + root_mib))
truncate -s "${total_mib}M" "$img"
fat_type=c; [ "$TARGET" = amd64 ] && fat_type=ef
sfdisk --quiet "$img" <<EOF
label: dos
label-id: 0x50455243
start=${offset_mib}MiB, size=${boot_mib}MiB, type=$fat_type, bootable
start=$((offset_mib + boot_mib))MiB, type=83
EOF
dd if="$fat" of="$img" bs=1M seek=$offset_mib conv=notrunc,sparse status=none
dd if="$ext" of="$img" bs=1M seek=$((offset_mib + boot_mib)) conv=notrunc,sparse status=none

root_used_kib=$(( $(dumpe2fs -h "$ext" 2>/dev/null | awk -F: '/^Block count/{c=$2} /^Free blocks/{f=$2} /^Block size/{b=$2} END{print (c-f)*b/1024}') ))
if [ -z "$NO_XZ" ]; then
  step "compress (xz)"
  xz -T2 -6 -f -k "$img"
  mv "$img.xz" "$OUT/$NAME.img.xz"
  final=$OUT/$NAME.img.xz
else
  mv "$img" "$OUT/$NAME.img"
  final=$OUT/$NAME.img
fi
{
  echo "image: $(basename "$final")"
  echo "perch: $VERSION ($(basename "$DEB"), sha256 $(sha256sum "$DEB" | cut -d' ' -f1))"
  echo "debian: $SUITE $ARCH from $MIRROR, tree built $(cat "$base/.built") (cache key $key)"
  echo "target: $TARGET"
  echo "built: $(date -u +%FT%TZ)"
  echo "sha256: $(sha256sum "$final" | cut -d' ' -f1)"
  echo "size: $(stat -c %s "$final") bytes ($(basename "$final")), image $((total_mib)) MiB, root file system used $((root_used_kib / 1024)) MiB, boot partition $(du -sm "$work/bootfiles" | cut -f1) MiB used"
  echo "apt: ${APT_URL:-none} ${APT_URL:+suite $APT_SUITE}"
  echo "packages ($(wc -l < "$work/packages")):"
  cat "$work/packages"
} > "$manifest"
step "done: $final ($(du -h "$final" | cut -f1)), $manifest"
