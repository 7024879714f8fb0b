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

// TestGatewayListensForStopOnceItServes: the gateway command asks for stop
// signals only when the gateway calls started (the runtime's signal thread
// is a measurable part of a start), and from then on SIGINT cancels its
// context; any other command listens before it runs.
func TestGatewayListensForStopOnceItServes(t *testing.T) {
	home(t)
	ctx, cancel := context.WithCancel(context.Background())
	stop := &signalStop{cancel: cancel}
	defer stop.close()
	rt := Runtime{Gateway: func(ctx context.Context, _ *config.Config, _ *slog.Logger, _ io.Writer, started func()) error {
		if stop.ch != nil {
			return errors.New("listening for stop signals before the gateway serves")
		}
		started()
		started() // a second call changes nothing
		if stop.ch == nil {
			return errors.New("started did not make the command listen for stop signals")
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
