#!/usr/bin/env bash
# package-test.sh: the .deb and its apt repository, tested the way boards
# use them. Needs root (chroots, mounts, dpkg in Debian roots); `make
# package-test` runs it and .ci/run runs that.
#
#  1. make deb (this version, every architecture) and a next version (amd64)
#     built from the same tree with a higher number.
#  2. dpkg-deb -I/-c of each package: fields, files, scripts, ELF headers;
#     the arm builds run under qemu-user (armhf as the Pi Zero's ARM1176).
#  3. lintian (trixie's) on each package: no error, no warning.
#  4. Signed repositories served over loopback HTTP like any static web
#     server: the real one, one signed with PERCH_REPO_KEY-style key import,
#     a tampered copy, an unsigned copy.
#  5. Debian trixie (amd64, with systemd installed but not running, as an
#     image build has it): apt-get install perch -> user, groups, config
#     0600 with a token, unit enabled; the installed gateway answers a chat
#     turn (loopback fake provider) and stores it; publish the next version,
#     apt-get upgrade -> new binary, config byte for byte the same, history
#     still there; remove keeps /etc/perch and /var/lib/perch, reinstall
#     keeps the config, purge deletes them and leaves nothing else behind;
#     the tampered, unsigned and wrongly signed repositories are refused.
#  6. Debian bookworm (amd64, no systemd: the useradd fallback): install,
#     a chat turn, purge; the refusals again (bookworm's apt uses gpgv,
#     trixie's sqv).
#  7. Debian trixie arm64 under qemu-user: install from the repository,
#     perch runs, postinst made the config.
#  8. piuparts: install/purge of the next version and upgrade from this
#     one, in a trixie root.
#
# Roots come from image/deb/rootfs.sh (cached in /var/cache/perch-build);
# everything else lives in build/pkgtest/; after a failure the roots stay
# there for inspection until the next run. Each step prints its time.
set -euo pipefail
shopt -s extglob
cd "$(dirname "$0")/../.."
top=$PWD
if [ "$(id -u)" -ne 0 ]; then
  echo "package-test: run as root: it builds chroots and installs packages in them" >&2
  exit 1
fi

t=$top/build/pkgtest
www=$t/www
export DEBIAN_FRONTEND=noninteractive
# The test's repositories are signed with the build's throwaway key, never
# with a release key the environment may hold.
unset PERCH_REPO_KEY PERCH_REPO_KEY_PASSPHRASE

# --- steps and their times ---
timings=()
current=
step() {
  current=$1; shift
  local start=$SECONDS
  echo "==> $current"
  "$@"
  timings+=("$(printf '%4ds  %s' $((SECONDS - start)) "$current")")
  echo "<== $current: $((SECONDS - start))s"
  current=
}
fail() { echo "package-test: FAIL${current:+ in '$current'}: $*" >&2; exit 1; }
note() { echo "    ok: $*"; }

# --- processes this script starts, stopped on exit ---
pids=()
gw_pid=
lint_pid=
cleanup() {
  local rc=$?
  for p in "${pids[@]}" $gw_pid; do kill "$p" 2>/dev/null || true; done
  if [ -n "$lint_pid" ]; then kill -- -"$lint_pid" 2>/dev/null || true; wait "$lint_pid" 2>/dev/null || true; fi
  for p in "${pids[@]}" $gw_pid; do wait "$p" 2>/dev/null || true; done
  if [ $rc -ne 0 ]; then
    echo "package-test: FAILED${current:+ in '$current'} (exit $rc); logs are in $t, the roots in $t/roots (a tmpfs: umount it when done)" >&2
  fi
  exit $rc
}
trap cleanup EXIT

# --- Debian roots ---

# inroot ROOT CMD...: runs CMD in ROOT with /proc, a read-only /sys and a
# minimal /dev, in a private mount namespace (the mounts vanish with it),
# with a clean environment. There is no /run/systemd/system inside: the
# maintainer scripts see "no running systemd", as in an image build.
inroot() { _inroot "$@"; }
# exec_inroot: the same, replacing the calling (sub)shell, so that `(
# exec_inroot … ) &` leaves $! as the PID of the program itself.
exec_inroot() { _inroot_exec=1 _inroot "$@"; }
_inroot() {
  local root=$1; shift
  local run=(unshare --mount --propagation private -- /bin/sh -c '
    r=$1; shift
    mount -t proc proc "$r/proc"
    mount -t sysfs -o ro sysfs "$r/sys"
    mount -t tmpfs -o mode=0755,size=1m dev "$r/dev"
    for n in null zero full random urandom tty; do : >"$r/dev/$n"; mount --bind "/dev/$n" "$r/dev/$n"; done
    mkdir "$r/dev/pts" "$r/dev/shm"
    mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$r/dev/pts"
    ln -s pts/ptmx "$r/dev/ptmx"
    ln -s /proc/self/fd "$r/dev/fd"
    exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
      DEBIAN_FRONTEND=noninteractive "$@"' sh "$root" "$@")
  if [ -n "${_inroot_exec:-}" ]; then exec "${run[@]}"; fi
  "${run[@]}"
}

# newroot NAME SUITE ARCH PACKAGE...: a fresh root from the cache, with no
# Debian sources (the test needs nothing from the archive once the cache
# is warm), and the Perch repository added as PACKAGING.md tells users to.
newroot() {
  local name=$1 suite=$2 arch=$3; shift 3
  local tar root=$t/roots/$name
  tar=$(image/deb/rootfs.sh "$suite" "$arch" "$@")
  rm -rf "$root"; mkdir -p "$root"
  tar -C "$root" --numeric-owner -xpf "$tar"
  rm -f "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/*
  # The user's two lines: the keyring, then a deb822 source naming it.
  curl -fsS -o "$root/usr/share/keyrings/perch-archive-keyring.gpg" "$REPO_URL/good/perch-archive-keyring.gpg"
  # No dpkg progress meter: a log, not a terminal.
  echo 'Dpkg::Use-Pty "0";' >"$root/etc/apt/apt.conf.d/90pkgtest"
  source_to "$root" good
  echo "$root"
}

# source_to ROOT REPO: points ROOT's perch.sources at www/REPO.
source_to() {
  printf 'Types: deb\nURIs: %s/%s\nSuites: stable\nComponents: main\nSigned-By: /usr/share/keyrings/perch-archive-keyring.gpg\n' \
    "$REPO_URL" "$2" >"$1/etc/apt/sources.list.d/perch.sources"
}

# --- checks of an installed package ---

# installed_checks ROOT VERSION: what postinst must have done.
installed_checks() {
  local root=$1 version=$2 pw uid
  [ "$(inroot "$root" dpkg-query -W -f='${Status} ${Version}' perch)" = "install ok installed $version" ] \
    || fail "perch $version is not installed: $(inroot "$root" dpkg-query -W -f='${Status} ${Version}' perch 2>&1)"
  inroot "$root" perch version | grep -qE "^perch $(sed 's/[.~+]/\\&/g' <<<"$version") \(commit [0-9a-f]+, built [0-9T:-]+Z, go[0-9.]+" \
    || fail "perch version: $(inroot "$root" perch version 2>&1)"
  note "perch $version installed; perch version prints it"

  pw=$(inroot "$root" getent passwd perch) || fail "no perch user"
  IFS=: read -r _ _ uid _ _ home shell <<<"$pw"
  [ "$uid" -gt 0 ] && [ "$uid" -lt 1000 ] && [ "$home" = /var/lib/perch ] && [ "$shell" = /usr/sbin/nologin ] \
    || fail "perch user: $pw (want a system uid, home /var/lib/perch, shell /usr/sbin/nologin)"
  local groups
  groups=" $(inroot "$root" id -nG perch) "
  for g in dialout plugdev i2c; do
    [[ $groups == *" $g "* ]] || fail "perch is not in group $g:$groups"
  done
  for g in spi gpio; do
    if inroot "$root" getent group "$g" >/dev/null; then fail "group $g was created; only existing groups are joined"; fi
  done
  note "user perch (uid $uid), groups:$groups(i2c made beforehand as on Raspberry Pi OS; spi, gpio absent and not created)"

  # Owners by number: the host's names for these ids mean nothing here.
  local gid
  gid=$(inroot "$root" getent group perch | cut -d: -f3)
  [ "$(stat -c '%a %u %g' "$root/etc/perch")" = "700 $uid $gid" ] || fail "/etc/perch: $(stat -c '%a %u %g' "$root/etc/perch"), want 700 perch ($uid $gid)"
  local cfg=$root/etc/perch/config.json
  [ "$(stat -c '%a %u %g' "$cfg")" = "600 $uid $gid" ] || fail "config.json: $(stat -c '%a %u %g' "$cfg"), want 600 perch ($uid $gid)"
  jq -e '.gateway.host == "0.0.0.0" and (.gateway.api_token | test("^[0-9a-f]{32}$"))' "$cfg" >/dev/null \
    || fail "config.json lacks gateway.host 0.0.0.0 or a random api_token: $(jq -c .gateway "$cfg" | sed 's/"api_token":"[^"]*"/"api_token":"…"/')"
  [ "$(stat -c '%u' "$root/var/lib/perch/workspace/AGENT.md")" = "$uid" ] || fail "the workspace was not seeded as perch"
  if grep -rqF "$(jq -r .gateway.api_token "$cfg")" "$root/var/log/"; then
    fail "the API token reached a log under /var/log (maintainer-script output is logged by apt)"
  fi
  note "/etc/perch 0700, config.json 0600 perch with host 0.0.0.0 and a random token (in no log); workspace seeded"

  # bookworm's deb-systemd-helper links /lib/systemd/system (merged /usr: the same file).
  [[ "$(readlink "$root/etc/systemd/system/multi-user.target.wants/perch.service")" == @(/usr/lib|/lib)/systemd/system/perch.service ]] \
    || fail "perch.service is not enabled: $(ls -l "$root/etc/systemd/system/multi-user.target.wants/" 2>&1)"
  note "perch.service enabled (multi-user.target.wants symlink), not started: no systemd runs here"
}

# --- the gateway, run in a root as the service would ---
start_gateway() {
  local root=$1 log=$2
  port=$(free_port)
  ( exec_inroot "$root" setpriv --reuid=perch --regid=perch --init-groups \
      env HOME=/var/lib/perch PERCH_HOME=/var/lib/perch PERCH_GATEWAY_HOST=127.0.0.1 PERCH_GATEWAY_PORT="$port" \
      PERCH_PROVIDERS_OPENROUTER_API_KEY=sk-pkgtest PERCH_PROVIDERS_OPENROUTER_API_BASE="$PROVIDER_URL" \
      PERCH_AGENTS_DEFAULTS_MODEL=openai/gpt-4o-mini \
      /usr/bin/perch gateway --config /etc/perch/config.json ) >"$log" 2>&1 &
  gw_pid=$!
  local i
  for i in $(seq 1 300); do
    curl -fsS -o /dev/null "http://127.0.0.1:$port/health" 2>/dev/null && return 0
    kill -0 "$gw_pid" 2>/dev/null || { cat "$log" >&2; fail "the gateway exited at start"; }
    sleep 0.1
  done
  cat "$log" >&2; fail "the gateway did not answer /health within 30 s"
}
stop_gateway() {
  kill -TERM "$gw_pid"
  local i
  for i in $(seq 1 150); do
    kill -0 "$gw_pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$gw_pid" 2>/dev/null; then kill -KILL "$gw_pid"; fail "the gateway did not stop within 30 s of SIGTERM"; fi
  wait "$gw_pid" || fail "the gateway exited with status $? on SIGTERM"
  gw_pid=
}
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 20000))
    ss -Htln "sport = :$p" | grep -q . || { echo "$p"; return; }
  done
}
# chat ROOT MESSAGE: one /chat turn on session "pkgtest"; prints the reply.
chat() {
  local token
  token=$(jq -r .gateway.api_token "$1/etc/perch/config.json")
  curl -fsS --max-time 60 -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d "$(jq -cn --arg m "$2" '{message: $m, session_key: "pkgtest"}')" "http://127.0.0.1:$port/chat" | jq -r .response
}

# --- 1. build ---
build() {
  make --no-print-directory deb
  # The next version (v2): same tree, a number dpkg orders above this one.
  dpkg --compare-versions "$v2" gt "$v1" || fail "$v2 does not sort above $v1"
  mkdir -p "$t/next"
  # make deb rebuilds bin/perch and dist/perch_linux_amd64 as v2: keep
  # this version's aside and put them back, so dist/ stays what `make deb` made.
  cp -p bin/perch "$t/next/perch.bin"; cp -p dist/perch_linux_amd64 "$t/next/perch_linux_amd64"
  make --no-print-directory deb VERSION="$v2" DEB_ARCHES=amd64
  mv "dist/perch_${v2}_amd64.deb" "$t/next/"
  mv "$t/next/perch.bin" bin/perch; mv "$t/next/perch_linux_amd64" dist/perch_linux_amd64
  note "this version $v1, next version $v2"
}

# --- 2. dpkg-deb ---
inspect() {
  local arch deb info files want magic x
  for arch in amd64 arm64 armhf; do
    deb=dist/perch_${v1}_${arch}.deb
    [ -f "$deb" ] || fail "$deb was not built"
    info=$(dpkg-deb -I "$deb")
    for field in "Package: perch" "Version: $v1" "Architecture: $arch" "Depends: passwd" "Recommends: systemd" "Section: net"; do
      grep -qxF " $field" <<<"$info" || fail "$deb: no '$field' in dpkg-deb -I:"$'\n'"$info"
    done
    # Maintainer scripts: these three, executable, POSIX sh; no conffiles
    # (the config is created by postinst, never shipped).
    x=$(dpkg-deb --ctrl-tarfile "$deb" | tar -tvf - | awk '$6 != "./" {print $1, $6}' | sort)
    want=$'-rw-r--r-- ./control\n-rw-r--r-- ./md5sums\n-rwxr-xr-x ./postinst\n-rwxr-xr-x ./postrm\n-rwxr-xr-x ./prerm'
    [ "$x" = "$want" ] || fail "$deb control members:"$'\n'"$x"$'\n'"want:"$'\n'"$want"
    rm -rf "$t/x/$arch"; mkdir -p "$t/x/$arch"
    dpkg-deb -e "$deb" "$t/x/$arch/DEBIAN"
    for s in postinst prerm postrm; do
      cmp -s "$t/x/$arch/DEBIAN/$s" "image/deb/$s" || fail "$deb: $s differs from image/deb/$s"
      sh -n "$t/x/$arch/DEBIAN/$s" || fail "$deb: $s is not valid sh"
    done
    files=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $1, $2, $6}' | sort)
    want=$(sort <<EOF
-rwxr-xr-x root/root ./usr/bin/perch
-rw-r--r-- root/root ./usr/lib/systemd/system/perch.service
-rw-r--r-- root/root ./usr/lib/sysusers.d/perch.conf
-rw-r--r-- root/root ./usr/lib/tmpfiles.d/perch.conf
-rw-r--r-- root/root ./usr/share/bash-completion/completions/perch
-rw-r--r-- root/root ./usr/share/doc/perch/changelog.gz
-rw-r--r-- root/root ./usr/share/doc/perch/copyright
-rw-r--r-- root/root ./usr/share/lintian/overrides/perch
-rw-r--r-- root/root ./usr/share/man/man1/perch.1.gz
EOF
)
    [ "$files" = "$want" ] || fail "$deb files:"$'\n'"$files"$'\n'"want:"$'\n'"$want"
    dpkg-deb -x "$deb" "$t/x/$arch"
    cmp -s "$t/x/$arch/usr/lib/systemd/system/perch.service" systemd/perch.service || fail "$deb: the unit differs from systemd/perch.service"
    cmp -s "$t/x/$arch/usr/lib/sysusers.d/perch.conf" systemd/perch.sysusers || fail "$deb: sysusers differs"
    cmp -s "$t/x/$arch/usr/lib/tmpfiles.d/perch.conf" systemd/perch.tmpfiles || fail "$deb: tmpfiles differs"
    zcat "$t/x/$arch/usr/share/doc/perch/changelog.gz" | head -n1 | grep -qF "perch ($v1)" || fail "$deb: changelog does not start with $v1"
    head -n1 "$t/x/$arch/usr/share/doc/perch/copyright" | grep -qF 'copyright-format/1.0' || fail "$deb: copyright is not machine-readable"

    case $arch in
      amd64) magic='ELF 64-bit LSB executable, x86-64' run=() ;;
      arm64) magic='ELF 64-bit LSB executable, ARM aarch64' run=(qemu-aarch64-static) ;;
      # The Pi Zero/1 CPU: an ARMv7 instruction would be SIGILL here.
      armhf) magic='ELF 32-bit LSB executable, ARM, EABI5' run=(qemu-arm-static -cpu arm1176) ;;
    esac
    x=$(file -b "$t/x/$arch/usr/bin/perch")
    [[ $x == "$magic"*"statically linked"* ]] || fail "$deb: usr/bin/perch is '$x', want '$magic … statically linked'"
    x=$("${run[@]}" "$t/x/$arch/usr/bin/perch" version) || fail "$deb: perch version failed under ${run[*]:-the host}"
    [[ $x == "perch $v1 ("* ]] || fail "$deb: perch version printed '$x'"
    note "$arch: fields, files, scripts, $magic, runs${run:+ under ${run[*]}}: $x"
  done
}

# --- 3. lintian ---
lint() {
  local root
  root=$t/roots/lintian
  local tar
  tar=$(image/deb/rootfs.sh trixie amd64 lintian)
  rm -rf "$root"; mkdir -p "$root"
  tar -C "$root" --numeric-owner -xpf "$tar"
  cp dist/perch_"${v1}"_{amd64,arm64,armhf}.deb "$t/next/perch_${v2}_amd64.deb" "$root/tmp/"
  inroot "$root" lintian --version
  # --fail-on warning: warnings count; overrides (with their reasons) are
  # shown so a reader sees what was waived.
  inroot "$root" sh -c 'lintian --display-level ">=warning" --show-overrides --fail-on error,warning /tmp/*.deb' \
    || fail "lintian found problems (above)"
  note "lintian: no errors, no warnings in 4 packages"
}

# --- 4. repositories ---
repos() {
  rm -rf "$www"; mkdir -p "$www"
  image/deb/apt-repo.sh "$www/good" dist/perch_"${v1}"_{amd64,arm64,armhf}.deb

  # A repository signed with a key given as PERCH_REPO_KEY (armored, with
  # a passphrase): the import path works, and boards that trust the build's
  # key must refuse it.
  local gh fpr
  gh=$(mktemp -d)
  GNUPGHOME=$gh gpg --batch --quiet --pinentry-mode loopback --passphrase pkgtest-pass \
    --quick-gen-key "Perch package test other key" ed25519 sign never
  fpr=$(GNUPGHOME=$gh gpg --batch --list-secret-keys --with-colons | awk -F: '$1 == "fpr" {print $10; exit}')
  PERCH_REPO_KEY=$(GNUPGHOME=$gh gpg --batch --pinentry-mode loopback --passphrase pkgtest-pass --armor --export-secret-keys "$fpr") \
    PERCH_REPO_KEY_PASSPHRASE=pkgtest-pass image/deb/apt-repo.sh "$www/otherkey" "dist/perch_${v1}_amd64.deb"
  GNUPGHOME=$gh gpgconf --kill gpg-agent 2>/dev/null || true
  rm -rf "$gh"
  gpgv --keyring "$www/otherkey/perch-archive-keyring.gpg" "$www/otherkey/dists/stable/InRelease" 2>&1 | grep -q "$fpr" \
    || fail "the PERCH_REPO_KEY repository is not signed by that key"
  note "PERCH_REPO_KEY (armored, passphrase) signs: $fpr"

  # Tampered: the Packages indexes rewritten after signing, to the same
  # size (so that only the hashes can tell): the package's SHA256 changed,
  # as an attacker pointing boards at a .deb of their own would.
  cp -a "$www/good" "$www/tampered"
  local p=$www/tampered/dists/stable/main/binary-amd64
  perl -pi -e 's/^(SHA256: )(.)/$1 . ($2 eq "0" ? "1" : "0")/e' "$p/Packages"
  cmp -s "$p/Packages" "$www/good/dists/stable/main/binary-amd64/Packages" && fail "the tampering changed nothing"
  # Only the uncompressed index is served, so apt falls back to it and
  # meets a file of the right size with the wrong hash.
  rm "$p/Packages.gz"
  # Unsigned: no InRelease, no Release.gpg.
  cp -a "$www/good" "$www/unsigned"
  rm "$www/unsigned/dists/stable/InRelease" "$www/unsigned/dists/stable/Release.gpg"
  note "repositories: good, otherkey, tampered, unsigned"
}

# refusals ROOT: apt must refuse each bad repository, and keep no index
# from it.
refusals() {
  local root=$1 repo out want
  for repo in tampered unsigned otherkey; do
    case $repo in
      tampered) want='Hash Sum mismatch|Hashes of expected file' ;;
      unsigned) want='is not signed' ;;
      otherkey) want="NO_PUBKEY|Missing key|signatures couldn't be verified|not signed" ;;
    esac
    source_to "$root" "$repo"
    rm -rf "$root"/var/lib/apt/lists/*
    if out=$(inroot "$root" apt-get update 2>&1); then
      fail "apt-get update accepted the $repo repository:"$'\n'"$out"
    fi
    grep -qE "$want" <<<"$out" || fail "apt-get update failed on the $repo repository, but not for its signature or hashes:"$'\n'"$out"
    if [ -n "$(ls "$root"/var/lib/apt/lists/ 2>/dev/null | grep "_${repo}_.*Packages")" ]; then
      fail "apt kept an index of the $repo repository"
    fi
    note "$repo repository refused: $(grep -oE "$want" <<<"$out" | head -n1)"
  done
  source_to "$root" good
  rm -rf "$root"/var/lib/apt/lists/*
}

# fake_systemd ROOT STATE: stand-ins for a running systemd in ROOT that
# record what the maintainer scripts ask (in /tmp/systemd.log); a unit
# started ends in STATE (active, failed). real_systemd puts the real tools
# back.
fake_systemd() {
  local root=$1 b
  mkdir -p "$root/run/systemd/system"
  for b in systemctl deb-systemd-invoke; do mv "$root/usr/bin/$b" "$root/usr/bin/$b.real"; done
  echo inactive >"$root/tmp/systemd.state"
  : >"$root/tmp/systemd.log"
  cat >"$root/usr/bin/systemctl" <<'EOS'
#!/bin/sh
echo "systemctl $*" >>/tmp/systemd.log
case "$1" in is-active) s=$(cat /tmp/systemd.state); echo "$s"; [ "$s" = active ] ;; *) exit 0 ;; esac
EOS
  cat >"$root/usr/bin/deb-systemd-invoke" <<EOS
#!/bin/sh
echo "invoke \$*" >>/tmp/systemd.log
case "\$1" in start|restart) echo $2 >/tmp/systemd.state ;; esac
EOS
  chmod 755 "$root/usr/bin/systemctl" "$root/usr/bin/deb-systemd-invoke"
}
real_systemd() {
  local root=$1 b
  for b in systemctl deb-systemd-invoke; do mv "$root/usr/bin/$b.real" "$root/usr/bin/$b"; done
  rmdir "$root/run/systemd/system"
}

# cfgstamp ROOT: mode, owner, size, mtime and hash of the config.
cfgstamp() { echo "$(stat -c '%a %u %g %s %Y' "$1/etc/perch/config.json") $(sha256sum <"$1/etc/perch/config.json")"; }

# snapshot ROOT: the files a package could leave behind.
snapshot() {
  (cd "$1" && find etc usr var -xdev \
    -path var/lib/apt/lists -prune -o -path var/cache -prune -o -path var/log -prune \
    -o -path var/lib/dpkg -prune -o -path var/lib/systemd/deb-systemd-helper-masked -prune \
    -o -path etc/ld.so.cache -prune -o -print 2>/dev/null | sort)
}

# --- 5. trixie ---
trixie() {
  local root
  root=$(newroot trixie trixie amd64 systemd passwd)
  # Raspberry Pi OS has an i2c group; plain Debian does not.
  inroot "$root" groupadd --system i2c
  snapshot "$root" >"$t/trixie.before"
  inroot "$root" apt-get update -q
  inroot "$root" apt-get install -y -q perch | tee "$t/trixie-install.log"
  grep -q "perch: next, open http://.*:8080/.* journalctl -u perch -b -o cat | grep setup_code | tail -n1" "$t/trixie-install.log" \
    || fail "the first install does not say what to do next"
  installed_checks "$root" "$v1"

  local reply
  start_gateway "$root" "$t/trixie-gateway-1.log"
  reply=$(chat "$root" "hello from the package test")
  [ "$reply" = "fake reply: 1 user messages, last: hello from the package test" ] || fail "chat reply: $reply"
  stop_gateway
  [ -s "$root/var/lib/perch/perch.db" ] || fail "no database after a chat turn"
  note "a chat turn through the installed gateway: '$reply'; stopped cleanly on SIGTERM"

  local before
  before=$(cfgstamp "$root")
  image/deb/apt-repo.sh "$www/good" "$t/next/perch_${v2}_amd64.deb"
  inroot "$root" apt-get update -q
  inroot "$root" apt-get upgrade -y -q
  published=$v2
  installed_checks "$root" "$v2"
  [ "$(cfgstamp "$root")" = "$before" ] \
    || fail "the upgrade changed /etc/perch/config.json"
  note "upgraded to $v2 by apt-get upgrade; config.json byte for byte, mode, owner and mtime the same"
  start_gateway "$root" "$t/trixie-gateway-2.log"
  reply=$(chat "$root" "and again after the upgrade")
  [ "$reply" = "fake reply: 2 user messages, last: and again after the upgrade" ] || fail "after the upgrade the model saw: $reply"
  stop_gateway
  note "history survived the upgrade: the new binary sent the earlier turn ('$reply')"

  inroot "$root" apt-get remove -y -q perch
  [ ! -e "$root/usr/bin/perch" ] || fail "remove left /usr/bin/perch"
  [ "$(cfgstamp "$root")" = "$before" ] \
    || fail "remove changed or deleted /etc/perch/config.json"
  [ -s "$root/var/lib/perch/perch.db" ] || fail "remove deleted /var/lib/perch/perch.db"
  [ "$(inroot "$root" dpkg-query -W -f='${Status}' perch)" = "deinstall ok config-files" ] || fail "status after remove"
  note "remove: binary gone, /etc/perch/config.json and /var/lib/perch/perch.db kept"

  # What postinst asks of a running systemd, recorded by stand-ins: the
  # reinstall must start the unit remove stopped (try-restart would leave
  # it stopped), and a unit that fails to start must be reported.
  fake_systemd "$root" failed
  inroot "$root" apt-get install -y -q perch >"$t/reinstall.log" 2>&1 || { cat "$t/reinstall.log" >&2; fail "reinstall failed"; }
  grep -q "^invoke start perch.service" "$root/tmp/systemd.log" \
    || fail "the reinstall after remove did not start the unit: $(cat "$root/tmp/systemd.log")"
  grep -q "perch.service did not start" "$t/reinstall.log" && grep -q "set gateway.port in /etc/perch/config.json" "$t/reinstall.log" \
    || fail "a unit that failed to start was not reported: $(cat "$t/reinstall.log")"
  real_systemd "$root"
  [ "$(cfgstamp "$root")" = "$before" ] \
    || fail "reinstalling replaced /etc/perch/config.json"
  installed_checks "$root" "$v2"
  note "reinstall after remove: the kept config is used as it is; the unit is started, and its failure to start reported"

  inroot "$root" apt-get purge -y -q perch
  [ ! -e "$root/etc/perch" ] || fail "purge left /etc/perch"
  [ ! -e "$root/var/lib/perch" ] || fail "purge left /var/lib/perch"
  if inroot "$root" dpkg-query -W -f='${Status}' perch 2>/dev/null | grep -q 'installed\|config-files'; then
    fail "perch is still known to dpkg after purge"
  fi
  inroot "$root" getent passwd perch >/dev/null || fail "purge deleted the perch user (system users are kept)"
  snapshot "$root" >"$t/trixie.after"
  # The account stays by design; apt's state files change with any install.
  local left
  left=$(diff "$t/trixie.before" "$t/trixie.after" | grep '^[<>]' \
    | grep -vE '^> etc/(passwd|group|shadow|gshadow)-$|^> var/lib/apt/(extended_states|periodic)' || true)
  [ -z "$left" ] || fail "purge left these behind (> added, < removed):"$'\n'"$left"
  note "purge: /etc/perch, /var/lib/perch, unit links gone; nothing else left; user perch kept (by design)"

  refusals "$root"
}

# --- 6. bookworm ---
bookworm() {
  local root reply
  root=$(newroot bookworm bookworm amd64)
  inroot "$root" groupadd --system i2c
  [ ! -e "$root/usr/bin/systemd-sysusers" ] || fail "the bookworm root has systemd: it should test the fallback"
  inroot "$root" apt-get update -q
  inroot "$root" apt-get install -y -q --no-install-recommends perch
  installed_checks "$root" "$published"
  start_gateway "$root" "$t/bookworm-gateway.log"
  reply=$(chat "$root" "hello bookworm")
  [ "$reply" = "fake reply: 1 user messages, last: hello bookworm" ] || fail "chat reply: $reply"
  stop_gateway
  note "bookworm without systemd: user by useradd, /etc/perch by install; a chat turn: '$reply'"

  # `sudo perch …` acts on the service's config and home, as the perch
  # user: a database a root command creates must be the service's to open.
  local uid out bad
  uid=$(inroot "$root" id -u perch)
  rm -f "$root"/var/lib/perch/perch.db*
  inroot "$root" perch cron add --message "water the tomatoes" --every 1h >/dev/null || fail "perch cron add as root failed"
  out=$(inroot "$root" perch cron list) || fail "perch cron list as root failed: $out"
  [[ $out == *"water the tomatoes"* ]] || fail "perch cron list as root: $out"
  out=$(inroot "$root" perch status 2>&1) || true
  [[ $out == *"/etc/perch/config.json"* ]] || fail "perch status as root does not use the service's config: $out"
  out=$(inroot "$root" setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp perch status 2>&1) \
    && fail "perch status as another user succeeded: $out"
  [[ $out == *"/etc/perch/config.json is the perch service's"*"sudo"* ]] || fail "perch status as another user: $out"
  bad=$(find "$root/var/lib/perch" "$root/etc/perch" ! -uid "$uid" -printf '%P ')
  [ -z "$bad" ] || fail "root's commands left files the service cannot open: $bad"
  start_gateway "$root" "$t/bookworm-gateway-2.log"
  out=$(inroot "$root" perch cron list) || fail "perch cron list through the running gateway failed: $out"
  [[ $out == *"water the tomatoes"* ]] || fail "perch cron list through the running gateway: $out"
  stop_gateway
  note "sudo perch cron add/list/status use /etc/perch and /var/lib/perch as perch; the service opens what they made"
  inroot "$root" apt-get purge -y -q perch
  [ ! -e "$root/etc/perch" ] && [ ! -e "$root/var/lib/perch" ] || fail "purge left /etc/perch or /var/lib/perch"
  note "bookworm purge"
  refusals "$root"
}

# --- 7. arm64 ---
arm64() {
  local root
  root=$(newroot trixie-arm64 trixie arm64 systemd passwd)
  inroot "$root" groupadd --system i2c
  inroot "$root" apt-get update -q
  inroot "$root" apt-get install -y -q perch
  installed_checks "$root" "$v1"
  [ "$(inroot "$root" dpkg --print-architecture)" = arm64 ] || fail "not an arm64 root"
  note "arm64 root (qemu-user): installed from the repository; postinst ran perch onboard emulated"
}

# --- 8. piuparts ---
piu() {
  local root
  root=$(newroot piuparts trixie amd64 systemd passwd)
  # piuparts installs and purges the next version's .deb and compares the
  # root with how it started; then installs this version from the signed
  # repository, upgrades it to the .deb, purges, and compares again.
  # --keep-sources-list: the root's only source is the Perch repository
  # (every dependency is in the root already), so it needs no network.
  # Its own PID namespace and /proc: piuparts records the root by walking
  # it, /proc included, which on a busy machine took minutes.
  rm -f "$t/piuparts.log"
  # TMPDIR: piuparts hard-links the root into its temporary directory,
  # which must be on the same (tmpfs) file system.
  TMPDIR=$t/roots timeout 900 unshare --mount --propagation private --pid --fork --mount-proc \
    piuparts --existing-chroot="$root" --hard-link -d trixie --keep-sources-list \
    --no-adequate --log-file="$t/piuparts.log" "$t/next/perch_${v2}_amd64.deb" >"$t/piuparts.out" 2>&1 \
    || { tail -n 60 "$t/piuparts.out" >&2; fail "piuparts failed (log: $t/piuparts.log)"; }
  grep -E 'PASS' "$t/piuparts.out"
  grep -q 'PASS: Installation and purging test' "$t/piuparts.out" || fail "piuparts did not run the install/purge test"
  grep -q 'PASS: Installation, upgrade and purging tests' "$t/piuparts.out" || fail "piuparts did not run the upgrade test (is $v1 in the repository?)"
  note "piuparts: install/purge of $v2, and upgrade from $v1 (repository) to $v2, then purge: nothing left behind"
}

# --- main ---
# PKGTEST_REUSE=1 (development): keep the packages of the last run instead
# of building again. PKGTEST_STEPS: the install steps to run (default: all
# of trixie bookworm arm64 piuparts).
steps=" ${PKGTEST_STEPS:-trixie bookworm arm64 piuparts} "
step deps .ci/deps-pkg
mkdir -p "$t"
rm -rf "$t/x"
# The roots live in RAM (a tmpfs mounted on build/pkgtest/roots): unpacking
# and deleting about 1.5 GB of small files on a disk shared with other jobs
# took minutes. A failed run leaves it mounted for inspection; the next run
# (or umount) frees it.
if mountpoint -q "$t/roots"; then umount "$t/roots"; fi
rm -rf "$t/roots"; mkdir -p "$t/roots"
mount -t tmpfs -o size=6g,mode=0755 perch-pkgtest "$t/roots"
v1=$(image/deb/version.sh)
v2=$v1+pkgtest1
if [ "${PKGTEST_REUSE:-}" = 1 ] && [ -f "dist/perch_${v1}_armhf.deb" ] && [ -f "$t/next/perch_${v2}_amd64.deb" ]; then
  echo "package-test: PKGTEST_REUSE=1: using the packages of $v1 and $v2 already built"
else
  rm -rf "$t/next"
  step "build: make deb ($v1 and the next version)" build
fi
step "dpkg-deb -I/-c, ELF headers, arm under qemu" inspect

# lintian is slow (perl, one package after another) and needs nothing
# from the steps below: it runs alongside them, and is waited for last.
lint_start=$SECONDS
# In a session of its own, so that stopping it stops lintian inside the root.
export -f inroot _inroot fail note lint
export t v1 v2
rm -f "$t/lintian.rc"
# Its exit code goes to a file: wait cannot be trusted to still know the
# status of a child that ended minutes before.
setsid bash -c 'set -uo pipefail; current=lintian; (set -e; lint); echo $? >"$t/lintian.rc"' >"$t/lintian.out" 2>&1 &
lint_pid=$!

step "signed repositories" repos
published=$v1 # the newest amd64 version in the good repository
servers() {
  rm -f "$t/servers.env"
  go build -o "$t/pkgtestd" ./image/deb/pkgtestd
  "$t/pkgtestd" -root "$www" -env "$t/servers.env" -timeout 30m &
  pids+=($!)
  for _ in $(seq 1 100); do [ -s "$t/servers.env" ] && break; sleep 0.1; done
  [ -s "$t/servers.env" ] || fail "pkgtestd did not start"
  . "$t/servers.env"
  note "repositories at $REPO_URL, fake provider at $PROVIDER_URL"
}
step "loopback servers: repositories, fake provider" servers

[[ $steps != *" trixie "* ]] || step "trixie amd64: install, chat, upgrade, remove, purge, refusals" trixie
[[ $steps != *" bookworm "* ]] || step "bookworm amd64 without systemd: install, chat, purge, refusals" bookworm
[[ $steps != *" arm64 "* ]] || step "trixie arm64 under qemu: install" arm64
[[ $steps != *" piuparts "* ]] || step "piuparts" piu

lint_wait() {
  local rc i
  for i in $(seq 1 900); do kill -0 "$lint_pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$lint_pid" 2>/dev/null && fail "lintian still runs after 15 minutes"
  wait "$lint_pid" 2>/dev/null || true
  lint_pid=
  rc=$(cat "$t/lintian.rc" 2>/dev/null || echo "none: it did not finish")
  cat "$t/lintian.out"
  [ "$rc" = 0 ] || fail "lintian (exit $rc): see above"
  echo "    (lintian ran for $((SECONDS - lint_start))s alongside the steps above)"
}
step "lintian (waited for)" lint_wait

umount "$t/roots"
echo "package-test: PASS"
printf '%s\n' "${timings[@]}"
