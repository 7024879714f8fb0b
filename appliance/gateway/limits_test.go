package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a log destination safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// protectedAs sends GET /protected from remote with auth ("" for none).
func protectedAs(s *Server, remote, auth string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/protected", nil)
	req.Host, req.RemoteAddr = "127.0.0.1:8080", remote
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

// Guessing the token from one address is slowed to a few tries a minute,
// without locking out other clients; tries without a token are not
// guesses. 30,000 wrong tokens in a row make a handful of log lines, which
// name the client and never a token.
func TestWrongTokensLimitedPerClientAndLogged(t *testing.T) {
	const token = "s3cret-0123456789abcdef0123"
	var logs syncBuffer
	s := New(Options{Host: "0.0.0.0", Token: token, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	ok := func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, http.StatusOK, map[string]bool{"ok": true}) }
	s.Handle(http.MethodGet, "/protected", Protected, ok)

	const guesser = "192.0.2.66:40000"
	for i := 0; i < maxWrongTokens; i++ {
		if rec := protectedAs(s, guesser, "Bearer wrong-guess-"+string(rune('a'+i))); rec.Code != 401 {
			t.Fatalf("wrong token %d: %d %s", i+1, rec.Code, rec.Body)
		}
	}
	rec := protectedAs(s, guesser, "Bearer "+token)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("after %d wrong tokens, the right one from the same client = %d (Retry-After %q), want 429 with Retry-After",
			maxWrongTokens, rec.Code, rec.Header().Get("Retry-After"))
	}
	if !strings.Contains(rec.Body.String(), "wrong") {
		t.Errorf("429 body %s does not say why", rec.Body)
	}
	if rec := protectedAs(s, "192.0.2.7:40000", "Bearer "+token); rec.Code != 200 {
		t.Errorf("another client with the right token = %d, want 200", rec.Code)
	}
	for i := 0; i < 50; i++ {
		if rec := protectedAs(s, "192.0.2.8:40000", ""); rec.Code != 401 {
			t.Fatalf("no token: %d", rec.Code)
		}
	}
	if rec := protectedAs(s, "192.0.2.8:40000", "Bearer "+token); rec.Code != 200 {
		t.Errorf("requests without a token counted as guesses: then the right token = %d", rec.Code)
	}

	for i := 0; i < 30_000; i++ {
		protectedAs(s, guesser, "Bearer wrong-guess-flood")
	}
	s.Stop(context.Background()) // reports the window's counts
	out := logs.String()
	lines := strings.Count(out, "\n")
	t.Logf("log after 30,010 wrong tokens:\n%s", out)
	if lines > 6 {
		t.Errorf("%d log lines for one flood of wrong tokens, want a handful", lines)
	}
	if !strings.Contains(out, "192.0.2.66") || !strings.Contains(out, "count=30001") { // the flood and the right token refused
		t.Errorf("the log does not name the client and the count of refused attempts")
	}
	if strings.Contains(out, token) || strings.Contains(out, "wrong-guess") {
		t.Error("a token reached the log")
	}
}
