package wsfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadStaysInTheWorkspaceAndOnRegularFiles(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "config.json")
	if err := os.WriteFile(secret, []byte(`{"api_key":"sk-secret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(ws, "AGENT.md"), []byte("be brief"), 0o644))
	must(os.MkdirAll(filepath.Join(ws, "memory"), 0o755))
	must(os.WriteFile(filepath.Join(ws, "memory", "notes.md"), []byte("inside"), 0o644))
	must(os.Symlink("notes.md", filepath.Join(ws, "memory", "MEMORY.md")))
	must(os.Symlink(secret, filepath.Join(ws, "IDENTITY.md")))
	must(os.Symlink("../"+filepath.Base(outside)+"/config.json", filepath.Join(ws, "USER.md")))
	must(syscall.Mkfifo(filepath.Join(ws, "HEARTBEAT.md"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "big.md"), []byte(strings.Repeat("x", 100)), 0o644))

	if data, cut, err := Read(ws, "AGENT.md", 1<<10); err != nil || cut || string(data) != "be brief" {
		t.Errorf("AGENT.md: %q %v %v", data, cut, err)
	}
	if data, _, err := Read(ws, "memory/MEMORY.md", 1<<10); err != nil || string(data) != "inside" {
		t.Errorf("a link inside the workspace: %q %v", data, err)
	}
	for _, name := range []string{"IDENTITY.md", "USER.md", "../" + filepath.Base(outside) + "/config.json", secret} {
		if data, _, err := Read(ws, name, 1<<10); err == nil || strings.Contains(string(data), "sk-secret") {
			t.Errorf("%s: read %q (%v), want refused", name, data, err)
		}
	}
	done := make(chan error, 1)
	go func() { _, _, err := Read(ws, "HEARTBEAT.md", 1<<10); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("a FIFO: %v, want ErrNotRegular", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
	if _, _, err := Read(ws, "memory", 1<<10); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a directory: %v, want ErrNotRegular", err)
	}
	if data, cut, err := Read(ws, "big.md", 10); err != nil || !cut || len(data) != 10 {
		t.Errorf("a long file: %d bytes, cut %v, %v", len(data), cut, err)
	}
}
