package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/config"
)

// TestGatewayListensForStopBeforeItOpensTheDatabase: the gateway command
// asks for stop signals on a goroutine of its own, and the hook the gateway
// calls before it opens its database returns only once it listens, so
// SIGINT from then on cancels its context (and the database is closed
// cleanly); any other command listens before it runs.
func TestGatewayListensForStopBeforeItOpensTheDatabase(t *testing.T) {
	home(t)
	ctx, cancel := context.WithCancel(context.Background())
	stop := &signalStop{cancel: cancel}
	defer stop.close()
	rt := Runtime{Gateway: func(ctx context.Context, _ *config.Config, _ *slog.Logger, _ io.Writer, listening func()) error {
		listening()
		listening()             // a second call changes nothing
		stop.once.Do(func() {}) // the listen is over: its fields may be read
		if stop.ch == nil {
			return errors.New("listening returned before the command listened for stop signals")
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("SIGINT did not cancel the gateway's context")
		}
	}}
	var out, errOut strings.Builder
	if code := Run(ctx, &Env{Stdout: &out, Stderr: &errOut, Runtime: rt, stop: stop}, []string{"gateway"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}

	other := &signalStop{cancel: func() {}}
	defer other.close()
	if code := Run(context.Background(), &Env{Stdout: &out, Stderr: &errOut, stop: other}, []string{"version"}); code != 0 {
		t.Fatalf("version: exit %d: %s", code, errOut.String())
	}
	if other.ch == nil {
		t.Error("a command other than the gateway does not listen for stop signals while it runs")
	}
}
