//go:build imagetest

package imagetest

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/provider/providertest"
)

// The boards the Raspberry Pi image is for, by device tree.
var piBoards = map[string]string{
	"Raspberry Pi 3 Model B":  "bcm2837-rpi-3-b.dtb",
	"Raspberry Pi 3 Model B+": "bcm2837-rpi-3-b-plus.dtb",
	"Raspberry Pi 4 Model B":  "bcm2711-rpi-4-b.dtb",
	"Raspberry Pi 400":        "bcm2711-rpi-400.dtb",
	"Raspberry Pi Zero 2 W":   "bcm2837-rpi-zero-2-w.dtb",
}

// TestRpiArm64Image builds the Raspberry Pi image with nothing on its boot
// partition but what it ships, inspects the firmware's files and the root,
// then boots the same card under qemu-system-aarch64 -M virt with the
// kernel and initramfs from its boot partition: the path of a person who
// flashes it with dd and sets it up from the page with the setup code the
// console shows.
func TestRpiArm64Image(t *testing.T) {
	// The two images build and boot side by side: on a 2-core machine one
	// emulated CPU each, and the arm64 tree's emulated build overlaps the
	// amd64 boots instead of adding to them.
	t.Parallel()
	deb := need(t, "PERCH_IMAGE_DEB_ARM64")
	work := t.TempDir()
	img, took := buildImage(t, filepath.Join(work, "out"), "--target", "rpi-arm64", "--deb", deb)
	record(t, "rpi-arm64 image build (Debian tree cached: %v): %s", treeWasCached(filepath.Join(work, "out")), took.Round(time.Second))

	t.Run("two builds list the same packages", func(t *testing.T) {
		checkSamePackages(t, "rpi-arm64", filepath.Join(work, "out", "image.manifest"))
	})
	parts := partitions(t, img)
	boot := parts[0]
	var kernel, initrd string
	t.Run("firmware partition", func(t *testing.T) {
		if boot.Type != "c" || !boot.Bootable || boot.Start%(4<<20) != 0 {
			t.Errorf("boot partition %+v; want FAT32 LBA (type c), bootable, 4 MiB aligned", boot)
		}
		names := fatList(t, img, boot.Start)
		have := map[string]bool{}
		for _, n := range names {
			have[n] = true
		}
		for _, f := range []string{"bootcode.bin", "start.elf", "fixup.dat", "start4.elf", "fixup4.dat", "config.txt", "cmdline.txt", "user-data", "perch-setup.example.json"} {
			if !have[f] {
				t.Errorf("boot partition lacks %s", f)
			}
		}
		for board, dtb := range piBoards {
			if !have[dtb] {
				t.Errorf("no device tree for the %s (%s)", board, dtb)
			}
		}
		if have["perch-setup.json"] || have["network-config"] {
			t.Error("the image ships settings files")
		}
		for _, n := range names {
			switch {
			case strings.HasPrefix(n, "vmlinuz-"):
				kernel = n
			case strings.HasPrefix(n, "initrd.img-"):
				initrd = n
			}
		}
		cfg, _ := fatFile(t, img, boot.Start, "/config.txt")
		for _, want := range []string{"arm_64bit=1", "kernel=" + kernel, "initramfs " + initrd, "dtparam=i2c_arm=on", "dtparam=spi=on", "dtoverlay=perch-spi0", "enable_uart=1"} {
			if !strings.Contains(cfg, want) {
				t.Errorf("config.txt lacks %q:\n%s", want, cfg)
			}
		}
		cmdline, _ := fatFile(t, img, boot.Start, "/cmdline.txt")
		if !regexp.MustCompile(`console=ttyS1,115200 console=tty0 root=LABEL=perch-root rw .*audit=0`).MatchString(cmdline) {
			t.Errorf("cmdline.txt: %q", cmdline)
		}
		ud, _ := fatFile(t, img, boot.Start, "/user-data")
		if !strings.HasPrefix(ud, "#cloud-config\n") {
			t.Errorf("the placeholder user-data (which makes Imager choose cloud-init) is %q", ud)
		}
		// The SPI overlay applies to each board's device tree as the
		// firmware applies it, and turns SPI0 on with two spidevs.
		dir := t.TempDir()
		dtbo := filepath.Join(dir, "perch-spi0.dtbo")
		runCmd(t, time.Minute, "mcopy", "-n", "-i", fmt.Sprintf("%s@@%d", img, boot.Start), "::/overlays/perch-spi0.dtbo", dtbo)
		for board, dtb := range piBoards {
			in, out := filepath.Join(dir, dtb), filepath.Join(dir, "with-spi-"+dtb)
			runCmd(t, time.Minute, "mcopy", "-n", "-i", fmt.Sprintf("%s@@%d", img, boot.Start), "::/"+dtb, in)
			if o, err := tryCmd(time.Minute, "fdtoverlay", "-i", in, "-o", out, dtbo); err != nil {
				t.Errorf("%s: perch-spi0 does not apply: %v %s", board, err, o)
				continue
			}
			dts := runCmd(t, time.Minute, "dtc", "-q", "-I", "dtb", "-O", "dts", out)
			spi := dts[strings.Index(dts, "spi@7e204000 {"):]
			spi = spi[:strings.Index(spi, "\n\t\t};")]
			if !strings.Contains(spi, `status = "okay"`) || !strings.Contains(spi, "spidev@0") || !strings.Contains(spi, "spidev@1") {
				t.Errorf("%s: SPI0 after the overlay:\n%s", board, spi)
			}
			i2c := dts[strings.Index(dts, "i2c@7e804000 {"):]
			if !strings.Contains(i2c[:strings.Index(i2c, "};")], `status = "okay"`) {
				t.Errorf("%s: I2C1 (header pins 3 and 5) is off in the device tree", board)
			}
		}
	})
	root := inspectRoot(t, img)
	t.Run("root for the Raspberry Pi", func(t *testing.T) {
		if !strings.Contains(debugfs(t, root, "cat /etc/default/raspi-firmware"), `ROOTPART="LABEL=perch-root"`) {
			t.Error("raspi-firmware does not boot by label: a kernel upgrade would rewrite cmdline.txt with mmcblk0p2")
		}
		if exists(root, "/etc/apt/sources.list.d/perch.sources") {
			t.Error("perch.sources without --apt-url")
		}
		if !exists(root, "/usr/lib/firmware/brcm") {
			t.Error("no Broadcom Wi-Fi firmware (firmware-brcm80211)")
		}
	})
	if kernel == "" || initrd == "" {
		t.Fatal("no kernel or initramfs on the boot partition")
	}

	// Boot the card under -M virt: the Pi's firmware does not run, the
	// kernel and initramfs are taken from its boot partition.
	dir := t.TempDir()
	for _, f := range []string{kernel, initrd} {
		runCmd(t, time.Minute, "mcopy", "-n", "-i", fmt.Sprintf("%s@@%d", img, boot.Start), "::/"+f, filepath.Join(dir, f))
	}
	disk := filepath.Join(work, "disk.img")
	copyFile(t, img, disk)
	runCmd(t, time.Minute, "truncate", "-s", "3G", disk)
	fake := providertest.New()
	t.Cleanup(fake.Close)
	v := startVM(t, "qemu-system-aarch64", []string{"-M", "virt", "-cpu", "cortex-a72", "-m", "1024", "-smp", "1",
		"-kernel", filepath.Join(dir, kernel), "-initrd", filepath.Join(dir, initrd),
		"-append", "root=LABEL=perch-root rw rootwait net.ifnames=0 audit=0 panic=10 console=ttyAMA0",
		"-drive", "file=" + disk + ",format=raw,if=virtio"}, 30*time.Minute)
	took = v.waitHealth(t, 30*time.Minute)
	record(t, "rpi-arm64 first boot under qemu-system-aarch64 -M virt (TCG): /health after %s", took.Round(time.Second))

	t.Run("no settings file: setup code and token on the console, setup from the page", func(t *testing.T) {
		var code, token string
		waitFor(t, "the console banner", 2*time.Minute, func() error {
			cons := v.console()
			c := regexp.MustCompile(`Setup code: (\d{4}-\d{4})`).FindAllStringSubmatch(cons, -1)
			k := regexp.MustCompile(`API token:  ([0-9a-f]{32})`).FindAllStringSubmatch(cons, -1)
			if c == nil || k == nil {
				return fmt.Errorf("no setup code or token on the console yet")
			}
			code, token = c[len(c)-1][1], k[len(k)-1][1]
			return nil
		})
		if !strings.Contains(v.console(), "Perch is running: http://perch.local:8080/") {
			t.Error("the console does not say where Perch is")
		}
		if st, body, _ := httpDo("GET", v.url("/"), "", nil); st != 200 || !strings.Contains(string(body), "<title>Perch</title>") {
			t.Errorf("GET / %d %.300s; want the page", st, body)
		}
		if st, body, _ := httpDo("GET", v.url("/ready"), "", nil); st != 503 {
			t.Errorf("/ready %d %s; want 503 until a provider is set", st, body)
		}
		port := fake.Listener.Addr().(*net.TCPAddr).Port
		st, body, err := httpDo("POST", v.url("/setup"), "", map[string]string{
			"code": code, "provider": "openai", "model": testModel, "api_key": testAPIKey,
			"api_base": fmt.Sprintf("http://10.0.2.2:%d", port),
		})
		if err != nil || st != 200 {
			t.Fatalf("POST /setup with the console's code: %d %s %v", st, body, err)
		}
		if st, body, _ := httpDo("GET", v.url("/ready"), "", nil); st != 200 {
			t.Errorf("/ready after setup: %d %s", st, body)
		}
		st, body, _ = httpDo("POST", v.url("/chat"), token, map[string]string{"message": "hello pi"})
		var r struct{ Response string }
		json.Unmarshal(body, &r)
		if st != 200 || r.Response != "echo: hello pi" {
			t.Errorf("/chat with the console's token: %d %s", st, body)
		}
	})
}
