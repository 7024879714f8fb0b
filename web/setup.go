package web

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/gateway"
)

// SetupRequest is the body of POST /setup.
type SetupRequest struct {
	// Code is the one-time setup code from the gateway's log; needed while
	// no provider is configured.
	Code     string        `json:"code"`
	Provider string        `json:"provider"`
	Model    string        `json:"model"`
	APIKey   config.Secret `json:"api_key"`
	// APIBase is optional; empty keeps the provider's default.
	APIBase string `json:"api_base"`
}

// SetupResult is what a successful setup reports (no secret in it).
type SetupResult struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	// Config is the file that was written.
	Config string `json:"config"`
}

// Setup is the provider setup the page drives; the composition root
// implements it over the config file, the provider and the agent loop.
type Setup interface {
	// Configured reports whether a provider is in use.
	Configured() bool
	// Apply validates req, writes the config file and swaps the new
	// provider in. An error wrapping ErrBadSetup is the caller's to fix
	// (400); any other is the machine's (500).
	Apply(ctx context.Context, req SetupRequest) (SetupResult, error)
}

// ErrBadSetup marks setup input the user must correct.
var ErrBadSetup = errors.New("setup")

// Wrong setup codes allowed per window, across all clients: one budget for
// the whole LAN, so neither many addresses nor many connections buy more
// guesses at an 8-digit code.
const (
	maxWrongCodes = 5
	wrongWindow   = time.Minute
)

// gate holds the one-time setup code and the wrong-code budget.
type gate struct {
	code  string // "" when none is active
	wrong []time.Time
	now   func() time.Time
}

// issue makes a new 8-digit code, shown as 1234-5678.
func (g *gate) issue() {
	n, err := rand.Int(rand.Reader, big.NewInt(100_000_000))
	if err != nil {
		panic("web: no randomness: " + err.Error()) // crypto/rand never fails on Linux
	}
	s := fmt.Sprintf("%08d", n.Int64())
	g.code = s[:4] + "-" + s[4:]
}

// normalizeCode drops what people add when they copy a code: spaces and
// dashes.
func normalizeCode(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '-' || r == '\t' {
			return -1
		}
		return r
	}, s)
}

// check answers 0 when given is the active code, else the status and the
// message to send, and how long to wait when the budget is spent.
func (g *gate) check(given string) (status int, msg string, wait time.Duration) {
	now := g.now()
	cut := 0
	for cut < len(g.wrong) && now.Sub(g.wrong[cut]) >= wrongWindow {
		cut++
	}
	g.wrong = g.wrong[cut:]
	if len(g.wrong) >= maxWrongCodes {
		wait = g.wrong[0].Add(wrongWindow).Sub(now)
		return http.StatusTooManyRequests, fmt.Sprintf("too many wrong setup codes; wait %d seconds and try again", int(wait.Seconds()+0.999)), wait
	}
	if g.code == "" {
		return http.StatusForbidden, "no setup code is active; restart the gateway (it prints a new code in its log)", 0
	}
	given = normalizeCode(given)
	if given == "" {
		return http.StatusForbidden, "the setup code is missing: the gateway printed it in its log when it started (journalctl -u perch | grep setup_code); enter it in the form", 0
	}
	if subtle.ConstantTimeCompare([]byte(given), []byte(normalizeCode(g.code))) != 1 {
		g.wrong = append(g.wrong, now)
		left := maxWrongCodes - len(g.wrong)
		return http.StatusForbidden, fmt.Sprintf("wrong setup code: use the code in the gateway's log from its latest start (journalctl -u perch | grep setup_code); %d more tries this minute", left), 0
	}
	return 0, "", 0
}

// setupHandler serves POST /setup.
type setupHandler struct {
	srv   *gateway.Server
	setup Setup
	log   *slog.Logger

	mu   sync.Mutex // one setup at a time; guards gate
	gate gate
}

func newSetupHandler(s *gateway.Server, d Deps) *setupHandler {
	return &setupHandler{srv: s, setup: d.Setup, log: d.Log, gate: gate{now: time.Now}}
}

// serve applies a setup. While no provider is configured the setup code is
// the credential (no token needed: the owner may not have it yet); once one
// is, the route follows the Protected rule like /admin/*, and the code is
// gone — it was spent or never issued.
func (h *setupHandler) serve(w http.ResponseWriter, r *http.Request) {
	var req SetupRequest
	if !gateway.DecodeJSON(w, r, &req) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	byCode := !h.setup.Configured()
	if byCode {
		if status, msg, wait := h.gate.check(req.Code); status != 0 {
			if wait > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds()+0.999)))
			}
			if status == http.StatusTooManyRequests {
				h.log.Warn("setup: too many wrong setup codes; refusing for a while", "remote", r.RemoteAddr)
			}
			gateway.WriteError(w, status, msg)
			return
		}
	} else if !h.srv.Authorize(w, r) {
		return
	}
	res, err := h.setup.Apply(r.Context(), req)
	if err != nil {
		if errors.Is(err, ErrBadSetup) {
			gateway.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		h.log.Error("setup failed", "err", err)
		gateway.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if byCode {
		h.gate.code = "" // one time
	}
	h.log.Info("provider configured from the web page", "provider", res.Provider, "model", res.Model, "config", res.Config)
	gateway.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok", "provider": res.Provider, "model": res.Model, "config": res.Config})
}
