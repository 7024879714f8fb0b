package store

import (
	"github.com/perchhq/perch/appliance/chat"

	"testing"
	"time"
)

func TestInfoRecordRoundTrip(t *testing.T) {
	in := infoRecord{Count: 123, Created: time.Unix(5, 6).UTC(), Updated: time.Unix(7, 8).UTC(),
		Usage: chat.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}, Channel: "telegram", ChatID: "-100123"}
	var out infoRecord
	if err := out.unmarshal(in.marshal()); err != nil || out != in {
		t.Fatalf("got %+v, %v", out, err)
	}
	b := in.marshal()
	for i := 0; i < len(b); i++ {
		if err := out.unmarshal(b[:i]); err == nil {
			t.Errorf("truncated record (%d of %d bytes) accepted", i, len(b))
		}
	}
}

// FuzzInfoRecord: a damaged record is an error, never a panic.
func FuzzInfoRecord(f *testing.F) {
	f.Add((&infoRecord{Count: 1, Channel: "c"}).marshal())
	f.Add([]byte{1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r infoRecord
		r.unmarshal(b)
	})
}
