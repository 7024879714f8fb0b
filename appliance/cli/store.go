package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/store"
)

// openStore opens the database of cfg for a command run without a
// gateway. A command that comes first on a fresh board makes the config
// dir, 0700 as onboard and the gateway make it: it will hold the config,
// the token and the conversations.
func openStore(cfg *config.Config) (*store.DB, error) {
	if err := os.MkdirAll(cfg.Dir(), 0o700); err != nil {
		return nil, fmt.Errorf("config dir %s: %w", cfg.Dir(), err)
	}
	return store.Open(cfg.DBPath(), store.Options{})
}

// noDatabase reports whether cfg's database was never made: commands that
// only read answer "nothing" then, instead of creating it (and its
// journal) in a home that may never run a gateway.
func noDatabase(cfg *config.Config) bool {
	_, err := os.Stat(cfg.DBPath())
	return errors.Is(err, fs.ErrNotExist)
}
