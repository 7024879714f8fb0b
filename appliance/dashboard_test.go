package appliance

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/config"

	"github.com/perchhq/perch/appliance/gateway"
)

// TestStatusAgreesWithReady: /admin/status says ready exactly when /ready
// does (it said true beside a 503 before).
func TestStatusAgreesWithReady(t *testing.T) {
	for _, tc := range []struct {
		name     string
		provider string
		ready    bool
	}{
		{"with a provider", "FAKE", true},
		{"without a provider", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := ""
			if tc.provider != "" {
				base = newFake(t).Base()
			}
			sys, url := startSystem(t, base)
			if tc.provider == "" {
				sys.Agent.SetProvider(nil, nil)
			}
			var ready map[string]any
			code := call(t, url, "GET", "/ready", "", &ready)
			var st map[string]any
			call(t, url, "GET", "/admin/status", "", &st)
			if (code == 200) != tc.ready || st["ready"] != tc.ready {
				t.Errorf("/ready = %d, /admin/status ready = %v; want both to say %v", code, st["ready"], tc.ready)
			}
			for _, k := range []string{"disk", "sample_seconds", "pages"} {
				if _, ok := st[k]; !ok {
					t.Errorf("/admin/status lacks %q: %v", k, st)
				}
			}
		})
	}
}

// TestPageStatusIsOneReadiness: the page's status event carries the same
// answer with every check, and the figures of the System panel.
func TestPageStatusIsOneReadiness(t *testing.T) {
	sys, _ := startSystem(t, newFake(t).Base())
	st := sys.pageStatus(context.Background()).(map[string]any)
	if st["ready"] != true || st["model"] != "openai/gpt-4o-mini" {
		t.Errorf("status %v", st)
	}
	names := map[string]bool{}
	for _, c := range st["checks"].([]gateway.CheckResult) {
		names[c.Name] = true
	}
	for _, want := range []string{"store", "provider", "sandbox", "sensors", "sensor history", "devices", "channel:web"} {
		if !names[want] {
			t.Errorf("status lacks the %s check: %v", want, names)
		}
	}
	if d, ok := st["disk"].(Disk); !ok || d.TotalBytes == 0 || d.FreeBytes > d.TotalBytes {
		t.Errorf("disk %+v", st["disk"])
	}
	if ch, chat := sys.noticeTarget(); ch != "web" || chat != "home" {
		t.Errorf("notices with no chat yet go to %s:%s, want the page's default chat", ch, chat)
	}
}

// TestBannerRepeatsTheSetupCode: a person starting Perch in a terminal
// reads the setup code in the start-up banner, the same as in the log.
func TestBannerRepeatsTheSetupCode(t *testing.T) {
	t.Setenv("PERCH_HOME", t.TempDir())
	cfg, err := config.Load(config.Options{Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Gateway.Port = 0
	var logs, banner syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunGateway(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), &banner, nil) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(banner.String(), "setup code") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`setup_code=(\d{4}-\d{4})`).FindStringSubmatch(logs.String())
	if m == nil || !strings.Contains(banner.String(), "enter the setup code "+m[1]+" to connect one") {
		t.Errorf("banner:\n%s\nlog:\n%s", banner.String(), logs.String())
	}
}

// TestSandboxProbeRunsOnceServing: the sandbox's cgroup probe (which logs
// "sandbox ready") is left out of the start, and runs a moment after the
// gateway serves, with nothing asking for a command.
func TestSandboxProbeRunsOnceServing(t *testing.T) {
	t.Setenv("PERCH_HOME", t.TempDir())
	cfg, err := config.Load(config.Options{Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Gateway.Port = 0
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunGateway(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil, nil) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "perch gateway ready") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ready := logs.String()
	for !strings.Contains(logs.String(), "sandbox ready") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ready, "perch gateway ready") || strings.Contains(ready, "sandbox ready") {
		t.Errorf("the probe ran during the start, or the gateway never served:\n%s", ready)
	}
	if !strings.Contains(logs.String(), "sandbox ready") {
		t.Errorf("the probe never ran once the gateway served:\n%s", logs.String())
	}
}

// TestStopDuringStartClosesTheDatabase: the gateway asks to hear stop
// signals before it opens its database, and a stop that comes then (ctx
// cancelled before the database opens) still ends in a clean close: the
// marker starts with "0", so the next start does not check every record as after
// a power cut. When the hook ran only once the gateway served, a SIGTERM
// right after the first answer killed it with the marker left at "1".
func TestStopDuringStartClosesTheDatabase(t *testing.T) {
	home := t.TempDir()
	t.Setenv("PERCH_HOME", home)
	cfg, err := config.Load(config.Options{Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Gateway.Port = 0
	marker := filepath.Join(home, "perch.db.open")
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	var atHook []byte
	hooked := false
	listening := func() {
		hooked = true
		atHook, _ = os.ReadFile(marker)
		cancel()
	}
	if err := RunGateway(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil, listening); err != nil {
		t.Fatal(err)
	}
	if !hooked {
		t.Fatal("RunGateway never called its listening hook")
	}
	if len(atHook) > 0 && atHook[0] == '1' {
		t.Error("the listening hook ran with the database already open")
	}
	if b, err := os.ReadFile(marker); err != nil || len(b) == 0 || b[0] != '0' {
		t.Errorf("marker after a stop during the start: %q, %v; want it to start with \"0\"\n%s", b, err, logs.String())
	}
}
