package appliance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/appliance/tools"
)

// TestCronToolOverTheScheduler drives the cron tool as the model would,
// through the registry, against the real scheduler and store.
func TestCronToolOverTheScheduler(t *testing.T) {
	sys := newCore(t, newFake(t))
	ctx := tools.WithCall(context.Background(), tools.Call{Channel: "web", ChatID: "kitchen", SessionKey: "web:kitchen"})
	run := func(args string) tools.Result {
		t.Helper()
		return sys.Tools.Execute(ctx, "cron", args)
	}
	res := run(`{"action":"add","message":"stretch","every_seconds":3600}`)
	if res.IsError() || !strings.HasPrefix(res.ForLLM, "scheduled job ") || !strings.Contains(res.ForLLM, "every 1 hour") {
		t.Fatalf("add: %+v", res)
	}
	id := strings.Fields(strings.TrimPrefix(res.ForLLM, "scheduled job "))[0]
	id = strings.TrimSuffix(id, ":")
	jobs, _ := sys.Cron.List(context.Background())
	if len(jobs) != 1 || !jobs[0].Deliver || jobs[0].Channel != "web" || jobs[0].To != "kitchen" {
		t.Fatalf("the job does not deliver to the current chat: %+v", jobs)
	}
	if res := run(`{"action":"list"}`); !strings.Contains(res.ForLLM, id) || !strings.Contains(res.ForLLM, "stretch") {
		t.Fatalf("list: %s", res.ForLLM)
	}
	if res := run(`{"action":"disable","job_id":"` + id + `"}`); res.IsError() || res.ForLLM != "job "+id+": disabled" {
		t.Fatalf("disable: %+v", res)
	}
	if jobs, _ := sys.Cron.List(context.Background()); jobs[0].Enabled {
		t.Fatal("still enabled")
	}
	for args, want := range map[string]string{
		`{"action":"remove"}`:                                    "needs job_id",
		`{"action":"remove","job_id":"nope"}`:                    `no job "nope"; use action list to see the ids`,
		`{"action":"add","message":"x"}`:                         "exactly one of",
		`{"action":"add","message":"x","every_seconds":5}`:       "at least 10",
		`{"action":"add","message":"x","cron_expr":"* * *"}`:     "five fields",
		`{"action":"add","message":"x","at_seconds":"soon"}`:     "at_seconds",
		`{"action":"explode"}`:                                   "must be one of",
		`{"action":"add","cron_expr":"0 9 * * *","tz":"Mars/X"}`: "tz",
	} {
		if res := run(args); !res.IsError() || !strings.Contains(res.ForLLM, want) {
			t.Errorf("%s: %q, want an error containing %q", args, res.ForLLM, want)
		}
	}
	if res := run(`{"action":"remove","job_id":"` + id + `"}`); res.IsError() {
		t.Fatalf("remove: %+v", res)
	}
	// From a conversation nobody reads later (/chat without a channel,
	// perch agent) the job delivers where a person reads it: with no chat
	// channel enabled and no page chat yet, the page's default chat.
	ictx := tools.WithCall(context.Background(), tools.Call{Channel: "cli", ChatID: "terminal", SessionKey: "rest:default"})
	res = sys.Tools.Execute(ictx, "cron", `{"action":"add","message":"check the tank","at_seconds":600}`)
	if res.IsError() || !strings.Contains(res.ForLLM, `"check the tank" is sent to the web page (chat home;`) {
		t.Fatalf("internal-session job: %s", res.ForLLM)
	}
	jobs, _ = sys.Cron.List(context.Background())
	if len(jobs) != 1 || !jobs[0].Deliver || jobs[0].Channel != "web" || jobs[0].To != "home" {
		t.Fatalf("internal-session job: %+v", jobs)
	}
	// An explicit channel that does not deliver is refused, naming those
	// that do.
	res = sys.Tools.Execute(ictx, "cron", `{"action":"add","message":"x","at_seconds":60,"channel":"bogus","chat_id":"1"}`)
	if !res.IsError() || !strings.Contains(res.ForLLM, `no channel "bogus" is enabled`) || !strings.Contains(res.ForLLM, "channels that deliver: web") {
		t.Errorf("bogus channel: %s", res.ForLLM)
	}
}

// TestCronTargetPrefersAChatChannel: the last chat a person used on a chat
// platform wins over the page; without one, the page chat used last.
func TestCronTargetPrefersAChatChannel(t *testing.T) {
	sys := newCore(t, newFake(t))
	sys.Cfg.Channels.Telegram.Enabled, sys.Cfg.Channels.Telegram.Token = true, "123:abc"
	sys.Cfg.Channels.Telegram.AllowFrom = []string{"42"}
	note := func(channel, chatID string) {
		t.Helper()
		key := channel + ":" + chatID
		if err := sys.Store.Append(key, []chat.Message{{Role: "user", Content: "hi"}}, chat.Usage{}, 200, channel, chatID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // sessions are ordered by their last update
	}
	if ch, chat := sys.deliveryTarget(); ch != "web" || chat != "home" {
		t.Errorf("no chat yet: %s:%s, want web:home", ch, chat)
	}
	note("web", "laptop")
	if ch, chat := sys.deliveryTarget(); ch != "web" || chat != "laptop" {
		t.Errorf("after the page: %s:%s, want web:laptop", ch, chat)
	}
	note("telegram", "42")
	note("web", "phone")
	if ch, chat := sys.deliveryTarget(); ch != "telegram" || chat != "42" {
		t.Errorf("with a telegram chat: %s:%s, want telegram:42 (a chat channel before the page)", ch, chat)
	}
	note("discord", "7") // not enabled: never a target
	if ch, chat := sys.deliveryTarget(); ch != "telegram" || chat != "42" {
		t.Errorf("after a discord chat: %s:%s, want telegram:42", ch, chat)
	}
	// Open to anyone: who spoke there last is no one the owner chose. An
	// owner's reminder, a command's output with it, went to a stranger.
	sys.Cfg.Channels.Discord.Enabled, sys.Cfg.Channels.Discord.Token = true, "discord-token"
	if ch, chat := sys.deliveryTarget(); ch != "telegram" || chat != "42" {
		t.Errorf("after a stranger's discord chat: %s:%s, want telegram:42", ch, chat)
	}
	sys.Cfg.Channels.Discord.AllowFrom = []string{"7"}
	if ch, chat := sys.deliveryTarget(); ch != "discord" || chat != "7" {
		t.Errorf("once discord admits only chosen people: %s:%s, want discord:7", ch, chat)
	}
}

// TestCronTargetIsNoGroup: a job added where nobody reads the answer goes
// to the owner's own chat, not to a group the owner spoke in since, whose
// members would read it, nor to the page when a chat platform was used.
func TestCronTargetIsNoGroup(t *testing.T) {
	sys := newCore(t, newFake(t))
	sys.Cfg.Channels.Telegram.Enabled, sys.Cfg.Channels.Telegram.Token = true, "123:abc"
	sys.Cfg.Channels.Telegram.AllowFrom = []string{"42"}
	ctx := context.Background()
	for _, in := range []bus.Inbound{
		{Channel: "telegram", ChatID: "42", SenderID: "42", Text: "hi"},
		{Channel: "web", ChatID: "laptop", Text: "hi from the page"},
		{Channel: "telegram", ChatID: "-100", SenderID: "42", Text: "hi all", Metadata: map[string]string{"group": "true"}},
	} {
		if _, err := sys.Agent.Process(ctx, in); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // sessions are ordered by their last update
	}
	if ch, chat := sys.deliveryTarget(); ch != "telegram" || chat != "42" {
		t.Errorf("after the owner wrote in a group: %s:%s, want the owner's own telegram:42", ch, chat)
	}
}

// TestSubagentAndSpawnTools: the synchronous tool returns the subagent's
// answer; spawn returns at once as an async result.
func TestSubagentAndSpawnTools(t *testing.T) {
	fake := newFake(t)
	sys := newCore(t, fake)
	ctx := tools.WithCall(context.Background(), tools.Call{Channel: "telegram", ChatID: "5", SessionKey: "telegram:5"})
	res := sys.Tools.Execute(ctx, "subagent", `{"task":"summarise the logs","label":"logs"}`)
	if res.IsError() || res.ForLLM != "echo: summarise the logs" {
		t.Fatalf("subagent: %+v", res)
	}
	res = sys.Tools.Execute(ctx, "spawn", `{"task":"long job"}`)
	if res.Kind != tools.KindAsync || !strings.Contains(res.ForLLM, "Started background task sa-") {
		t.Fatalf("spawn: %+v", res)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		list := sys.Agent.Subagents().List()
		if len(list) == 2 && list[1].Status != "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spawned task never finished: %+v", list)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if res := sys.Tools.Execute(ctx, "subagent", `{}`); !res.IsError() || !strings.Contains(res.ForLLM, `"task"`) {
		t.Fatalf("missing task: %+v", res)
	}
}

// TestCronToolRefusesBlockedCommands: a command the exec guard refuses is
// refused when the job is added, not when it falls due.
func TestCronToolRefusesBlockedCommands(t *testing.T) {
	sys := newCore(t, newFake(t))
	res := sys.Tools.Execute(context.Background(), "cron", `{"action":"add","command":"rm -rf /","every_seconds":60}`)
	if !res.IsError() || !strings.Contains(res.ForLLM, "command") {
		t.Fatalf("blocked command accepted: %+v", res)
	}
	if jobs, _ := sys.Cron.List(context.Background()); len(jobs) != 0 {
		t.Fatalf("job stored: %+v", jobs)
	}
}
