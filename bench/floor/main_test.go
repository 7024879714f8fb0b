package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// TestFloorSendsHistoryAndPersists: the floor does what it stands for — it
// sends the whole history every turn, and with a log it writes each
// message durably.
func TestFloorSendsHistoryAndPersists(t *testing.T) {
	var lens []int
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Messages []message }
		json.NewDecoder(r.Body).Decode(&req)
		lens = append(lens, len(req.Messages))
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`)
	}))
	defer prov.Close()
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{provider: prov.URL, limit: 3, sessions: map[string]*session{}, hc: prov.Client(), log: f}
	for i := 0; i < 3; i++ {
		w := httptest.NewRecorder()
		s.chat(w, httptest.NewRequest("POST", "/chat", strings.NewReader(`{"message":"hi","session_key":"a"}`)))
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"response":"ok"`) {
			t.Fatalf("turn %d: %d %s", i, w.Code, w.Body)
		}
	}
	if want := []int{1, 3, 4}; len(lens) != 3 || lens[0] != want[0] || lens[1] != want[1] || lens[2] != want[2] {
		t.Errorf("history sent %v, want %v (the history capped at 3, then the turn's message)", lens, want)
	}
	data, _ := os.ReadFile(f.Name())
	if n := bytes.Count(data, []byte("\n")); n != 6 {
		t.Errorf("%d records in the log, want 6 (user and reply per turn)", n)
	}
}
