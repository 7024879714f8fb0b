//go:build imagetest

package imagetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// top is the repository's root.
var top = func() string {
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "../.."))
}()

// need returns the environment variable name, failing the test without it.
func need(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run the image tests with `make image-test`", name)
	}
	return v
}

// results collects the figures the tests measure; image-test.sh prints them.
var results struct {
	mu    sync.Mutex
	lines []string
}

func record(t *testing.T, format string, a ...any) {
	t.Helper()
	line := fmt.Sprintf(format, a...)
	t.Log("measured: " + line)
	results.mu.Lock()
	results.lines = append(results.lines, line)
	results.mu.Unlock()
	if p := os.Getenv("PERCH_IMAGE_RESULTS"); p != "" {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
}

// runCmd runs a host command, failing the test with its output.
func runCmd(t *testing.T, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := tryCmd(timeout, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(out, 60))
	}
	return out
}

func tryCmd(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePort returns a TCP port free on loopback now.
func freePort(t *testing.T) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	// The kernel may hand the same free port to two calls in a row (the
	// first listener is closed before QEMU binds it): one VM's forwards, or
	// the two VMs running side by side, would then collide and QEMU exit.
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsGiven[port] {
			portsGiven[port] = true
			return port
		}
	}
	t.Fatal("no free loopback port that was not handed out already")
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// waitFor polls fn until it succeeds or timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, fn func() error) time.Duration {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < timeout {
		if err = fn(); err == nil {
			return time.Since(start)
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("%s: not within %v: %v", what, timeout, err)
	return 0
}

// httpDo sends a request with an optional bearer token and JSON body.
func httpDo(method, url, token string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 60 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// startNTP answers SNTP requests on 127.0.0.1:123 with the host's clock: the
// guest's systemd-timesyncd reaches it at 10.0.2.2. The board has no RTC;
// this is the time server of its LAN.
func startNTP(t *testing.T) {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:123")
	if err != nil {
		t.Fatalf("NTP fake: %v (is a time server running on this host?)", err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return // closed by the cleanup
			}
			if n < 48 {
				continue
			}
			now := time.Now()
			resp := make([]byte, 48)
			vn := (buf[0] >> 3) & 7
			resp[0] = vn<<3 | 4                              // leap 0, the client's version, mode 4 (server)
			resp[1] = 2                                      // stratum 2
			resp[2] = buf[2]                                 // poll
			resp[3] = 0xEC                                   // precision 2^-20
			binary.BigEndian.PutUint32(resp[4:], 0x00000100) // root delay ~4 ms
			binary.BigEndian.PutUint32(resp[8:], 0x00000100) // root dispersion
			copy(resp[12:16], []byte{127, 0, 0, 1})          // reference id
			putNTPTime(resp[16:], now.Add(-time.Second))     // reference
			copy(resp[24:32], buf[40:48])                    // originate = client's transmit
			putNTPTime(resp[32:], now)                       // receive
			putNTPTime(resp[40:], time.Now())                // transmit
			pc.WriteTo(resp, addr)
		}
	}()
}

func putNTPTime(b []byte, t time.Time) {
	const epoch = 2208988800 // 1900 to 1970
	sec := uint64(t.Unix() + epoch)
	frac := uint64(t.Nanosecond()) << 32 / 1e9
	binary.BigEndian.PutUint32(b, uint32(sec))
	binary.BigEndian.PutUint32(b[4:], uint32(frac))
}

// vm is one QEMU guest.
type vm struct {
	t        *testing.T
	cmd      *exec.Cmd
	serial   string
	httpPort int
	sshPort  int
	key      string // SSH private key
	label    string // told apart from another QEMU of the same test in kept logs
	exited   chan struct{}
	exitErr  error
}

// startVM starts QEMU with the given arguments plus user networking that
// forwards the guest's 8080 and 22 to free loopback ports, and the serial
// console in a file. The process is killed by its PID when the test ends,
// and after maxLife whatever happens.
func startVM(t *testing.T, qemu string, args []string, maxLife time.Duration) *vm {
	t.Helper()
	v := &vm{t: t, httpPort: freePort(t), sshPort: freePort(t), serial: filepath.Join(t.TempDir(), "serial.log"), exited: make(chan struct{})}
	args = append(args,
		"-netdev", fmt.Sprintf("user,id=n0,hostfwd=tcp:127.0.0.1:%d-:8080,hostfwd=tcp:127.0.0.1:%d-:22", v.httpPort, v.sshPort),
		"-device", "virtio-net-pci,netdev=n0",
		"-device", "virtio-rng-pci",
		"-display", "none", "-monitor", "none",
		"-serial", "file:"+v.serial,
	)
	v.cmd = exec.Command(qemu, args...)
	// Should the test binary die without its cleanups (go test's -timeout
	// panics), the kernel ends QEMU with it; image-test.sh also kills any
	// QEMU still running by the PIDs this test logs.
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	log, err := os.Create(filepath.Join(filepath.Dir(v.serial), "qemu.out"))
	if err != nil {
		t.Fatal(err)
	}
	v.cmd.Stdout, v.cmd.Stderr = log, log
	if err := v.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", qemu, err)
	}
	pid := v.cmd.Process.Pid
	t.Logf("%s started, pid %d, http %d, ssh %d, serial %s", qemu, pid, v.httpPort, v.sshPort, v.serial)
	go func() {
		v.exitErr = v.cmd.Wait()
		log.Close()
		close(v.exited)
	}()
	timer := time.AfterFunc(maxLife, func() {
		t.Logf("QEMU pid %d ran past its %v bound; killing it", pid, maxLife)
		syscall.Kill(pid, syscall.SIGKILL)
	})
	t.Cleanup(func() {
		timer.Stop()
		v.kill()
		if dir := os.Getenv("PERCH_IMAGE_LOGS"); dir != "" {
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+v.labelSuffix()+"-serial.log"), []byte(v.console()), 0o644)
		}
		if t.Failed() {
			t.Logf("serial console (last lines):\n%s", tail(v.console(), 80))
		}
		// -action watchdog=debug: the hardware watchdog fired (the guest
		// would have been reset) without a reset.
		if out, err := os.ReadFile(log.Name()); err == nil {
			if n := strings.Count(string(out), "watchdog: timer fired"); n > 0 {
				record(t, "%s: the emulated hardware watchdog fired %d times (not reset: TCG stalls)", qemu, n)
			}
		}
	})
	return v
}

func (v *vm) labelSuffix() string {
	if v.label == "" {
		return ""
	}
	return "-" + v.label
}

// kill ends QEMU by its PID and waits for it.
func (v *vm) kill() {
	select {
	case <-v.exited:
		return
	default:
	}
	syscall.Kill(v.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-v.exited:
	case <-time.After(30 * time.Second):
		v.t.Errorf("QEMU pid %d did not exit after SIGKILL", v.cmd.Process.Pid)
	}
}

// waitExit waits for the guest to power off.
func (v *vm) waitExit(timeout time.Duration) error {
	select {
	case <-v.exited:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("QEMU still running after %v", timeout)
	}
}

func (v *vm) console() string {
	b, _ := os.ReadFile(v.serial)
	return string(b)
}

func (v *vm) url(path string) string { return fmt.Sprintf("http://127.0.0.1:%d%s", v.httpPort, path) }

// sshAs runs a command in the guest as user.
func (v *vm) sshAs(user, key, command string) (string, error) {
	return v.sshTimeout(90*time.Second, user, key, command)
}

func (v *vm) sshTimeout(timeout time.Duration, user, key, command string) (string, error) {
	for try := 1; ; try++ {
		out, err := tryCmd(timeout, "ssh", "-i", key, "-p", strconv.Itoa(v.sshPort),
			"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
			"-o", "ConnectTimeout=15", "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes",
			user+"@127.0.0.1", command)
		if err == nil || try == 3 || !sshNeverStarted(out) {
			return out, err
		}
		// QEMU's user network on a busy host now and then drops a new
		// connection before sshd's banner; the command never ran, so it
		// is safe to send again.
		time.Sleep(2 * time.Second)
	}
}

// sshNeverStarted reports whether ssh's output is only its own complaint
// about a connection that failed before a session began.
func sshNeverStarted(out string) bool {
	out = strings.TrimSpace(out)
	if strings.Contains(out, "\n") {
		return false
	}
	return strings.HasPrefix(out, "kex_exchange_identification:") ||
		strings.Contains(out, "during banner exchange") ||
		strings.HasPrefix(out, "ssh: connect to host")
}

// sh runs a command as root in the guest and fails the test on error.
func (v *vm) sh(t *testing.T, command string) string {
	t.Helper()
	return v.shTimeout(t, 90*time.Second, command)
}

func (v *vm) shTimeout(t *testing.T, timeout time.Duration, command string) string {
	t.Helper()
	out, err := v.sshTimeout(timeout, "root", v.key, command)
	if err != nil {
		t.Fatalf("guest: %s: %v\n%s", command, err, tail(out, 40))
	}
	return strings.TrimRight(out, "\n")
}

// waitHealth waits for GET /health to answer 200.
func (v *vm) waitHealth(t *testing.T, timeout time.Duration) time.Duration {
	t.Helper()
	return waitFor(t, "GET /health", timeout, func() error {
		select {
		case <-v.exited:
			t.Fatalf("QEMU exited: %v\n%s", v.exitErr, tail(v.console(), 60))
		default:
		}
		if c := v.console(); strings.Contains(c, "Kernel panic") {
			t.Fatalf("the guest's kernel panicked:\n%s", tail(c, 60))
		}
		code, _, err := httpDo("GET", v.url("/health"), "", nil)
		if err == nil && code != 200 {
			err = fmt.Errorf("status %d", code)
		}
		return err
	})
}

// partitions reads an image's MBR partition table with sfdisk.
type partition struct {
	Start, Size int64
	Type        string
	Bootable    bool
}

func partitions(t *testing.T, img string) []partition {
	t.Helper()
	var pt struct {
		PartitionTable struct {
			Label      string `json:"label"`
			ID         string `json:"id"`
			Partitions []struct {
				Start    int64  `json:"start"`
				Size     int64  `json:"size"`
				Type     string `json:"type"`
				Bootable bool   `json:"bootable"`
			} `json:"partitions"`
		} `json:"partitiontable"`
	}
	if err := json.Unmarshal([]byte(runCmd(t, time.Minute, "sfdisk", "--json", img)), &pt); err != nil {
		t.Fatal(err)
	}
	if pt.PartitionTable.Label != "dos" {
		t.Errorf("partition table %q; the Raspberry Pi firmware reads MBR (dos)", pt.PartitionTable.Label)
	}
	var out []partition
	for _, p := range pt.PartitionTable.Partitions {
		out = append(out, partition{Start: p.Start * 512, Size: p.Size * 512, Type: p.Type, Bootable: p.Bootable})
	}
	return out
}

// fatFile reads a file from the FAT partition at offset with mtools.
func fatFile(t *testing.T, img string, off int64, name string) (string, bool) {
	t.Helper()
	out, err := tryCmd(time.Minute, "mtype", "-i", fmt.Sprintf("%s@@%d", img, off), "::"+name)
	if err != nil {
		return "", false
	}
	return out, true
}

// fatList lists the FAT partition's top directory (long names).
func fatList(t *testing.T, img string, off int64) []string {
	t.Helper()
	out := runCmd(t, time.Minute, "mdir", "-b", "-i", fmt.Sprintf("%s@@%d", img, off), "::/")
	var names []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		names = append(names, strings.TrimPrefix(strings.TrimSpace(sc.Text()), "::/"))
	}
	return names
}

// extractPartition copies a partition of img to its own file.
func extractPartition(t *testing.T, img string, p partition) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "part.img")
	runCmd(t, 5*time.Minute, "dd", "if="+img, "of="+out, "bs=1M", fmt.Sprintf("skip=%d", p.Start>>20),
		fmt.Sprintf("count=%d", p.Size>>20), "conv=sparse", "status=none")
	return out
}

// debugfs runs one debugfs request on an ext4 file; missing files give "".
func debugfs(t *testing.T, fs, request string) string {
	t.Helper()
	out, _ := tryCmd(time.Minute, "debugfs", "-R", request, fs)
	// debugfs prints its banner first.
	if i := strings.Index(out, "\n"); i >= 0 && strings.HasPrefix(out, "debugfs ") {
		out = out[i+1:]
	}
	return out
}

func exists(fs, path string) bool {
	out, _ := tryCmd(time.Minute, "debugfs", "-R", "stat "+path, fs)
	return !strings.Contains(out, "File not found")
}

// sshKey makes an SSH key pair in dir and returns the private key's path
// and the public key line.
func sshKey(t *testing.T, dir, name string) (string, string) {
	t.Helper()
	path := filepath.Join(dir, name)
	runCmd(t, time.Minute, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name+"@imagetest", "-f", path)
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return path, strings.TrimSpace(string(pub))
}

// publish adds .debs to the apt repository at dir with the repository
// tool (`make apt-repo`'s script, or the test fallback) and returns the
// public key file the image is to trust.
func publish(t *testing.T, dir string, debs ...string) string {
	t.Helper()
	tool := need(t, "PERCH_IMAGE_REPO_TOOL")
	runCmd(t, 5*time.Minute, tool, append([]string{dir}, debs...)...)
	key := filepath.Join(dir, "perch-archive-keyring.gpg")
	if _, err := os.Stat(key); err != nil {
		t.Fatalf("the repository tool made no %s: %v", key, err)
	}
	return key
}

// buildImage runs image/build.sh and returns the uncompressed image.
func buildImage(t *testing.T, out string, args ...string) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	logPath := filepath.Join(out, "build.log")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	cmdOut, err := tryCmd(40*time.Minute, filepath.Join(top, "image/build.sh"), append(args, "--out", out, "--no-xz", "--name", "image")...)
	os.WriteFile(logPath, []byte(cmdOut), 0o644)
	if err != nil {
		t.Fatalf("image/build.sh %s: %v\n%s", strings.Join(args, " "), err, tail(cmdOut, 40))
	}
	for _, l := range strings.Split(cmdOut, "\n") {
		if strings.HasPrefix(l, "==> image") {
			t.Log(l)
		}
	}
	return filepath.Join(out, "image.img"), time.Since(start)
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	runCmd(t, 5*time.Minute, "cp", "--sparse=always", src, dst)
}

// checkSamePackages resolves the target's package list again from the
// archive (resolve.sh, apt in a private state) and compares it with the
// packages in the image's manifest: the same inputs name the same
// packages. Versions may differ only if the archive moved since the cached
// tree was built; that is reported, not failed.
func checkSamePackages(t *testing.T, target, manifest string) {
	t.Helper()
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	inImage := map[string]string{}
	_, list, _ := strings.Cut(string(data), "\npackages")
	for _, l := range strings.Split(list, "\n")[1:] {
		if f := strings.Fields(l); len(f) >= 2 && f[0] != "perch" {
			inImage[f[0]] = f[1]
		}
	}
	resolved := map[string]string{}
	for _, l := range strings.Split(runCmd(t, 10*time.Minute, filepath.Join(top, "image/imagetest/resolve.sh"), target), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			resolved[f[0]] = f[1]
		}
	}
	moved := 0
	for name, v := range inImage {
		rv, ok := resolved[name]
		switch {
		case !ok:
			t.Errorf("%s is in the image but a new resolution of the same list does not install it", name)
		case rv != v:
			moved++
		}
	}
	for name := range resolved {
		if _, ok := inImage[name]; !ok {
			t.Errorf("a new resolution of the same list installs %s, which the image lacks", name)
		}
	}
	record(t, "%s: %d Debian packages; a second resolution of the same list names the same packages (%d at a newer version since the cached tree was built)", target, len(inImage), moved)
}
