package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/store"
)

// fillSessions stores n sessions of two messages each, committed by 32
// writers at once so the store groups them.
func fillSessions(tb testing.TB, db *store.DB, n int) {
	tb.Helper()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				msgs := []chat.Message{{Role: "user", Content: "hello"}, {Role: "assistant", Content: "hi"}}
				if err := db.Append(fmt.Sprintf("telegram:%d", 100000+i), msgs, chat.Usage{}, 200); err != nil {
					tb.Error(err)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// BenchmarkReady3000Sessions: health probes call /ready often, so it must
// stay cheap however many sessions the store holds. "owner, after a turn"
// runs an offline command (/help) before each /ready, so every listing is
// taken afresh: the walk's cost.
func BenchmarkReady3000Sessions(b *testing.B) {
	const token = "tok-0123456789abcdef01234567"
	r := newRig(b, rigOptions{server: Options{Token: token}})
	r.srv.SetReady(true)
	r.checks.Register("store", func(context.Context) (bool, string) { return true, "bbolt" })
	fillSessions(b, r.db, 3000)
	for _, tc := range []struct {
		name, auth string
		turn       bool
	}{
		{"stranger", "", false},
		{"owner", "Bearer " + token, false},
		{"owner, after a turn", "Bearer " + token, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if tc.turn {
					if _, err := r.loop.Process(context.Background(), chatInbound("cli:bench", "/help")); err != nil {
						b.Fatal(err)
					}
				}
				req := httptest.NewRequest("GET", "/ready", nil)
				req.Host, req.RemoteAddr = "127.0.0.1:8080", "192.0.2.7:40000"
				if tc.auth != "" {
					req.Header.Set("Authorization", tc.auth)
				}
				rec := httptest.NewRecorder()
				r.srv.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("/ready = %d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
