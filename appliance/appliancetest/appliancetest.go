// Package appliancetest runs a whole Perch gateway in-process for tests:
// built by the same composition root as `perch gateway`, loaded from a
// config file in a fresh PERCH_HOME, listening on a loopback port, with its
// log captured so a test reads what an owner would read (the setup code).
package appliancetest

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/perchhq/perch/appliance"
	"github.com/perchhq/perch/appliance/config"
)

// Gateway is a running in-process gateway.
type Gateway struct {
	Sys *appliance.System
	// URL is the base address, e.g. http://127.0.0.1:41234.
	URL string
	// ConfigPath is the config file (present or not).
	ConfigPath string
	Log        *LogBuffer
}

// Start writes file (nil: no config file at all) as config.json in a fresh
// PERCH_HOME, loads it without environment overrides, lets adjust change the
// loaded config (nil: nothing), and starts the gateway; Cleanup stops it.
// Unless the file names gateway.port, the gateway listens on a free port.
// It sets PERCH_HOME, so the test must not run in parallel.
func Start(tb testing.TB, file map[string]any, adjust func(*config.Config)) *Gateway {
	tb.Helper()
	return StartWith(tb, file, Options{Adjust: adjust})
}

// StartAt is Start in the config dir home, which may hold a database
// already (a restart).
func StartAt(tb testing.TB, home string, file map[string]any, adjust func(*config.Config)) *Gateway {
	tb.Helper()
	return StartWith(tb, file, Options{Adjust: adjust, Home: home})
}

// Options tune StartWith.
type Options struct {
	// Adjust changes the loaded config.
	Adjust func(*config.Config)
	// Prepare runs after the core is built and before the gateway is:
	// the place to set the System's replacements of what lies outside the
	// machine (USBListen, USBSysRoot).
	Prepare func(*appliance.System)
	// Home is the config dir; empty means a new temporary one.
	Home string
}

// setsPort reports whether the config file names gateway.port.
func setsPort(file map[string]any) bool {
	gw, _ := file["gateway"].(map[string]any)
	_, ok := gw["port"]
	return ok
}

// StartWith is Start with more options.
func StartWith(tb testing.TB, file map[string]any, o Options) *Gateway {
	tb.Helper()
	adjust := o.Adjust
	home := o.Home
	if home == "" {
		home = tb.TempDir()
	}
	tb.Setenv("PERCH_HOME", home)
	g := &Gateway{ConfigPath: filepath.Join(home, "config.json"), Log: &LogBuffer{}}
	if file != nil {
		data, err := json.MarshalIndent(file, "", "  ")
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(g.ConfigPath, data, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	cfg, err := config.Load(config.Options{Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		tb.Fatal(err)
	}
	if !setsPort(file) {
		// The default port may be taken by another test package's gateway
		// running at the same time, or by a gateway on the machine.
		cfg.Gateway.Port = 0
	}
	if adjust != nil {
		adjust(cfg)
	}
	sys, err := appliance.NewCore(context.Background(), cfg, slog.New(slog.NewTextHandler(g.Log, nil)))
	if err != nil {
		tb.Fatal(err)
	}
	if o.Prepare != nil {
		o.Prepare(sys)
	}
	if err := sys.BuildGateway(); err != nil {
		sys.Close()
		tb.Fatal(err)
	}
	if err := sys.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sys.Stop(context.Background()) })
	g.Sys, g.URL = sys, "http://"+sys.HTTP.Addr()
	return g
}

var setupCodeRE = regexp.MustCompile(`setup_code=(\d{4}-\d{4})`)

// SetupCode is the first-run setup code, read from the log as the owner
// reads it; the test fails when there is none.
func (g *Gateway) SetupCode(tb testing.TB) string {
	tb.Helper()
	m := setupCodeRE.FindStringSubmatch(g.Log.String())
	if m == nil {
		tb.Fatalf("no setup code in the gateway log:\n%s", g.Log)
	}
	return m[1]
}

// WrongCode is a setup code that differs from code in its last digit.
func WrongCode(code string) string {
	last := code[len(code)-1]
	return code[:len(code)-1] + string('0'+(last-'0'+1)%10)
}

// LogBuffer is a log destination safe for concurrent writes and reads.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything logged so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
