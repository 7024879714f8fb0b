package channel

import (
	"log/slog"
	"net/http"
	"time"

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
	// are all set. It must not connect: Start does. Webhook routes on the
	// gateway's listener are registered here (Deps.Routes), before the
	// gateway serves.
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
	// Hub is what the gateway's channels share: the durable inbox, the
	// allow lists and pairing codes, transcription, every channel's state.
	// Nil makes NewIntake build a private one from the fields above (tests).
	Hub *Hub
	// Routes serves webhooks on the gateway's own listener; nil when the
	// process has none (perch agent, tests without a gateway).
	Routes Routes
	// GatewayHost and GatewayPort are where the gateway listens: a webhook
	// configured on the same port is served by the gateway itself.
	GatewayHost string
	GatewayPort int
	// TurnTimeout is how long the agent may work on a message
	// (agents.defaults.turn_timeout_seconds); 0: unknown.
	TurnTimeout time.Duration
	// IsCommand reports whether name ("status", no slash) is one of the
	// agent's chat commands, for a platform that reaches them some other
	// way than by a message starting with "/"; nil knows none.
	IsCommand func(name string) bool
}

// Routes registers HTTP routes on the gateway's listener.
type Routes interface {
	// HandleWebhook serves h at method and path without the gateway's
	// token and browser rules: h checks the platform's own credential (a
	// signature) itself. Call it from Platform.New, before the gateway
	// serves; a path already taken is an error.
	HandleWebhook(method, path string, h http.HandlerFunc) error
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
