// Package client is a typed client of a running gateway's HTTP API, used by
// the CLI: perch agent, perch cron and perch status talk to the gateway
// through it instead of opening the database the gateway holds.
//
// # Concepts
//
// Find locates the gateway this config directory runs (its pid file), checks
// that the process lives and that the listener at its address proves it
// holds the pid file's key, and only then returns a Client that sends the
// API token. A Client implements api.Jobs, so CLI code manages cron jobs the
// same way whether it talks to the gateway or to the scheduler directly.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/pidfile"
)

// Client calls one gateway.
type Client struct {
	base  string
	token string
	hc    *http.Client
	// PID is the gateway's process id (0 when unknown).
	PID int
}

var _ api.Jobs = (*Client)(nil)

// New returns a client of the gateway at base (http://host:port) that
// sends token, if any.
func New(base, token string) *Client {
	return &Client{base: base, token: token, hc: &http.Client{}}
}

// Base is the gateway's address.
func (c *Client) Base() string { return c.base }

// ErrNoGateway means no gateway runs for this config directory.
var ErrNoGateway = errors.New("no gateway is running")

// Find returns a client of the gateway that the pid file at pidPath
// announces, after checking that it is alive and that the listener at its
// address knows the pid file's key: a pid or port reused by another program
// after a power loss must never receive the token.
func Find(ctx context.Context, pidPath, token string) (*Client, error) {
	p, err := pidfile.Read(pidPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoGateway, err)
	}
	c := New("http://"+pidfile.DialAddr(p.Addr), token)
	c.PID = p.PID
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	challenge := pidfile.NewKey()
	req, err := http.NewRequestWithContext(hctx, http.MethodGet, c.base+"/health", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(pidfile.ChallengeHeader, challenge)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s does not answer: %v", ErrNoGateway, c.base, err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if !pidfile.Valid(p.Key, challenge, resp.Header.Get(pidfile.ProofHeader)) {
		return nil, fmt.Errorf("%w: the program at %s is not the gateway of %s (stale pid file?)", ErrNoGateway, c.base, pidPath)
	}
	return c, nil
}

// Chat sends one message.
func (c *Client) Chat(ctx context.Context, r api.ChatRequest) (api.ChatResponse, error) {
	var out api.ChatResponse
	err := c.do(ctx, http.MethodPost, "/chat", r, &out)
	return out, err
}

// Ready returns /ready's body and whether the gateway is ready.
func (c *Client) Ready(ctx context.Context) (map[string]any, bool, error) {
	var out map[string]any
	err := c.do(ctx, http.MethodGet, "/ready", nil, &out)
	var se *StatusError
	if errors.As(err, &se) && se.Status == http.StatusServiceUnavailable {
		return se.body, false, nil
	}
	return out, err == nil, err
}

// Status returns /admin/status.
func (c *Client) Status(ctx context.Context) (map[string]any, error) {
	var out map[string]any
	err := c.do(ctx, http.MethodGet, "/admin/status", nil, &out)
	return out, err
}

// List returns the cron jobs.
func (c *Client) List(ctx context.Context) ([]api.Job, error) {
	jobs := []api.Job{}
	err := c.do(ctx, http.MethodGet, "/admin/cron", nil, &jobs)
	return jobs, err
}

// Add adds a cron job.
func (c *Client) Add(ctx context.Context, spec api.JobSpec) (api.Job, error) {
	var j api.Job
	err := c.do(ctx, http.MethodPost, "/admin/cron", spec, &j)
	return j, err
}

// Remove deletes a cron job.
func (c *Client) Remove(ctx context.Context, id string) (api.Job, error) {
	var j api.Job
	err := c.do(ctx, http.MethodDelete, "/admin/cron/"+url.PathEscape(id), nil, &j)
	return j, err
}

// SetEnabled enables or disables a cron job.
func (c *Client) SetEnabled(ctx context.Context, id string, on bool) (api.Job, error) {
	action := "disable"
	if on {
		action = "enable"
	}
	var j api.Job
	err := c.do(ctx, http.MethodPost, "/admin/cron/"+url.PathEscape(id)+"/"+action, nil, &j)
	return j, err
}

// StatusError is a non-2xx answer; its message is the gateway's.
type StatusError struct {
	Status  int
	Message string
	body    map[string]any
}

func (e *StatusError) Error() string {
	switch {
	case e.Message != "" && e.Status < 500:
		// The gateway refused the request and says why (an unknown job,
		// an interval out of range): its words alone, as the same
		// command says them without a gateway.
		return e.Message
	case e.Message != "":
		return "gateway: " + e.Message
	}
	return fmt.Sprintf("gateway: HTTP %d", e.Status)
}

// Unwrap lets callers test for api.ErrNoJob on a 404 of the jobs API.
func (e *StatusError) Unwrap() error {
	if e.Status == http.StatusNotFound {
		return api.ErrNoJob
	}
	return nil
}

// maxAnswer bounds what the CLI reads from the gateway.
const maxAnswer = 32 << 20

// do sends a JSON request and decodes a JSON answer into out.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("gateway at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("gateway at %s: %w", c.base, err)
	}
	if resp.StatusCode/100 != 2 {
		se := &StatusError{Status: resp.StatusCode}
		var e api.Error
		if json.Unmarshal(data, &e) == nil {
			se.Message = e.Error
		}
		if resp.StatusCode == http.StatusUnauthorized {
			// The gateway's own words are for HTTP clients ("send
			// Authorization: Bearer …"); the CLI sent the config's token,
			// so the two disagree: the config changed after the gateway
			// started, or the CLI reads another config.
			se.Message = "refused this config's gateway.api_token: if it changed after the gateway at " + c.base +
				" started, restart the gateway (sudo systemctl restart perch, or stop and start perch gateway) so both use the same one"
		}
		json.Unmarshal(data, &se.body)
		return se
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("gateway: unexpected answer to %s %s: %w", method, path, err)
		}
	}
	return nil
}
