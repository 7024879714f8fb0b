package usb

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseUevent: whatever arrives on the socket, parsing never panics, and
// what it accepts is self-consistent.
func FuzzParseUevent(f *testing.F) {
	files, _ := filepath.Glob("testdata/uevents/*/*.uevent")
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := ParseUevent(b)
		if err != nil {
			return
		}
		if ev.Action == "" || !strings.HasPrefix(ev.DevPath, "/") {
			t.Fatalf("accepted event without action or path: %+v", ev)
		}
		if ev.Env["ACTION"] != ev.Action || ev.Env["DEVPATH"] != ev.DevPath {
			t.Fatalf("fields disagree with the environment: %+v", ev)
		}
		if d, ok := DeviceFromEvent(ev, ""); ok && (d.Path != ev.DevPath || strings.Contains(d.Port, "/")) {
			t.Fatalf("device %+v from %+v", d, ev)
		}
	})
}
