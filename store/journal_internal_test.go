package store

import (
	"bytes"
	"errors"
	"os"
	"strings"
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
	// A cut anywhere, even inside the length, asks for more; zeros are no
	// record at all.
	for _, cut := range []int{1, 7, recordHead + 3, len(enc) - 1} {
		if _, _, err := decodeRecord(enc[:cut]); !errors.Is(err, errShort) {
			t.Fatalf("cut to %d bytes: %v", cut, err)
		}
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

// TestJournalScanAcrossReads: a record cut by the end of the scan's
// first read (it reads a half in growing pieces) is read whole, wherever
// the cut falls: inside the length, the checksum, the sequence number or
// the body.
func TestJournalScanAcrossReads(t *testing.T) {
	path := t.TempDir() + "/j"
	j, _, err := openJournal(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.prepare(); err != nil {
		t.Fatal(err)
	}
	j.close()
	for cut := 1; cut <= 40; cut++ {
		// A first record that ends cut bytes before the first read does.
		var buf []byte
		for size := 0; len(buf) != 4096-cut; size++ {
			if size > 4096 {
				t.Fatalf("no record size ends at %d", 4096-cut)
			}
			buf = (&appendRec{seq: 1, key: "k", limit: 100, data: [][]byte{bytes.Repeat([]byte("x"), size)}}).encode(nil)
		}
		for seq := uint64(2); seq <= 5; seq++ {
			buf = (&appendRec{seq: seq, key: "k", limit: 100, data: [][]byte{[]byte("{}")}}).encode(buf)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(make([]byte, 8192), halfStart(0))
		f.WriteAt(buf, halfStart(0))
		f.Close()
		j, recs, err := openJournal(path, 0)
		if err != nil {
			t.Fatal(err)
		}
		j.close()
		if len(recs) != 5 {
			t.Fatalf("cut %d bytes into the second record: found %d of 5 records", cut, len(recs))
		}
		if j.off != halfStart(0)+int64(len(buf)) {
			t.Fatalf("cut %d: writing would go on at %d, not after the last record at %d", cut, j.off, halfStart(0)+int64(len(buf)))
		}
	}
}

// TestSalvageJournalNeedsMark: without the damaged file's mark the journal
// is left alone (a record applied twice repeats messages), and the report
// says why.
func TestSalvageJournalNeedsMark(t *testing.T) {
	dir := t.TempDir()
	src := dir + "/perch.db"
	db, err := Open(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.History("web:a")
	HoldJournalForTest(db)
	if err := db.Append("web:a", []chat.Message{{Role: "user", Content: "hi"}}, chat.Usage{}, 200); err != nil {
		t.Fatal(err)
	}
	CrashForTest(db)
	if recs, err := readJournal(JournalPath(src), 0); err != nil || len(recs) != 1 {
		t.Fatalf("the journal holds %d records (%v), want 1", len(recs), err)
	}
	dst, err := Open(dir+"/out.db", Options{NoRecover: true, CacheSessions: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	var rep SalvageReport
	if err := dst.salvageJournal(JournalPath(src), nil, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.JournalRecords != 0 || !strings.Contains(rep.JournalSkipped, "unreadable") {
		t.Fatalf("report = %+v", rep)
	}
	if n := dst.countSessions(); n != 0 {
		t.Fatalf("%d sessions applied without a mark", n)
	}
}
