package provider

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/chat"
)

func encodeBoth(t *testing.T, wc *wireCache, key string, r Request) []byte {
	t.Helper()
	b := chatBody{model: "m", maxTokens: 10}
	want := encodeChat(nil, b, r)
	r.HistoryKey = key
	got := encodeChatWith(nil, b, r, wc)
	if !bytes.Equal(got, want) {
		t.Fatalf("with the cache:\n%s\nwithout:\n%s", got, want)
	}
	return got
}

// TestWireCacheEncodesLikeTheEncoder: a conversation whose history grows
// at its end and is trimmed at its start, with tool calls and text that
// needs escaping, encodes to the same bytes turn after turn whether the
// history's encoding is kept or not.
func TestWireCacheEncodesLikeTheEncoder(t *testing.T) {
	wc := newWireCache()
	var hist []chat.Message
	for turn := range 300 {
		user := chat.Message{Role: chat.RoleUser, Content: fmt.Sprintf("turn %d: \"quote\" \\ <tag> \n ünï", turn)}
		r := Request{System: "sys", History: hist[:len(hist):len(hist)], Messages: []chat.Message{user}}
		encodeBoth(t, wc, "s", r)
		added := []chat.Message{user}
		if turn%5 == 0 {
			added = append(added,
				chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "c", Name: "exec", Arguments: `{"cmd":"ls"}`}}},
				chat.Message{Role: chat.RoleTool, ToolCallID: "c", Name: "exec", Content: "a\tb"})
		}
		added = append(added, chat.Message{Role: chat.RoleAssistant, Content: fmt.Sprint("answer ", turn)})
		hist = append(hist, added...)
		if len(hist) > 120 {
			hist = hist[len(hist)-100:] // a trim, like the store's
		}
	}
	// No history, and no messages at all.
	encodeBoth(t, wc, "s", Request{})
	encodeBoth(t, wc, "s", Request{System: "only"})
}

// TestWireCacheReusesOnlyTheSameStrings: the kept bytes are copied for
// messages that are the same strings, and equal text in new strings (a
// history read again from the database) is encoded again.
func TestWireCacheReusesOnlyTheSameStrings(t *testing.T) {
	wc := newWireCache()
	hist := []chat.Message{{Role: "user", Content: "hello"}, {Role: "assistant", Content: "hi"}}
	encodeBoth(t, wc, "s", Request{History: hist})
	// Mark the kept encoding: a call that copies it shows the mark.
	e := wc.entries["s"]
	copy(e.enc, bytes.ToUpper(e.enc))
	r := Request{History: hist, HistoryKey: "s"}
	if got := encodeChatWith(nil, chatBody{model: "m"}, r, wc); !bytes.Contains(got, []byte(`"HELLO"`)) {
		t.Fatalf("the kept encoding was not reused: %s", got)
	}
	copy(wc.entries["s"].enc, bytes.ToUpper(wc.entries["s"].enc))
	fresh := []chat.Message{{Role: "user", Content: strings.Clone("hello")}, {Role: "assistant", Content: strings.Clone("hi")}}
	r.History = fresh
	if got := encodeChatWith(nil, chatBody{model: "m"}, r, wc); bytes.Contains(got, []byte("HELLO")) {
		t.Fatalf("equal text in other strings reused the kept bytes: %s", got)
	}
	// Other keys never share.
	copy(wc.entries["s"].enc, bytes.ToUpper(wc.entries["s"].enc))
	r.HistoryKey = "t"
	if got := encodeChatWith(nil, chatBody{model: "m"}, r, wc); bytes.Contains(got, []byte("HELLO")) {
		t.Fatalf("another conversation reused the kept bytes: %s", got)
	}
}

// TestWireCacheBounds: the cache holds at most wireMaxEntries
// conversations and wireMaxBytes, and never one history over wireMaxEntry.
func TestWireCacheBounds(t *testing.T) {
	wc := newWireCache()
	big := []chat.Message{{Role: "user", Content: strings.Repeat("x", wireMaxEntry)}}
	encodeBoth(t, wc, "big", Request{History: big})
	if _, kept := wc.entries["big"]; kept {
		t.Fatal("a history over wireMaxEntry was kept")
	}
	mid := []chat.Message{{Role: "user", Content: strings.Repeat("y", 100<<10)}}
	for i := range 3 * wireMaxEntries {
		encodeBoth(t, wc, fmt.Sprint("k", i), Request{History: mid})
		size := 0
		for _, e := range wc.entries {
			size += e.bytes()
		}
		if len(wc.entries) > wireMaxEntries || wc.size > wireMaxBytes || size != wc.size {
			t.Fatalf("after %d conversations: %d entries, %d bytes (counted %d)", i+1, len(wc.entries), size, wc.size)
		}
	}
	small := []chat.Message{{Role: "user", Content: "s"}}
	for i := range 3 * wireMaxEntries {
		encodeBoth(t, wc, fmt.Sprint("s", i), Request{History: small})
	}
	if len(wc.entries) != wireMaxEntries {
		t.Fatalf("%d entries, want %d", len(wc.entries), wireMaxEntries)
	}
	if _, ok := wc.entries[fmt.Sprint("s", 3*wireMaxEntries-1)]; !ok {
		t.Fatal("the most recent conversation was evicted")
	}
}

// TestSystemHeadEncodesAsOnePrompt: a system prompt sent as a head and a
// tail is the same request as the whole prompt in System, and the head's
// escaped text is reused only for the very same string.
func TestSystemHeadEncodesAsOnePrompt(t *testing.T) {
	wc := newWireCache()
	heads := []string{"", "You are Perch.\n", "quote \" back \\ tab\t ünï \u2028 bad \xff", strings.Repeat("h", 5000)}
	tails := []string{"", "\n## Now\nTime: 12:00\n", "ü\"\n"}
	for _, h := range heads {
		for _, tail := range tails {
			whole := encodeChat(nil, chatBody{model: "m"}, Request{System: h + tail, Messages: userMsg("x")})
			for range 2 { // encoded, then from the kept head
				got := encodeChatWith(nil, chatBody{model: "m"}, Request{SystemHead: h, System: tail, Messages: userMsg("x")}, wc)
				if !bytes.Equal(got, whole) {
					t.Fatalf("head %q tail %q:\n%s\nwant\n%s", h, tail, got, whole)
				}
			}
		}
	}
	head := "You are Perch, kept."
	encodeChatWith(nil, chatBody{model: "m"}, Request{SystemHead: head}, wc)
	h := wc.head.Load()
	copy(h.enc, bytes.ToUpper(h.enc))
	if got := encodeChatWith(nil, chatBody{model: "m"}, Request{SystemHead: head}, wc); !bytes.Contains(got, []byte("PERCH, KEPT")) {
		t.Fatalf("the kept head was not reused: %s", got)
	}
	if got := encodeChatWith(nil, chatBody{model: "m"}, Request{SystemHead: strings.Clone(head)}, wc); bytes.Contains(got, []byte("PERCH, KEPT")) {
		t.Fatalf("an equal head in another string reused the kept bytes: %s", got)
	}
}

// TestWireCacheDrop: after drop no conversation is kept, the next call of
// each encodes the same bytes afresh and is kept again, and a client
// without a cache drops nothing without failing.
func TestWireCacheDrop(t *testing.T) {
	wc := newWireCache()
	hist := []chat.Message{{Role: "user", Content: "hello"}, {Role: "assistant", Content: "hi"}}
	first := encodeBoth(t, wc, "s", Request{History: hist})
	encodeBoth(t, wc, "t", Request{History: hist})
	wc.drop()
	if len(wc.entries) != 0 || wc.size != 0 {
		t.Fatalf("after drop: %d entries, %d bytes", len(wc.entries), wc.size)
	}
	if again := encodeBoth(t, wc, "s", Request{History: hist}); !bytes.Equal(again, first) {
		t.Fatalf("after drop:\n%s\nbefore:\n%s", again, first)
	}
	if _, ok := wc.entries["s"]; !ok || len(wc.entries) != 1 {
		t.Fatalf("the next call was not kept: %d entries", len(wc.entries))
	}
	(&Client{}).DropCache()
}
