package gateway

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestWaitingAndAnswered: before Serve, Waiting tells whether a client
// waits in the listen queue; Answered closes once the server has answered
// a request, and not before.
func TestWaitingAndAnswered(t *testing.T) {
	s := New(Options{Host: "127.0.0.1", Log: slog.New(slog.DiscardHandler)})
	s.Handle(http.MethodGet, "/open", Open, func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(t.Context()) })
	if s.Waiting() {
		t.Fatal("Waiting with no client connected")
	}
	c := dialFrom(t, "127.0.0.2", s.Addr())
	deadline := time.Now().Add(2 * time.Second)
	for !s.Waiting() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !s.Waiting() {
		t.Fatal("not Waiting with a client in the listen queue")
	}
	go s.Serve()
	select {
	case <-s.Answered():
		t.Fatal("Answered before any request was answered")
	case <-time.After(50 * time.Millisecond):
	}
	if got := getOn(t, c); !strings.Contains(got, "200") {
		t.Fatalf("answer: %q", got)
	}
	select {
	case <-s.Answered():
	case <-time.After(5 * time.Second):
		t.Fatal("Answered not closed after a request was answered")
	}
}
