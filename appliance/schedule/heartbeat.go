package schedule

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/wsfile"
)

// HeartbeatOK is what the model answers when nothing needs the user.
const HeartbeatOK = "HEARTBEAT_OK"

// HeartbeatOptions configure the heartbeat.
type HeartbeatOptions struct {
	Interval  time.Duration
	Workspace string
	// Ask runs a prompt without session history and returns the answer.
	Ask func(ctx context.Context, prompt string) (string, error)
	// Deliver sends a non-OK answer to the user (the last active chat).
	Deliver func(text string)
	Log     *slog.Logger
}

// Heartbeat prompts the agent periodically with HEARTBEAT.md.
type Heartbeat struct {
	opts   HeartbeatOptions
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewHeartbeat returns a stopped heartbeat.
func NewHeartbeat(opts HeartbeatOptions) *Heartbeat {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Heartbeat{opts: opts}
}

// Start begins ticking.
func (h *Heartbeat) Start(ctx context.Context) error {
	ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTicker(h.opts.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				h.Tick(ctx)
			}
		}
	}()
	return nil
}

// maxHeartbeatFile bounds HEARTBEAT.md as the prompt bounds its files.
const maxHeartbeatFile = 16 << 10

// Tick runs one heartbeat now. It does nothing (and costs nothing) when
// HEARTBEAT.md is absent or empty.
func (h *Heartbeat) Tick(ctx context.Context) {
	// Read as the prompt's files are: commands write in the workspace,
	// and the file could be a link to the config or a FIFO.
	data, _, err := wsfile.Read(h.opts.Workspace, "HEARTBEAT.md", maxHeartbeatFile)
	tasks := strings.TrimSpace(string(data))
	if err != nil || tasks == "" || isOnlyHeadings(tasks) {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			h.opts.Log.Warn("heartbeat: HEARTBEAT.md not read", "err", err)
		}
		return
	}
	prompt := "This is a periodic heartbeat. Check the tasks below (from HEARTBEAT.md) and act on any that are due. " +
		"If nothing needs the user's attention, answer exactly " + HeartbeatOK + ".\n\n" + tasks
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	out, err := h.opts.Ask(ctx, prompt)
	if err != nil {
		h.opts.Log.Warn("heartbeat failed", "err", err)
		return
	}
	out = strings.TrimSpace(out)
	if out == "" || strings.Contains(out, HeartbeatOK) {
		return
	}
	if h.opts.Deliver != nil {
		h.opts.Deliver(out)
	}
}

// Stop ends the ticking and waits for a running tick.
func (h *Heartbeat) Stop(ctx context.Context) error {
	if h.cancel == nil {
		return nil
	}
	h.cancel()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func isOnlyHeadings(s string) bool {
	for _, ln := range strings.Split(s, "\n") {
		t := strings.TrimSpace(ln)
		if t != "" && !strings.HasPrefix(t, "#") {
			return false
		}
	}
	return true
}
