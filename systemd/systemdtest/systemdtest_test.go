package systemdtest

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// TestUnitPathIsSystemdsEscaping: the fake's object paths are the ones
// clients compute (go-systemd follows systemd's bus_label_escape).
func TestUnitPathIsSystemdsEscaping(t *testing.T) {
	for _, name := range []string{"perch.service", "getty@tty1.service", "1st-unit.service", "a_b:c.socket"} {
		want := dbus.ObjectPath("/org/freedesktop/systemd1/unit/" + sdbus.PathBusEscape(name))
		if got := UnitPath(name); got != want {
			t.Errorf("UnitPath(%q) = %s, want %s", name, got, want)
		}
	}
}

// TestManagerLookups: GetUnit knows only loaded units; LoadUnit and
// ListUnitsByNames answer for any name, unknown ones as not-found, like
// systemd.
func TestManagerLookups(t *testing.T) {
	addr := StartBus(t)
	NewSystemd(t, addr, Unit{Name: "perch.service", ActiveState: "active", SubState: "running"})
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mgr := conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")

	var path dbus.ObjectPath
	if err := mgr.Call("org.freedesktop.systemd1.Manager.GetUnit", 0, "perch.service").Store(&path); err != nil || path != UnitPath("perch.service") {
		t.Fatalf("GetUnit(perch.service) = %s, %v", path, err)
	}
	err = mgr.Call("org.freedesktop.systemd1.Manager.GetUnit", 0, "nosuch.service").Err
	var derr dbus.Error
	if !errors.As(err, &derr) || derr.Name != "org.freedesktop.systemd1.NoSuchUnit" {
		t.Fatalf("GetUnit(nosuch.service) error %v, want NoSuchUnit", err)
	}
	if err := mgr.Call("org.freedesktop.systemd1.Manager.LoadUnit", 0, "nosuch.service").Store(&path); err != nil {
		t.Fatal(err)
	}
	var load dbus.Variant
	if err := conn.Object("org.freedesktop.systemd1", path).Call("org.freedesktop.DBus.Properties.Get", 0,
		"org.freedesktop.systemd1.Unit", "LoadState").Store(&load); err != nil {
		t.Fatal(err)
	}
	if load.Value() != "not-found" {
		t.Fatalf("LoadState of an unknown unit = %v, want not-found", load.Value())
	}

	c, err := sdbus.NewConnection(func() (*dbus.Conn, error) { return dbus.Connect(addr) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	units, err := c.ListUnitsByNamesContext(context.Background(), []string{"perch.service", "other.service"})
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, u := range units {
		states = append(states, u.Name+"="+u.LoadState+"/"+u.ActiveState)
	}
	want := []string{"perch.service=loaded/active", "other.service=not-found/inactive"}
	if !slices.Equal(states, want) {
		t.Fatalf("ListUnitsByNames = %v, want %v", states, want)
	}
}

// TestNotifySocket: Next waits for a message; Pending drains what is queued
// without waiting.
func TestNotifySocket(t *testing.T) {
	sock := ListenNotify(t)
	send := func(msg string) {
		c, err := net.Dial("unixgram", os.Getenv("NOTIFY_SOCKET"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	send("READY=1")
	if got := sock.Next(t, 5*time.Second); got != "READY=1" {
		t.Fatalf("Next = %q", got)
	}
	if got := sock.Pending(t); len(got) != 0 {
		t.Fatalf("Pending on an empty socket = %q", got)
	}
	send("WATCHDOG=1")
	send("STOPPING=1")
	if got := sock.Pending(t); !slices.Equal(got, []string{"WATCHDOG=1", "STOPPING=1"}) {
		t.Fatalf("Pending = %q", got)
	}
}

// TestJournalUnpacksTheFixture: the committed journal (built from the
// export text by systemd-journal-remote, which only -update-journal needs)
// unpacks into a directory journalctl reads, every entry of the export in it.
func TestJournalUnpacksTheFixture(t *testing.T) {
	checkJournal(t, Journal(t, "../testdata/journal.export"), "../testdata/journal.export")
}
