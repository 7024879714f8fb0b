package sandbox

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// capBuffer keeps the first and the last bytes of a stream and counts the
// rest, so a command that prints without end costs a fixed amount of memory.
// Both ends matter: the start says what ran, the end holds the error.
type capBuffer struct {
	head  []byte // first headCap bytes
	tail  []byte // ring of the last tailCap bytes once head is full
	start int    // index of the oldest byte in tail when the ring is full
	total int64
}

func newCapBuffer(max int) *capBuffer {
	if max < 2 {
		max = 2
	}
	headCap := max / 2
	return &capBuffer{
		head: make([]byte, 0, headCap),
		tail: make([]byte, 0, max-headCap),
	}
}

// Write implements io.Writer; it never fails.
func (b *capBuffer) Write(p []byte) (int, error) {
	n := len(p)
	b.total += int64(n)
	if room := cap(b.head) - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	tc := cap(b.tail)
	if len(p) >= tc {
		b.tail = append(b.tail[:0], p[len(p)-tc:]...)
		b.start = 0
		return n, nil
	}
	if room := tc - len(b.tail); room > 0 {
		k := min(room, len(p))
		b.tail = append(b.tail, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 { // ring full: overwrite the oldest bytes
		k := copy(b.tail[b.start:], p)
		p = p[k:]
		b.start = (b.start + k) % tc
	}
	return n, nil
}

// ReadFrom drains r into the buffer with a small fixed buffer.
func (b *capBuffer) ReadFrom(r io.Reader) (int64, error) {
	buf := make([]byte, 16<<10)
	var n int64
	for {
		k, err := r.Read(buf)
		if k > 0 {
			_, _ = b.Write(buf[:k])
			n += int64(k)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// Truncated reports whether bytes were dropped.
func (b *capBuffer) Truncated() bool {
	return b.total > int64(len(b.head)+len(b.tail))
}

// String returns the kept bytes; when some were dropped, a line between head
// and tail says how many. Cuts land on UTF-8 boundaries.
func (b *capBuffer) String() string {
	tail := make([]byte, 0, len(b.tail))
	tail = append(tail, b.tail[b.start:]...)
	tail = append(tail, b.tail[:b.start]...)
	if !b.Truncated() {
		return string(b.head) + string(tail)
	}
	head := b.head
	// Drop a rune cut in half at the end of head and the start of tail.
	for i := 0; i < utf8.UTFMax && len(head) > 0; i++ {
		if r, size := utf8.DecodeLastRune(head); r != utf8.RuneError || size != 1 {
			break
		}
		head = head[:len(head)-1]
	}
	for i := 0; i < utf8.UTFMax && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
		tail = tail[1:]
	}
	omitted := b.total - int64(len(head)+len(tail))
	return fmt.Sprintf("%s\n[... %d bytes of output omitted ...]\n%s", head, omitted, tail)
}
