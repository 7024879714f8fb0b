package systemd

import (
	"fmt"
	"math"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// renderStatus lays out the properties of the org.freedesktop.systemd1.Unit
// and .Service interfaces the way systemctl's print_status_info does (plain
// text, no colours, no process tree, no log tail).
func renderStatus(unit string, p map[string]any, now time.Time, loc *time.Location) string {
	var b strings.Builder
	active := get[string](p, "ActiveState")

	head := glyph(active) + " " + unit
	if d := get[string](p, "Description"); d != "" && d != unit {
		head += " - " + d
	}
	b.WriteString(head + "\n")

	line := func(label, value string) { fmt.Fprintf(&b, "%11s: %s\n", label, value) }

	load := get[string](p, "LoadState")
	path := get[string](p, "FragmentPath")
	if path == "" {
		path = get[string](p, "SourcePath")
	}
	switch {
	case load == "masked":
		line("Loaded", fmt.Sprintf("masked (Reason: Unit %s is masked.)", unit))
	case path != "" && get[string](p, "UnitFileState") != "":
		detail := path + "; " + get[string](p, "UnitFileState")
		if preset := get[string](p, "UnitFilePreset"); preset != "" {
			detail += "; preset: " + preset
		}
		line("Loaded", fmt.Sprintf("%s (%s)", load, detail))
	case path != "":
		line("Loaded", fmt.Sprintf("%s (%s)", load, path))
	default:
		line("Loaded", load)
	}

	act := active
	if sub := get[string](p, "SubState"); sub != "" && sub != active {
		act += " (" + sub + ")"
	}
	if r := get[string](p, "Result"); r != "" && r != "success" {
		act += " (Result: " + r + ")"
	}
	var since uint64
	switch active {
	case "active", "reloading":
		since = get[uint64](p, "ActiveEnterTimestamp")
	case "inactive", "failed":
		since = get[uint64](p, "InactiveEnterTimestamp")
	case "activating":
		since = get[uint64](p, "InactiveExitTimestamp")
	default:
		since = get[uint64](p, "ActiveExitTimestamp")
	}
	if since > 0 && since != math.MaxUint64 {
		t := time.UnixMicro(int64(since))
		act += " since " + t.In(loc).Format("Mon 2006-01-02 15:04:05 MST") + "; " + relative(now.Sub(t))
	}
	line("Active", act)

	pid := get[uint32](p, "MainPID")
	running := pid > 0
	if !running {
		pid = get[uint32](p, "ExecMainPID")
	}
	if pid > 0 {
		v := fmt.Sprint(pid)
		if code := get[int32](p, "ExecMainCode"); !running && code > 0 {
			v += " (" + exitText(code, get[int32](p, "ExecMainStatus")) + ")"
		}
		line("Main PID", v)
	}
	if s := get[string](p, "StatusText"); s != "" {
		line("Status", fmt.Sprintf("%q", s))
	}
	if n, ok := known(p, "TasksCurrent"); ok {
		v := fmt.Sprint(n)
		if max, ok := known(p, "TasksMax"); ok {
			v += fmt.Sprintf(" (limit: %d)", max)
		}
		line("Tasks", v)
	}
	if n, ok := known(p, "MemoryCurrent"); ok {
		line("Memory", formatBytes(n))
	}
	if n, ok := known(p, "CPUUsageNSec"); ok {
		line("CPU", formatTimespan(n/1000, 1000))
	}
	if cg := get[string](p, "ControlGroup"); cg != "" && running {
		line("CGroup", cg)
	}
	return b.String()
}

// glyph is systemctl's unit state mark without colour.
func glyph(active string) string {
	switch active {
	case "failed":
		return "×"
	case "inactive", "maintenance":
		return "○"
	}
	return "●"
}

// exitText is the "(code=exited, status=1/FAILURE)" part of a dead main
// process, in systemctl's words.
func exitText(code, status int32) string {
	// si_code values of SIGCHLD (CLD_*).
	codes := map[int32]string{1: "exited", 2: "killed", 3: "dumped", 4: "trapped", 5: "stopped", 6: "continued"}
	name, ok := codes[code]
	if !ok {
		name = fmt.Sprint(code)
	}
	if code == 1 {
		s := fmt.Sprintf("code=%s, status=%d", name, status)
		if n, ok := exitStatusNames[status]; ok {
			s += "/" + n
		}
		return s
	}
	sig := strings.TrimPrefix(unix.SignalName(unix.Signal(status)), "SIG")
	if sig == "" {
		sig = fmt.Sprint(status)
	}
	return fmt.Sprintf("code=%s, signal=%s", name, sig)
}

// exitStatusNames are the exit codes systemctl names: LSB's and the ones
// systemd itself uses when setting up the process fails (the 2xx ones are
// the hardening settings' failures, e.g. 216/GROUP for a missing
// SupplementaryGroups= group, 226/NAMESPACE for a missing ReadWritePaths=).
var exitStatusNames = map[int32]string{
	0: "SUCCESS", 1: "FAILURE", 2: "INVALIDARGUMENT", 3: "NOTIMPLEMENTED",
	4: "NOPERMISSION", 5: "NOTINSTALLED", 6: "NOTCONFIGURED", 7: "NOTRUNNING",
	200: "CHDIR", 201: "NICE", 202: "FDS", 203: "EXEC", 204: "MEMORY",
	205: "LIMITS", 206: "OOM_ADJUST", 207: "SIGNAL_MASK", 208: "STDIN",
	209: "STDOUT", 210: "CHROOT", 211: "IOPRIO", 212: "TIMERSLACK",
	213: "SECUREBITS", 214: "SETSCHEDULER", 215: "CPUAFFINITY", 216: "GROUP",
	217: "USER", 218: "CAPABILITIES", 219: "CGROUP", 220: "SETSID",
	221: "CONFIRM", 222: "STDERR", 224: "PAM", 225: "NETWORK", 226: "NAMESPACE",
	227: "NO_NEW_PRIVILEGES", 228: "SECCOMP", 229: "SELINUX_CONTEXT",
	230: "PERSONALITY", 231: "APPARMOR", 232: "ADDRESS_FAMILIES",
	233: "RUNTIME_DIRECTORY", 235: "CHOWN", 236: "SMACK_PROCESS_LABEL",
	237: "KEYRING", 238: "STATE_DIRECTORY", 239: "CACHE_DIRECTORY",
	240: "LOGS_DIRECTORY", 241: "CONFIGURATION_DIRECTORY",
	242: "NUMA_POLICY", 243: "CREDENTIALS", 245: "BPF",
}

const (
	usecSecond = uint64(1_000_000)
	usecMinute = 60 * usecSecond
	usecHour   = 60 * usecMinute
	usecDay    = 24 * usecHour
	usecWeek   = 7 * usecDay
	usecMonth  = 2_629_800 * usecSecond
	usecYear   = 31_557_600 * usecSecond
)

// relative is systemd's format_timestamp_relative: "2h 3min ago".
func relative(d time.Duration) string {
	suffix := "ago"
	if d < 0 {
		d, suffix = -d, "left"
	}
	u := uint64(d / time.Microsecond)
	plural := func(n uint64, one string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, one)
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	switch {
	case u >= usecYear:
		return plural(u/usecYear, "year") + " " + plural(u%usecYear/usecMonth, "month") + " " + suffix
	case u >= usecMonth:
		return plural(u/usecMonth, "month") + " " + plural(u%usecMonth/usecDay, "day") + " " + suffix
	case u >= usecWeek:
		return plural(u/usecWeek, "week") + " " + plural(u%usecWeek/usecDay, "day") + " " + suffix
	case u >= 2*usecDay:
		return fmt.Sprintf("%d days %s", u/usecDay, suffix)
	case u >= 25*usecHour:
		return fmt.Sprintf("1 day %dh %s", (u-usecDay)/usecHour, suffix)
	case u >= 6*usecHour:
		return fmt.Sprintf("%dh %s", u/usecHour, suffix)
	case u >= usecHour:
		return fmt.Sprintf("%dh %dmin %s", u/usecHour, u%usecHour/usecMinute, suffix)
	case u >= 5*usecMinute:
		return fmt.Sprintf("%dmin %s", u/usecMinute, suffix)
	case u >= usecMinute:
		return fmt.Sprintf("%dmin %ds %s", u/usecMinute, u%usecMinute/usecSecond, suffix)
	case u >= usecSecond:
		return fmt.Sprintf("%ds %s", u/usecSecond, suffix)
	case u >= 1000:
		return fmt.Sprintf("%dms %s", u/1000, suffix)
	case u > 0:
		return fmt.Sprintf("%dus %s", u, suffix)
	}
	return "now"
}

// formatTimespan is systemd's format_timespan: "1min 2.345s", "10ms".
func formatTimespan(t, accuracy uint64) string {
	if t == 0 {
		return "0"
	}
	table := []struct {
		suffix string
		usec   uint64
	}{
		{"y", usecYear}, {"month", usecMonth}, {"w", usecWeek}, {"d", usecDay},
		{"h", usecHour}, {"min", usecMinute}, {"s", usecSecond}, {"ms", 1000}, {"us", 1},
	}
	var parts []string
	for _, e := range table {
		if t == 0 || (t < accuracy && len(parts) > 0) {
			break
		}
		if t < e.usec {
			continue
		}
		a, b := t/e.usec, t%e.usec
		if t < usecMinute && b > 0 {
			digits := 0
			for c := e.usec; c > 1; c /= 10 {
				digits++
			}
			for c := accuracy; c > 1; c /= 10 {
				b /= 10
				digits--
			}
			if digits > 0 {
				parts = append(parts, fmt.Sprintf("%d.%0*d%s", a, digits, b, e.suffix))
				break
			}
		}
		parts = append(parts, fmt.Sprintf("%d%s", a, e.suffix))
		t = b
	}
	return strings.Join(parts, " ")
}

// formatBytes is systemd's format_bytes: IEC units, one truncated decimal.
func formatBytes(t uint64) string {
	table := []struct {
		suffix string
		factor uint64
	}{
		{"E", 1 << 60}, {"P", 1 << 50}, {"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10},
	}
	for i, e := range table {
		if t < e.factor {
			continue
		}
		var dec uint64
		if i < len(table)-1 {
			dec = t / table[i+1].factor * 10 / 1024 % 10
		} else {
			dec = t * 10 / e.factor % 10
		}
		return fmt.Sprintf("%d.%d%s", t/e.factor, dec, e.suffix)
	}
	return fmt.Sprintf("%dB", t)
}

// get returns property k when it has systemd's type T, else T's zero value:
// a value of an unexpected type is treated as absent rather than trusted.
func get[T any](p map[string]any, k string) T {
	v, _ := p[k].(T)
	return v
}

// known returns a counter that systemd reports as UINT64_MAX when it does
// not know it (no accounting, no cgroup).
func known(p map[string]any, k string) (uint64, bool) {
	n, ok := p[k].(uint64)
	return n, ok && n != math.MaxUint64
}
