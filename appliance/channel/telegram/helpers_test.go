package telegram_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/channel/channeltest"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// transcriber is the production speech-to-text client pointed at the fake.
func transcriber(t *testing.T, prov *providertest.Server) channel.TranscribeFunc {
	t.Helper()
	cfg := config.Default()
	cfg.Providers.Groq.APIKey = "gsk-test"
	cfg.Providers.Groq.APIBase = prov.Base()
	c, err := provider.NewTranscriber(context.Background(), cfg, nil)
	if err != nil || c == nil {
		t.Fatalf("transcriber: %v", err)
	}
	return c.Transcribe
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// restartOptions put the database and workspace in dir, so a second
// Env on the same dir is the gateway restarted.
func restartOptions(dir string, prov ...*providertest.Server) channeltest.Options {
	o := channeltest.Options{StorePath: filepath.Join(dir, "perch.db"), Workspace: filepath.Join(dir, "workspace")}
	if len(prov) > 0 {
		o.Provider = prov[0]
	}
	return o
}
