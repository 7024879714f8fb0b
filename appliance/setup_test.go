package appliance_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/appliancetest"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

const setupToken = "tok-SETUP-0123456789"

type setupGateway struct{ *appliancetest.Gateway }

// startFromFile runs a gateway from the config file cfg describes (nil: no
// file; the run then gets port 0 and a token in memory only).
func startFromFile(t *testing.T, cfg map[string]any) setupGateway {
	t.Helper()
	var adjust func(*config.Config)
	if cfg == nil {
		adjust = func(c *config.Config) { c.Gateway.Port, c.Gateway.APIToken = 0, setupToken }
	}
	return setupGateway{appliancetest.Start(t, cfg, adjust)}
}

func (g setupGateway) configured() bool {
	p, _ := g.Sys.Agent.Provider()
	return p != nil
}

// baseConfig is a gateway with a token, a sensor and an exec timeout (so a
// test can see them survive the rewrite) and no provider.
func baseConfig() map[string]any {
	return map[string]any{
		"gateway": map[string]any{"host": "127.0.0.1", "port": 0, "api_token": setupToken},
		"tools":   map[string]any{"exec": map[string]any{"timeout_seconds": 42}},
		"sensors": []any{map[string]any{"name": "room", "type": "bme280", "bus": "1", "address": 118}},
	}
}

func (g setupGateway) do(t *testing.T, method, path, token string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, g.URL+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After")
	}
	return resp.StatusCode, string(out)
}

func setupBody(code, key, base string) map[string]any {
	return map[string]any{"code": code, "provider": "openrouter", "model": "openai/gpt-4o-mini", "api_key": key, "api_base": base}
}

func TestSetupCodeOnlyWithoutProvider(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	cfg := baseConfig()
	cfg["providers"] = map[string]any{"openrouter": map[string]any{"api_key": "sk-start", "api_base": fake.Base()}}
	cfg["agents"] = map[string]any{"defaults": map[string]any{"model": "openai/gpt-4o-mini"}}
	g := startFromFile(t, cfg)
	if strings.Contains(g.Log.String(), "setup_code") {
		t.Fatalf("a configured gateway issued a setup code:\n%s", g.Log)
	}
	// Configured: /setup is guarded like /admin/* and needs no code.
	if st, body := g.do(t, "POST", "/setup", "", setupBody("", "sk-new", fake.Base())); st != http.StatusUnauthorized {
		t.Fatalf("/setup without token on a configured gateway = %d %s, want 401", st, body)
	}
	if st, body := g.do(t, "POST", "/setup", setupToken, setupBody("", "sk-new", fake.Base())); st != 200 {
		t.Fatalf("/setup with the token = %d %s, want 200", st, body)
	}
	if st, body := g.do(t, "POST", "/chat", setupToken, map[string]string{"message": "hi"}); st != 200 {
		t.Fatalf("/chat = %d %s", st, body)
	}
	if got := fake.Requests()[0].Header.Get("Authorization"); got != "Bearer sk-new" {
		t.Errorf("provider got %q, want the key set from the page", got)
	}
}

func TestSetupRefusesWrongOrMissingCode(t *testing.T) {
	g := startFromFile(t, baseConfig())
	code := g.SetupCode(t)
	for _, tc := range []struct{ name, code, want string }{
		{"missing", "", "setup code is missing"},
		{"wrong", appliancetest.WrongCode(code), "wrong setup code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body := g.do(t, "POST", "/setup", setupToken, setupBody(tc.code, "sk-x", "http://127.0.0.1:9/v1"))
			if st != http.StatusForbidden || !strings.Contains(body, tc.want) {
				t.Fatalf("= %d %s, want 403 %q", st, body, tc.want)
			}
		})
	}
	if st, body := g.do(t, "POST", "/chat", setupToken, map[string]string{"message": "hi"}); st != 503 || !strings.Contains(body, "no provider") {
		t.Errorf("/chat after refused setups = %d %s, want 503 no provider", st, body)
	}
}

func TestSetupRateLimitsWrongCodes(t *testing.T) {
	g := startFromFile(t, baseConfig())
	code := g.SetupCode(t)
	wrong := appliancetest.WrongCode(code)
	for i := range 5 {
		if st, body := g.do(t, "POST", "/setup", "", setupBody(wrong, "sk-x", "")); st != 403 {
			t.Fatalf("wrong code %d = %d %s, want 403", i+1, st, body)
		}
	}
	st, body := g.do(t, "POST", "/setup", "", setupBody(code, "sk-x", ""))
	if st != http.StatusTooManyRequests || !strings.Contains(body, "too many wrong setup codes") {
		t.Fatalf("right code after 5 wrong ones = %d %s, want 429", st, body)
	}
	if g.configured() {
		t.Error("a refused setup configured a provider")
	}
}

func TestSetupValidatesInput(t *testing.T) {
	g := startFromFile(t, baseConfig())
	code := g.SetupCode(t)
	for _, tc := range []struct {
		name string
		edit func(b map[string]any)
		want string
	}{
		{"unknown provider", func(b map[string]any) { b["provider"] = "skynet" }, `unknown provider \"skynet\"`},
		{"empty model", func(b map[string]any) { b["model"] = " " }, "the model is empty"},
		{"empty key", func(b map[string]any) { b["api_key"] = "" }, "the API key is empty"},
		{"bad api_base", func(b map[string]any) { b["api_base"] = "ftp://example.com" }, "providers.openrouter.api_base"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setupBody(code, "sk-valid", "")
			tc.edit(b)
			st, body := g.do(t, "POST", "/setup", "", b)
			if st != http.StatusBadRequest || !strings.Contains(body, tc.want) {
				t.Fatalf("= %d %s, want 400 %q", st, body, tc.want)
			}
		})
	}
	if _, err := os.Stat(g.ConfigPath); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(g.ConfigPath)
	if strings.Contains(string(data), "sk-valid") {
		t.Error("a refused setup wrote the config file")
	}
	// A provider that refuses the key, or an address nothing answers at,
	// is said on the form, and nothing is saved: "Connected" followed by a
	// failure at the first message helped nobody.
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":{"message":"Incorrect API key provided"}}`))
	}))
	defer refusing.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	// Said in the form's words: its fields, not config keys.
	for base, want := range map[string]string{
		refusing.URL: "openrouter refused the API key: Incorrect API key provided. Check the API key field",
		gone.URL:     "nothing answers at " + gone.URL + " (connection refused). Check the API base URL field",
	} {
		b := setupBody(code, "sk-wrong", "")
		b["api_base"] = base
		st, body := g.do(t, "POST", "/setup", "", b)
		if st != http.StatusBadRequest || !strings.Contains(body, want) || !strings.Contains(body, "nothing was saved") || strings.Contains(body, "providers.") {
			t.Errorf("setup against %s = %d %s, want 400 %q", base, st, body, want)
		}
	}
	if data, _ := os.ReadFile(g.ConfigPath); strings.Contains(string(data), "sk-wrong") || g.configured() {
		t.Error("a setup the provider refused was saved")
	}
	// Bad input does not spend the code: ollama needs no key.
	ollama := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"object":"list","data":[{"id":"llama3.2"}]}`))
	}))
	defer ollama.Close()
	b := map[string]any{"code": code, "provider": "ollama", "model": "llama3.2", "api_base": ollama.URL + "/v1"}
	if st, body := g.do(t, "POST", "/setup", "", b); st != 200 {
		t.Fatalf("setup after refused input = %d %s, want 200", st, body)
	}
}

// TestSetupSwapsProviderWithoutRestart is the first-run path end to end:
// the code from the log, the key from the page, the provider swapped in, the
// config written so a restart loads the same.
func TestSetupSwapsProviderWithoutRestart(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	g := startFromFile(t, baseConfig())
	code := g.SetupCode(t)
	// An environment override is the environment's: the file must not get it.
	t.Setenv("PERCH_TOOLS_EXEC_TIMEOUT_SECONDS", "99")

	if st, body := g.do(t, "POST", "/chat", setupToken, map[string]string{"message": "hello"}); st != 503 {
		t.Fatalf("/chat before setup = %d %s, want 503", st, body)
	}
	st, body := g.do(t, "POST", "/setup", "", setupBody(code, "sk-or-SECRET-key", fake.Base()))
	if st != 200 {
		t.Fatalf("/setup = %d %s", st, body)
	}
	var res map[string]string
	json.Unmarshal([]byte(body), &res)
	if res["status"] != "ok" || res["provider"] != "openrouter" || res["model"] != "openai/gpt-4o-mini" || res["config"] != g.ConfigPath {
		t.Errorf("/setup answered %v", res)
	}
	if !strings.Contains(g.Log.String(), "provider configured from the web page") {
		t.Errorf("setup not logged:\n%s", g.Log)
	}

	// The running gateway uses the new provider at once.
	st, body = g.do(t, "POST", "/chat", setupToken, map[string]string{"message": "hello"})
	if st != 200 || !strings.Contains(body, "echo: hello") {
		t.Fatalf("/chat after setup = %d %s", st, body)
	}
	if got := fake.Requests()[0].Header.Get("Authorization"); got != "Bearer sk-or-SECRET-key" {
		t.Errorf("provider got Authorization %q", got)
	}
	// The model is a detail: it needs the token.
	if st, body := g.do(t, "GET", "/ready", setupToken, nil); st != 200 || !strings.Contains(body, "openai/gpt-4o-mini") {
		t.Errorf("/ready after setup = %d %s", st, body)
	}

	// The file: 0600, loadable, the user's values, the rest kept.
	fi, err := os.Stat(g.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("config mode %v, want 0600", fi.Mode().Perm())
	}
	re, err := config.Load(config.Options{Path: g.ConfigPath, Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatalf("the written config does not load: %v", err)
	}
	d := re.Agents.Defaults
	if d.Provider != "openrouter" || d.Model != "openai/gpt-4o-mini" ||
		re.Providers.OpenRouter.APIKey.Value() != "sk-or-SECRET-key" || re.Providers.OpenRouter.APIBase != fake.Base() {
		t.Errorf("written config: provider %q model %q base %q", d.Provider, d.Model, re.Providers.OpenRouter.APIBase)
	}
	if re.Gateway.APIToken.Value() != setupToken || len(re.Sensors.Parts) != 1 || re.Sensors.Parts[0].Name != "room" {
		t.Errorf("setup lost settings of the file: token set %v, sensors %v", re.Gateway.APIToken.IsSet(), re.Sensors)
	}
	if re.Tools.Exec.TimeoutSeconds != 42 {
		t.Errorf("tools.exec.timeout_seconds = %d in the file, want the file's 42 (not the environment's 99)", re.Tools.Exec.TimeoutSeconds)
	}

	// The code is spent: the gateway is configured, so /setup wants the token.
	if st, body := g.do(t, "POST", "/setup", "", setupBody(code, "sk-other", fake.Base())); st != http.StatusUnauthorized {
		t.Errorf("second /setup with the spent code = %d %s, want 401", st, body)
	}
}

func TestSetupWithoutConfigFile(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	g := startFromFile(t, nil)
	st, body := g.do(t, "POST", "/setup", "", setupBody(g.SetupCode(t), "sk-nofile", fake.Base()))
	if st != 200 {
		t.Fatalf("/setup = %d %s", st, body)
	}
	re, err := config.Load(config.Options{Path: g.ConfigPath, Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	// Built-in defaults plus the provider; the in-memory port and token of
	// this run are not the file's.
	if re.Gateway.Port != 8080 || re.Gateway.APIToken.IsSet() || re.Providers.OpenRouter.APIKey.Value() != "sk-nofile" {
		t.Errorf("new config: port %d, token %v, key set %v", re.Gateway.Port, re.Gateway.APIToken.IsSet(), re.Providers.OpenRouter.APIKey.IsSet())
	}
	if fi, _ := os.Stat(g.ConfigPath); fi.Mode().Perm() != 0o600 {
		t.Errorf("config mode %v, want 0600", fi.Mode().Perm())
	}
}

// TestSetupRollsBackAConfigThatWouldNotStart: when the saved file would not
// load as a restart loads it (here an environment override the file cannot
// see), the old file comes back and the gateway keeps no provider.
func TestSetupRollsBackAConfigThatWouldNotStart(t *testing.T) {
	g := startFromFile(t, baseConfig())
	before, err := os.ReadFile(g.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PERCH_PROVIDERS_OPENROUTER_MAX_RETRIES", "99")
	st, body := g.do(t, "POST", "/setup", "", setupBody(g.SetupCode(t), "sk-rollback", ""))
	if st != http.StatusBadRequest || !strings.Contains(body, "max_retries") {
		t.Fatalf("/setup = %d %s, want 400 naming max_retries", st, body)
	}
	after, _ := os.ReadFile(g.ConfigPath)
	if !bytes.Equal(before, after) {
		t.Errorf("config file not restored:\n%s", after)
	}
	if g.configured() {
		t.Error("a rolled-back setup configured a provider")
	}
}

// TestSecretsNeverInResponses: no GET response carries the API key, the
// gateway token or the setup code, and no /setup answer the key or code.
func TestSecretsNeverInResponses(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	g := startFromFile(t, baseConfig())
	code := g.SetupCode(t)
	const key = "sk-or-NEVER-SHOWN-4242"
	secrets := []string{key, setupToken, code, strings.ReplaceAll(code, "-", "")}
	check := func(what, body string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(body, s) {
				t.Errorf("%s shows a secret (%q): %s", what, s, body)
			}
		}
	}
	gets := func(stage string) {
		index := ""
		for _, path := range []string{"/", "/health", "/ready", "/setup", "/admin/status", "/admin/service", "/admin/logs", "/admin/cron", "/sensors", "/i2c", "/web/history"} {
			_, body := g.do(t, "GET", path, setupToken, nil)
			check(stage+" GET "+path, body)
			if path == "/" {
				index = body
			}
		}
		for _, m := range regexp.MustCompile(`"(/static/[^"]+)"`).FindAllStringSubmatch(index, -1) {
			_, body := g.do(t, "GET", m[1], "", nil)
			check(stage+" GET "+m[1], body)
		}
	}
	gets("before setup")
	_, body := g.do(t, "POST", "/setup", "", setupBody(appliancetest.WrongCode(code), key, fake.Base()))
	check("refused /setup", body)
	_, body = g.do(t, "POST", "/setup", "", map[string]any{"code": code, "provider": "openrouter", "model": "", "api_key": key})
	check("invalid /setup", body)
	st, body := g.do(t, "POST", "/setup", "", setupBody(code, key, fake.Base()))
	if st != 200 {
		t.Fatalf("/setup = %d %s", st, body)
	}
	// The page that proved the code gets the API token, and only it: the
	// code shows the owner reads the console or journal, where onboard
	// printed the token too.
	var res struct{ Token string }
	if json.Unmarshal([]byte(body), &res); res.Token != setupToken {
		t.Errorf("successful /setup by code = %s, want the API token in it", body)
	}
	secrets = []string{key, code, strings.ReplaceAll(code, "-", "")}
	check("successful /setup", body)
	secrets = []string{key, setupToken, code, strings.ReplaceAll(code, "-", "")}
	gets("after setup")
	// A setup with the token (a provider exists) hands nothing back.
	_, body = g.do(t, "POST", "/setup", setupToken, setupBody("", key, fake.Base()))
	check("setup with the token", body)
	if strings.Contains(g.Log.String(), key) {
		t.Errorf("the log shows the API key:\n%s", g.Log)
	}
}
