package appliance

import (
	"context"
	"testing"

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
