package store

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/chat"
)

func TestJournalRecordRoundTrip(t *testing.T) {
	in := &appendRec{seq: 42, key: "telegram:123", limit: 200, now: time.Unix(1700000000, 5).UTC(),
		usage: chat.Usage{PromptTokens: 3, CompletionTokens: -1, TotalTokens: 1 << 40},
		route: true, ch: "telegram", id: "123",
		data: [][]byte{[]byte(`{"role":"user","content":"hé\u2028"}`), []byte(`{}`)}}
	enc := in.encode([]byte("prefix"))
	if string(enc[:6]) != "prefix" {
		t.Fatal("encode overwrote what was before it")
	}
	enc = enc[6:]
	if len(enc) > in.encodedSize() {
		t.Fatalf("encoded %d bytes, encodedSize said at most %d", len(enc), in.encodedSize())
	}
	out, n, err := decodeRecord(append(enc, 0, 0, 0))
	if err != nil || n != len(enc) {
		t.Fatalf("decode: %v, %d of %d bytes", err, n, len(enc))
	}
	if out.seq != in.seq || out.key != in.key || out.limit != in.limit || !out.now.Equal(in.now) ||
		out.usage != in.usage || !out.route || out.ch != in.ch || out.id != in.id || len(out.data) != 2 ||
		!bytes.Equal(out.data[0], in.data[0]) || !bytes.Equal(out.data[1], in.data[1]) {
		t.Fatalf("round trip:\n in %+v\nout %+v", in, out)
	}
	// Without a route, too.
	in.route = false
	if out, _, err := decodeRecord(in.encode(nil)); err != nil || out.route || out.ch != "" {
		t.Fatalf("no route: %+v %v", out, err)
	}
	// Every cut is refused, and every changed byte.
	for i := range len(enc) {
		if _, _, err := decodeRecord(enc[:i]); err == nil {
			t.Fatalf("a record cut to %d of %d bytes decoded", i, len(enc))
		}
		bad := bytes.Clone(enc)
		bad[i] ^= 0x40
		if _, _, err := decodeRecord(bad); err == nil {
			t.Fatalf("a record with byte %d changed decoded", i)
		}
	}
	// A cut inside the body asks for more; zeros are no record at all.
	if _, _, err := decodeRecord(enc[:len(enc)-1]); !errors.Is(err, errShort) {
		t.Fatalf("cut body: %v", err)
	}
	if _, _, err := decodeRecord(make([]byte, 64)); !errors.Is(err, errRecord) {
		t.Fatalf("zeros: %v", err)
	}
}

// FuzzJournalRecord: decoding any bytes never panics, and whatever decodes
// encodes back to the same bytes.
func FuzzJournalRecord(f *testing.F) {
	f.Add((&appendRec{seq: 1, key: "k", limit: 100, data: [][]byte{[]byte(`{"role":"user"}`)}}).encode(nil))
	f.Add(make([]byte, 32))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := decodeRecord(b)
		if err != nil {
			return
		}
		if again := r.encode(nil); !bytes.Equal(again, b[:n]) {
			t.Fatalf("decoded %+v re-encodes differently", r)
		}
	})
}
