//go:build imagetest

package imagetest

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/provider/providertest"
)

const (
	testToken  = "imagetest-token-0123456789abcdef"
	testAPIKey = "sk-imagetest-secret-0123456789"
	testModel  = "gpt-imagetest"
)

// TestAmd64Image builds the amd64 image with settings files on its boot
// partition (perch-setup.json, and Imager's user-data and network-config),
// boots it under UEFI in qemu-system-x86_64 (TCG) and checks the board from
// outside (HTTP through a forwarded port) and inside (SSH, which is on
// because perch-setup.json gave a key).
func TestAmd64Image(t *testing.T) {
	// The two images build and boot side by side: on a 2-core machine one
	// emulated CPU each, and the arm64 tree's emulated build overlaps the
	// amd64 boots instead of adding to them.
	t.Parallel()
	deb, debNext := need(t, "PERCH_IMAGE_DEB"), need(t, "PERCH_IMAGE_DEB_NEXT")
	work := t.TempDir()

	// What lies outside the board: a provider, a time server and Perch's
	// apt repository, on the host (the guest's 10.0.2.2).
	fake := providertest.New()
	t.Cleanup(fake.Close)
	fakePort := fake.Listener.Addr().(*net.TCPAddr).Port
	startNTP(t)
	repo := filepath.Join(work, "repo")
	repoKey := publish(t, repo, deb)
	repoSrv := httptest.NewServer(http.FileServer(http.Dir(repo)))
	t.Cleanup(repoSrv.Close)
	repoPort := repoSrv.Listener.Addr().(*net.TCPAddr).Port

	key, pub := sshKey(t, work, "owner")
	otherKey, _ := sshKey(t, work, "stranger")
	seed := filepath.Join(work, "seed")
	os.MkdirAll(seed, 0o755)
	setup := map[string]any{
		"hostname":            "perch-test",
		"timezone":            "Europe/Berlin",
		"ntp_servers":         []string{"10.0.2.2"},
		"wifi":                map[string]any{"ssid": "Test Net", "passphrase": "test passphrase 1", "country": "DE"},
		"ssh_authorized_keys": []string{pub},
		"provider":            "openai",
		"model":               testModel,
		"api_key":             testAPIKey,
		"api_base":            fmt.Sprintf("http://10.0.2.2:%d", fakePort),
		"api_token":           testToken,
	}
	b, _ := json.MarshalIndent(setup, "", "  ")
	os.WriteFile(filepath.Join(seed, "perch-setup.json"), b, 0o644)
	// As Raspberry Pi Imager 2 writes them; its host name loses to
	// perch-setup.json's, its user and network are added.
	os.WriteFile(filepath.Join(seed, "user-data"), []byte("#cloud-config\nhostname: imager-name\nmanage_etc_hosts: true\ntimezone: Europe/London\nenable_ssh: true\nusers:\n- name: pi\n  groups: users,adm,dialout,audio,netdev,video,plugdev,cdrom,games,input,gpio,spi,i2c,render,sudo\n  shell: /bin/bash\n  lock_passwd: true\n  ssh_authorized_keys:\n    - "+pub+"\n  sudo: ALL=(ALL) NOPASSWD:ALL\n"), 0o644)
	os.WriteFile(filepath.Join(seed, "network-config"), []byte("network:\n  version: 2\n  wifis:\n    wlan0:\n      dhcp4: true\n      regulatory-domain: \"DE\"\n      access-points:\n        \"Imager Net\":\n          password: \"1572cfd83e170938e34a74a222bb9c08143a12556546f3643ffbe05bf82e68c9\"\n      optional: true\n"), 0o644)
	os.WriteFile(filepath.Join(seed, "meta-data"), []byte("instance-id: rpi-imager-1\n"), 0o644)

	img, took := buildImage(t, filepath.Join(work, "out"), "--target", "amd64", "--deb", deb,
		"--apt-url", fmt.Sprintf("http://10.0.2.2:%d/", repoPort), "--apt-key", repoKey, "--seed", seed)
	record(t, "amd64 image build (Debian tree cached: %v): %s", treeWasCached(filepath.Join(work, "out")), took.Round(time.Second))

	t.Run("two builds list the same packages", func(t *testing.T) {
		checkSamePackages(t, "amd64", filepath.Join(work, "out", "image.manifest"))
	})
	var bootPart partition
	t.Run("image contents", func(t *testing.T) {
		parts := partitions(t, img)
		bootPart = parts[0]
		if parts[0].Type != "ef" || !parts[0].Bootable {
			t.Errorf("boot partition %+v; want an EFI system partition (type ef), bootable", parts[0])
		}
		names := strings.Join(fatList(t, img, bootPart.Start), " ")
		for _, want := range []string{"EFI", "loader", "vmlinuz", "initrd.img", "perch-setup.json", "perch-setup.example.json"} {
			if !strings.Contains(names, want) {
				t.Errorf("boot partition lacks %s: %s", want, names)
			}
		}
		entry, _ := fatFile(t, img, bootPart.Start, "/loader/entries/perch.conf")
		if !strings.Contains(entry, "root=LABEL=perch-root") || !strings.Contains(entry, "console=ttyS0") {
			t.Errorf("systemd-boot entry:\n%s", entry)
		}
		root := inspectRoot(t, img)
		src := debugfs(t, root, "cat /etc/apt/sources.list.d/perch.sources")
		if !strings.Contains(src, fmt.Sprintf("URIs: http://10.0.2.2:%d/", repoPort)) || !strings.Contains(src, "Signed-By: /usr/share/keyrings/perch-archive-keyring.gpg") {
			t.Errorf("perch.sources:\n%s", src)
		}
	})
	if bootPart.Size == 0 {
		t.FailNow()
	}

	// The card is bigger than the image: the root grows into it.
	disk := filepath.Join(work, "disk.img")
	copyFile(t, img, disk)
	runCmd(t, time.Minute, "truncate", "-s", "3G", disk)
	vars := filepath.Join(work, "OVMF_VARS.fd")
	copyFile(t, "/usr/share/OVMF/OVMF_VARS_4M.fd", vars)
	qemuArgs := []string{"-accel", "tcg", "-machine", "q35", "-m", "1024", "-smp", "1",
		"-drive", "if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd",
		"-drive", "if=pflash,format=raw,file=" + vars,
		"-drive", "file=" + disk + ",format=raw,if=virtio",
		"-device", "i6300esb",
		// The guest's systemd arms the watchdog (the test checks it does),
		// but an emulated CPU on a loaded host can stall PID 1 past 15 s
		// (seen: four silent resets in one first boot). QEMU logs a
		// firing instead of resetting; the log is reported below.
		"-action", "watchdog=debug",
		// A guest reboot ends QEMU, and the second-boot check starts it
		// again on the same disk and UEFI variables. OVMF's warm reset
		// under TCG hung once with the console silent after "reboot:
		// machine restart" for 20 minutes; a cold start does not go
		// through it, and the guest's side of a reboot is the same.
		"-action", "reboot=shutdown"}
	// One vCPU: with two, TCG occasionally runs stale code while the kernel
	// patches itself at boot (an int3 oops in enqueue_timer, seen here).
	v := startVM(t, "qemu-system-x86_64", qemuArgs, 45*time.Minute)
	v.key = key
	top := t
	// When a check fails, the guest's own account of it: failed units and
	// the journal of Perch's units (cleanups run before the VM's is).
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		out, _ := v.sshAs("root", key, "systemctl --failed --no-pager; systemctl status --no-pager perch; journalctl -b --no-pager -o short-monotonic -u perch -u perch-firstboot | tail -80")
		t.Logf("guest diagnostics:\n%s", out)
	})
	boot := v.waitHealth(t, 25*time.Minute)
	record(t, "amd64 first boot under TCG (UEFI, first-boot setup, growroot): /health after %s", boot.Round(time.Second))
	waitFor(t, "SSH", 3*time.Minute, func() error { _, err := v.sshAs("root", key, "true"); return err })

	t.Run("health and ready name the provider", func(t *testing.T) {
		code, body, err := httpDo("GET", v.url("/health"), "", nil)
		if err != nil || code != 200 || !strings.Contains(string(body), `"status":"ok"`) {
			t.Fatalf("/health %d %s %v", code, body, err)
		}
		// Anyone on the LAN reads that a provider is configured; with the
		// token, which one (the names are kept from strangers).
		code, body, err = httpDo("GET", v.url("/ready"), "", nil)
		if err != nil || code != 200 || !strings.Contains(string(body), "a provider is configured") || strings.Contains(string(body), testModel) {
			t.Errorf("/ready without the token: %d %s %v", code, body, err)
		}
		code, body, err = httpDo("GET", v.url("/ready"), testToken, nil)
		if err != nil || code != 200 || !strings.Contains(string(body), "openai, model "+testModel) {
			t.Errorf("/ready with the token: %d %s %v", code, body, err)
		}
	})

	t.Run("the page is served on the LAN address", func(t *testing.T) {
		code, body, err := httpDo("GET", v.url("/"), "", nil)
		if err != nil || code != 200 || !strings.Contains(string(body), "<title>Perch</title>") {
			t.Errorf("GET / %d %.300s %v", code, body, err)
		}
	})

	t.Run("a chat turn reaches the provider", func(t *testing.T) {
		code, body, err := httpDo("POST", v.url("/chat"), testToken, map[string]string{"message": "hello from the image test", "session_key": "imagetest"})
		if err != nil || code != 200 || !strings.Contains(string(body), "echo: hello from the image test") {
			t.Fatalf("/chat %d %s %v", code, body, err)
		}
		reqs := fake.Requests()
		if len(reqs) == 0 || reqs[len(reqs)-1].Body.Model != testModel || reqs[len(reqs)-1].Header.Get("Authorization") != "Bearer "+testAPIKey {
			t.Errorf("the provider got %d requests, last model %q", len(reqs), reqs[len(reqs)-1].Body.Model)
		}
		if code, _, _ := httpDo("POST", v.url("/chat"), "", map[string]string{"message": "x"}); code != 401 {
			t.Errorf("/chat without the token: %d, want 401", code)
		}
	})

	t.Run("the gateway maps its binary page by page and gives it back when idle", func(t *testing.T) {
		// Installed, the gateway runs as perch from a binary root owns,
		// under the unit's system call filter and Debian's default
		// vm.unprivileged_userfaultfd=0. The start-up trim must still
		// switch the binary's read-only mappings to one page per fault
		// (a userfaultfd in user mode, registered for asynchronous write
		// protection: VmFlags "uw"), and the idle trim, two quiet minutes
		// after the turn above, must unmap their pages (MADV_PAGEOUT, used
		// once, is honoured only for the file's owner and left every one).
		binary := func() (kb, mappings, byPage int, err error) {
			out, err := v.sshAs("root", key, `pid=$(systemctl show -p MainPID --value perch); stat -c %U /proc/$pid; `+
				`awk '/^[0-9a-f]+-[0-9a-f]+ / {ours = ($6 == "/usr/bin/perch" && $2 !~ /w/); if (ours) n++} `+
				`ours && $1 == "Rss:" {kb += $2} ours && $1 == "VmFlags:" && / uw/ {uw++} END {print kb+0, n+0, uw+0}' /proc/$pid/smaps`)
			if err != nil {
				return 0, 0, 0, fmt.Errorf("%v: %s", err, out)
			}
			f := strings.Fields(out)
			if len(f) != 4 || f[0] != "perch" {
				return 0, 0, 0, fmt.Errorf("the gateway's user and binary mappings: %q", out)
			}
			_, err = fmt.Sscan(strings.Join(f[1:], " "), &kb, &mappings, &byPage)
			return kb, mappings, byPage, err
		}
		warm, n, byPage, err := binary()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 || byPage != n {
			t.Errorf("%d of the binary's %d read-only mappings are mapped page by page", byPage, n)
		}
		var trimmed int
		took := waitFor(t, "the idle trim", 4*time.Minute, func() error {
			kb, _, _, err := binary()
			if err != nil {
				return err
			}
			if trimmed = kb; kb > warm/2 {
				return fmt.Errorf("the binary's read-only mappings hold %d kB, %d kB after the turn", kb, warm)
			}
			return nil
		})
		record(t, "gateway's binary pages as perch on the board, mapped page by page: %d kB after a turn, %d kB %s later (idle trim)", warm, trimmed, took.Round(time.Second))
	})

	t.Run("settings moved off the boot partition", func(t *testing.T) {
		left := v.sh(t, "ls -A /boot/firmware")
		for _, gone := range []string{"perch-setup.json", "user-data", "network-config", "meta-data"} {
			if regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(gone) + `$`).MatchString(left) {
				t.Errorf("%s is still on the boot partition:\n%s", gone, left)
			}
		}
		st := strings.Fields(v.sh(t, "stat -c '%a %U %G' /etc/perch/config.json"))
		if len(st) != 3 || st[0] != "600" || st[1] != "perch" {
			t.Errorf("config.json: %v; want mode 600 owned by perch", st)
		}
		if n := v.sh(t, "grep -c -e '"+testAPIKey+"' -e '"+testToken+"' /etc/perch/config.json"); n != "2" {
			t.Errorf("the key and token are not both in config.json (%s lines)", n)
		}
		if out, _ := v.sshAs("root", key, "journalctl -b --no-pager | grep -c -e '"+testAPIKey+"' -e 'test passphrase 1'"); strings.TrimSpace(out) != "0" {
			t.Errorf("a secret reached the journal (%s lines)", out)
		}
		if strings.Contains(v.console(), testAPIKey) || strings.Contains(v.console(), testToken) {
			t.Error("a secret reached the serial console")
		}
		wpa := v.sh(t, "stat -c %a /etc/wpa_supplicant/wpa_supplicant-wlan0.conf && cat /etc/wpa_supplicant/wpa_supplicant-wlan0.conf")
		for _, want := range []string{"600\n", "country=DE", "ssid=" + hex.EncodeToString([]byte("Test Net")), "ssid=" + hex.EncodeToString([]byte("Imager Net"))} {
			if !strings.Contains(wpa, want) {
				t.Errorf("wpa_supplicant config lacks %q", want)
			}
		}
		if h := v.sh(t, "hostname; readlink /etc/localtime"); h != "perch-test\n/usr/share/zoneinfo/Europe/Berlin" {
			t.Errorf("hostname and zone: %q", h)
		}
	})

	t.Run("accounts: keys only, no passwords", func(t *testing.T) {
		if out := v.sh(t, `awk -F: '$2 !~ /^[*!]/ {print $1": "$2}' /etc/shadow`); out != "" {
			t.Errorf("accounts with a usable password:\n%s", out)
		}
		if out := v.sh(t, `awk -F: '$2 != "x" {print $1}' /etc/passwd`); out != "" {
			t.Errorf("passwords in /etc/passwd: %s", out)
		}
		if out, err := v.sshAs("pi", key, "id -nG"); err != nil || !strings.Contains(out, "i2c") || strings.Contains(out, "sudo") {
			t.Errorf("Imager's account pi: %q %v; want it to log in with its key, in i2c, not in sudo", out, err)
		}
		if out, err := v.sshAs("root", otherKey, "true"); err == nil {
			t.Errorf("an unknown key logged in: %s", out)
		}
		if out := v.sh(t, "sshd -T | grep -E '^(passwordauthentication|kbdinteractiveauthentication|permitrootlogin) '"); !strings.Contains(out, "passwordauthentication no") || !strings.Contains(out, "permitrootlogin without-password") && !strings.Contains(out, "permitrootlogin prohibit-password") {
			t.Errorf("sshd settings:\n%s", out)
		}
		// Host keys made on this board (the image has none: see image contents).
		v.sh(t, "test -s /etc/ssh/ssh_host_ed25519_key")
		if groups := v.sh(t, "id -nG perch"); !strings.Contains(groups, "i2c") || !strings.Contains(groups, "spi") || !strings.Contains(groups, "gpio") || !strings.Contains(groups, "dialout") {
			t.Errorf("perch is in %q; want the hardware groups", groups)
		}
	})

	t.Run("an appliance that lasts", func(t *testing.T) {
		size := v.sh(t, "df -B1M --output=size / | tail -1")
		if mb, _ := strconv.Atoi(strings.TrimSpace(size)); mb < 2500 {
			t.Errorf("root is %s MiB on a 3 GiB disk: it did not grow", size)
		}
		record(t, "root file system after growroot on a 3 GiB disk: %s MiB", strings.TrimSpace(size))
		if out := v.sh(t, "swapon --show --noheadings | wc -l; findmnt -no OPTIONS /"); !strings.HasPrefix(out, "0\n") || !strings.Contains(out, "noatime") {
			t.Errorf("swap or atime: %q", out)
		}
		// The device's state and systemd's last ping show that systemd
		// drives the watchdog. PID 1's "Using hardware watchdog" line, which
		// it writes to /dev/kmsg before journald runs, was once missing from
		// the journal when the gateway ran fine; it is shown only when this
		// check fails.
		wd := "/sys/class/watchdog/watchdog0"
		out := v.sh(t, "cat "+wd+"/identity "+wd+"/state "+wd+"/timeout; systemctl show -p WatchdogDevice -p WatchdogLastPingTimestampMonotonic --value")
		if f := strings.Split(out, "\n"); len(f) != 5 || f[0] != "i6300ESB timer" || f[1] != "active" || f[2] != "15" || f[3] != "/dev/watchdog0" || f[4] == "" || f[4] == "0" {
			t.Errorf("systemd does not run the hardware watchdog (identity, state, timeout, systemd's device and last ping):\n%s\n%s", out,
				v.sh(t, "journalctl -b --no-pager -o short-monotonic | grep -i -e watchdog -e ratelimit || true"))
		}
		if out := v.sh(t, "systemctl show -p RuntimeWatchdogUSec --value"); out != "15s" {
			t.Errorf("RuntimeWatchdogUSec=%s", out)
		}
		// Waited for, not grepped once: under emulation on a busy host the
		// first answer can come after systemd-time-wait-sync's 90 s bound,
		// and the board then rightly starts on its saved clock first.
		waitFor(t, "timesyncd's first answer from the LAN's time server (10.0.2.2)", 2*time.Minute, func() error {
			out := v.sh(t, "journalctl -b -u systemd-timesyncd --no-pager | grep -m1 'Contacted time server' || true")
			if !strings.Contains(out, "10.0.2.2") {
				return fmt.Errorf("timesyncd's journal: %q", out)
			}
			return nil
		})
		ts := v.sh(t, "systemctl show -p ActiveEnterTimestampMonotonic --value time-sync.target systemd-time-wait-sync.service perch.service")
		f := strings.Fields(ts)
		if len(f) == 3 {
			sync, _ := strconv.ParseInt(f[0], 10, 64)
			perch, _ := strconv.ParseInt(f[2], 10, 64)
			if sync == 0 || perch < sync {
				t.Errorf("perch started (%d µs) before time-sync.target (%d µs)", perch, sync)
			}
			record(t, "time-sync.target reached %.1f s after boot, perch active %.1f s after boot", float64(sync)/1e6, float64(perch)/1e6)
		}
		if out := v.sh(t, "systemctl is-active perch; systemctl is-enabled perch; systemctl --failed --no-legend --plain | wc -l"); out != "active\nenabled\n0" {
			t.Errorf("perch active, enabled, failed units: %q\n%s", out, v.sh(t, "systemctl --failed --no-pager"))
		}
		// The journal survives a reboot (the reason for the last one is
		// there), within the drop-in's cap.
		if out := v.sh(t, "journalctl --header --no-pager | grep -m1 '^File path:'; systemd-analyze cat-config systemd/journald.conf | grep -E '^(Storage|SystemMaxUse)='"); !strings.Contains(out, "/var/log/journal/") || !strings.Contains(out, "Storage=persistent") || !strings.Contains(out, "SystemMaxUse=") {
			t.Errorf("the journal is not persistent and capped:\n%s", out)
		}
		if out := v.sh(t, "resolvectl status eth0 --no-pager | grep -i 'protocols'"); !strings.Contains(out, "+mDNS") {
			t.Errorf("mDNS is not on for eth0: %q", out)
		}
		if out := v.sh(t, "ss -ulpn | grep -c ':5353 '"); out == "0" {
			t.Error("nothing answers mDNS on UDP 5353")
		}
		if out := v.sh(t, "journalctl -b --no-pager | grep -ci 'ordering cycle' || true"); out != "0" {
			t.Errorf("systemd found ordering cycles (%s)", out)
		}
		cons := v.console()
		if !strings.Contains(cons, "Perch is running: http://perch-test.local:8080/") || strings.Contains(cons, "API token:") || strings.Contains(cons, "Setup code:") {
			t.Errorf("console banner: want the URL, no setup code (a provider is set) and no token (the owner gave one):\n%s", tail(cons, 20))
		}
	})

	t.Run("systemd and the unit", func(t *testing.T) {
		// READY=1 comes after the listener is up: when restart returns, the
		// port answers at once (5 times).
		var worst time.Duration
		for i := range 5 {
			start := time.Now()
			out, err := v.sshAs("root", key, "systemctl restart perch && timeout 1 bash -c 'exec 3<>/dev/tcp/127.0.0.1/8080' && echo connected")
			if err != nil || !strings.Contains(out, "connected") {
				t.Errorf("restart %d: the port did not answer when systemd reported ready: %v %s", i, err, out)
			}
			worst = max(worst, time.Since(start))
		}
		record(t, "systemctl restart perch + connect, slowest of 5 (ssh included): %s", worst.Round(time.Millisecond))

		code, body, _ := httpDo("GET", v.url("/admin/service"), testToken, nil)
		if code != 200 || !strings.Contains(string(body), "perch.service") || !strings.Contains(string(body), "active (running)") {
			t.Errorf("/admin/service %d: %s", code, body)
		}
		code, body, _ = httpDo("GET", v.url("/admin/logs"), testToken, nil)
		if code != 200 || !strings.Contains(string(body), "perch gateway ready") || strings.Contains(string(body), "does not go to the journal") {
			t.Errorf("/admin/logs %d: %.500s", code, body)
		}

		start := time.Now()
		v.sh(t, "systemctl stop perch")
		stopTook := time.Since(start)
		if out := v.sh(t, "systemctl show perch -p Result -p ExecMainCode -p ExecMainStatus"); !strings.Contains(out, "Result=success") || !strings.Contains(out, "ExecMainStatus=0") {
			t.Errorf("stop was not clean:\n%s", out)
		}
		record(t, "systemctl stop perch (ssh included): %s, exit status 0", stopTook.Round(time.Millisecond))
		v.sh(t, "systemctl start perch")

		sec := v.sh(t, "systemd-analyze security perch.service --no-pager | tail -1")
		record(t, "systemd-analyze security perch.service on the board: %s", strings.TrimSpace(sec))
		if m := regexp.MustCompile(`exposure level for perch.service: ([0-9.]+)`).FindStringSubmatch(sec); m == nil {
			t.Errorf("security: %q", sec)
		} else if f, _ := strconv.ParseFloat(m[1], 64); f > 3.0 {
			t.Errorf("exposure %s; the unit's own test holds it lower", m[1])
		}
	})

	t.Run("the unit's watchdog restarts a stopped gateway", func(t *testing.T) {
		// WatchdogSec=60s in the unit; a test drop-in makes it 10 s so the
		// test does not wait minutes. Perch pings at half the interval.
		v.sh(t, "mkdir -p /run/systemd/system/perch.service.d && printf '[Service]\\nWatchdogSec=10s\\n' > /run/systemd/system/perch.service.d/test-watchdog.conf && systemctl daemon-reload && systemctl restart perch")
		pid := v.sh(t, "systemctl show -p MainPID --value perch")
		start := time.Now()
		v.sh(t, "kill -STOP "+pid)
		waitFor(t, "a new gateway process", 3*time.Minute, func() error {
			out, err := v.sshAs("root", key, "systemctl show -p MainPID --value perch; systemctl is-active perch")
			if err != nil {
				return err
			}
			f := strings.Fields(out)
			if len(f) != 2 || f[0] == pid || f[0] == "0" || f[1] != "active" {
				return fmt.Errorf("MainPID %v", f)
			}
			return nil
		})
		if out := v.sh(t, "journalctl -u perch --no-pager --since=-5min | grep -ci 'watchdog timeout'"); out == "0" {
			t.Error("the journal does not say the watchdog fired")
		}
		record(t, "watchdog (WatchdogSec=10s drop-in): SIGSTOPped gateway replaced after %s", (time.Since(start)).Round(time.Second))
		v.sh(t, "rm /run/systemd/system/perch.service.d/test-watchdog.conf && systemctl daemon-reload && systemctl restart perch")
		v.waitHealth(t, 2*time.Minute)
	})

	// History to find again after the upgrade.
	if code, body, err := httpDo("POST", v.url("/chat"), testToken, map[string]string{"message": "remember the number 42", "session_key": "upgrade-check"}); code != 200 {
		t.Fatalf("/chat before the upgrade: %d %s %v", code, body, err)
	}

	t.Run("a second boot does not redo first-boot work", func(t *testing.T) {
		before := v.sh(t, "sha256sum /etc/perch/config.json /etc/ssh/ssh_host_ed25519_key.pub /etc/machine-id /var/lib/perch-firstboot/state.json")
		if mid := v.sh(t, "cat /etc/machine-id"); mid == "uninitialized" {
			t.Error("machine-id still uninitialized after the first boot")
		}
		v.sshAs("root", key, "systemctl reboot")
		if err := v.waitExit(3 * time.Minute); err != nil {
			t.Fatalf("the guest did not go down for its reboot: %v\n%s", err, tail(v.console(), 40))
		}
		// The later checks and the cleanups follow v to the new QEMU.
		v = startVM(top, "qemu-system-x86_64", qemuArgs, 30*time.Minute)
		v.key, v.label = key, "second-boot"
		took := v.waitHealth(t, 15*time.Minute)
		record(t, "amd64 second boot (cold start of QEMU on the same card): /health after %s", took.Round(time.Second))
		waitFor(t, "SSH", 3*time.Minute, func() error { _, err := v.sshAs("root", key, "true"); return err })
		if after := v.sh(t, "sha256sum /etc/perch/config.json /etc/ssh/ssh_host_ed25519_key.pub /etc/machine-id /var/lib/perch-firstboot/state.json"); after != before {
			t.Errorf("first-boot files changed on the second boot:\n%s\n---\n%s", before, after)
		}
		if out := v.sh(t, "journalctl -b -u perch-firstboot --no-pager -o cat"); !strings.Contains(out, "nothing to do") {
			t.Errorf("perch-firstboot on the second boot:\n%s", out)
		}
		if out := v.sh(t, "systemctl show -p ConditionResult --value perch-growroot"); out != "no" {
			t.Errorf("growroot ran again (ConditionResult=%s)", out)
		}
	})

	t.Run("apt upgrade from a newer repository keeps config and history", func(t *testing.T) {
		publish(t, repo, debNext)
		cfgBefore := v.sh(t, "sha256sum /etc/perch/config.json")
		apt := "-o Dir::Etc::SourceList=/etc/apt/sources.list.d/perch.sources -o Dir::Etc::SourceParts=- -o APT::Get::List-Cleanup=0"
		start := time.Now()
		out := v.shTimeout(t, 15*time.Minute, "apt-get "+apt+" update -q && DEBIAN_FRONTEND=noninteractive apt-get "+apt+" -y -q -o Dpkg::Use-Pty=0 upgrade 2>&1")
		record(t, "apt-get update + upgrade of perch on the board: %s", time.Since(start).Round(time.Second))
		if !strings.Contains(out, "perch") {
			t.Errorf("apt-get upgrade did not upgrade perch:\n%s", tail(out, 20))
		}
		want := debVersion(t, debNext)
		if got := v.sh(t, "dpkg-query -W -f '${Version}' perch"); got != want {
			t.Errorf("installed %s after the upgrade; want %s", got, want)
		}
		if after := v.sh(t, "sha256sum /etc/perch/config.json"); after != cfgBefore {
			t.Error("the upgrade changed /etc/perch/config.json")
		}
		v.waitHealth(t, 2*time.Minute)
		code, body, err := httpDo("POST", v.url("/chat"), testToken, map[string]string{"message": "what was the number?", "session_key": "upgrade-check"})
		if err != nil || code != 200 {
			t.Fatalf("/chat after the upgrade: %d %s %v", code, body, err)
		}
		reqs := fake.Requests()
		last := reqs[len(reqs)-1].Body
		found := false
		for _, m := range last.Messages {
			if strings.Contains(m.Content, "remember the number 42") {
				found = true
			}
		}
		if !found {
			t.Error("the session's history did not survive the upgrade")
		}
		var st map[string]any
		_, body, _ = httpDo("GET", v.url("/admin/status"), testToken, nil)
		json.Unmarshal(body, &st)
		if st["version"] != want {
			t.Errorf("the running gateway reports version %v; want %s (restarted by the upgrade)", st["version"], want)
		}
	})

	t.Run("power off, then the card's boot partition holds no secrets", func(t *testing.T) {
		v.sshAs("root", key, "systemctl poweroff")
		if err := v.waitExit(3 * time.Minute); err != nil {
			t.Fatal(err)
		}
		names := strings.Join(fatList(t, disk, bootPart.Start), " ")
		for _, gone := range []string{"perch-setup.json", "user-data", "network-config"} {
			for _, n := range strings.Fields(names) {
				if n == gone {
					t.Errorf("%s is on the card after first boot: %s", gone, names)
				}
			}
		}
	})
}

// debVersion reads a .deb's version.
func debVersion(t *testing.T, deb string) string {
	t.Helper()
	return strings.TrimSpace(runCmd(t, time.Minute, "dpkg-deb", "-f", deb, "Version"))
}

// treeWasCached reads build.sh's log.
func treeWasCached(out string) bool {
	b, _ := os.ReadFile(filepath.Join(out, "build.log"))
	return strings.Contains(string(b), "Debian tree from the cache")
}
