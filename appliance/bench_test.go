package appliance

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/perchhq/perch/appliance/config"
)

// startSystem runs a whole gateway in-process on a loopback port against
// fake, in a temp config dir.
func startSystem(tb testing.TB, providerBase string) (*System, string) {
	tb.Helper()
	tb.Setenv("PERCH_HOME", tb.TempDir())
	cfg, err := config.Load(config.Options{Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Gateway.Port = 0
	cfg.Gateway.APIToken = "t"
	cfg.Providers.OpenRouter.APIKey = "k"
	cfg.Providers.OpenRouter.APIBase = providerBase
	cfg.Agents.Defaults.Model = "openai/gpt-4o-mini"
	log := slog.New(slog.DiscardHandler)
	sys, err := NewCore(context.Background(), cfg, log)
	if err != nil {
		tb.Fatal(err)
	}
	if err := sys.BuildGateway(); err != nil {
		tb.Fatal(err)
	}
	if err := sys.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sys.Stop(context.Background()) })
	return sys, "http://" + sys.HTTP.Addr()
}

// instantProvider answers every call at once without decoding it, so the
// benchmark measures the gateway, not the fake.
func instantProvider() *httptest.Server {
	reply := []byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(reply)
	}))
}

func benchChat(b *testing.B, parallel bool) {
	fake := instantProvider()
	defer fake.Close()
	_, base := startSystem(b, fake.URL)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var worker atomic.Int64
	do := func(body []byte) {
		req, _ := http.NewRequest("POST", base+"/chat", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer t")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("HTTP %d", resp.StatusCode)
		}
	}
	b.ResetTimer()
	if !parallel {
		body := []byte(`{"message":"hello, how are you today?","session_key":"bench:serial"}`)
		for b.Loop() {
			do(body)
		}
		return
	}
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		body := []byte(fmt.Sprintf(`{"message":"hello, how are you today?","session_key":"bench:%d"}`, worker.Add(1)))
		for pb.Next() {
			do(body)
		}
	})
}

// BenchmarkChatSerial is one /chat turn end to end: HTTP, two durable
// commits, a provider round trip to a loopback fake.
func BenchmarkChatSerial(b *testing.B) { benchChat(b, false) }

// BenchmarkChatParallel16 runs 16 sessions at once.
func BenchmarkChatParallel16(b *testing.B) { benchChat(b, true) }
