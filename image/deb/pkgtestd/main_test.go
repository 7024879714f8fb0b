package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFiles(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "good/dists/stable"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "good/dists/stable/InRelease"), []byte("signed"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Files(root))
	defer srv.Close()
	for path, want := range map[string]int{
		"/good/dists/stable/InRelease": 200,
		"/good/dists/stable/Release":   404,
		"/good/dists/":                 404, // no listings
		"/../etc/passwd":               404,
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/good/x", strings.NewReader("x"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d", resp.StatusCode)
	}
}

func TestProviderCountsUserMessages(t *testing.T) {
	p := NewProvider()
	defer p.Close()
	body := `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"one"},{"role":"assistant","content":"a"},{"role":"user","content":"two"}]}`
	resp, err := http.Post(p.Base()+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message struct{ Content string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if len(out.Choices) != 1 || out.Choices[0].Message.Content != "fake reply: 2 user messages, last: two" {
		t.Fatalf("reply %+v", out)
	}
}

// TestRun: the command writes the env file once it listens, serves the
// root, and exits cleanly on its timeout.
func TestRun(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := filepath.Join(t.TempDir(), "servers.env")
	errc := make(chan error, 1)
	go func() { errc <- run(context.Background(), []string{"-root", root, "-env", env, "-timeout", "3s"}) }()
	var text []byte
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(env); err == nil {
			text = b
			break
		}
	}
	vars := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(text)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		vars[k] = v
	}
	if vars["REPO_URL"] == "" || vars["PROVIDER_URL"] == "" {
		t.Fatalf("env file %q", text)
	}
	resp, err := http.Get(vars["REPO_URL"] + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(b, []byte("hi")) {
		t.Errorf("GET /hello: %q", b)
	}
	resp, err = http.Post(vars["PROVIDER_URL"]+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("provider: %d", resp.StatusCode)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop at its timeout")
	}
}

func TestRunRejectsMissingRoot(t *testing.T) {
	err := run(context.Background(), []string{"-root", filepath.Join(t.TempDir(), "nope"), "-env", "x"})
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("err = %v", err)
	}
}
