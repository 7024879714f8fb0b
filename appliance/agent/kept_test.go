package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// TestALongMessageIsKeptShortInTheHistory: a pasted text of hundreds of KB
// goes to the model whole in the turn that answers it, and the history
// keeps its beginning and how much was left out, as it does a long answer.
// Kept whole, a hundred such messages were 800 MB of memory and requests
// of 93 MB, every turn.
func TestALongMessageIsKeptShortInTheHistory(t *testing.T) {
	f := newFixture(t, nil)
	paste := strings.Repeat("log line ", 30000) + "end" // 270 KB
	answer := strings.Repeat("word ", 20000) + "end"    // 100 KB
	f.fake.Enqueue(providertest.Reply{Status: 500}, providertest.Reply{Content: answer}, providertest.Reply{Content: "ok"})
	in := bus.Inbound{Channel: "telegram", ChatID: "7", SessionKey: "telegram:7", Text: paste}
	if _, err := f.loop.Process(context.Background(), in); err == nil {
		t.Fatal("the first try was answered; the fake failed it")
	}
	// Sent again after the failure, as the page suggests: asked again,
	// not stored twice.
	rep, err := f.loop.Process(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Text != answer {
		t.Errorf("the answer came back %d bytes, want %d (whole)", len(rep.Text), len(answer))
	}
	reqs := f.fake.Requests()
	if got := fmt.Sprint(reqs[1].Body.Messages[len(reqs[1].Body.Messages)-1].Content); got != paste {
		t.Errorf("the model got %d bytes of the message, want all %d", len(got), len(paste))
	}
	h, err := f.db.History("telegram:7")
	if err != nil || len(h) != 2 {
		t.Fatalf("history %d messages (%v); want the message once and the answer", len(h), err)
	}
	for i, want := range []int{len(paste), len(answer)} {
		if c := h[i].Content; len(c) > 70<<10 || !strings.Contains(c, "more bytes, kept out of the history") || !strings.HasPrefix(whole(i, paste, answer), c[:1000]) {
			t.Errorf("stored %s: %d bytes of %d, ending %q", h[i].Role, len(c), want, c[max(0, len(c)-120):])
		}
	}
	if _, err := f.loop.Process(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "7", SessionKey: "telegram:7", Text: "and?"}); err != nil {
		t.Fatal(err)
	}
	if n := len(f.fake.Requests()[2].Raw); n > 150<<10 {
		t.Errorf("the next turn's request is %d bytes; the history should carry the kept beginnings", n)
	}
}

func whole(i int, a, b string) string {
	if i == 0 {
		return a
	}
	return b
}
