package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// UnitName is the name the packaged unit file is installed under.
const UnitName = "perch.service"

// DefaultSystemBus is where systemd's D-Bus listens on Debian and Raspberry
// Pi OS when DBUS_SYSTEM_BUS_ADDRESS is unset.
const DefaultSystemBus = "unix:path=/run/dbus/system_bus_socket"

// Client asks systemd about units over D-Bus: the same data `systemctl
// status` shows, without running systemctl (no pager, no terminal, no
// exit-code guessing). The zero Client talks to the system bus.
type Client struct {
	// Address is the D-Bus address of the bus systemd is on. Empty means
	// $DBUS_SYSTEM_BUS_ADDRESS, else DefaultSystemBus.
	Address string
	// Timeout bounds one UnitStatus call when ctx has no earlier deadline;
	// zero means 5 seconds.
	Timeout time.Duration
	// Now and Location render "since ...; 2h 3min ago"; nil means time.Now
	// and time.Local.
	Now      func() time.Time
	Location *time.Location
}

// UnitStatus renders unit's status on the system bus like `systemctl status
// --no-pager` does. See Client.UnitStatus.
func UnitStatus(ctx context.Context, unit string) (string, error) {
	return Client{}.UnitStatus(ctx, unit)
}

// UnitStatus returns a text shaped like `systemctl status --no-pager unit`
// (without the log tail): the state line, Loaded, Active, Main PID, Status,
// Tasks, Memory, CPU and CGroup, each when known. A failed or stopped unit is
// not an error: the text says so. Errors wrap ErrBadUnitName, ErrNoSystemd or
// ErrUnitNotFound and name the fix.
func (c Client) UnitStatus(ctx context.Context, unit string) (string, error) {
	if err := checkUnitName(unit); err != nil {
		return "", err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	addr := c.address()
	conn, err := sdbus.NewConnection(func() (*dbus.Conn, error) {
		// EXTERNAL with the numeric uid: no user-name lookup, which a
		// static binary cannot always do.
		return dbus.Connect(addr, dbus.WithContext(ctx),
			dbus.WithAuth(dbus.AuthExternal(strconv.Itoa(os.Getuid()))))
	})
	if err != nil {
		return "", noSystemd(addr, err)
	}
	defer conn.Close()

	// ListUnitsByNames loads the unit like LoadUnit does, so an unknown name
	// comes back as LoadState "not-found" rather than as an error.
	units, err := conn.ListUnitsByNamesContext(ctx, []string{unit})
	if err != nil {
		return "", callError(ctx, addr, unit, err)
	}
	if len(units) == 0 {
		return "", fmt.Errorf("systemd: %w %q: systemd refused it", ErrBadUnitName, unit)
	}
	u := units[0]
	if u.LoadState == "not-found" {
		return "", fmt.Errorf("systemd: %w: %s is not installed (the perch package installs %s; after copying a unit file by hand, run systemctl daemon-reload)", ErrUnitNotFound, unit, UnitName)
	}
	props, err := conn.GetUnitPathPropertiesContext(ctx, u.Path)
	if err != nil {
		return "", callError(ctx, addr, unit, err)
	}
	// Only services have the Service interface (MainPID, memory, tasks);
	// other unit types just show less.
	if strings.HasSuffix(unit, ".service") {
		svc, err := conn.GetUnitTypePropertiesContext(ctx, unit, "Service")
		if err != nil {
			return "", callError(ctx, addr, unit, err)
		}
		for k, v := range svc {
			props[k] = v
		}
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	loc := c.Location
	if loc == nil {
		loc = time.Local
	}
	return renderStatus(unit, props, now(), loc), nil
}

func (c Client) address() string {
	if c.Address != "" {
		return c.Address
	}
	if a := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" {
		return a
	}
	return DefaultSystemBus
}

func noSystemd(addr string, err error) error {
	return fmt.Errorf("systemd: no system D-Bus at %s (%s), so %w; the service's status needs the gateway to run under systemd, as the perch package installs it",
		busLabel(addr), lastCause(err), ErrNoSystemd)
}

// lastCause is the end of a chain of wrapped messages, the system's own
// words ("connect: no such file or directory"), without the address the
// message already names.
func lastCause(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		if j := strings.LastIndex(msg[:i], ": "); j >= 0 {
			return msg[j+2:]
		}
	}
	return msg
}

// busLabel shortens a D-Bus address for a message: the socket path of
// "unix:path=/run/dbus/system_bus_socket", without the ",guid=" part.
func busLabel(addr string) string {
	addr, _, _ = strings.Cut(addr, ",guid=")
	return strings.TrimPrefix(addr, "unix:path=")
}

// callError sorts the failures of a method call on a bus that answered.
func callError(ctx context.Context, addr, unit string, err error) error {
	switch dbusErrorName(err) {
	case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
		return fmt.Errorf("systemd: %w (the D-Bus at %s has no org.freedesktop.systemd1): /admin/service needs the gateway to run under systemd: %v",
			ErrNoSystemd, busLabel(addr), err)
	case "org.freedesktop.systemd1.NoSuchUnit":
		return fmt.Errorf("systemd: %w: %s is not loaded (install the perch package, or run systemctl daemon-reload): %v", ErrUnitNotFound, unit, err)
	case "org.freedesktop.DBus.Error.AccessDenied":
		return fmt.Errorf("systemd: reading %s was denied by the D-Bus policy (the gateway's user may not query systemd; check /usr/share/dbus-1/system.d): %w", unit, err)
	}
	// A timed-out call can surface as the closed connection rather than the
	// deadline, depending on which goroutine notices first.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("systemd: systemd did not answer about %s in time (is it overloaded or hung?): %w", unit, err)
	}
	return fmt.Errorf("systemd: asking about %s: %w", unit, err)
}

// dbusErrorName is the D-Bus error name inside err, or "".
func dbusErrorName(err error) string {
	var v dbus.Error
	if errors.As(err, &v) {
		return v.Name
	}
	var p *dbus.Error
	if errors.As(err, &p) && p != nil {
		return p.Name
	}
	return ""
}

// unitNameRe() is systemd's alphabet for unit names (unit_name_is_valid), with
// a known type suffix. Templates (foo@.service) are not units one can query.
var unitNameRe = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]+)?\.(service|socket|target|timer|mount|automount|swap|path|slice|scope|device)$`)
})

func checkUnitName(unit string) error {
	if len(unit) > 255 || !unitNameRe().MatchString(unit) {
		return fmt.Errorf("systemd: %w %q: give a full unit name such as %s", ErrBadUnitName, unit, UnitName)
	}
	return nil
}
