package gateway

import (
	"context"
	"sort"
	"sync"
	"time"
)

// CheckFunc reports whether a dependency is fit to serve, with a message
// that says what is wrong and how to fix it (or what is in use). The
// message may name private things (paths, ids): only clients allowed the
// details read it (see RegisterCore's /ready).
type CheckFunc func(ctx context.Context) (ok bool, message string)

// CheckResult is one entry of /ready's checks map.
type CheckResult struct {
	Name      string `json:"name"`
	Status    string `json:"status"` // ok or fail
	Message   string `json:"message,omitempty"`
	Timestamp string `json:"timestamp"`

	public string // Message for clients without the details
}

// A CheckOption adjusts how a check is shown.
type CheckOption func(*check)

// PublicMessage gives the message that clients without access to the
// details read for the check. It must name nothing private: no path, key,
// chat id or address. Without it they read "ok", or that the check fails
// and where the reason is shown.
func PublicMessage(f func(ok bool) string) CheckOption {
	return func(c *check) { c.public = f }
}

type check struct {
	fn     CheckFunc
	public func(ok bool) string
}

// Checks is the set of readiness checks.
type Checks struct {
	mu     sync.RWMutex
	checks map[string]check
}

// NewChecks returns an empty set.
func NewChecks() *Checks { return &Checks{checks: map[string]check{}} }

// Register adds or replaces the check name.
func (c *Checks) Register(name string, fn CheckFunc, opts ...CheckOption) {
	ch := check{fn: fn}
	for _, o := range opts {
		o(&ch)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks[name] = ch
}

// Run evaluates every check and reports whether all passed. The results
// carry the full messages.
func (c *Checks) Run(ctx context.Context) (map[string]CheckResult, bool) {
	c.mu.RLock()
	names := make([]string, 0, len(c.checks))
	for n := range c.checks {
		names = append(names, n)
	}
	sort.Strings(names)
	chs := make([]check, len(names))
	for i, n := range names {
		chs[i] = c.checks[n]
	}
	c.mu.RUnlock()
	out := make(map[string]CheckResult, len(names))
	all := true
	now := time.Now().UTC().Format(time.RFC3339)
	for i, n := range names {
		ok, msg := chs[i].fn(ctx)
		st := "ok"
		if !ok {
			st, all = "fail", false
		}
		res := CheckResult{Name: n, Status: st, Message: msg, Timestamp: now}
		if chs[i].public != nil {
			res.public = chs[i].public(ok)
		}
		out[n] = res
	}
	return out, all
}

// withoutDetails replaces every message by its public form; failing checks
// without one say where the reason is shown (hint).
func withoutDetails(checks map[string]CheckResult, hint string) {
	for n, c := range checks {
		switch {
		case c.public != "":
			c.Message = c.public
		case c.Status == "ok":
			c.Message = "ok"
		default:
			c.Message = "fails; " + hint
		}
		checks[n] = c
	}
}
