package systemdtest

import (
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"
)

// Unit is what the fake systemd knows about one unit: the properties
// `systemctl status` reads, in the types systemd gives them on the bus.
// Zero counters (Memory, Tasks, TasksMax, CPU) are reported as unknown
// (UINT64_MAX), as systemd does without accounting; zero times as unset.
type Unit struct {
	Name, Description                   string
	LoadState, ActiveState, SubState    string
	FragmentPath                        string
	UnitFileState, UnitFilePreset       string
	Result, StatusText, ControlGroup    string
	ActiveEnter, ActiveExit             time.Time
	InactiveEnter, InactiveExit         time.Time
	MainPID, ExecMainPID                uint32
	ExecMainCode, ExecMainStatus        int32 // CLD_* code and exit status or signal
	Memory, Tasks, TasksMax, CPUNanosec uint64
}

// unitInfo is one element of ListUnits*'s a(ssssssouso).
type unitInfo struct {
	Name, Description, LoadState, ActiveState, SubState, Followed string
	Path                                                          dbus.ObjectPath
	JobID                                                         uint32
	JobType                                                       string
	JobPath                                                       dbus.ObjectPath
}

// Systemd is a fake org.freedesktop.systemd1 on a test bus: the Manager
// methods that look units up (GetUnit, LoadUnit, ListUnitsByNames) and each
// unit's properties at /org/freedesktop/systemd1/unit/<escaped name>. Like
// systemd, it answers LoadUnit and ListUnitsByNames for a unit it does not
// know with a unit whose LoadState is "not-found".
type Systemd struct {
	conn *dbus.Conn

	mu      sync.Mutex
	units   map[string]Unit
	stalled chan struct{}
}

// NewSystemd connects to the bus at addr, takes the name
// org.freedesktop.systemd1 and serves units; it goes away with the test.
func NewSystemd(t testing.TB, addr string, units ...Unit) *Systemd {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatalf("fake systemd: connect %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s := &Systemd{conn: conn, units: map[string]Unit{}}
	if err := conn.Export(manager{s}, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager"); err != nil {
		t.Fatal(err)
	}
	for _, u := range units {
		if err := s.Add(u); err != nil {
			t.Fatal(err)
		}
	}
	reply, err := conn.RequestName("org.freedesktop.systemd1", dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("fake systemd: request name: reply %v, %v", reply, err)
	}
	return s
}

// Stall makes the Manager's methods wait until the returned function is
// called (or the test ends): a systemd that does not answer.
func (s *Systemd) Stall(t testing.TB) (release func()) {
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	s.mu.Lock()
	s.stalled = ch
	s.mu.Unlock()
	return release
}

// Add exports u (replacing a unit of the same name).
func (s *Systemd) Add(u Unit) error {
	if u.LoadState == "" {
		u.LoadState = "loaded"
	}
	s.mu.Lock()
	s.units[u.Name] = u
	s.mu.Unlock()
	_, err := prop.Export(s.conn, UnitPath(u.Name), unitProps(u))
	return err
}

// UnitPath is the object path systemd gives a unit: its name escaped with
// _XX for every byte outside [A-Za-z0-9] (and a leading digit).
func UnitPath(name string) dbus.ObjectPath {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' && i > 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteString("_" + hex2(c))
	}
	if name == "" {
		b.WriteString("_")
	}
	return dbus.ObjectPath("/org/freedesktop/systemd1/unit/" + b.String())
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&15]})
}

func usec(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixMicro())
}

func counter(n uint64) uint64 {
	if n == 0 {
		return math.MaxUint64
	}
	return n
}

func unitProps(u Unit) prop.Map {
	p := func(v any) *prop.Prop { return &prop.Prop{Value: v, Emit: prop.EmitFalse} }
	changed := u.ActiveEnter
	for _, t := range []time.Time{u.ActiveExit, u.InactiveEnter, u.InactiveExit} {
		if t.After(changed) {
			changed = t
		}
	}
	return prop.Map{
		"org.freedesktop.systemd1.Unit": {
			"Id":                     p(u.Name),
			"Description":            p(u.Description),
			"LoadState":              p(u.LoadState),
			"ActiveState":            p(u.ActiveState),
			"SubState":               p(u.SubState),
			"FragmentPath":           p(u.FragmentPath),
			"SourcePath":             p(""),
			"UnitFileState":          p(u.UnitFileState),
			"UnitFilePreset":         p(u.UnitFilePreset),
			"ActiveEnterTimestamp":   p(usec(u.ActiveEnter)),
			"ActiveExitTimestamp":    p(usec(u.ActiveExit)),
			"InactiveEnterTimestamp": p(usec(u.InactiveEnter)),
			"InactiveExitTimestamp":  p(usec(u.InactiveExit)),
			"StateChangeTimestamp":   p(usec(changed)),
		},
		"org.freedesktop.systemd1.Service": {
			"MainPID":        p(u.MainPID),
			"ExecMainPID":    p(u.ExecMainPID),
			"ExecMainCode":   p(u.ExecMainCode),
			"ExecMainStatus": p(u.ExecMainStatus),
			"Result":         p(orDefault(u.Result, "success")),
			"StatusText":     p(u.StatusText),
			"ControlGroup":   p(u.ControlGroup),
			"MemoryCurrent":  p(counter(u.Memory)),
			"TasksCurrent":   p(counter(u.Tasks)),
			"TasksMax":       p(counter(u.TasksMax)),
			"CPUUsageNSec":   p(counter(u.CPUNanosec)),
			"NRestarts":      p(uint32(0)),
		},
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// manager is the exported org.freedesktop.systemd1.Manager.
type manager struct{ s *Systemd }

// lookup waits out a Stall, then finds name, exporting a not-found unit for
// a name it does not know, as systemd's manager_load_unit does.
func (m manager) lookup(name string, load bool) (Unit, *dbus.Error) {
	m.s.mu.Lock()
	stalled := m.s.stalled
	u, ok := m.s.units[name]
	m.s.mu.Unlock()
	if stalled != nil {
		<-stalled
	}
	if ok {
		return u, nil
	}
	if !load {
		return Unit{}, dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit " + name + " not loaded."})
	}
	u = Unit{Name: name, Description: name, LoadState: "not-found", ActiveState: "inactive", SubState: "dead"}
	if err := m.s.Add(u); err != nil {
		return Unit{}, dbus.MakeFailedError(err)
	}
	return u, nil
}

// GetUnit returns the path of a loaded unit, or NoSuchUnit.
func (m manager) GetUnit(name string) (dbus.ObjectPath, *dbus.Error) { return m.path(name, false) }

// LoadUnit returns the path of a unit, loading (here: inventing) it.
func (m manager) LoadUnit(name string) (dbus.ObjectPath, *dbus.Error) { return m.path(name, true) }

func (m manager) path(name string, load bool) (dbus.ObjectPath, *dbus.Error) {
	u, err := m.lookup(name, load)
	if err != nil {
		return "", err
	}
	return UnitPath(u.Name), nil
}

// ListUnitsByNames returns the state of each named unit, loading it first.
func (m manager) ListUnitsByNames(names []string) ([]unitInfo, *dbus.Error) {
	out := make([]unitInfo, 0, len(names))
	for _, n := range names {
		u, err := m.lookup(n, true)
		if err != nil {
			return nil, err
		}
		out = append(out, unitInfo{
			Name: u.Name, Description: u.Description, LoadState: u.LoadState,
			ActiveState: u.ActiveState, SubState: u.SubState,
			Path: UnitPath(u.Name), JobPath: "/",
		})
	}
	return out, nil
}
