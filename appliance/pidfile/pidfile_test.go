package pidfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestDialAddr(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0.0.0.0:8080", "127.0.0.1:8080"},
		{"[::]:8080", "127.0.0.1:8080"},
		{":8080", "127.0.0.1:8080"},
		{"127.0.0.1:8080", "127.0.0.1:8080"},
		{"192.168.1.20:80", "192.168.1.20:80"},
		{"[::1]:9000", "[::1]:9000"},
		{"[fe80::1]:9000", "[fe80::1]:9000"},
		{"perch.local:8080", "perch.local:8080"},
		{"no-port", "no-port"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := DialAddr(tt.in); got != tt.want {
				t.Errorf("DialAddr(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestPIDFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.pid")
	if err := Write(path, "0.0.0.0:8080", "k"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("pid file mode %v, %v: it holds the key, so only its owner may read it", st.Mode(), err)
	}
	p, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != os.Getpid() || p.Addr != "0.0.0.0:8080" || p.Key != "k" {
		t.Errorf("readPID = %+v, want this process and its address", p)
	}
}

// deadPID returns the id of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.Pid()
}

func TestReadPIDRefusals(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content *string
		want    string
	}{
		{name: "absent", content: nil},
		{name: "not JSON", content: ptr("12345\n"), want: "is damaged"},
		{name: "truncated", content: ptr(`{"pid": 12`), want: "is damaged"},
		{name: "empty", content: ptr(""), want: "is damaged"},
		{name: "pid zero", content: ptr(`{"pid":0,"addr":"127.0.0.1:8080"}`), want: "is damaged"},
		{name: "negative pid", content: ptr(`{"pid":-1,"addr":"127.0.0.1:8080"}`), want: "is damaged"},
		{name: "dead process", content: ptr(fmt.Sprintf(`{"pid":%d,"addr":"127.0.0.1:8080"}`, deadPID(t))), want: "is not running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".pid")
			if tt.content != nil {
				if err := os.WriteFile(path, []byte(*tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Read(path)
			if err == nil {
				t.Fatal("readPID accepted it")
			}
			if tt.content == nil {
				if !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("absent file: %v, want fs.ErrNotExist", err)
				}
				return
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("readPID = %v, want %q", err, tt.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// TestProof: only a holder of the key answers a challenge; a listener that
// replays an old proof or guesses fails.
func TestProof(t *testing.T) {
	key := NewKey()
	if len(key) != 64 || key == NewKey() {
		t.Fatalf("keys must be random 32-byte hex: %q", key)
	}
	ch := NewKey()
	p := Proof(key, ch)
	if !Valid(key, ch, p) {
		t.Fatal("the right proof was refused")
	}
	for name, tt := range map[string][3]string{
		"other key":       {NewKey(), ch, p},
		"other challenge": {key, NewKey(), p},
		"empty proof":     {key, ch, ""},
		"empty key":       {"", ch, Proof("", ch)},
		"empty challenge": {key, "", Proof(key, "")},
	} {
		if Valid(tt[0], tt[1], tt[2]) {
			t.Errorf("%s: accepted", name)
		}
	}
}
