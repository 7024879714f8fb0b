package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/pidfile"
)

// fakeGateway speaks the gateway's HTTP API over loopback: the pid file's
// proof on /health, the token on everything else, and the jobs API over a
// map.
type fakeGateway struct {
	*httptest.Server
	key, token string

	mu    sync.Mutex
	auths []string // Authorization headers received, in order
	jobs  map[string]api.Job
	ready bool
}

func newFakeGateway(t *testing.T, key, token string) *fakeGateway {
	g := &fakeGateway{key: key, token: token, jobs: map[string]api.Job{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if c := r.Header.Get(pidfile.ChallengeHeader); c != "" && g.key != "" {
			w.Header().Set(pidfile.ProofHeader, pidfile.Proof(g.key, c))
		}
		writeJSON(w, 200, api.Health{Status: "ok"})
	})
	mux.HandleFunc("POST /chat", g.authed(func(w http.ResponseWriter, r *http.Request) {
		var req api.ChatRequest
		if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&req) != nil {
			writeJSON(w, 400, api.Error{Error: "send JSON"})
			return
		}
		writeJSON(w, 200, api.ChatResponse{Response: req.SessionKey + ": " + req.Message, UICommands: []api.UICommand{}})
	}))
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		ready := g.ready
		g.mu.Unlock()
		if !ready {
			writeJSON(w, 503, map[string]any{"status": "not ready", "checks": map[string]any{"provider": map[string]string{"status": "fail"}}})
			return
		}
		writeJSON(w, 200, map[string]any{"status": "ready"})
	})
	mux.HandleFunc("GET /admin/cron", g.authed(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		defer g.mu.Unlock()
		list := []api.Job{}
		for _, j := range g.jobs {
			list = append(list, j)
		}
		writeJSON(w, 200, list)
	}))
	mux.HandleFunc("POST /admin/cron", g.authed(func(w http.ResponseWriter, r *http.Request) {
		var spec api.JobSpec
		if err := json.NewDecoder(r.Body).Decode(&spec); err != nil || spec.Message == "" {
			writeJSON(w, 400, api.Error{Error: "message is empty"})
			return
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		j := api.Job{ID: "j" + string(rune('0'+len(g.jobs))), JobSpec: spec, Enabled: true}
		g.jobs[j.ID] = j
		writeJSON(w, 201, j)
	}))
	job := func(w http.ResponseWriter, r *http.Request, change func(*api.Job) bool) {
		g.mu.Lock()
		defer g.mu.Unlock()
		j, ok := g.jobs[r.PathValue("id")]
		if !ok {
			writeJSON(w, 404, api.Error{Error: "no such job " + r.PathValue("id")})
			return
		}
		if change(&j) {
			g.jobs[j.ID] = j
		} else {
			delete(g.jobs, j.ID)
		}
		writeJSON(w, 200, j)
	}
	mux.HandleFunc("DELETE /admin/cron/{id}", g.authed(func(w http.ResponseWriter, r *http.Request) {
		job(w, r, func(*api.Job) bool { return false })
	}))
	mux.HandleFunc("POST /admin/cron/{id}/{action}", g.authed(func(w http.ResponseWriter, r *http.Request) {
		job(w, r, func(j *api.Job) bool { j.Enabled = r.PathValue("action") == "enable"; return true })
	}))
	mux.HandleFunc("GET /admin/channels/pairing", g.authed(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []api.Pairing{{Code: "K7Q2", Channel: "telegram", SenderID: "42", ChatID: "42"}})
	}))
	mux.HandleFunc("POST /admin/channels/approve", g.authed(func(w http.ResponseWriter, r *http.Request) {
		var req api.ApproveRequest
		json.NewDecoder(r.Body).Decode(&req)
		if req.Code != "K7Q2" {
			writeJSON(w, 404, api.Error{Error: "no pending sender has the code " + req.Code})
			return
		}
		writeJSON(w, 200, api.Approval{Pairing: api.Pairing{Code: "K7Q2", Channel: "telegram", SenderID: "42"}, Key: "channels.telegram.allow_from"})
	}))
	g.Server = httptest.NewServer(mux)
	t.Cleanup(g.Close)
	return g
}

func (g *fakeGateway) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.auths = append(g.auths, r.Header.Get("Authorization"))
		g.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+g.token {
			writeJSON(w, 401, api.Error{Error: "missing or wrong token"})
			return
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func addr(g *fakeGateway) string { return strings.TrimPrefix(g.URL, "http://") }

// TestFindProvesTheGateway: Find hands out a client only for a listener
// that proves it holds the pid file's key; a stranger on the pid file's
// address (a port reused after a power loss) gets no request with the token.
func TestFindProvesTheGateway(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	pidPath := filepath.Join(dir, "perch.pid")
	key := pidfile.NewKey()

	g := newFakeGateway(t, key, "tok")
	if err := pidfile.Write(pidPath, addr(g), key); err != nil {
		t.Fatal(err)
	}
	c, err := Find(ctx, pidPath, "tok")
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	if c.Base() != g.URL || c.PID <= 0 {
		t.Errorf("client of %s, pid %d; want %s and this process", c.Base(), c.PID, g.URL)
	}

	stranger := newFakeGateway(t, pidfile.NewKey(), "tok") // proves another key
	silent := newFakeGateway(t, "", "tok")                 // proves nothing
	for _, s := range []*fakeGateway{stranger, silent} {
		if err := pidfile.Write(pidPath, addr(s), key); err != nil {
			t.Fatal(err)
		}
		_, err := Find(ctx, pidPath, "tok")
		if !errors.Is(err, ErrNoGateway) || !strings.Contains(err.Error(), "not the gateway of") {
			t.Errorf("Find with a stranger on the address: %v", err)
		}
		if len(s.auths) != 0 {
			t.Errorf("the stranger received %d requests with a token", len(s.auths))
		}
	}

	// Nobody listens at the address any more.
	gone := newFakeGateway(t, key, "tok")
	goneAddr := addr(gone)
	gone.Close()
	if err := pidfile.Write(pidPath, goneAddr, key); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(ctx, pidPath, "tok"); !errors.Is(err, ErrNoGateway) || !strings.Contains(err.Error(), "does not answer") {
		t.Errorf("Find with nobody listening: %v", err)
	}

	// No pid file, and one naming a process that has ended.
	if _, err := Find(ctx, filepath.Join(dir, "absent.pid"), "tok"); !errors.Is(err, ErrNoGateway) {
		t.Errorf("Find without a pid file: %v", err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, "dead.pid")
	data, _ := json.Marshal(pidfile.Info{PID: cmd.Process.Pid, Addr: addr(g), Key: key})
	if err := os.WriteFile(dead, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(ctx, dead, "tok"); !errors.Is(err, ErrNoGateway) || !strings.Contains(err.Error(), "not running") {
		t.Errorf("Find with a dead pid: %v", err)
	}
}

// TestCalls: each call reaches its endpoint with the token and decodes the
// answer; a refusal carries the gateway's own message.
func TestCalls(t *testing.T) {
	ctx := context.Background()
	g := newFakeGateway(t, "", "tok")
	c := New(g.URL, "tok")

	resp, err := c.Chat(ctx, api.ChatRequest{Message: "hi", SessionKey: "cli:default"})
	if err != nil || resp.Response != "cli:default: hi" {
		t.Fatalf("Chat: %+v %v", resp, err)
	}

	j, err := c.Add(ctx, api.JobSpec{Message: "water the plants", Schedule: api.Schedule{EverySeconds: ptr(int64(3600))}})
	if err != nil || j.ID == "" || !j.Enabled {
		t.Fatalf("Add: %+v %v", j, err)
	}
	if _, err := c.Add(ctx, api.JobSpec{}); err == nil || err.Error() != "message is empty" {
		t.Errorf("Add refused: %v", err)
	}
	if off, err := c.SetEnabled(ctx, j.ID, false); err != nil || off.Enabled {
		t.Errorf("disable: %+v %v", off, err)
	}
	if on, err := c.SetEnabled(ctx, j.ID, true); err != nil || !on.Enabled {
		t.Errorf("enable: %+v %v", on, err)
	}
	if list, err := c.List(ctx); err != nil || len(list) != 1 || list[0].Message != "water the plants" {
		t.Errorf("List: %+v %v", list, err)
	}
	if gone, err := c.Remove(ctx, j.ID); err != nil || gone.ID != j.ID {
		t.Errorf("Remove: %+v %v", gone, err)
	}
	_, err = c.Remove(ctx, j.ID)
	var se *StatusError
	if !errors.Is(err, api.ErrNoJob) || !errors.As(err, &se) || se.Status != 404 || !strings.Contains(err.Error(), "no such job "+j.ID) {
		t.Errorf("Remove of a removed job: %v", err)
	}
	if list, err := c.List(ctx); err != nil || list == nil || len(list) != 0 {
		t.Errorf("List after: %#v %v", list, err)
	}

	if ps, err := c.Pairings(ctx); err != nil || len(ps) != 1 || ps[0].Code != "K7Q2" {
		t.Errorf("Pairings: %+v %v", ps, err)
	}
	if a, err := c.ApprovePairing(ctx, "K7Q2"); err != nil || a.Key != "channels.telegram.allow_from" || a.SenderID != "42" {
		t.Errorf("ApprovePairing: %+v %v", a, err)
	}
	if _, err := c.ApprovePairing(ctx, "XXXX"); err == nil || !strings.Contains(err.Error(), "no pending sender has the code XXXX") {
		t.Errorf("ApprovePairing of an unknown code: %v", err)
	}

	// A wrong token is the gateway's 401, not ErrNoJob, and says what
	// makes the CLI's token differ from the gateway's.
	_, err = New(g.URL, "wrong").List(ctx)
	if !errors.As(err, &se) || se.Status != 401 || errors.Is(err, api.ErrNoJob) ||
		!strings.Contains(err.Error(), "refused this config's gateway.api_token") || !strings.Contains(err.Error(), "restart the gateway") {
		t.Errorf("wrong token: %v", err)
	}
	for _, a := range g.auths {
		if a != "Bearer tok" && a != "Bearer wrong" {
			t.Errorf("Authorization %q", a)
		}
	}
}

// TestReady: 503 is an answer (not ready, with its checks), not an error.
func TestReady(t *testing.T) {
	ctx := context.Background()
	g := newFakeGateway(t, "", "tok")
	c := New(g.URL, "tok")
	body, ok, err := c.Ready(ctx)
	if err != nil || ok || body["status"] != "not ready" || body["checks"] == nil {
		t.Fatalf("not ready: %v %v %v", body, ok, err)
	}
	g.mu.Lock()
	g.ready = true
	g.mu.Unlock()
	if body, ok, err := c.Ready(ctx); err != nil || !ok || body["status"] != "ready" {
		t.Fatalf("ready: %v %v %v", body, ok, err)
	}
}

// TestAnswersThatAreNotTheGateways: a proxy's HTML error page, a body that
// is not the JSON asked for, and a closed port each give an error that
// says what happened.
func TestAnswersThatAreNotTheGateways(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/admin/status" {
			w.Write([]byte("[1,2]"))
			return
		}
		w.WriteHeader(502)
		w.Write([]byte("<html>Bad Gateway</html>"))
	}))
	defer srv.Close()
	c := New(srv.URL, "")
	if _, err := c.Chat(ctx, api.ChatRequest{Message: "hi"}); err == nil || err.Error() != "gateway: HTTP 502" {
		t.Errorf("HTML 502: %v", err)
	}
	if _, err := c.Status(ctx); err == nil || !strings.Contains(err.Error(), "unexpected answer to GET /admin/status") {
		t.Errorf("wrong JSON: %v", err)
	}
	srv.Close()
	if _, err := c.Status(ctx); err == nil || !strings.Contains(err.Error(), "gateway at "+srv.URL) {
		t.Errorf("closed port: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
