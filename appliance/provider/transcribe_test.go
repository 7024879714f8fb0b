package provider_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// A voice message's file lies in the workspace, where commands write too:
// a link in its place is not followed (the config would be uploaded), a
// FIFO is not waited on, and a plain file is uploaded under its own name.
func TestTranscribeReadsOnlyThePlainFile(t *testing.T) {
	prov := providertest.New()
	defer prov.Close()
	cfg := config.Default()
	cfg.Providers.Groq.APIKey = "gsk-test"
	cfg.Providers.Groq.APIBase = prov.Base()
	c, err := provider.NewTranscriber(context.Background(), cfg, nil)
	if err != nil || c == nil {
		t.Fatalf("transcriber: %v", err)
	}
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(secret, []byte(`{"api_key":"sk-leaked"}`), 0o600)
	link, fifo, plain := filepath.Join(dir, "audio.ogg"), filepath.Join(dir, "audio-2.ogg"), filepath.Join(dir, "audio-3.ogg")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(plain, []byte("OggS"), 0o644)
	for _, p := range []string{link, fifo} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Transcribe(ctx, p)
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || timedOut {
			t.Errorf("%s: %v, want a prompt refusal", filepath.Base(p), err)
		}
	}
	if _, err := c.Transcribe(context.Background(), plain); err != nil {
		t.Fatalf("a plain file: %v", err)
	}
	tx := prov.Transcribed()
	if len(tx) != 1 || tx[0].FileName != "audio-3.ogg" {
		t.Errorf("uploads %+v, want only audio-3.ogg", tx)
	}
	for _, x := range tx {
		if strings.Contains(x.FileName, dir) {
			t.Errorf("the upload names the local path: %q", x.FileName)
		}
	}
}
