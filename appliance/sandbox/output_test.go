package sandbox

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCapBufferKeepsHeadAndTail(t *testing.T) {
	for _, tc := range []struct {
		name      string
		max       int
		writes    []string
		want      string
		truncated bool
	}{
		{"fits", 10, []string{"hello"}, "hello", false},
		{"exactly full", 10, []string{"0123456789"}, "0123456789", false},
		{"many small writes", 6, []string{"ab", "cd", "ef", "gh", "ij"}, "abc\n[... 4 bytes of output omitted ...]\nhij", true},
		{"one big write", 6, []string{"abcdefghij"}, "abc\n[... 4 bytes of output omitted ...]\nhij", true},
		{"ring wraps several times", 4, []string{"12", "34", "56", "78", "9"}, "12\n[... 5 bytes of output omitted ...]\n89", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newCapBuffer(tc.max)
			for _, w := range tc.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := b.String(); got != tc.want {
				t.Errorf("String = %q, want %q", got, tc.want)
			}
			if b.Truncated() != tc.truncated {
				t.Errorf("Truncated = %v, want %v", b.Truncated(), tc.truncated)
			}
		})
	}
}

// TestCapBufferBoundedMemory: 50 MB through a 1 KiB buffer keep 1 KiB.
func TestCapBufferBoundedMemory(t *testing.T) {
	b := newCapBuffer(1024)
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for i := 0; i < 800; i++ {
		_, _ = b.Write(chunk)
	}
	if cap(b.head)+cap(b.tail) != 1024 {
		t.Errorf("buffers grew to %d bytes", cap(b.head)+cap(b.tail))
	}
	if b.total != 800*64<<10 {
		t.Errorf("total = %d", b.total)
	}
}

// TestCapBufferCutsOnRuneBoundaries: the kept text stays valid UTF-8.
func TestCapBufferCutsOnRuneBoundaries(t *testing.T) {
	b := newCapBuffer(11)
	_, _ = b.ReadFrom(strings.NewReader(strings.Repeat("é€", 40)))
	if s := b.String(); !utf8.ValidString(s) {
		t.Errorf("invalid UTF-8: %q", s)
	}
}
