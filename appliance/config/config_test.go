package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func noEnv(string) (string, bool) { return "", false }

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDefaultsWhenKeysAbsent: an empty object gets every documented default.
func TestDefaultsWhenKeysAbsent(t *testing.T) {
	cfg, err := Load(Options{Path: writeConfig(t, `{}`), Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Agents.Defaults
	checks := []struct {
		name      string
		got, want any
	}{
		{"max_tokens", d.MaxTokens, 8192},
		{"temperature", d.Temperature, 0.7},
		{"max_tool_iterations", d.MaxToolIterations, 20},
		{"max_concurrent_turns", d.MaxConcurrentTurns, 16},
		{"max_queued_turns", d.MaxQueuedTurns, 64},
		{"turn_timeout_seconds", d.TurnTimeoutSeconds, 300},
		{"history_limit", d.HistoryLimit, 200},
		{"session_ttl_days", d.SessionTTLDays, 90},
		{"restrict_to_workspace", d.RestrictToWorkspace, true},
		{"gateway.host", cfg.Gateway.Host, "127.0.0.1"},
		{"gateway.port", cfg.Gateway.Port, 8080},
		{"ollama.api_base", cfg.Providers.Ollama.APIBase, "http://127.0.0.1:11434/v1"},
		{"openai.max_retries", cfg.Providers.OpenAI.MaxRetries, 3},
		{"exec.timeout_seconds", cfg.Tools.Exec.TimeoutSeconds, 60},
		{"exec.user", cfg.Tools.Exec.User, "nobody"},
		{"line.webhook_path", cfg.Channels.LINE.WebhookPath, "/webhook/line"},
		{"line.webhook_host", cfg.Channels.LINE.WebhookHost, "0.0.0.0"},
		{"line.webhook_port", cfg.Channels.LINE.WebhookPort, 8080},
		{"heartbeat.enabled", cfg.Heartbeat.Enabled, false},
		{"fetch.allow_private", cfg.Tools.Web.Fetch.AllowPrivate, false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestExplicitFalseOverridesTrueDefault: defaults are filled before decoding,
// so false in the file must win.
func TestExplicitFalseOverridesTrueDefault(t *testing.T) {
	cfg, err := Load(Options{Path: writeConfig(t, `{"agents":{"defaults":{"restrict_to_workspace":false}}}`), Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Agents.Defaults.RestrictToWorkspace {
		t.Fatal("restrict_to_workspace stayed true")
	}
}

func TestLoadErrorsNameTheKey(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string
	}{
		{"unknown top", `{"gatway":{}}`, []string{`unknown key "gatway"`, `did you mean "gateway"`}},
		{"unknown nested", `{"agents":{"defaults":{"max_token":5}}}`, []string{`"agents.defaults.max_token"`, `"agents.defaults.max_tokens"`}},
		{"unknown far", `{"providers":{"openai":{"colour":1}}}`, []string{`"providers.openai.colour"`, "known keys here"}},
		{"unknown provider", `{"providers":{"mistral":{}}}`, []string{`"providers.mistral"`}},
		{"unknown in sensor", `{"sensors":[{"name":"a","type":"bme280","bus":"1","address":118,"x":1}]}`, []string{`"sensors[0].x"`}},
		{"wrong type", `{"gateway":{"port":"80"}}`, []string{`"gateway.port"`, "whole number"}},
		// A part's mistake is named with its entry, in either form.
		{"sensor bus type", `{"sensors":[{"name":"a","type":"bme280"},{"name":"b","type":"bme280","bus":1.5}]}`, []string{`key "sensors[1].bus" must be a string, not 1.5`}},
		{"sensor name type", `{"sensors":{"parts":[{"name":7,"type":"bme280"}]}}`, []string{`key "sensors.parts[0].name" must be a string, not a number`}},
		{"sensor address", `{"sensors":[{"name":"a","type":"bme280","address":"sixty"}]}`, []string{`sensors[0]: address "sixty" is not a number`}},
		{"sensor parts type", `{"sensors":{"parts":{}}}`, []string{`key "sensors.parts" must be an array, not an object`}},
		{"sample_seconds type", `{"sensors":{"sample_seconds":"60"}}`, []string{`key "sensors.sample_seconds" must be a whole number, not a string`}},
		{"fraction", `{"gateway":{"port":80.5}}`, []string{`key "gateway.port" must be a whole number, not 80.5`}},
		{"array element", `{"channels":{"telegram":{"allow_from":["ok",1]}}}`, []string{`key "channels.telegram.allow_from[1]" must be a string, not a number`}},
		{"secret", `{"providers":{"openai":{"api_key":5}}}`, []string{`key "providers.openai.api_key" must be a string, not a number`}},
		{"string for a flag", `{"mqtt":{"enabled":"yes"}}`, []string{`key "mqtt.enabled" must be true or false, not a string`}},
		{"object for a list", `{"channels":{"telegram":{"allow_from":{}}}}`, []string{`key "channels.telegram.allow_from" must be an array, not an object`}},
		{"temperature range", `{"agents":{"defaults":{"temperature":2.5}}}`, []string{"agents.defaults.temperature", "0.0 and 2.0"}},
		{"negative temperature", `{"agents":{"defaults":{"temperature":-0.1}}}`, []string{"agents.defaults.temperature"}},
		{"history floor", `{"agents":{"defaults":{"history_limit":50}}}`, []string{"agents.defaults.history_limit", "at least 100"}},
		{"negative ttl", `{"agents":{"defaults":{"session_ttl_days":-1}}}`, []string{"agents.defaults.session_ttl_days", "0 (keep sessions forever)"}},
		{"syntax", "{\n  \"gateway\": {,}\n}", []string{"invalid JSON", "line 2"}},
		{"truncated", `{"gateway": {`, []string{"ends early"}},
		{"trailing", `{} {}`, []string{"unexpected data after"}},
		{"not object", `[]`, []string{"JSON object"}},
		{"empty", ``, []string{"empty"}},
		{"bad provider", `{"agents":{"defaults":{"provider":"mistral"}}}`, []string{"agents.defaults.provider", "openrouter"}},
		{"bad api_base", `{"providers":{"openai":{"api_base":"ftp://x"}}}`, []string{"providers.openai.api_base"}},
		{"bad auth method", `{"providers":{"gemini":{"auth_method":"oauth"}}}`, []string{"providers.gemini.auth_method"}},
		{"adc elsewhere", `{"providers":{"openai":{"auth_method":"adc"}}}`, []string{"providers.openai.auth_method", "gemini"}},
		{"bad port", `{"gateway":{"port":70000}}`, []string{"gateway.port"}},
		{"bad tz", `{"agents":{"defaults":{"timezone":"Mars/Olympus"}}}`, []string{"agents.defaults.timezone"}},
		{"line user id", `{"channels":{"line":{"allow_from":["bob"]}}}`, []string{"channels.line.allow_from[0]", "33 characters"}},
		{"sensor type", `{"sensors":[{"name":"a","type":"dht22","bus":"1","address":64}]}`, []string{"sensors[0].type"}},
		{"sensor address", `{"sensors":[{"name":"a","type":"bme280","bus":"1","address":200}]}`, []string{"sensors[0].address", "0x77"}},
		{"heartbeat", `{"heartbeat":{"interval":5}}`, []string{"heartbeat.interval", "milliseconds"}},
		{"exec user empty", `{"tools":{"exec":{"user":""}}}`, []string{"tools.exec.user", "nobody"}},
		{"exec user name", `{"tools":{"exec":{"user":"bob; rm"}}}`, []string{"tools.exec.user", `"bob; rm"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(Options{Path: writeConfig(t, c.body), Env: noEnv})
			if err == nil {
				t.Fatal("loaded without error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestLoadAbsentExplicitIsErrNoConfig: a named file must exist; the default
// path may be absent (defaults, "run perch onboard").
func TestLoadAbsentExplicitIsErrNoConfig(t *testing.T) {
	_, err := Load(Options{Path: filepath.Join(t.TempDir(), "nope.json"), Env: noEnv})
	if !errors.Is(err, ErrNoConfig) {
		t.Fatalf("err = %v, want ErrNoConfig", err)
	}
	t.Setenv("PERCH_HOME", t.TempDir())
	cfg, err := Load(Options{Env: noEnv})
	if err != nil {
		t.Fatalf("absent default config: %v", err)
	}
	if !cfg.Absent() {
		t.Fatal("Absent() = false for a missing default file")
	}
}

// A config saved with a UTF-8 byte-order mark (Windows editors) loads; a
// mark elsewhere is still an error.
func TestLoadToleratesAByteOrderMark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte("\xef\xbb\xbf{\"gateway\":{\"port\":18282}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(Options{Path: path, Env: noEnv})
	if err != nil || cfg.Gateway.Port != 18282 {
		t.Fatalf("with a BOM: %v, port %v", err, cfg)
	}
	if err := os.WriteFile(path, []byte("{\"gateway\":\xef\xbb\xbf{}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(Options{Path: path, Env: noEnv}); err == nil {
		t.Fatal("a BOM inside the JSON loaded")
	}
}

// TestLoadHomeIsAFile: PERCH_HOME naming a file is said so, instead of
// "open …/config.json: not a directory".
func TestLoadHomeIsAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "home")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PERCH_HOME", file)
	_, err := Load(Options{Env: noEnv})
	want := "config: " + file + " is a file, not a directory: the config's directory (PERCH_HOME, ~/.perch or --config's) must be a directory; move that file away or point PERCH_HOME at a directory"
	if err == nil || err.Error() != want {
		t.Errorf("PERCH_HOME a file: %v", err)
	}
	// The file is named wherever it lies above the config.
	_, err = Load(Options{Path: filepath.Join(file, "sub", "config.json"), Env: noEnv})
	if err == nil || err.Error() != want {
		t.Errorf("--config two levels under a file: %v", err)
	}
	// onboard says the same, and leaves the file as it was.
	_, err = Onboard(filepath.Join(file, "config.json"), false)
	if err == nil || err.Error() != want {
		t.Errorf("onboard under a file: %v", err)
	}
	if fi, err := os.Stat(file); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Errorf("onboard touched the file in the way: %v %v", fi, err)
	}
}

func TestEnvOverrides(t *testing.T) {
	p := writeConfig(t, `{"gateway":{"port":9000},"providers":{"openai":{"api_key":"from-file"}}}`)
	cfg, err := Load(Options{Path: p, Env: envMap(map[string]string{
		"PERCH_GATEWAY_PORT":                    "9100",
		"PERCH_PROVIDERS_OPENROUTER_API_KEY":    "or-key",
		"PERCH_AGENTS_DEFAULTS_TEMPERATURE":     "0.2",
		"PERCH_AGENTS_DEFAULTS_FALLBACK_MODELS": "a/b, c/d",
		"PERCH_TOOLS_WEB_FETCH_ALLOW_PRIVATE":   "true",
		"OPENAI_API_KEY":                        "conventional-ignored",
		"ANTHROPIC_API_KEY":                     "anthropic-conv",
		"PERCH_SENSORS":                         `[{"name":"t","type":"sht3x","bus":"1","address":68}]`,
	})})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Gateway.Port != 9100 {
		t.Errorf("port = %d, want the env value 9100", cfg.Gateway.Port)
	}
	if cfg.Providers.OpenRouter.APIKey.Value() != "or-key" {
		t.Error("PERCH_PROVIDERS_OPENROUTER_API_KEY not applied")
	}
	if cfg.Providers.OpenAI.APIKey.Value() != "from-file" {
		t.Error("conventional OPENAI_API_KEY replaced a key set in the file")
	}
	if cfg.Providers.Anthropic.APIKey.Value() != "anthropic-conv" {
		t.Error("conventional ANTHROPIC_API_KEY not used for an empty key")
	}
	if cfg.Agents.Defaults.Temperature != 0.2 {
		t.Errorf("temperature = %v", cfg.Agents.Defaults.Temperature)
	}
	if got := strings.Join(cfg.Agents.Defaults.FallbackModels, "|"); got != "a/b|c/d" {
		t.Errorf("fallback_models = %q", got)
	}
	if !cfg.Tools.Web.Fetch.AllowPrivate {
		t.Error("bool override not applied")
	}
	if len(cfg.Sensors.Parts) != 1 || cfg.Sensors.Parts[0].Address != 68 {
		t.Errorf("sensors = %+v", cfg.Sensors)
	}
}

// TestEnvOverridesFromTheProcessEnvironment: through the real environment
// (no lookup function), a key variable is applied, a provider's
// conventional variable too, and a start with only PERCH_HOME keeps the
// file's values.
func TestEnvOverridesFromTheProcessEnvironment(t *testing.T) {
	p := writeConfig(t, `{"gateway":{"port":9000}}`)
	t.Setenv("PERCH_HOME", t.TempDir())
	t.Setenv("ANTHROPIC_API_KEY", "anthropic-conv")
	cfg, err := Load(Options{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Gateway.Port != 9000 || cfg.Providers.Anthropic.APIKey.Value() != "anthropic-conv" || len(cfg.Warnings()) != 0 {
		t.Errorf("only PERCH_HOME: port %d, anthropic key set %v, warnings %q", cfg.Gateway.Port, cfg.Providers.Anthropic.APIKey.IsSet(), cfg.Warnings())
	}
	t.Setenv("PERCH_GATEWAY_PORT", "9100")
	t.Setenv("PERCH_GATEWAY_PROT", "1")
	cfg, err = Load(Options{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Gateway.Port != 9100 {
		t.Errorf("PERCH_GATEWAY_PORT=9100: port %d", cfg.Gateway.Port)
	}
	if w := strings.Join(cfg.Warnings(), "\n"); !strings.Contains(w, "PERCH_GATEWAY_PROT") || !strings.Contains(w, "PERCH_GATEWAY_PORT") {
		t.Errorf("warnings %q", w)
	}
}

func TestEnvOverrideBadValueNamesVariable(t *testing.T) {
	_, err := Load(Options{Path: writeConfig(t, `{}`), Env: envMap(map[string]string{"PERCH_GATEWAY_PORT": "eighty"})})
	if err == nil || !strings.Contains(err.Error(), "PERCH_GATEWAY_PORT") || !strings.Contains(err.Error(), "gateway.port") {
		t.Fatalf("err = %v", err)
	}
	// A value in range for its type but not for its key is named by the
	// variable too: the file does not hold it. A bad key of the file's
	// own keeps its plain name.
	_, err = Load(Options{Path: writeConfig(t, `{"agents":{"defaults":{"max_tokens":0}}}`), Env: envMap(map[string]string{
		"PERCH_AGENTS_DEFAULTS_TEMPERATURE": "9", "PERCH_CHANNELS_LINE_ALLOW_FROM": "bob"})})
	for _, want := range []string{
		"agents.defaults.temperature (set by PERCH_AGENTS_DEFAULTS_TEMPERATURE): must be between 0.0 and 2.0, got 9",
		"channels.line.allow_from[0] (set by PERCH_CHANNELS_LINE_ALLOW_FROM): ",
		"config.json: agents.defaults.max_tokens: must be at least 1",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("out-of-range env values: error lacks %q: %v", want, err)
		}
	}
}

// TestSecretNeverPrints covers every way a secret could reach a log or body.
func TestSecretNeverPrints(t *testing.T) {
	s := Secret("sk-very-secret")
	type holder struct{ Key Secret }
	var logBuf bytes.Buffer
	slog.New(slog.NewTextHandler(&logBuf, nil)).Info("x", "key", s, "h", holder{s})
	js, _ := json.Marshal(holder{s})
	outs := []string{
		s.String(), fmt.Sprint(s), fmt.Sprintf("%v %s %q %x %#v %+v", s, s, s, s, s, holder{s}),
		string(js), logBuf.String(), fmt.Sprintf("%v", &holder{s}),
	}
	for _, o := range outs {
		if strings.Contains(o, "very-secret") {
			t.Errorf("secret leaked: %s", o)
		}
	}
	if s.Value() != "sk-very-secret" {
		t.Error("Value() lost the secret")
	}
}

func TestSaveRoundTripsSecretsAndKeepsMode(t *testing.T) {
	cfg, err := Load(Options{Path: writeConfig(t, `{"providers":{"openai":{"api_key":"sk-1"}},"sensors":[{"name":"a","type":"bh1750","bus":"1","address":35}]}`), Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Gateway.APIToken = "tok"
	if err := cfg.Save(); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(cfg.Path())
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
	again, err := Load(Options{Path: cfg.Path(), Env: noEnv})
	if err != nil {
		t.Fatalf("reloading the saved file: %v", err)
	}
	if again.Providers.OpenAI.APIKey.Value() != "sk-1" || again.Gateway.APIToken.Value() != "tok" {
		t.Error("secrets did not survive Save")
	}
	if len(again.Sensors.Parts) != 1 || again.Sensors.Parts[0].Name != "a" {
		t.Errorf("sensors lost: %+v", again.Sensors)
	}
}

func TestOnboardWritesCompleteConfigAndNeverOverwrites(t *testing.T) {
	home := t.TempDir()
	t.Setenv("PERCH_HOME", home)
	res, err := Onboard("", false)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(res.ConfigPath)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, section := range []string{"agents", "providers", "gateway", "channels", "heartbeat", "devices", "tools", "sensors"} {
		if _, ok := m[section]; !ok {
			t.Errorf("section %q missing", section)
		}
	}
	cfg, err := Load(Options{Env: noEnv})
	if err != nil {
		t.Fatalf("onboarded config does not load: %v", err)
	}
	if cfg.Gateway.Host != "0.0.0.0" || len(cfg.Gateway.APIToken.Value()) != 32 {
		t.Errorf("gateway = %s with token %d chars", cfg.Gateway.Host, len(cfg.Gateway.APIToken.Value()))
	}
	if cfg.Channels.Telegram.Enabled || cfg.Channels.LINE.Enabled {
		t.Error("channels enabled by onboard")
	}
	for _, f := range []string{"AGENT.md", "USER.md", "memory/MEMORY.md"} {
		if _, err := os.Stat(filepath.Join(home, "workspace", f)); err != nil {
			t.Errorf("starter file %s: %v", f, err)
		}
	}
	// The user's edits survive a forced re-onboard; the config is replaced.
	agent := filepath.Join(home, "workspace", "AGENT.md")
	os.WriteFile(agent, []byte("mine"), 0o644)
	if _, err := Onboard("", false); !errors.Is(err, ErrExists) {
		t.Fatalf("second onboard err = %v, want ErrExists", err)
	}
	res2, err := Onboard("", true)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(agent); string(b) != "mine" {
		t.Error("--force overwrote a workspace file")
	}
	if res2.Token == res.Token {
		t.Error("--force kept the old token")
	}
}

func TestWorkspacePaths(t *testing.T) {
	t.Setenv("PERCH_HOME", "/srv/perch")
	cfg, err := Load(Options{Path: writeConfig(t, `{"agents":{"defaults":{"workspace":"ws"}}}`), Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.WorkspaceDir() != "/srv/perch/ws" || cfg.DBPath() != "/srv/perch/perch.db" {
		t.Errorf("workspace %s db %s", cfg.WorkspaceDir(), cfg.DBPath())
	}
}

// TestUnknownEnvWarns: a PERCH_ variable that names no key is reported with
// the closest one; known keys (leaves, whole structs such as sensors) and
// the process's own variables are not.
func TestUnknownEnvWarns(t *testing.T) {
	env := map[string]string{"PERCH_GATEWAY_PROT": "1", "PERCH_HOME": "/x", "PERCH_SENSORS": "[]", "PERCH_GATEWAY_PORT": "9000", "PERCH_NOTHING_LIKE_IT_AT_ALL": "1"}
	cfg, err := Load(Options{Path: writeConfig(t, `{}`), Env: envMap(env), Environ: func() []string {
		var out []string
		for k, v := range env {
			out = append(out, k+"="+v)
		}
		return out
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"environment variable PERCH_GATEWAY_PROT names no config key; it is ignored (did you mean PERCH_GATEWAY_PORT?)",
		"environment variable PERCH_NOTHING_LIKE_IT_AT_ALL names no config key; it is ignored",
	}
	if got := cfg.Warnings(); !slices.Equal(got, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// SecretValues walks the struct on its own; it must find exactly the
// secrets the leaf table knows (the keys status lists and PERCH_ variables
// set), or a secret added in a new section would reach a chat unscrubbed.
func TestSecretValuesMatchTheLeafTable(t *testing.T) {
	c := Default()
	root := reflect.ValueOf(c).Elem()
	var want []string
	for _, l := range leafTable().leaves {
		if v := root.FieldByIndex(l.index); v.Type() == secretType {
			v.SetString("secret-of-" + l.path)
			want = append(want, "secret-of-"+l.path)
		}
	}
	if len(want) < 8 {
		t.Fatalf("the leaf table names %d secrets; expected every provider key and channel token", len(want))
	}
	if got := c.SecretValues(); !slices.Equal(got, want) {
		t.Fatalf("SecretValues:\n got %q\nwant %q", got, want)
	}
	// Unset secrets are left out.
	for _, l := range leafTable().leaves {
		if v := root.FieldByIndex(l.index); v.Type() == secretType {
			v.SetString("")
			break
		}
	}
	if got := c.SecretValues(); len(got) != len(want)-1 {
		t.Fatalf("with one secret unset SecretValues has %d values, want %d", len(got), len(want)-1)
	}
}
