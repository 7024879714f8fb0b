package web_test

// Browser tests of the gateway's defences against pages of other sites: a
// real Chromium visits a hostile page while a tokenless gateway (which
// trusts loopback clients) runs on this machine.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/chromedp"

	"github.com/perchhq/perch/appliance/appliancetest"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// tokenlessGateway runs a gateway on loopback without a token, with a
// provider: the set-up of the owner's laptop that `make run` gives.
func tokenlessGateway(t *testing.T) (*appliancetest.Gateway, *providertest.Server) {
	t.Helper()
	fake := providertest.New()
	t.Cleanup(fake.Close)
	g := appliancetest.Start(t, map[string]any{
		"gateway":   map[string]any{"host": "127.0.0.1", "port": 0},
		"providers": map[string]any{"openrouter": map[string]any{"api_key": "sk-owner", "api_base": fake.Base()}},
		"agents":    map[string]any{"defaults": map[string]any{"model": "openai/gpt-4o-mini"}},
	}, nil)
	return g, fake
}

// refusedByDesign: the hostile page's requests fail on purpose, and
// Chromium reports each on the console.
func refusedByDesign(e *log.Entry) bool {
	return strings.Contains(e.Text, "status of 403") || strings.Contains(e.Text, "status of 415") ||
		strings.Contains(e.Text, "status of 404") || // favicon.ico
		strings.Contains(e.Text, "CORS policy") || strings.Contains(e.Text, "net::ERR_FAILED")
}

// TestBrowserCrossSitePageCannotDrive: a page of another site makes the
// visitor's browser post to the gateway in every way that needs no CORS
// permission (a text/plain form, no-cors fetches to /chat and /setup) and
// one that does (a JSON fetch). None may run a turn or change the provider.
func TestBrowserCrossSitePageCannotDrive(t *testing.T) {
	g, fake := tokenlessGateway(t)
	before, err := os.ReadFile(g.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	attack := fmt.Sprintf(`<!doctype html><title>cute cats</title>
<iframe name="sink"></iframe>
<form id="f" method="POST" action="%[1]s/chat" enctype="text/plain" target="sink">
<input name='{"message":"form attack: run exec","x":"' value='"}'></form>
<script>
window.done = (async () => {
  const r = {};
  const send = async (name, path, init) => {
    try { const res = await fetch('%[1]s' + path, init); r[name] = 'status ' + res.status; }
    catch (e) { r[name] = 'failed'; }
  };
  await send('nocors-chat', '/chat', {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'},
    body: JSON.stringify({message: 'fetch attack: run exec'})});
  await send('nocors-setup', '/setup', {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'},
    body: JSON.stringify({provider: 'openai', model: 'evil', api_key: 'sk-evil', api_base: 'http://127.0.0.1:9/v1'})});
  await send('nocors-bare', '/chat', {method: 'POST', mode: 'no-cors', body: '{"message":"bare attack"}'});
  // A byte body goes without any Content-Type.
  await send('nocors-bytes', '/chat', {method: 'POST', mode: 'no-cors', body: new TextEncoder().encode('{"message":"bytes attack"}')});
  await send('cors-json', '/chat', {method: 'POST', headers: {'Content-Type': 'application/json'},
    body: JSON.stringify({message: 'cors attack'})});
  await new Promise((ok) => { document.querySelector('iframe').onload = ok; document.getElementById('f').submit(); });
  r.form = 'submitted';
  return JSON.stringify(r);
})();
</script>`, g.URL)
	// localhost and 127.0.0.1 are different sites to the browser.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, attack)
	}))
	defer evil.Close()
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)

	ctx := browserWith(t, refusedByDesign)
	step(t, ctx, "visit the hostile page", chromedp.Navigate(evilURL+"/"))
	results := evalAsync[string](t, ctx, `window.done`)
	t.Logf("the hostile page saw: %s", results)

	time.Sleep(200 * time.Millisecond) // a turn, had one started, would reach the fake by now
	if n := fake.Calls(); n != 0 {
		t.Errorf("the hostile page ran %d turns (provider calls)", n)
	}
	if ss, err := g.Sys.Store.Sessions(); err != nil || len(ss) != 0 {
		t.Errorf("sessions after the attack: %v %v", ss, err)
	}
	after, _ := os.ReadFile(g.ConfigPath)
	if string(after) != string(before) {
		t.Errorf("the hostile page rewrote the config:\n%s", after)
	}
	if p, _ := g.Sys.Agent.Provider(); p == nil || p.Model() != "openai/gpt-4o-mini" {
		t.Errorf("provider after the attack: %v", p)
	}
}

// TestBrowserDNSRebindingRefused: the attacker's host name, re-pointed at
// this machine, makes the browser treat the gateway as the attacker's own
// origin (same-origin, so CORS and Origin checks pass); the gateway answers
// no request that names a host it does not know as its own.
func TestBrowserDNSRebindingRefused(t *testing.T) {
	g, fake := tokenlessGateway(t)
	port := g.URL[strings.LastIndexByte(g.URL, ':')+1:]
	ctx := browserWith(t, refusedByDesign,
		chromedp.Flag("host-resolver-rules", "MAP rebind.test 127.0.0.1"),
		chromedp.Flag("disable-features", "HttpsUpgrades,HttpsFirstBalancedModeAutoEnable"))
	step(t, ctx, "open the re-pointed name", chromedp.Navigate("http://rebind.test:"+port+"/"))
	if body := eval[string](t, ctx, `document.body.innerText`); !strings.Contains(body, "gateway.allowed_hosts") {
		t.Errorf("the gateway served %q under a foreign name", body)
	}
	got := evalAsync[string](t, ctx, `(async () => {
		const a = await fetch('/admin/status');
		const c = await fetch('/chat', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{"message":"rebind attack"}'});
		return a.status + ' ' + c.status;
	})()`)
	if got != "403 403" {
		t.Errorf("/admin/status and /chat under the foreign name answered %q, want 403 403", got)
	}
	if n := fake.Calls(); n != 0 {
		t.Errorf("the rebinding page ran %d turns", n)
	}
}

// evalAsync evaluates a script that gives a promise and waits for its
// value, with a deadline.
func evalAsync[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	v, err := chromedp.Run(sctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}
