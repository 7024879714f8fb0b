package appliance

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/store"
)

// TestNewCoreProviderErrorClosesTheStore: the provider is built while the
// store opens; a provider that cannot be created still fails the start
// with its own error, and leaves the database closed for the next start.
func TestNewCoreProviderErrorClosesTheStore(t *testing.T) {
	t.Setenv("PERCH_HOME", t.TempDir())
	cfg, err := config.Load(config.Options{Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Providers.OpenRouter.APIKey = "k"
	cfg.Providers.OpenRouter.APIBase = "ftp://nowhere"
	cfg.Agents.Defaults.Model = "openai/gpt-4o-mini"
	if _, err := NewCore(context.Background(), cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "api_base") {
		t.Fatalf("NewCore with a malformed api_base: %v", err)
	}
	db, err := store.Open(cfg.DBPath(), store.Options{})
	if err != nil {
		t.Fatalf("the database is still held after the failed start: %v", err)
	}
	db.Close()
}
