package systemd

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/systemd/systemdtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Fatalf("%s differs (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// now is the fixed "present" the status texts are rendered at.
var now = time.Date(2024, 5, 14, 12, 3, 10, 0, time.UTC)

var (
	runningUnit = systemdtest.Unit{
		Name:           "perch.service",
		Description:    "Perch AI agent gateway",
		ActiveState:    "active",
		SubState:       "running",
		FragmentPath:   "/lib/systemd/system/perch.service",
		UnitFileState:  "enabled",
		UnitFilePreset: "enabled",
		ActiveEnter:    now.Add(-2*time.Hour - 3*time.Minute - 10*time.Second),
		InactiveExit:   now.Add(-2*time.Hour - 3*time.Minute - 12*time.Second),
		MainPID:        812,
		ExecMainPID:    812,
		StatusText:     "serving 2 channels",
		ControlGroup:   "/system.slice/perch.service",
		Memory:         24_535_040,
		Tasks:          12,
		TasksMax:       4915,
		CPUNanosec:     1_234_567_890,
	}
	failedUnit = systemdtest.Unit{
		Name:           "perch.service",
		Description:    "Perch AI agent gateway",
		ActiveState:    "failed",
		SubState:       "failed",
		Result:         "exit-code",
		FragmentPath:   "/lib/systemd/system/perch.service",
		UnitFileState:  "enabled",
		UnitFilePreset: "enabled",
		InactiveEnter:  now.Add(-5 * time.Second),
		ExecMainPID:    4242,
		ExecMainCode:   1, // CLD_EXITED
		ExecMainStatus: 216,
		CPUNanosec:     12_000_000,
	}
	watchdogUnit = systemdtest.Unit{
		Name:           "perch.service",
		Description:    "Perch AI agent gateway",
		ActiveState:    "activating",
		SubState:       "auto-restart",
		Result:         "watchdog",
		FragmentPath:   "/lib/systemd/system/perch.service",
		UnitFileState:  "enabled",
		InactiveExit:   now.Add(-3 * 24 * time.Hour),
		ExecMainPID:    900,
		ExecMainCode:   2, // CLD_KILLED
		ExecMainStatus: 6,
	}
)

// client talks to a fake systemd on a private bus.
func client(t *testing.T, units ...systemdtest.Unit) (Client, *systemdtest.Systemd) {
	addr := systemdtest.StartBus(t)
	fake := systemdtest.NewSystemd(t, addr, units...)
	return Client{Address: addr, Now: func() time.Time { return now }, Location: time.UTC}, fake
}

// TestUnitStatusText: the text /admin/service shows, as systemctl status
// would, for the states an operator meets.
func TestUnitStatusText(t *testing.T) {
	tests := []struct {
		name   string
		unit   systemdtest.Unit
		golden string
	}{
		{"running", runningUnit, "status-running.txt"},
		{"failed", failedUnit, "status-failed.txt"},
		{"restarting after a watchdog timeout", watchdogUnit, "status-watchdog.txt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := client(t, tt.unit)
			got, err := c.UnitStatus(context.Background(), "perch.service")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tt.golden, got)
		})
	}
}

// TestUnitStatusErrors: each failure wraps its sentinel and names the fix.
func TestUnitStatusErrors(t *testing.T) {
	t.Run("unknown unit", func(t *testing.T) {
		c, _ := client(t, runningUnit)
		_, err := c.UnitStatus(context.Background(), "nosuch.service")
		wantErr(t, err, ErrUnitNotFound, "nosuch.service is not installed", "daemon-reload")
	})
	t.Run("bus unreachable", func(t *testing.T) {
		c := Client{Address: "unix:path=" + t.TempDir() + "/system_bus_socket"}
		_, err := c.UnitStatus(context.Background(), "perch.service")
		wantErr(t, err, ErrNoSystemd, "systemd is not running here", "no system D-Bus at /", "needs the gateway to run under systemd")
	})
	t.Run("bus without systemd", func(t *testing.T) {
		c := Client{Address: systemdtest.StartBus(t)}
		_, err := c.UnitStatus(context.Background(), "perch.service")
		wantErr(t, err, ErrNoSystemd, "has no org.freedesktop.systemd1", "needs the gateway to run under systemd")
	})
	t.Run("systemd does not answer", func(t *testing.T) {
		c, fake := client(t, runningUnit)
		fake.Stall(t)
		c.Timeout = 200 * time.Millisecond
		_, err := c.UnitStatus(context.Background(), "perch.service")
		wantErr(t, err, nil, "did not answer")
	})
	t.Run("bad unit name", func(t *testing.T) {
		_, err := Client{}.UnitStatus(context.Background(), "--all")
		wantErr(t, err, ErrBadUnitName, "perch.service")
	})
}

// TestUnitStatusDefaultsToTheSystemBus: the zero Client dials
// DBUS_SYSTEM_BUS_ADDRESS (else /run/dbus/system_bus_socket), which a test
// can point at its private bus.
func TestUnitStatusDefaultsToTheSystemBus(t *testing.T) {
	addr := systemdtest.StartBus(t)
	systemdtest.NewSystemd(t, addr, runningUnit)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", addr)
	got, err := UnitStatus(context.Background(), "perch.service")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "● perch.service - Perch AI agent gateway\n") {
		t.Fatalf("unexpected status:\n%s", got)
	}
}

// TestUnitStatusLeavesNoGoroutines: each call's two D-Bus connections and
// their dispatchers are gone after it returns (the page may poll).
func TestUnitStatusLeavesNoGoroutines(t *testing.T) {
	c, _ := client(t, runningUnit)
	if _, err := c.UnitStatus(context.Background(), "perch.service"); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for range 20 {
		if _, err := c.UnitStatus(context.Background(), "perch.service"); err != nil {
			t.Fatal(err)
		}
	}
	// Connections close asynchronously: poll, with a deadline.
	after := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); after > before && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		after = runtime.NumGoroutine()
	}
	if after > before {
		t.Fatalf("%d goroutines after 20 calls, %d before", after, before)
	}
}

func wantErr(t *testing.T, err, sentinel error, words ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("want an error")
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Errorf("error %q does not wrap %q", err, sentinel)
	}
	if !strings.HasPrefix(err.Error(), "systemd: ") {
		t.Errorf("error %q lacks the subsystem prefix", err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}
