package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// A conversation that outgrew the model's context window is not stuck: the
// turn that meets the refusal sends the newer half of the history, says so
// once, and later turns start from that window without a failed call.
func TestAConversationPastTheContextWindowGoesOn(t *testing.T) {
	f := newFixture(t, nil)
	var old []chat.Message
	for i := range 20 {
		old = append(old, chat.Message{Role: chat.RoleUser, Content: fmt.Sprintf("question %d", i)},
			chat.Message{Role: chat.RoleAssistant, Content: fmt.Sprintf("a long answer %d", i)})
	}
	if err := f.db.Append("telegram:5", old, chat.Usage{}, 200); err != nil {
		t.Fatal(err)
	}
	f.fake.Enqueue(
		providertest.Reply{Status: 400, ErrorCode: "context_length_exceeded",
			ErrorMessage: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9120 tokens."},
		providertest.Reply{Content: "Here is the answer."},
		providertest.Reply{Content: "And the next one."},
	)
	ask := func(text string) string {
		rep, err := f.loop.Process(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "5", SessionKey: "telegram:5", Text: text})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Text
	}
	first := ask("and now?")
	if !strings.HasPrefix(first, "Here is the answer.") || !strings.Contains(first, "no longer fits the model's context window") {
		t.Errorf("first answer %q", first)
	}
	second := ask("one more")
	if second != "And the next one." {
		t.Errorf("second answer %q; want no note again", second)
	}
	reqs := f.fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d provider calls; want the refused one, its retry and the next turn's", len(reqs))
	}
	sent := func(i int) int { return len(reqs[i].Body.Messages) }
	if !(sent(1) < sent(0) && sent(1) > 2 && sent(2) <= sent(1)+2) {
		t.Errorf("messages sent: %d refused, %d retried, %d next; want the retry and the next turn within the newer half", sent(0), sent(1), sent(2))
	}
	if m := reqs[1].Body.Messages; m[1].Role != "user" {
		t.Errorf("the shorter history starts with a %s message; want the user's", m[1].Role)
	}
	if h, _ := f.db.History("telegram:5"); len(h) != 44 {
		t.Errorf("the stored history has %d messages; want all 40 and the two exchanges", len(h))
	}
}

// A message too long for the model even alone is refused, and the chat
// goes on with what came after it: the halving went down to no history
// and remembered the count of what was left, none, so every later turn
// (and the one after /new) went to the model without any of the
// conversation, until a restart. The fake refuses as a model does, while
// the long message is in what it is sent.
func TestAMessageTooLongAloneDoesNotStarveTheChat(t *testing.T) {
	f := newFixture(t, nil)
	var old []chat.Message
	for i := range 4 {
		old = append(old, chat.Message{Role: chat.RoleUser, Content: fmt.Sprintf("question %d", i), Time: int64(i*2 + 1)},
			chat.Message{Role: chat.RoleAssistant, Content: fmt.Sprintf("answer %d", i), Time: int64(i*2 + 2)})
	}
	if err := f.db.Append("telegram:6", old, chat.Usage{}, 200); err != nil {
		t.Fatal(err)
	}
	tooLong := providertest.Reply{Status: 400, ErrorCode: "context_length_exceeded", ErrorMessage: "This model's maximum context length is 8192 tokens."}
	long := strings.Repeat("a long paste ", 1000)
	ask := func(text string) (string, error) {
		rep, err := f.loop.Process(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "6", SessionKey: "telegram:6", Text: text})
		if err != nil {
			return "", err
		}
		return rep.Text, nil
	}
	sentAt := func(i int) string {
		var b strings.Builder
		for _, m := range f.fake.Requests()[i].Body.Messages[1:] {
			fmt.Fprintf(&b, "%s|", strings.Fields(fmt.Sprint(m.Content))[0])
		}
		return b.String()
	}
	// The whole history, its newer halves, and none of it: all refused.
	f.fake.Enqueue(tooLong, tooLong, tooLong, tooLong)
	if _, err := ask(long); err == nil || !strings.Contains(err.Error(), "this message (with what its tools returned) does not fit") {
		t.Fatalf("the message too long alone: %v; want it said that the message is too long", err)
	}
	n := len(f.fake.Requests())
	if got := sentAt(n - 1); got != "a|" {
		t.Fatalf("the last try sent %q; want the long message alone", got)
	}
	// The next message: refused while the long one is in the history,
	// answered once the history starts after it.
	f.fake.Enqueue(tooLong, tooLong, tooLong, providertest.Reply{Content: "fine"})
	if _, err := ask("my name is Bob"); err != nil {
		t.Fatal(err)
	}
	n = len(f.fake.Requests())
	f.fake.Enqueue(providertest.Reply{Content: "Bob."})
	if _, err := ask("what is my name?"); err != nil {
		t.Fatal(err)
	}
	if got := sentAt(n); got != "my|fine|what|" {
		t.Errorf("the turn after sent %q; want the exchange since the long message (my name is Bob, fine) and the question", got)
	}
	f.loop.Process(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "6", SessionKey: "telegram:6", Text: "/new"})
	f.fake.Enqueue(providertest.Reply{Content: "I do not know."})
	if _, err := ask("what is my name?"); err != nil {
		t.Fatal(err)
	}
	if got := sentAt(n + 1); got != "what|" {
		t.Errorf("after /new the turn sent %q; want the question alone", got)
	}
}
