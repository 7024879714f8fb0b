package channel

import (
	"log/slog"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/store"
)

// Platform is one entry of the channel table: a chat platform this build
// can run. The composition root keeps the table; config.Channels' fields
// are the platforms' sections. Adding a platform is a package under
// appliance/channel/, a field in config.Channels and one Platform entry.
type Platform struct {
	// Name is the platform's key under channels in the config.
	Name string
	// New builds the channel from its enabled section, whose credentials
	// are all set. It must not connect: Start does.
	New func(d Deps) (Channel, error)
}

// Deps are what the appliance gives a platform's channel.
type Deps struct {
	// Section is the platform's config (Settings holds its own struct).
	Section config.ChannelSection
	Bus     *bus.Bus
	Store   *store.DB
	Log     *slog.Logger
	// Workspace is the agent's workspace: received media are saved under
	// it so the agent's file tools can read them.
	Workspace string
}

// Lookup returns the platform called name in table.
func Lookup(table []Platform, name string) (Platform, bool) {
	for _, p := range table {
		if p.Name == name {
			return p, true
		}
	}
	return Platform{}, false
}
