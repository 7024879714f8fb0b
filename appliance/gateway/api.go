package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/pidfile"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/version"
	"github.com/perchhq/perch/store"
)

// Deps are what the core routes need.
type Deps struct {
	Agent     *agent.Loop
	Store     *store.DB
	Checks    *Checks
	Workspace string
	// ServiceStatus and Logs back /admin/service and /admin/logs (systemd).
	ServiceStatus func(ctx context.Context) (string, error)
	Logs          func(ctx context.Context) (string, error)
	// StatusExtra adds fields to /admin/status (sensors, devices, ...).
	StatusExtra func(ctx context.Context, into map[string]any)
	// Answered, when set, hears of each exchange /chat answered, so that
	// the other pages open on the same chat show it at once. page is the
	// asking page's PageHeader (empty from other clients).
	Answered func(in bus.Inbound, asked time.Time, reply string, answered time.Time, page string)
}

// PageHeader names the page (one browser tab) that sends a /chat request:
// the page shows its own exchange from the answer, and every other page
// open on the chat from the event Answered publishes.
const PageHeader = "X-Perch-Page"

// RegisterCore adds /chat, /health, /ready and /admin/{status,service,logs}.
//
// /ready is open, but only clients allowed the details (the Protected rule:
// the token, or loopback when there is none) read the agent object and the
// checks' full messages; others read the status and each check's name,
// status and public message.
func (s *Server) RegisterCore(d Deps) {
	sessions := &sessionList{db: d.Store, loop: d.Agent}
	s.Handle(http.MethodPost, "/chat", Protected, s.chat(d))
	s.Handle(http.MethodGet, "/health", Open, s.health)
	s.Handle(http.MethodGet, "/ready", Open, s.readyHandler(d, sessions))
	s.Handle(http.MethodGet, "/admin/status", Protected, s.adminStatus(d, sessions))
	s.Handle(http.MethodGet, "/admin/service", Protected, commandOutput(d.ServiceStatus, "service status"))
	s.Handle(http.MethodGet, "/admin/logs", Protected, commandOutput(d.Logs, "logs"))
}

// MaxSessionKey bounds session keys, channel names and chat ids: they are
// database keys.
const MaxSessionKey = 512

func (s *Server) chat(d Deps) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req api.ChatRequest
		if !DecodeJSON(w, r, &req) {
			return
		}
		if strings.TrimSpace(req.Message) == "" {
			WriteError(w, http.StatusBadRequest, `"message" is empty; send {"message": "..."}`)
			return
		}
		if len(req.SessionKey) > MaxSessionKey || len(req.Channel) > MaxSessionKey || len(req.ChatID) > MaxSessionKey {
			WriteError(w, http.StatusBadRequest, fmt.Sprintf(`"session_key", "channel" and "chat_id" are limited to %d bytes`, MaxSessionKey))
			return
		}
		if !s.ready.Load() {
			WriteError(w, http.StatusServiceUnavailable, "the gateway is starting; try again in a moment")
			return
		}
		in := bus.Inbound{
			Channel:    req.Channel,
			ChatID:     req.ChatID,
			SessionKey: req.SessionKey,
			Text:       req.Message,
		}
		if in.SessionKey == "" {
			in.SessionKey = "rest:default"
		}
		if in.Channel == "" {
			in.Channel = bus.ChannelCLI
		}
		if mc := req.MediaConfig; mc != nil {
			in.Metadata = map[string]string{"media_type": mc.Type, "media_size": mc.Size, "media_aspect_ratio": mc.AspectRatio}
		}
		asked := time.Now()
		rep, err := d.Agent.Process(r.Context(), in)
		if err != nil {
			status, msg := chatError(err)
			if status >= 500 {
				s.log.Warn("chat failed", "session", in.SessionKey, "status", status, "err", err)
			}
			WriteError(w, status, msg)
			return
		}
		ui := rep.UI
		if ui == nil {
			ui = []api.UICommand{}
		}
		answered := time.Now()
		if d.Answered != nil {
			d.Answered(in, asked, rep.Text, answered, r.Header.Get(PageHeader))
		}
		WriteJSON(w, http.StatusOK, api.ChatResponse{Response: rep.Text, UICommands: ui, T: answered.UnixMilli()})
	}
}

// chatError maps a turn's failure to a status and a message that names the
// cause.
func chatError(err error) (int, string) {
	var pe *provider.Error
	switch {
	case errors.Is(err, agent.ErrEmpty):
		return http.StatusBadRequest, `"message" is empty`
	case errors.Is(err, provider.ErrNoProvider):
		return http.StatusServiceUnavailable, err.Error() + "; or connect one with the web page's setup form"
	case errors.Is(err, agent.ErrBusy):
		return http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, agent.ErrStopped):
		return http.StatusServiceUnavailable, "the gateway is shutting down"
	case errors.Is(err, agent.ErrTimeout):
		return http.StatusGatewayTimeout, err.Error()
	case errors.As(err, &pe):
		return http.StatusBadGateway, err.Error()
	case errors.Is(err, context.Canceled):
		return 499, "request canceled"
	}
	return http.StatusInternalServerError, err.Error()
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	// A CLI on this machine asks the listener to prove it is the gateway its
	// pid file names before it sends the token here.
	if ch := r.Header.Get(pidfile.ChallengeHeader); ch != "" && s.opts.ProofKey != "" && len(ch) <= 128 {
		w.Header().Set(pidfile.ProofHeader, pidfile.Proof(s.opts.ProofKey, ch))
	}
	WriteJSON(w, http.StatusOK, map[string]string{"status": "ok", "uptime": FormatUptime(s.Uptime())})
}

type readyAgent struct {
	Model     string               `json:"model"`
	Workspace string               `json:"workspace"`
	Sessions  []readySession       `json:"sessions"`
	Subagents []agent.SubagentInfo `json:"subagents"`
}

type readySession struct {
	Key          string `json:"key"`
	MessageCount int    `json:"message_count"`
}

// maxReadySessions bounds the list in /ready: health probes call it often.
const maxReadySessions = 100

func (s *Server) readyHandler(d Deps, sessions *sessionList) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		details, answered := s.detailsAllowed(w, r)
		if answered {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		checks, ok := d.Checks.Run(ctx)
		if !s.ready.Load() {
			ok = false
			checks["startup"] = CheckResult{Name: "startup", Status: "fail", Message: "the gateway is starting", Timestamp: time.Now().UTC().Format(time.RFC3339),
				public: "the gateway is starting"}
		}
		if !details {
			withoutDetails(checks, s.detailsHint())
		}
		if !ok {
			WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "checks": checks})
			return
		}
		body := map[string]any{"status": "ready", "uptime": FormatUptime(s.Uptime()), "checks": checks}
		if details {
			ag := readyAgent{Workspace: d.Workspace, Sessions: []readySession{}, Subagents: []agent.SubagentInfo{}}
			if p, _ := d.Agent.Provider(); p != nil {
				ag.Model = p.Model()
			}
			if top, _, err := sessions.get(); err == nil {
				ag.Sessions = top
			}
			if subs := d.Agent.Subagents().List(); len(subs) > 0 {
				ag.Subagents = subs
			}
			body["agent"] = ag
		}
		WriteJSON(w, http.StatusOK, body)
	}
}

func (s *Server) adminStatus(d Deps, sessions *sessionList) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st := d.Agent.Stats()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		// ready is what /ready answers: start-up done and every check ok.
		ready := s.ready.Load()
		if d.Checks != nil && ready {
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			_, ok := d.Checks.Run(ctx)
			cancel()
			ready = ok
		}
		out := map[string]any{
			"uptime":            FormatUptime(s.Uptime()),
			"uptime_seconds":    int64(s.Uptime() / time.Second),
			"ready":             ready,
			"version":           version.Get().Version,
			"active_sessions":   st.ActiveSessions,
			"queue_depth":       st.QueueDepth,
			"running_turns":     st.Running,
			"memory_mb":         rssMB(),
			"heap_mb":           round1(float64(ms.HeapInuse) / (1 << 20)),
			"goroutines":        runtime.NumGoroutine(),
			"subagents_running": countRunning(d.Agent.Subagents().List()),
		}
		if p, err := d.Agent.Provider(); p != nil {
			out["provider"], out["model"] = p.Name(), p.Model()
		} else {
			out["provider_error"] = err.Error()
		}
		if d.Store != nil {
			if _, n, err := sessions.get(); err == nil {
				out["sessions"] = n
			}
			if u, err := d.Store.TotalUsage(); err == nil {
				out["tokens"] = u
			}
			out["database_bytes"] = d.Store.Size()
		}
		if d.StatusExtra != nil {
			d.StatusExtra(r.Context(), out)
		}
		WriteJSON(w, http.StatusOK, out)
	}
}

func countRunning(list []agent.SubagentInfo) int {
	n := 0
	for _, s := range list {
		if s.Status == agent.StatusRunning {
			n++
		}
	}
	return n
}

// commandOutput answers {output, error?}; a failure is still 200.
func commandOutput(fn func(ctx context.Context) (string, error), what string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if fn == nil {
			WriteJSON(w, http.StatusOK, map[string]string{"output": "", "error": what + " is not available in this build"})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		out, err := fn(ctx)
		body := map[string]string{"output": out}
		if err != nil {
			body["output"] = ""
			body["error"] = err.Error()
		}
		WriteJSON(w, http.StatusOK, body)
	}
}

// rssMB reads the resident set size from /proc/self/statm.
func rssMB() float64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return round1(float64(pages*int64(os.Getpagesize())) / (1 << 20))
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
