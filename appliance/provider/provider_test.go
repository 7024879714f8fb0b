package provider

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

func cfgWith(t testing.TB, mutate func(c *config.Config)) *config.Config {
	t.Helper()
	c := config.Default()
	mutate(c)
	if err := c.Validate(); err != nil {
		t.Fatalf("test config invalid: %v", err)
	}
	return c
}

func TestSelect(t *testing.T) {
	cases := []struct {
		name         string
		mutate       func(c *config.Config)
		wantProvider string
		wantModel    string
		wantErr      string
	}{
		{"aggregator prefix", func(c *config.Config) {
			c.Providers.OpenRouter.APIKey = "k"
			c.Agents.Defaults.Model = "anthropic/claude-3.5-sonnet"
		}, "openrouter", "anthropic/claude-3.5-sonnet", ""},
		{"meta-llama prefix", func(c *config.Config) {
			c.Providers.OpenRouter.APIKey = "k"
			c.Providers.Groq.APIKey = "g"
			c.Agents.Defaults.Model = "meta-llama/llama-3-70b"
		}, "openrouter", "meta-llama/llama-3-70b", ""},
		{"vendor prefix without aggregator key falls to the vendor", func(c *config.Config) {
			c.Providers.OpenAI.APIKey = "k"
			c.Agents.Defaults.Model = "openai/gpt-4o"
		}, "openai", "gpt-4o", ""},
		{"vendor prefix with no key at all", func(c *config.Config) {
			c.Agents.Defaults.Model = "openai/gpt-4o"
		}, "", "", "providers.openrouter.api_key"},
		{"explicit provider wins", func(c *config.Config) {
			c.Providers.OpenRouter.APIKey = "k"
			c.Providers.DeepSeek.APIKey = "d"
			c.Agents.Defaults.Provider = "deepseek"
			c.Agents.Defaults.Model = "deepseek/deepseek-chat"
		}, "deepseek", "deepseek-chat", ""},
		{"explicit provider without key", func(c *config.Config) {
			c.Agents.Defaults.Provider = "anthropic"
			c.Agents.Defaults.Model = "claude-3-5-haiku-latest"
		}, "", "", "providers.anthropic.api_key"},
		{"gemini strips vendor prefix", func(c *config.Config) {
			c.Providers.Gemini.APIKey = "k"
			c.Agents.Defaults.Provider = "gemini"
			c.Agents.Defaults.Model = "google/gemini-2.0-flash"
		}, "gemini", "gemini-2.0-flash", ""},
		{"family", func(c *config.Config) {
			c.Providers.Anthropic.APIKey = "k"
			c.Providers.OpenAI.APIKey = "o"
			c.Agents.Defaults.Model = "claude-3-5-haiku-latest"
		}, "anthropic", "claude-3-5-haiku-latest", ""},
		{"unknown family goes to aggregator with key", func(c *config.Config) {
			c.Providers.OpenRouter.APIKey = "k"
			c.Agents.Defaults.Model = "mistralai/mistral-7b"
		}, "openrouter", "mistralai/mistral-7b", ""},
		{"single keyed provider", func(c *config.Config) {
			c.Providers.Groq.APIKey = "k"
			c.Agents.Defaults.Model = "qwen-2.5-32b"
		}, "groq", "qwen-2.5-32b", ""},
		{"provider prefix ollama is keyless", func(c *config.Config) {
			c.Agents.Defaults.Model = "ollama/qwen2.5:0.5b"
		}, "ollama", "qwen2.5:0.5b", ""},
		{"nothing configured", func(c *config.Config) {}, "", "", "providers.openrouter.api_key"},
		{"key without model", func(c *config.Config) {
			c.Providers.OpenAI.APIKey = "k"
		}, "", "", "agents.defaults.model is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch, err := Select(cfgWith(t, tc.mutate))
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrNoProvider) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrNoProvider mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ch.Name != tc.wantProvider || ch.Model != tc.wantModel {
				t.Fatalf("got %s/%s, want %s/%s", ch.Name, ch.Model, tc.wantProvider, tc.wantModel)
			}
		})
	}
}

func TestReasoningModels(t *testing.T) {
	for m, want := range map[string]bool{"o1": true, "o1-mini": true, "o3-mini": true, "openai/o4-mini": true,
		"gpt-5": true, "gpt-5-nano": true, "gpt-4o": false, "o10x": false, "gpt-50": false, "claude-3": false} {
		if got := isReasoningModel(m); got != want {
			t.Errorf("isReasoningModel(%q) = %v", m, got)
		}
	}
}

// newTestClient points provider name at the fake with fast retries.
func newTestClient(t *testing.T, fake *providertest.Server, mutate func(c *config.Config)) *Client {
	t.Helper()
	return clientAt(t, fake.Base(), mutate)
}

// clientAt is a client of the provider at base (a loopback server).
func clientAt(t testing.TB, base string, mutate func(c *config.Config)) *Client {
	t.Helper()
	cfg := cfgWith(t, func(c *config.Config) {
		c.Providers.OpenRouter.APIKey = "sk-or-secret-key"
		c.Providers.OpenRouter.APIBase = base
		c.Agents.Defaults.Model = "openai/gpt-4o-mini"
		if mutate != nil {
			mutate(c)
		}
	})
	cl, err := FromConfig(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl.tr.policy.BaseDelay = time.Millisecond
	return cl
}

// history is n messages of text, the user's and the assistant's in turn.
func history(n int, text string) []chat.Message {
	h := make([]chat.Message, n)
	for i := range h {
		h[i] = chat.Message{Role: []string{"user", "assistant"}[i%2], Content: text}
	}
	return h
}

func userMsg(s string) []chat.Message {
	return []chat.Message{{Role: "user", Content: s}}
}

func TestChatSendsDocumentedFields(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	cl := newTestClient(t, fake, func(c *config.Config) { c.Agents.Defaults.FallbackModels = []string{"anthropic/claude-3.5-haiku"} })
	tools := []chat.ToolDef{{Name: "t", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}}
	resp, err := cl.Chat(context.Background(), Request{Messages: userMsg("hello"), Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content != "echo: hello" || resp.Usage.TotalTokens != 15 {
		t.Fatalf("resp = %+v", resp)
	}
	r := fake.Requests()[0]
	b := r.Body
	if b.Model != "openai/gpt-4o-mini" || b.MaxTokens == nil || *b.MaxTokens != 8192 || b.Temperature == nil || *b.Temperature != 0.7 {
		t.Errorf("model/max_tokens/temperature wrong: %s", r.Raw)
	}
	if b.ToolChoice != "auto" || len(b.Tools) != 1 {
		t.Errorf("tools/tool_choice wrong: %s", r.Raw)
	}
	if b.Route != "fallback" || strings.Join(b.Models, ",") != "openai/gpt-4o-mini,anthropic/claude-3.5-haiku" {
		t.Errorf("route/models wrong: %s", r.Raw)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer sk-or-secret-key" {
		t.Errorf("authorization header %q", got)
	}
}

func TestReasoningModelGetsMaxCompletionTokensAndNoTemperature(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	cl := newTestClient(t, fake, func(c *config.Config) { c.Agents.Defaults.Model = "openai/o3-mini" })
	if _, err := cl.Chat(context.Background(), Request{Messages: userMsg("x")}); err != nil {
		t.Fatal(err)
	}
	b := fake.Requests()[0].Body
	if b.MaxTokens != nil || b.MaxCompletionTokens == nil || *b.MaxCompletionTokens != 8192 || b.Temperature != nil {
		t.Fatalf("body %s", fake.Requests()[0].Raw)
	}
	if b.Route != "" {
		t.Errorf("route sent without fallback models: %s", fake.Requests()[0].Raw)
	}
}

// TestZeroTemperatureIsSent: go-openai's omitempty would drop 0.
func TestZeroTemperatureIsSent(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	cl := newTestClient(t, fake, func(c *config.Config) { c.Agents.Defaults.Temperature = 0 })
	cl.Chat(context.Background(), Request{Messages: userMsg("x")})
	if tmp := fake.Requests()[0].Body.Temperature; tmp == nil || *tmp != 0 {
		t.Fatalf("temperature not sent as 0: %s", fake.Requests()[0].Raw)
	}
}

func TestRetries(t *testing.T) {
	t.Run("429 then 200", func(t *testing.T) {
		fake := providertest.New()
		defer fake.Close()
		cl := newTestClient(t, fake, nil)
		fake.Enqueue(providertest.Reply{Status: 429, RetryAfter: "0"}, providertest.Reply{Status: 503}, providertest.Reply{Content: "fine"})
		resp, err := cl.Chat(context.Background(), Request{Messages: userMsg("x")})
		if err != nil || resp.Content != "fine" || fake.Calls() != 3 {
			t.Fatalf("resp %+v err %v calls %d", resp, err, fake.Calls())
		}
	})
	t.Run("Retry-After is honoured", func(t *testing.T) {
		fake := providertest.New()
		defer fake.Close()
		cl := newTestClient(t, fake, nil)
		fake.Enqueue(providertest.Reply{Status: 429, RetryAfter: "0.3"}, providertest.Reply{Content: "ok"})
		start := time.Now()
		if _, err := cl.Chat(context.Background(), Request{Messages: userMsg("x")}); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el < 300*time.Millisecond {
			t.Fatalf("retried after %v, before Retry-After", el)
		}
	})
	t.Run("attempts are bounded", func(t *testing.T) {
		fake := providertest.New()
		defer fake.Close()
		cl := newTestClient(t, fake, nil)
		for i := 0; i < 10; i++ {
			fake.Enqueue(providertest.Reply{Status: 429, ErrorMessage: "slow down"})
		}
		_, err := cl.Chat(context.Background(), Request{Messages: userMsg("x")})
		var pe *Error
		if !errors.As(err, &pe) || pe.Kind != KindRateLimit || pe.Retries != 3 || fake.Calls() != 4 {
			t.Fatalf("err %v calls %d", err, fake.Calls())
		}
		if !strings.Contains(err.Error(), "rate limited (HTTP 429) after 3 retries;") {
			t.Errorf("message %q", err)
		}
	})
	t.Run("a long Retry-After is not waited out", func(t *testing.T) {
		fake := providertest.New()
		defer fake.Close()
		cl := newTestClient(t, fake, nil)
		fake.Enqueue(providertest.Reply{Status: 429, RetryAfter: "3600"})
		start := time.Now()
		_, err := cl.Chat(context.Background(), Request{Messages: userMsg("x")})
		if err == nil || time.Since(start) > 2*time.Second {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
	})
	t.Run("400 is not retried", func(t *testing.T) {
		fake := providertest.New()
		defer fake.Close()
		cl := newTestClient(t, fake, nil)
		fake.Enqueue(providertest.Reply{Status: 400, ErrorMessage: "bad"})
		cl.Chat(context.Background(), Request{Messages: userMsg("x")})
		if fake.Calls() != 1 {
			t.Fatalf("calls %d", fake.Calls())
		}
	})
}

func TestUpstreamErrorsAreClear(t *testing.T) {
	cases := []struct {
		name  string
		reply providertest.Reply
		kind  Kind
		want  []string
	}{
		{"bad key", providertest.Reply{Status: 401, ErrorMessage: "Incorrect API key provided: sk-or-secret-key"}, KindAuth,
			[]string{"authentication failed", "providers.openrouter.api_key", "[redacted]"}},
		{"unknown model", providertest.Reply{Status: 404, ErrorMessage: "gpt-4o-mini is not a valid model ID"}, KindModel,
			[]string{"unknown model", "vendor prefix"}},
		{"model 400", providertest.Reply{Status: 400, ErrorMessage: "The model `foo` does not exist", ErrorCode: "model_not_found"}, KindModel,
			[]string{"unknown model"}},
		{"credits", providertest.Reply{Status: 402, ErrorMessage: "Insufficient credits"}, KindCredits,
			[]string{"no credits", "add credits"}},
		{"quota", providertest.Reply{Status: 429, ErrorMessage: "You exceeded your current quota", ErrorCode: "insufficient_quota"}, KindCredits,
			[]string{"no credits"}},
		{"server", providertest.Reply{Status: 500, ErrorMessage: "boom"}, KindUpstream, []string{"HTTP 500", "boom"}},
		{"non-JSON", providertest.Reply{Status: 502, ErrorBody: "<html>bad gateway</html>"}, KindUpstream, []string{"HTTP 502"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake := providertest.New()
			defer fake.Close()
			cl := newTestClient(t, fake, nil)
			for i := 0; i < 5; i++ {
				fake.Enqueue(tc.reply)
			}
			_, err := cl.Chat(context.Background(), Request{Messages: userMsg("x")})
			var pe *Error
			if !errors.As(err, &pe) || pe.Kind != tc.kind {
				t.Fatalf("err %v (%#v), want kind %d", err, pe, tc.kind)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "sk-or-secret-key") {
				t.Errorf("API key leaked: %q", err)
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	fake := providertest.New()
	base := fake.Base()
	fake.Close()
	cfg := cfgWith(t, func(c *config.Config) {
		c.Providers.OpenRouter.APIKey = "k"
		c.Providers.OpenRouter.APIBase = base
		c.Agents.Defaults.Model = "openai/x"
	})
	cl, _ := FromConfig(context.Background(), cfg, nil)
	cl.tr.policy.BaseDelay = time.Millisecond
	_, err := cl.Chat(context.Background(), Request{Messages: userMsg("x")})
	var pe *Error
	if !errors.As(err, &pe) || pe.Kind != KindUnreachable || !strings.Contains(err.Error(), "cannot reach the API after 3 retries: ") {
		t.Fatalf("err %v", err)
	}
	// The model list is asked once: no "after 0 retries".
	_, err = cl.Models(context.Background())
	if !errors.As(err, &pe) || pe.Kind != KindUnreachable || !strings.Contains(err.Error(), "openrouter: cannot reach the API: ") {
		t.Fatalf("models: %v", err)
	}
}

// TestModelRejectingToolsIsRemembered: one failed call, then no tools sent.
func TestModelRejectingToolsIsRemembered(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	cl := newTestClient(t, fake, nil)
	fake.Enqueue(providertest.Reply{Status: 400, ErrorMessage: "registry.ollama.ai/library/gemma:2b does not support tools"})
	tools := []chat.ToolDef{{Name: "t", Parameters: json.RawMessage(`{"type":"object"}`)}}
	resp, err := cl.Chat(context.Background(), Request{Messages: userMsg("a"), Tools: tools})
	if err != nil || !resp.ToolsDropped {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	cl.Chat(context.Background(), Request{Messages: userMsg("b"), Tools: tools})
	reqs := fake.Requests()
	if len(reqs) != 3 || len(reqs[0].Body.Tools) != 1 || len(reqs[1].Body.Tools) != 0 || len(reqs[2].Body.Tools) != 0 {
		t.Fatalf("tools per request: %d requests", len(reqs))
	}
}

func TestProxyIsUsed(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	var proxied atomic.Int32
	target, _ := url.Parse(fake.Base())
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		// A forward proxy receives the absolute URL.
		out, _ := http.NewRequest(r.Method, target.Scheme+"://"+target.Host+r.URL.Path, r.Body)
		out.Header = r.Header
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			w.WriteHeader(502)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	defer proxy.Close()
	// The proxy is only consulted for non-loopback hosts by default, so
	// name the fake by a hostname that resolves nowhere: the proxy forwards.
	cl := newTestClient(t, fake, func(c *config.Config) {
		c.Providers.OpenRouter.APIBase = "http://upstream.invalid"
		c.Providers.OpenRouter.Proxy = proxy.URL
	})
	resp, err := cl.Chat(context.Background(), Request{Messages: userMsg("via proxy")})
	if err != nil || resp.Content != "echo: via proxy" || proxied.Load() != 1 {
		t.Fatalf("resp %+v err %v proxied %d", resp, err, proxied.Load())
	}
}

func TestModelsAndImages(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	fake.SetModels([]map[string]any{
		{"id": "openai/gpt-4o", "pricing": map[string]any{"prompt": "0.0000025", "completion": "0.00001"}},
		{"id": "anthropic/claude"},
	})
	cl := newTestClient(t, fake, nil)
	ms, err := cl.Models(context.Background())
	if err != nil || len(ms) != 2 || ms[1].ID != "openai/gpt-4o" || ms[1].Pricing["prompt"] != "0.0000025" {
		t.Fatalf("models %+v err %v", ms, err)
	}
	b64, mime, err := cl.GenerateImage(context.Background(), "a cat", "1024x1024")
	if err != nil || b64 != fake.Image || mime != "image/png" {
		t.Fatalf("image %q %q %v", b64, mime, err)
	}
}

// TestADCTokensFromServiceAccount: gcloud-adc mode signs a JWT with the
// service account key, exchanges it at token_uri and sends the access token.
func TestADCTokensFromServiceAccount(t *testing.T) {
	var exchanged atomic.Int32
	tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		if r.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" || r.Form.Get("assertion") == "" {
			w.WriteHeader(400)
			return
		}
		exchanged.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"access_token":"ya29.test-token","token_type":"Bearer","expires_in":3600}`)
	}))
	defer tokenSrv.Close()
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: must(x509.MarshalPKCS8PrivateKey(key))})
	sa, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "p", "private_key_id": "1", "private_key": string(pemKey),
		"client_email": "perch@p.iam.gserviceaccount.com", "client_id": "1", "token_uri": tokenSrv.URL,
	})
	credFile := filepath.Join(t.TempDir(), "sa.json")
	os.WriteFile(credFile, sa, 0o600)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", credFile)

	fake := providertest.New()
	defer fake.Close()
	cfg := cfgWith(t, func(c *config.Config) {
		c.Providers.Gemini.AuthMethod = "gcloud-adc"
		c.Providers.Gemini.APIBase = fake.Base()
		c.Agents.Defaults.Provider = "gemini"
		c.Agents.Defaults.Model = "gemini/gemini-2.0-flash"
	})
	cl, err := FromConfig(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := cl.Chat(context.Background(), Request{Messages: userMsg("x")}); err != nil {
			t.Fatal(err)
		}
	}
	r := fake.Requests()[1]
	if r.Header.Get("Authorization") != "Bearer ya29.test-token" || r.Body.Model != "gemini-2.0-flash" {
		t.Fatalf("auth %q model %q", r.Header.Get("Authorization"), r.Body.Model)
	}
	if exchanged.Load() != 1 {
		t.Errorf("token exchanged %d times; it should be reused until expiry", exchanged.Load())
	}
}

func TestADCUnreadableIsCreationError(t *testing.T) {
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "missing.json"))
	cfg := cfgWith(t, func(c *config.Config) {
		c.Providers.Gemini.AuthMethod = "adc"
		c.Agents.Defaults.Provider = "gemini"
		c.Agents.Defaults.Model = "gemini-2.0-flash"
	})
	_, err := FromConfig(context.Background(), cfg, nil)
	if err == nil || errors.Is(err, ErrNoProvider) || !strings.Contains(err.Error(), "providers.gemini.auth_method") {
		t.Fatalf("err = %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestADCAuthorizedUser: gcloud's file is refreshed at its token_uri and the
// access token is reused.
func TestADCAuthorizedUser(t *testing.T) {
	var refreshed atomic.Int32
	tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		if r.Form.Get("grant_type") != "refresh_token" || r.Form.Get("refresh_token") != "1//rt" || r.Form.Get("client_id") != "cid" {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":"invalid_grant","error_description":"Token has been expired or revoked."}`)
			return
		}
		refreshed.Add(1)
		io.WriteString(w, `{"access_token":"ya29.user","expires_in":3599}`)
	}))
	defer tokenSrv.Close()
	dir := t.TempDir()
	write := func(body string) {
		os.WriteFile(filepath.Join(dir, "application_default_credentials.json"), []byte(body), 0o600)
	}
	write(`{"type":"authorized_user","client_id":"cid","client_secret":"cs","refresh_token":"1//rt","token_uri":"` + tokenSrv.URL + `"}`)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	t.Setenv("CLOUDSDK_CONFIG", dir)
	fake := providertest.New()
	defer fake.Close()
	cfg := cfgWith(t, func(c *config.Config) {
		c.Providers.Gemini.AuthMethod = "adc"
		c.Providers.Gemini.APIBase = fake.Base()
		c.Agents.Defaults.Provider = "gemini"
		c.Agents.Defaults.Model = "gemini-2.0-flash"
	})
	cl, err := FromConfig(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl.Chat(context.Background(), Request{Messages: userMsg("a")})
	cl.Chat(context.Background(), Request{Messages: userMsg("b")})
	if got := fake.Requests()[1].Header.Get("Authorization"); got != "Bearer ya29.user" || refreshed.Load() != 1 {
		t.Fatalf("auth %q, refreshed %d times", got, refreshed.Load())
	}
	// Revoked credentials: a clear error, not a retry storm.
	write(`{"type":"authorized_user","client_id":"cid","client_secret":"cs","refresh_token":"revoked","token_uri":"` + tokenSrv.URL + `"}`)
	cl2, _ := FromConfig(context.Background(), cfg, nil)
	_, err = cl2.Chat(context.Background(), Request{Messages: userMsg("c")})
	if err == nil || !strings.Contains(err.Error(), "application-default login") || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("revoked: %v", err)
	}
	// An unsupported credential type is a creation error.
	write(`{"type":"external_account"}`)
	if _, err := FromConfig(context.Background(), cfg, nil); err == nil || !strings.Contains(err.Error(), "external_account") {
		t.Fatalf("external_account: %v", err)
	}
}

// TestContextOverflowIsNamed: the ways providers refuse a request longer
// than the model's context window are one kind, which the agent answers by
// sending less of the history; other refusals are not.
func TestContextOverflowIsNamed(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	cl := newTestClient(t, fake, nil)
	for msg, want := range map[string]bool{
		"This model's maximum context length is 8192 tokens. However, your messages resulted in 9120 tokens.": true,
		"prompt is too long: 210000 tokens > 200000 maximum":                                                  true,
		"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).":             true,
		"the request exceeds the available context size, try increasing it":                                   true,
		"temperature must be between 0 and 2":                                                                 false,
	} {
		fake.Enqueue(providertest.Reply{Status: 400, ErrorMessage: msg})
		_, err := cl.Chat(context.Background(), Request{Messages: userMsg("a")})
		var pe *Error
		if got := errors.As(err, &pe) && pe.Kind == KindContext; got != want {
			t.Errorf("%q: context overflow %v, want %v (%v)", msg, got, want, err)
		}
		if want && !strings.Contains(err.Error(), "does not fit model") {
			t.Errorf("%q: %v", msg, err)
		}
	}
}

// TestErrorsHideTheConfigsOtherSecrets: a provider's error quoting what it
// was sent (a chat sender's message can hold a channel token) shows none
// of the config's secrets, not only the provider's key. The text went to
// the chat and the log as it came.
func TestErrorsHideTheConfigsOtherSecrets(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	cl := newTestClient(t, fake, func(c *config.Config) {
		c.Channels.Telegram.Token = "123456:telegram-secret-token"
		c.Channels.Slack.BotToken = "xoxb-slack-secret"
		c.Gateway.APIToken = "api-token-secret-0123456789"
		// A server of one's own behind basic auth: its password is a
		// secret like the key.
		c.Providers.OpenRouter.APIBase = strings.Replace(fake.Base(), "http://", "http://bob:base-secret-pw@", 1)
	})
	fake.Enqueue(providertest.Reply{Status: 400, ErrorMessage: "bad input: 123456:telegram-secret-token xoxb-slack-secret api-token-secret-0123456789 sk-or-secret-key base-secret-pw"})
	_, err := cl.Chat(context.Background(), Request{Messages: userMsg("x")})
	if err == nil {
		t.Fatal("no error")
	}
	for _, s := range []string{"telegram-secret", "xoxb-slack", "api-token-secret", "sk-or-secret", "base-secret-pw"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("%q shows a secret (%s)", err, s)
		}
	}
	if strings.Count(err.Error(), "[redacted]") != 5 {
		t.Errorf("%q: want five [redacted]", err)
	}
}
