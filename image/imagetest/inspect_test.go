//go:build imagetest

package imagetest

import (
	"regexp"
	"strings"
	"testing"
)

// inspectRoot checks what every image's root file system must and must not
// ship, reading it with debugfs (no mount, no loop device). It returns the
// root partition's file for further checks.
func inspectRoot(t *testing.T, img string) string {
	t.Helper()
	parts := partitions(t, img)
	if len(parts) != 2 || parts[1].Type != "83" {
		t.Fatalf("partitions %+v; want the FAT boot partition and one Linux root", parts)
	}
	root := extractPartition(t, img, parts[1])
	if label := strings.TrimSpace(runCmd(t, 60e9, "e2label", root)); label != "perch-root" {
		t.Errorf("root label %q; the kernel command line boots LABEL=perch-root", label)
	}
	if out, err := tryCmd(120e9, "e2fsck", "-fn", root); err != nil {
		t.Errorf("root file system does not check clean: %v\n%s", err, tail(out, 20))
	}

	// Per-board identity is made on the board, never shipped.
	for _, p := range []string{"/etc/perch/config.json", "/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_rsa_key", "/etc/ssh/ssh_host_ecdsa_key", "/var/lib/systemd/random-seed"} {
		if exists(root, p) {
			t.Errorf("the image ships %s; it must be made on each board", p)
		}
	}
	if mid := strings.TrimSpace(debugfs(t, root, "cat /etc/machine-id")); mid != "uninitialized" {
		t.Errorf("/etc/machine-id is %q; want \"uninitialized\" (systemd's first-boot marker)", mid)
	}
	// SSH off until first boot is given a key.
	if !exists(root, "/etc/ssh/sshd_not_to_be_run") {
		t.Error("/etc/ssh/sshd_not_to_be_run missing: SSH would start without a key")
	}
	// No account has a usable password.
	for _, line := range strings.Split(debugfs(t, root, "cat /etc/shadow"), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 2 {
			continue
		}
		if f[1] == "" || !(strings.HasPrefix(f[1], "*") || strings.HasPrefix(f[1], "!")) {
			t.Errorf("account %s has a password field %q in the image", f[0], f[1])
		}
	}
	// Perch, its units and the image's own settings.
	for _, p := range []string{
		"/usr/bin/perch",
		"/etc/systemd/system/multi-user.target.wants/perch.service",
		"/etc/systemd/system/sysinit.target.wants/perch-firstboot.service",
		"/etc/systemd/system/multi-user.target.wants/perch-growroot.service",
		"/etc/systemd/system/sysinit.target.wants/systemd-time-wait-sync.service",
		"/etc/systemd/system/sys-subsystem-net-devices-wlan0.device.wants/wpa_supplicant@wlan0.service",
		"/etc/systemd/system.conf.d/perch-watchdog.conf",
		"/etc/systemd/system/perch-console.service",
		"/etc/systemd/journald.conf.d/perch.conf",
		"/etc/udev/rules.d/60-perch-hardware.rules",
	} {
		if !exists(root, p) {
			t.Errorf("%s missing from the image", p)
		}
	}
	if l := debugfs(t, root, "stat /etc/systemd/system/systemd-firstboot.service"); !strings.Contains(l, "/dev/null") {
		t.Error("systemd-firstboot.service is not masked: it would prompt on a console nobody watches")
	}
	fstab := debugfs(t, root, "cat /etc/fstab")
	for _, want := range []string{`LABEL=perch-root\s+/\s+ext4\s+\S*noatime`, `LABEL=PERCHBOOT\s+/boot/firmware\s+vfat\s+\S*umask=0077`} {
		if !regexp.MustCompile(want).MatchString(fstab) {
			t.Errorf("fstab lacks %s:\n%s", want, fstab)
		}
	}
	if strings.Contains(fstab, "swap") {
		t.Errorf("fstab has swap:\n%s", fstab)
	}
	if !strings.Contains(debugfs(t, root, "cat /etc/systemd/system.conf.d/perch-watchdog.conf"), "RuntimeWatchdogSec=15s") {
		t.Error("the hardware watchdog is not configured")
	}
	sources := debugfs(t, root, "cat /etc/apt/sources.list.d/debian.sources")
	if !strings.Contains(sources, "trixie-security") || !strings.Contains(sources, "Signed-By:") {
		t.Errorf("debian.sources:\n%s", sources)
	}
	return root
}
