package appliance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/perchhq/perch/appliance/config"
)

// remote talks to a running gateway on behalf of a CLI command, so the CLI
// never opens the database the gateway holds.
type remote struct {
	base  string
	token string
	pid   int
	hc    *http.Client
}

// findGateway returns the gateway that {config_dir}/perch.pid names, if it
// is alive and answers /health.
func findGateway(ctx context.Context, cfg *config.Config) (*remote, bool) {
	p, err := readPID(cfg.PIDPath())
	if err != nil {
		return nil, false
	}
	r := &remote{base: "http://" + dialAddr(p.Addr), token: cfg.Gateway.APIToken.Value(), pid: p.PID,
		hc: &http.Client{Timeout: 0}}
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := r.do(hctx, http.MethodGet, "/health", nil, nil); err != nil {
		return nil, false
	}
	return r, true
}

// do sends a JSON request and decodes a JSON answer into out; a non-2xx
// answer becomes an error carrying the gateway's message.
func (r *remote) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return fmt.Errorf("gateway at %s: %w", r.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("gateway at %s: %w", r.base, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return fmt.Errorf("gateway: %s", e.Error)
		}
		return fmt.Errorf("gateway: HTTP %d", resp.StatusCode)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("gateway: unexpected answer to %s %s: %w", method, path, err)
		}
	}
	return nil
}
