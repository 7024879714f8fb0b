package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/gateway"
	"github.com/perchhq/perch/appliance/provider"
)

// newHub builds what the channels share: the durable inbox, pairing (whose
// approvals are written to the config file), voice transcription.
func (s *System) newHub() *channel.Hub {
	return channel.NewHub(channel.HubOptions{
		Bus: s.Bus, Store: s.Store, Log: s.Log, Workspace: s.Cfg.WorkspaceDir(),
		Transcribe: s.transcriber(),
		SaveAllowFrom: func(ch, id string) error {
			return config.AddAllowFrom(s.Cfg.Path(), ch, id)
		},
	})
}

// warnOpen says at start which channels anyone can talk to.
func warnOpen(log *slog.Logger, sec config.ChannelSection) {
	if len(sec.AllowFrom) > 0 {
		return
	}
	if sec.AllowAllTools {
		log.Warn("channel open to anyone, with every tool: anyone who finds the bot can run commands on this board; set channels."+sec.Name+".allow_from", "channel", sec.Name)
		return
	}
	log.Warn("channel open to anyone; unknown senders get only tools that cannot change the board (set channels."+sec.Name+".allow_from to admit people by id)", "channel", sec.Name)
}

// webhookRoutes collects the platforms' webhook routes while the channels
// are built, before the gateway's server exists, and adds them to it.
type webhookRoutes struct {
	mu     sync.Mutex
	routes []webhookRoute
	srv    *gateway.Server
}

type webhookRoute struct {
	method, path string
	h            http.HandlerFunc
}

// HandleWebhook implements channel.Routes.
func (w *webhookRoutes) HandleWebhook(method, path string, h http.HandlerFunc) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.routes {
		if r.method == method && r.path == path {
			return fmt.Errorf("the path %s is already served by another channel", path)
		}
	}
	if reserved(path) {
		return fmt.Errorf("the path %s belongs to the gateway's API; choose another webhook_path", path)
	}
	w.routes = append(w.routes, webhookRoute{method, path, h})
	if w.srv != nil {
		w.srv.Handle(method, path, gateway.SelfGuarded, h)
	}
	return nil
}

func (w *webhookRoutes) attach(srv *gateway.Server) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.srv = srv
	for _, r := range w.routes {
		srv.Handle(r.method, r.path, gateway.SelfGuarded, r.h)
	}
}

// webhookHint explains a request to LINE's webhook path that nothing
// serves: LINE's console says only that the webhook failed, and a bare
// 404 does not say which setting is missing.
func (s *System) webhookHint(path string) string {
	l := s.Cfg.Channels.LINE
	if p := l.WebhookPath; path != p && path != "/webhook/line" {
		return ""
	}
	switch {
	case !l.Enabled:
		return fmt.Sprintf("no LINE webhook here: channels.line.enabled is false (set it, with channel_secret and channel_access_token, and restart; LINE's webhook is then %s on this port)", l.WebhookPath)
	case l.WebhookPort != s.Cfg.Gateway.Port:
		return fmt.Sprintf("no LINE webhook on this port: channels.line.webhook_port is %d, so LINE's webhook listens on port %d (set it to gateway.port, %d, to serve it here)", l.WebhookPort, l.WebhookPort, s.Cfg.Gateway.Port)
	case path != l.WebhookPath:
		return fmt.Sprintf("no LINE webhook at %s: channels.line.webhook_path is %s", path, l.WebhookPath)
	}
	return "no LINE webhook here: the LINE channel did not start (is channel_secret or channel_access_token empty? see perch status and the gateway's log)"
}

// reserved reports whether path collides with the gateway's own routes.
func reserved(path string) bool {
	for _, p := range []string{"/chat", "/health", "/ready", "/admin", "/setup", "/static", "/sensors", "/api"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return path == "/"
}

// registerChannelsAPI adds the pairing routes: the CLI's `perch channels
// approve CODE` and the page's approve button.
func (s *System) registerChannelsAPI() {
	h := s.HTTP
	h.Handle(http.MethodPost, "/admin/channels/approve", gateway.Protected, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Code string `json:"code"`
		}
		if !gateway.DecodeJSON(w, r, &req) {
			return
		}
		hub := s.Channels.Hub()
		a, err := hub.Approve(req.Code)
		switch {
		case errors.Is(err, channel.ErrNoPairing):
			gateway.WriteError(w, http.StatusNotFound, err.Error())
			return
		case err != nil:
			gateway.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		gateway.WriteJSON(w, http.StatusOK, a)
	})
	h.Handle(http.MethodGet, "/admin/channels/pairing", gateway.Protected, func(w http.ResponseWriter, r *http.Request) {
		list, err := s.Channels.Hub().Pairings()
		if err != nil {
			gateway.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		if list == nil {
			list = []channel.Pairing{}
		}
		gateway.WriteJSON(w, http.StatusOK, list)
	})
}

// transcriber returns voice transcription through groq or openai, whichever
// has a key (groq first: it is free and fast), or nil.
func (s *System) transcriber() channel.TranscribeFunc {
	c, err := provider.NewTranscriber(context.Background(), s.Cfg, s.Log)
	if err != nil {
		s.Log.Warn("voice transcription unavailable", "err", err)
		return nil
	}
	if c == nil {
		return nil
	}
	s.Log.Info("voice messages are transcribed", "provider", c.Name(), "model", c.Model())
	return c.Transcribe
}
