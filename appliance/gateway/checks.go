package gateway

import (
	"context"
	"sort"
	"sync"
	"time"
)

// CheckFunc reports whether a dependency is fit to serve, with a message
// that says what is wrong and how to fix it (or what is in use).
type CheckFunc func(ctx context.Context) (ok bool, message string)

// CheckResult is one entry of /ready's checks map.
type CheckResult struct {
	Name      string `json:"name"`
	Status    string `json:"status"` // ok or fail
	Message   string `json:"message,omitempty"`
	Timestamp string `json:"timestamp"`
}

// Checks is the set of readiness checks.
type Checks struct {
	mu     sync.RWMutex
	checks map[string]CheckFunc
}

// NewChecks returns an empty set.
func NewChecks() *Checks { return &Checks{checks: map[string]CheckFunc{}} }

// Register adds or replaces the check name.
func (c *Checks) Register(name string, fn CheckFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks[name] = fn
}

// Run evaluates every check and reports whether all passed.
func (c *Checks) Run(ctx context.Context) (map[string]CheckResult, bool) {
	c.mu.RLock()
	names := make([]string, 0, len(c.checks))
	for n := range c.checks {
		names = append(names, n)
	}
	fns := make([]CheckFunc, len(names))
	sort.Strings(names)
	for i, n := range names {
		fns[i] = c.checks[n]
	}
	c.mu.RUnlock()
	out := make(map[string]CheckResult, len(names))
	all := true
	now := time.Now().UTC().Format(time.RFC3339)
	for i, n := range names {
		ok, msg := fns[i](ctx)
		st := "ok"
		if !ok {
			st, all = "fail", false
		}
		out[n] = CheckResult{Name: n, Status: st, Message: msg, Timestamp: now}
	}
	return out, all
}
