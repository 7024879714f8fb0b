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
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/gateway"
	"github.com/perchhq/perch/appliance/gateway/attempts"
	"github.com/perchhq/perch/systemd"
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

// Wrong setup codes allowed. Per client (an IPv4 address or IPv6 /64):
// five at once, then one per 12 s, so a stranger guessing, or a script
// stuck on a wrong code, locks out only itself. For all clients together:
// 30 at once, then one per 2 s, so that guessing one of 10^8 codes takes
// years however many addresses are used; a single client cannot spend that
// budget, so locking the owner out takes many addresses at once.
const (
	wrongCodesBurst    = 5
	wrongCodeEvery     = 12 * time.Second
	allWrongCodesBurst = 30
	allWrongCodeEvery  = 2 * time.Second
)

// gate holds the one-time setup code and the wrong-code budgets.
type gate struct {
	code      string // "" when none is active
	where     string // where the code is printed, for messages
	perClient *attempts.Limiter
	all       *attempts.Limiter // one bucket, for the zero Client
}

func newGate(now func() time.Time) gate {
	return gate{
		perClient: attempts.NewLimiter(attempts.Options{Burst: wrongCodesBurst, Every: wrongCodeEvery, Now: now}),
		all:       attempts.NewLimiter(attempts.Options{Burst: allWrongCodesBurst, Every: allWrongCodeEvery, Now: now}),
	}
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

// verdict is the outcome of a code check: status 0 lets the setup go on.
type verdict struct {
	status int
	msg    string
	wait   time.Duration // > 0: a budget is spent
	wrong  bool          // a wrong code was given (and counted)
}

// check judges the code client c gives.
func (g *gate) check(given string, c attempts.Client) verdict {
	if wait := g.perClient.Wait(c); wait > 0 {
		return verdict{http.StatusTooManyRequests, fmt.Sprintf("too many wrong setup codes from your address; wait %d seconds and try again", seconds(wait)), wait, false}
	}
	if wait := g.all.Wait(attempts.Client{}); wait > 0 {
		return verdict{http.StatusTooManyRequests, fmt.Sprintf("too many wrong setup codes from many addresses; wait %d seconds and try again "+
			"(if this goes on, someone on the network is guessing: restart the gateway for a new code)", seconds(wait)), wait, false}
	}
	if g.code == "" {
		return verdict{status: http.StatusForbidden, msg: "no setup code is active; restart the gateway (it prints a new code " + g.where + ")"}
	}
	given = normalizeCode(given)
	if given == "" {
		return verdict{status: http.StatusForbidden, msg: "the setup code is missing: the gateway printed it " + g.where + " when it started; enter it in the form"}
	}
	if subtle.ConstantTimeCompare([]byte(given), []byte(normalizeCode(g.code))) != 1 {
		left := g.perClient.Fail(c)
		g.all.Fail(attempts.Client{})
		return verdict{status: http.StatusForbidden, wrong: true, msg: fmt.Sprintf("wrong setup code: use the code the gateway printed %s at its latest start; "+
			"%d more tries now, then one per %d seconds", g.where, left, seconds(wrongCodeEvery))}
	}
	return verdict{}
}

func seconds(d time.Duration) int { return int(d.Seconds() + 0.999) }

// setupHandler serves POST /setup.
type setupHandler struct {
	srv     *gateway.Server
	setup   Setup
	log     *slog.Logger
	token   func() string
	onSetup func()

	mu   sync.Mutex // one setup at a time; guards gate
	gate gate

	// Wrong codes and refusals, logged in aggregate by client.
	wrong, refused *attempts.Tally
}

func newSetupHandler(s *gateway.Server, d Deps) *setupHandler {
	log := d.Log
	g := newGate(time.Now)
	g.where = d.CodeWhere
	return &setupHandler{srv: s, setup: d.Setup, log: log, gate: g, token: d.Token, onSetup: d.OnSetup,
		wrong: attempts.NewTally(attempts.TallyOptions{
			First: func(c attempts.Client) {
				log.Warn("setup: wrong setup code; later ones are summed up each minute", "client", c.String())
			},
			Report: func(s attempts.Summary) { log.Warn("setup: wrong setup codes", s.LogAttrs()...) },
		}),
		refused: attempts.NewTally(attempts.TallyOptions{
			First: func(c attempts.Client) {
				log.Warn("setup: too many wrong setup codes; refusing the client's codes for a while", "client", c.String())
			},
			Report: func(s attempts.Summary) {
				log.Warn("setup: setup codes refused after too many wrong ones", s.LogAttrs()...)
			},
		}),
	}
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
		c := attempts.ClientOf(r.RemoteAddr)
		if v := h.gate.check(req.Code, c); v.status != 0 {
			switch {
			case v.wait > 0:
				w.Header().Set("Retry-After", strconv.Itoa(seconds(v.wait)))
				h.refused.Add(c)
			case v.wrong:
				h.wrong.Add(c)
			}
			gateway.WriteError(w, v.status, v.msg)
			return
		}
	} else if !h.srv.Authorize(w, r) {
		return
	}
	res, err := h.setup.Apply(r.Context(), req)
	if err != nil {
		if errors.Is(err, ErrBadSetup) {
			// Said on the form: the person needs the reason, not the
			// package it came from.
			gateway.WriteError(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), ErrBadSetup.Error()+": "))
			return
		}
		h.log.Error("setup failed", "err", err)
		gateway.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	body := map[string]string{"status": "ok", "provider": res.Provider, "model": res.Model, "config": res.Config}
	if byCode {
		h.gate.code = "" // one time
		// The code proved the owner reads the console or the journal,
		// where `perch onboard` shows the token too: hand it over so the
		// page does not ask for it next.
		if h.token != nil && h.token() != "" {
			body["token"] = h.token()
		}
	}
	h.log.Info("provider configured from the web page", "provider", res.Provider, "model", res.Model, "config", res.Config)
	if h.onSetup != nil {
		h.onSetup()
	}
	gateway.WriteJSON(w, http.StatusOK, body)
}

// SetupInfo is GET /setup: whether the page must ask for the setup code,
// and where the owner finds it (never the code).
type SetupInfo struct {
	NeedsCode bool   `json:"needs_code"`
	CodeWhere string `json:"code_where"`
}

func (h *setupHandler) info(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	needs := h.gate.code != "" && !h.setup.Configured()
	h.mu.Unlock()
	gateway.WriteJSON(w, http.StatusOK, SetupInfo{NeedsCode: needs, CodeWhere: h.gate.where})
}

// CodeWhere says where the setup code is printed, from how the gateway
// was started (lookup reads the environment, stderr is the gateway's
// standard error): when stderr is the stream systemd connected to the
// journal, the journal; under make (MAKELEVEL), the terminal of `make run`;
// otherwise the terminal where `perch gateway` runs.
func CodeWhere(lookup func(string) (string, bool), stderr *os.File) string {
	has := func(k string) bool { v, ok := lookup(k); return ok && v != "" }
	switch {
	case systemd.LogsToJournal(lookup, stderr):
		return "in the journal, the latest since boot (journalctl -u perch -b -o cat | grep setup_code | tail -n1)"
	case has("MAKELEVEL"):
		return `in the terminal where "make run" runs`
	}
	return `in the terminal where "perch gateway" runs`
}
