package appliancetest

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/perchhq/perch/appliance/config"
)

func TestStartServesAndLogsTheSetupCode(t *testing.T) {
	g := Start(t, map[string]any{"gateway": map[string]any{"host": "127.0.0.1", "port": 0}}, nil)
	resp, err := http.Get(g.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/health = %d", resp.StatusCode)
	}
	code := g.SetupCode(t)
	if w := WrongCode(code); w == code || !regexp.MustCompile(`^\d{4}-\d{4}$`).MatchString(w) {
		t.Errorf("WrongCode(%q) = %q", code, w)
	}
}

func TestStartWithoutFileAppliesAdjust(t *testing.T) {
	g := Start(t, nil, func(c *config.Config) { c.Gateway.Port = 0; c.Gateway.APIToken = "tok" })
	if g.Sys.Cfg.Gateway.APIToken.Value() != "tok" || !g.Sys.Cfg.Absent() {
		t.Errorf("adjust not applied or a config file appeared")
	}
	resp, err := http.Get(g.URL + "/admin/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/admin/status without the token = %d, want 401", resp.StatusCode)
	}
}
