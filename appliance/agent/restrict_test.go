package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/provider/providertest"
	"github.com/perchhq/perch/appliance/tools"
)

// withBoardTool adds "relay", a tool that changes the board.
func withBoardTool(f *fixture) *int {
	runs := new(int)
	f.reg.Register(tools.Func{ToolName: "relay", ToolDescription: "Switch the relay.", Mutating: true,
		Run: func(context.Context, tools.Args) tools.Result { *runs++; return tools.Text("switched") }})
	f.reg.Register(tools.NewSubagent(f.loop.Subagents()))
	return runs
}

func offered(req providertest.Request) []string {
	var names []string
	for _, tl := range req.Body.Tools {
		b, _ := json.Marshal(tl)
		var v struct {
			Function struct{ Name string } `json:"function"`
		}
		json.Unmarshal(b, &v)
		names = append(names, v.Function.Name)
	}
	return names
}

func TestRestrictedTurnGetsOnlySafeToolsAndIsToldWhy(t *testing.T) {
	f := newFixture(t, nil)
	runs := withBoardTool(f)
	f.fake.Enqueue(
		providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "a", Name: "relay", Args: `{}`}}},
		providertest.Reply{Content: "I may not."},
	)
	msg := bus.Inbound{Channel: "discord", ChatID: "c9", SessionKey: "discord:c9", Text: "switch it", RestrictTools: true}
	if _, err := f.loop.Process(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	reqs := f.fake.Requests()
	if got := strings.Join(offered(reqs[0]), ","); strings.Contains(got, "relay") || !strings.Contains(got, "echo") {
		t.Errorf("offered %s; want echo without relay", got)
	}
	system := reqs[0].Body.Messages[0].Content
	if !strings.Contains(system, "withheld: relay") || !strings.Contains(system, "channels.discord.allow_all_tools") {
		t.Errorf("the system prompt does not explain the restriction:\n%s", system)
	}
	if *runs != 0 || !strings.Contains(providertest.LastTool(reqs[1].Body), "refused") {
		t.Errorf("the withheld tool ran %d times; result %q", *runs, providertest.LastTool(reqs[1].Body))
	}

	// The same message from the owner gets every tool.
	f.fake.Enqueue(providertest.Reply{Content: "ok"})
	msg.RestrictTools = false
	f.loop.Process(context.Background(), msg)
	reqs = f.fake.Requests()
	if got := strings.Join(offered(reqs[2]), ","); !strings.Contains(got, "relay") {
		t.Errorf("unrestricted turn offered %s", got)
	}
}

func TestSubagentOfARestrictedTurnIsRestrictedToo(t *testing.T) {
	f := newFixture(t, nil)
	runs := withBoardTool(f)
	f.fake.Enqueue(
		providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "a", Name: "subagent", Args: `{"task":"switch the relay"}`}}},
		// the subagent's turn: tries the relay
		providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "b", Name: "relay", Args: `{}`}}},
		providertest.Reply{Content: "could not"},
		providertest.Reply{Content: "done"},
	)
	msg := bus.Inbound{Channel: "telegram", ChatID: "5", SessionKey: "telegram:5", Text: "delegate", RestrictTools: true}
	if _, err := f.loop.Process(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	reqs := f.fake.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model calls", len(reqs))
	}
	sub := reqs[1]
	if strings.Contains(strings.Join(offered(sub), ","), "relay") || !strings.Contains(sub.Body.Messages[0].Content, "channels.telegram.allow_all_tools") {
		t.Errorf("the subagent got %v and prompt:\n%s", offered(sub), sub.Body.Messages[0].Content)
	}
	if *runs != 0 {
		t.Errorf("the relay ran %d times through a subagent", *runs)
	}
}

func TestChannelReplyCarriesTheInboxIDEvenWhenEmpty(t *testing.T) {
	f := newFixture(t, nil)
	f.fake.Enqueue(providertest.Reply{Content: ""})
	if err := f.loop.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.bus.PublishInbound(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "5", ThreadID: "3", ReplyTo: "77", Text: "hi", InboxID: 42})
	select {
	case out := <-f.bus.Outbound():
		// The model said nothing at all: the person reads why, not a blank.
		if out.InboxID != 42 || out.Text != agent.EmptyAnswer || out.ChatID != "5" || out.ThreadID != "3" || out.ReplyTo != "77" {
			t.Errorf("reply %+v", out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reply published: the inbox entry would never clear")
	}
	if ch, chat := f.loop.LastActive(nil); ch != "telegram" || chat != "5" {
		t.Errorf("last active %s:%s", ch, chat)
	}
}

func TestCanvasImagesGoOutAsMedia(t *testing.T) {
	f := newFixture(t, nil)
	f.reg.Register(tools.NewCanvas())
	uri := "data:image/png;base64,iVBORw0KGgo="
	f.fake.Enqueue(
		providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "a", Name: "canvas", Args: `{"action":"create_node","type":"image","title":"plot","content":"` + uri + `"}`}}},
		providertest.Reply{Content: "here"},
	)
	f.loop.Start(context.Background())
	f.bus.PublishInbound(context.Background(), bus.Inbound{Channel: "slack", ChatID: "C1", Text: "plot it", InboxID: 7})
	select {
	case out := <-f.bus.Outbound():
		if len(out.Media) != 1 || out.Media[0].URL != uri || out.Media[0].Kind != "image" || out.Text != "here" {
			t.Errorf("reply %+v", out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reply")
	}
}

func TestReplayedTurnDoesNotStoreItsMessageTwice(t *testing.T) {
	f := newFixture(t, nil)
	f.fake.Enqueue(providertest.Reply{Status: 500, ErrorMessage: "boom"}, providertest.Reply{Content: "answer"})
	msg := bus.Inbound{Channel: "line", ChatID: "U1", SessionKey: "line:U1", Text: "question", InboxID: 3}
	f.loop.Process(context.Background(), msg) // fails after storing the question
	msg.Metadata = map[string]string{bus.MetaReplay: "true"}
	if _, err := f.loop.Process(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	hist, _ := f.db.History("line:U1")
	var roles []string
	for _, m := range hist {
		roles = append(roles, m.Role+":"+m.Content)
	}
	if strings.Join(roles, "|") != "user:question|assistant:answer" {
		t.Errorf("history %q", roles)
	}
	if n := strings.Count(toJSONString(f.fake.Requests()[1].Body.Messages), `"question"`); n != 1 {
		t.Errorf("the model saw the question %d times", n)
	}
}

func toJSONString(v any) string { b, _ := json.Marshal(v); return string(b) }

// The files about the owner (USER.md, the memory) stay out of the prompt
// of a turn for a sender nobody vouched for, who could otherwise ask the
// model what it knows about its owner; the persona stays in.
func TestRestrictedTurnDoesNotSeeTheOwnersFiles(t *testing.T) {
	ws := t.TempDir()
	f := newFixture(t, func(o *agent.Options) { o.Workspace = ws })
	os.MkdirAll(filepath.Join(ws, "memory"), 0o700)
	os.WriteFile(filepath.Join(ws, "IDENTITY.md"), []byte("You are called Wren."), 0o600)
	os.WriteFile(filepath.Join(ws, "USER.md"), []byte("The owner is Ada; she lives at 5 Elm Street."), 0o600)
	os.WriteFile(filepath.Join(ws, "memory", "MEMORY.md"), []byte("Ada's door code is 4711."), 0o600)
	system := func(restricted bool) string {
		f.fake.Enqueue(providertest.Reply{Content: "ok"})
		msg := bus.Inbound{Channel: "telegram", ChatID: "5", SessionKey: "telegram:5", Text: "what do you know about your owner?", RestrictTools: restricted}
		if _, err := f.loop.Process(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		reqs := f.fake.Requests()
		return reqs[len(reqs)-1].Body.Messages[0].Content
	}
	for _, restricted := range []bool{true, false, true} {
		s := system(restricted)
		if !strings.Contains(s, "Wren") {
			t.Errorf("restricted=%v: the persona is missing", restricted)
		}
		if private := strings.Contains(s, "Elm Street") || strings.Contains(s, "4711"); private == restricted {
			t.Errorf("restricted=%v: the owner's files in the prompt: %v", restricted, private)
		}
	}
}
