package firstboot

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/config"
)

func TestSetupCodeIsTheLatest(t *testing.T) {
	log := "level=INFO msg=\"first-run setup\" setup_code=1111-2222\nother\nlevel=INFO msg=\"first-run setup\" setup_code=3333-4444\n"
	if got := SetupCode(log); got != "3333-4444" {
		t.Errorf("SetupCode = %q", got)
	}
	if got := SetupCode("perch gateway ready"); got != "" {
		t.Errorf("SetupCode = %q; want none", got)
	}
}

func TestBannerText(t *testing.T) {
	b := Banner{Hostname: "perch-kitchen", Port: 8080, Addrs: []string{"192.168.1.20", "fd00::20"}, SetupCode: "1234-5678", Token: `tok\en`}
	text := b.Text()
	for _, want := range []string{
		"Perch is running: http://perch-kitchen.local:8080/\n",
		"http://192.168.1.20:8080/\n", "http://[fd00::20]:8080/\n",
		"Setup code: 1234-5678", `API token:  tok\en`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	issue := b.Issue()
	// agetty fills in \n (host name) and \4 (IPv4) itself; our own text
	// has its backslashes doubled so agetty prints them as they are.
	if !strings.HasPrefix(issue, `Perch: http://\n.local:8080/  http://\4:8080/`) || !strings.Contains(issue, `tok\\en`) {
		t.Errorf("issue:\n%s", issue)
	}
	if strings.Contains((Banner{Hostname: "x", Port: 8080}).Text(), "API token") {
		t.Error("a token line without a token")
	}
	p := Banner{Hostname: "x", Port: 8080, Problem: "setup: perch-setup.json: \"wifi.ssid\" must be 1 to 32 bytes"}.Text()
	if !strings.Contains(p, "NOT applied") || !strings.Contains(p, "wifi.ssid") {
		t.Errorf("problem not shown:\n%s", p)
	}
}

// TestConsoleCommand runs `perch firstboot --console` against a root with a
// config and state made by first boot, with journalctl and agetty standing
// in for systemd's (a journal with the gateway's setup-code line).
func TestConsoleCommand(t *testing.T) {
	root := t.TempDir()
	bin := t.TempDir()
	script := "#!/bin/sh\necho 'time=x level=INFO msg=\"first-run setup\" setup_code=4321-8765'\necho 'time=x level=INFO msg=\"perch gateway ready\"'\n"
	if err := os.WriteFile(filepath.Join(bin, "journalctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "agetty"), []byte("#!/bin/sh\necho \"$@\" > \""+filepath.Join(bin, "agetty.args")+"\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Setenv("INVOCATION_ID", "0123456789abcdef0123456789abcdef")
	cfg := config.Fresh(filepath.Join(root, DefaultConfig))
	if err := os.MkdirAll(filepath.Dir(cfg.Path()), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Save(); err != nil {
		t.Fatal(err)
	}
	if err := SaveState(root, &State{TokenGenerated: true}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"dev/ttyS0", "dev/tty0"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "sys/class/tty/console"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sys/class/tty/console/active"), []byte("tty0 ttyS0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if err := CLI(context.Background(), []string{"--console", "--root", root}, &stderr, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	token := cfg.Gateway.APIToken.Value()
	for _, tty := range []string{"dev/ttyS0", "dev/tty0"} {
		out := readFile(t, filepath.Join(root, tty))
		if !strings.Contains(out, "Setup code: 4321-8765") || !strings.Contains(out, "API token:  "+token) || !strings.Contains(out, "\r\n") {
			t.Errorf("%s got:\n%q", tty, out)
		}
	}
	issue := filepath.Join(root, "run/perch-firstboot/console.issue")
	if s := readFile(t, issue); !strings.Contains(s, "4321-8765") {
		t.Errorf("issue:\n%s", s)
	}
	if fi, _ := os.Stat(issue); fi.Mode().Perm() != 0o600 {
		t.Errorf("issue file mode %v; it holds the token: want 0600", fi.Mode().Perm())
	}
	if args := readFile(t, filepath.Join(bin, "agetty.args")); strings.TrimSpace(args) != "--reload" {
		t.Errorf("agetty called with %q", args)
	}
}
