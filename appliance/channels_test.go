package appliance_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/gateway/gatewaytest"

	"github.com/perchhq/perch/appliance/appliancetest"
	"github.com/perchhq/perch/appliance/channel/line/linetest"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

const apiToken = "0123456789abcdef0123456789abcdef"

func get(t *testing.T, url, token string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	json.Unmarshal(data, &out)
	return resp.StatusCode, out
}

// With webhook_port equal to gateway.port, LINE's webhook is one more
// route of the gateway: reachable without the API token (its signature
// guards it), while the gateway's own routes still need the token.
func TestLINEWebhookOnTheGatewayListener(t *testing.T) {
	prov := providertest.New()
	defer prov.Close()
	fake := linetest.New("line-token", "line-secret")
	defer fake.Close()
	port := gatewaytest.FreePort(t)
	g := appliancetest.Start(t, map[string]any{
		"gateway":   map[string]any{"host": "127.0.0.1", "port": port, "api_token": apiToken},
		"providers": map[string]any{"openai": map[string]any{"api_key": "k", "api_base": prov.Base()}},
		"agents":    map[string]any{"defaults": map[string]any{"model": "gpt-4o-mini"}},
		"channels": map[string]any{"line": map[string]any{
			"enabled": true, "channel_secret": "line-secret", "channel_access_token": "line-token",
			"webhook_host": "127.0.0.1", "webhook_port": port, "api_base": fake.Base(), "data_api_base": fake.Base(),
		}},
	}, nil)
	hook := g.URL + "/webhook/line"
	body := linetest.Body(fake.NewEvent(linetest.Event{UserID: "U11111111111111111111111111111111", Text: "hello"}))
	if code, _ := linetest.Post(hook, body, ""); code != http.StatusForbidden {
		t.Errorf("unsigned webhook: %d, want 403", code)
	}
	if code, _ := linetest.Post(hook, body, linetest.Signature("line-secret", body)); code != http.StatusOK {
		t.Fatalf("signed webhook without the API token: %d, want 200", code)
	}
	if sent := fake.WaitSent(1, 10*time.Second); len(sent) != 1 || sent[0].Text != "echo: hello" || sent[0].API != "reply" {
		t.Fatalf("sent %+v", sent)
	}
	if code, _ := get(t, g.URL+"/admin/status", ""); code != http.StatusUnauthorized {
		t.Errorf("/admin/status without the token: %d; the gateway's routes must stay protected", code)
	}
	code, st := get(t, g.URL+"/admin/status", apiToken)
	line, _ := st["channels"].(map[string]any)["line"].(map[string]any)
	if code != 200 || line["connected"] != true || line["messages_in"] != float64(1) {
		t.Errorf("/admin/status channels: %v", st["channels"])
	}
	if extra, _ := line["extra"].(map[string]any); extra["pushes_this_month"] != float64(0) {
		t.Errorf("pushes_this_month missing: %v", line)
	}
	_, ready := get(t, g.URL+"/ready", apiToken)
	check, _ := ready["checks"].(map[string]any)["channel:line"].(map[string]any)
	if check["status"] != "ok" || !strings.Contains(check["message"].(string), "Webhook URL") {
		t.Errorf("/ready channel:line = %v", check)
	}
}

// TestLINEWebhookThatIsNotServedSaysWhy: LINE's console reports only that
// the webhook failed, so the 404 of a webhook nothing serves names the
// setting that keeps it off.
func TestLINEWebhookThatIsNotServedSaysWhy(t *testing.T) {
	for _, tt := range []struct {
		name string
		line func(*config.LINEChannel)
		want string
	}{
		{"disabled", func(*config.LINEChannel) {}, "no LINE webhook here: channels.line.enabled is false"},
		{"its own port", func(l *config.LINEChannel) { l.Enabled, l.WebhookPort = true, 12345 }, "channels.line.webhook_port is 12345, so LINE's webhook listens on port 12345"},
		{"no credentials", func(l *config.LINEChannel) { l.Enabled, l.WebhookPort = true, 0 }, "the LINE channel did not start (is channel_secret or channel_access_token empty?"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := appliancetest.Start(t, nil, func(c *config.Config) { tt.line(&c.Channels.LINE) })
			resp, err := http.Post(g.URL+"/webhook/line", "application/json", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 404 || !strings.Contains(string(body), tt.want) {
				t.Errorf("POST /webhook/line = %d %s, want 404 saying %q", resp.StatusCode, body, tt.want)
			}
		})
	}
	g := appliancetest.Start(t, nil, nil)
	resp, err := http.Get(g.URL + "/webhook/slack")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(body), "no such path /webhook/slack") {
		t.Errorf("GET /webhook/slack = %d %s", resp.StatusCode, body)
	}
}
