package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/provider/providertest"
	"github.com/perchhq/perch/appliance/tools"
	"github.com/perchhq/perch/store"
	"github.com/perchhq/perch/store/storetest"
)

type fixture struct {
	loop *agent.Loop
	fake *providertest.Server
	db   *store.DB
	bus  *bus.Bus
	reg  *tools.Registry
}

// newFixture builds a loop over a real store and a real provider client
// talking to a loopback fake.
func newFixture(t *testing.T, mutate func(*agent.Options)) *fixture {
	t.Helper()
	fake := providertest.New()
	t.Cleanup(fake.Close)
	cfg := config.Default()
	cfg.Providers.OpenRouter.APIKey = "k"
	cfg.Providers.OpenRouter.APIBase = fake.Base()
	cfg.Providers.OpenRouter.MaxRetries = 0
	cfg.Agents.Defaults.Model = "openai/gpt-4o-mini"
	cl, err := provider.FromConfig(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{fake: fake, db: storetest.Open(t), bus: bus.New(64)}
	f.reg = tools.NewRegistry(slog.New(slog.DiscardHandler))
	f.reg.Register(tools.Func{ToolName: "echo", ToolDescription: "Echo text back.",
		Params: tools.Object(map[string]*tools.Property{"text": tools.String("text")}, "text"),
		Run: func(ctx context.Context, a tools.Args) tools.Result {
			c := tools.CallFrom(ctx)
			return tools.Text("echoed " + a.String("text") + " in " + c.SessionKey)
		}})
	opts := agent.Options{Store: f.db, Provider: cl, Tools: f.reg, Bus: f.bus, Workspace: t.TempDir(),
		Log: slog.New(slog.DiscardHandler), MaxToolIterations: 5, MaxConcurrentTurns: 4, MaxQueuedTurns: 4,
		TurnTimeout: 5 * time.Second, HistoryLimit: 100}
	if mutate != nil {
		mutate(&opts)
	}
	f.loop = agent.New(opts)
	t.Cleanup(func() { f.loop.Stop(context.Background()) })
	return f
}

func in(session, text string) bus.Inbound {
	return bus.Inbound{Channel: "cli", ChatID: "t", SessionKey: session, Text: text}
}

func TestTurnRunsToolsAndStoresEverything(t *testing.T) {
	f := newFixture(t, nil)
	f.fake.Enqueue(
		providertest.Reply{Content: "let me check", ToolCalls: []providertest.ToolCall{{ID: "a", Name: "echo", Args: `{"text":"hi"}`}, {ID: "b", Name: "nope", Args: `{}`}}},
		providertest.Reply{Content: "done", Usage: [3]int{7, 3, 10}},
	)
	rep, err := f.loop.Process(context.Background(), in("s1", "go"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Text != "done" {
		t.Fatalf("reply %q", rep.Text)
	}
	second := f.fake.Requests()[1].Body.Messages
	var toolMsgs []string
	for _, m := range second {
		if m.Role == "tool" {
			toolMsgs = append(toolMsgs, m.ToolCallID+"="+m.Content)
		}
	}
	if len(toolMsgs) != 2 || toolMsgs[0] != "a=echoed hi in s1" || !strings.Contains(toolMsgs[1], `unknown tool "nope"`) {
		t.Fatalf("tool results sent: %v", toolMsgs)
	}
	if second[0].Role != "system" || !strings.Contains(second[0].Content, "echo: Echo text back.") {
		t.Errorf("system prompt lacks the tool summary: %q", second[0].Content)
	}
	h, _ := f.db.History("s1")
	roles := make([]string, len(h))
	for i, m := range h {
		roles[i] = m.Role
	}
	if strings.Join(roles, ",") != "user,assistant,tool,tool,assistant" {
		t.Fatalf("stored roles %v", roles)
	}
	if info, _ := f.db.Session("s1"); info.Usage.TotalTokens != 25 { // 15 default + 10
		t.Errorf("usage %+v", info.Usage)
	}
}

// TestUserMessageStoredBeforeProviderCall: when the provider fails, the
// user's message is already durable.
func TestUserMessageStoredBeforeProviderCall(t *testing.T) {
	f := newFixture(t, nil)
	f.fake.Enqueue(providertest.Reply{Status: 500, ErrorMessage: "down"})
	_, err := f.loop.Process(context.Background(), in("s", "remember me"))
	var pe *provider.Error
	if !errors.As(err, &pe) {
		t.Fatalf("err %v", err)
	}
	h, _ := f.db.History("s")
	if len(h) != 1 || h[0].Content != "remember me" {
		t.Fatalf("history %+v", h)
	}
}

func TestCommandsAnswerWithoutModel(t *testing.T) {
	f := newFixture(t, nil)
	f.loop.RegisterChatCommand(agent.ChatCommand{Name: "/ping", Help: "pong", Run: func(_ context.Context, _ bus.Inbound, args string) (string, error) {
		return "pong " + args, nil
	}})
	for text, want := range map[string]string{
		"/ping a b":      "pong a b",
		"/ping@perchbot": "pong ",
		"/PING":          "pong ",
	} {
		rep, err := f.loop.Process(context.Background(), in("c", text))
		if err != nil || rep.Text != want || !rep.ChatCommand {
			t.Errorf("%q: %+v %v", text, rep, err)
		}
	}
	rep, _ := f.loop.Process(context.Background(), in("c", "/help"))
	if !strings.Contains(rep.Text, "/ping — pong") || !strings.Contains(rep.Text, "/new") {
		t.Errorf("/help: %q", rep.Text)
	}
	if f.fake.Calls() != 0 {
		t.Fatal("a command reached the model")
	}
	rep, _ = f.loop.Process(context.Background(), in("c", "/etc/hosts please"))
	if rep.ChatCommand || rep.Text != "echo: /etc/hosts please" {
		t.Errorf("path treated as command: %+v", rep)
	}
	f.loop.Process(context.Background(), in("c", "/new"))
	if h, _ := f.db.History("c"); len(h) != 0 {
		t.Errorf("/new left %d messages", len(h))
	}
}

func TestNoProvider(t *testing.T) {
	f := newFixture(t, func(o *agent.Options) {
		o.Provider = nil
		o.NoProvider = fmt.Errorf("%w: set providers.x.api_key", provider.ErrNoProvider)
	})
	_, err := f.loop.Process(context.Background(), in("s", "hi"))
	if !errors.Is(err, provider.ErrNoProvider) || !strings.Contains(err.Error(), "providers.x.api_key") {
		t.Fatalf("err %v", err)
	}
	if rep, err := f.loop.Process(context.Background(), in("s", "/status")); err != nil || !strings.Contains(rep.Text, "not ready") {
		t.Fatalf("/status without provider: %+v %v", rep, err)
	}
}

// TestRunningCommandsAreNotWaiting: a chat command being answered is not a
// turn waiting for its slot, so /status does not count itself ("1 waiting"
// on an idle board) and /admin/status's queue depth stays 0 while a slow
// command (/models asks the provider) runs.
func TestRunningCommandsAreNotWaiting(t *testing.T) {
	f := newFixture(t, nil)
	rep, err := f.loop.Process(context.Background(), in("s", "/status"))
	if err != nil || !strings.Contains(rep.Text, "0 turns running, 0 waiting") {
		t.Fatalf("/status on an idle loop: %+v %v", rep, err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	f.loop.RegisterChatCommand(agent.ChatCommand{Name: "/slow", Help: "waits", Run: func(context.Context, bus.Inbound, string) (string, error) {
		close(entered)
		<-release
		return "done", nil
	}})
	done := make(chan error, 1)
	go func() {
		_, err := f.loop.Process(context.Background(), in("a", "/slow"))
		done <- err
	}()
	<-entered
	if st := f.loop.Stats(); st.QueueDepth != 0 || st.Running != 0 {
		t.Errorf("stats while a command runs: %+v, want nothing waiting or running", st)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestSessionTurnsAreSerialised: two concurrent turns on one session never
// overlap; the second sees the first's reply in its history.
func TestSessionTurnsAreSerialised(t *testing.T) {
	f := newFixture(t, nil)
	release := make(chan struct{})
	var mu sync.Mutex
	inFlight, maxInFlight := 0, 0
	f.fake.Default = func(r providertest.ChatRequest) providertest.Reply {
		mu.Lock()
		inFlight++
		if inFlight > maxInFlight {
			maxInFlight = inFlight
		}
		mu.Unlock()
		<-release
		mu.Lock()
		inFlight--
		mu.Unlock()
		return providertest.Reply{Content: "r:" + providertest.LastUser(r)}
	}
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.loop.Process(context.Background(), in("same", fmt.Sprint(i)))
		}()
	}
	// Both turns admitted: one at the provider, the other waiting for the
	// session. Only then may the first finish.
	waitStats(t, f.loop, func(s agent.Stats) bool { return s.Running+s.QueueDepth == 2 })
	close(release)
	wg.Wait()
	if maxInFlight != 1 {
		t.Fatalf("%d turns of one session ran at once", maxInFlight)
	}
	h, _ := f.db.History("same")
	if len(h) != 4 || h[0].Role != "user" || h[1].Role != "assistant" || h[2].Role != "user" {
		t.Fatalf("history interleaved: %+v", h)
	}
}

func TestBusyAndTimeout(t *testing.T) {
	f := newFixture(t, func(o *agent.Options) {
		o.MaxConcurrentTurns, o.MaxQueuedTurns, o.TurnTimeout = 1, 1, 300*time.Millisecond
	})
	release := make(chan struct{})
	defer close(release)
	f.fake.Default = func(providertest.ChatRequest) providertest.Reply {
		select {
		case <-release:
		case <-time.After(2 * time.Second):
		}
		return providertest.Reply{Content: "late"}
	}
	errs := make(chan error, 3)
	for i := 0; i < 2; i++ {
		go func() {
			_, err := f.loop.Process(context.Background(), in(fmt.Sprintf("b%d", i), "x"))
			errs <- err
		}()
	}
	waitStats(t, f.loop, func(s agent.Stats) bool { return s.Running == 1 && s.QueueDepth == 1 })
	// Two admitted (one running, one waiting): the third is refused at once.
	start := time.Now()
	_, err := f.loop.Process(context.Background(), in("b3", "x"))
	if !errors.Is(err, agent.ErrBusy) || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("third turn: %v after %v", err, time.Since(start))
	}
	// Each says what it waited for: the first the provider; the second the
	// single turn slot the first held, or the provider when the first let
	// the slot go just before the second's deadline.
	var said []string
	for i := 0; i < 2; i++ {
		err := <-errs
		if !errors.Is(err, agent.ErrTimeout) {
			t.Errorf("turn past its deadline: %v", err)
			continue
		}
		said = append(said, err.Error())
	}
	const (
		head     = "agent: the turn ran past its 0.3-second deadline (agents.defaults.turn_timeout_seconds) waiting for "
		slot     = head + "a free turn slot (agents.defaults.max_concurrent_turns)"
		provider = head + "provider openrouter (model openai/gpt-4o-mini) to answer"
	)
	sort.Strings(said)
	if len(said) != 2 || (said[0] != slot && said[0] != provider) || said[1] != provider {
		t.Errorf("timeouts say\n%q\nwant %q and %q (or the provider twice)", said, slot, provider)
	}
	if st := f.loop.Stats(); st.Running != 0 || st.QueueDepth != 0 {
		t.Errorf("stats after: %+v", st)
	}
}

// TestTimeoutInATool: a deadline that passes while a tool runs names the
// tool, not the provider call the turn could no longer make.
func TestTimeoutInATool(t *testing.T) {
	f := newFixture(t, func(o *agent.Options) { o.TurnTimeout = 200 * time.Millisecond })
	f.reg.Register(tools.Func{ToolName: "slow", ToolDescription: "Wait until cancelled.",
		Params: tools.Object(map[string]*tools.Property{}),
		Run: func(ctx context.Context, a tools.Args) tools.Result {
			<-ctx.Done()
			return tools.Text("cancelled")
		}})
	f.fake.Enqueue(providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "a", Name: "slow", Args: `{}`}}})
	_, err := f.loop.Process(context.Background(), in("slow", "go"))
	if !errors.Is(err, agent.ErrTimeout) || !strings.HasSuffix(err.Error(), "waiting for tool slow to finish") {
		t.Fatalf("deadline in a tool: %v", err)
	}
	if n := f.fake.Calls(); n != 1 {
		t.Errorf("the provider was called %d times; the turn had no time left for a second call", n)
	}
}

func TestToolIterationsAreBounded(t *testing.T) {
	f := newFixture(t, func(o *agent.Options) { o.MaxToolIterations = 3 })
	f.fake.Default = func(providertest.ChatRequest) providertest.Reply {
		return providertest.Reply{ToolCalls: []providertest.ToolCall{{Name: "echo", Args: `{"text":"again"}`}}}
	}
	rep, err := f.loop.Process(context.Background(), in("loop", "spin"))
	if err != nil || !strings.Contains(rep.Text, "max_tool_iterations") {
		t.Fatalf("%+v %v", rep, err)
	}
	if f.fake.Calls() != 3 {
		t.Fatalf("%d calls", f.fake.Calls())
	}
}

func TestSubagentsRunAndSpawn(t *testing.T) {
	f := newFixture(t, nil)
	f.reg.Register(tools.NewCanvas())
	sub := f.loop.Subagents()
	out, err := sub.Run(context.Background(), "count the sheep", "sheep")
	if err != nil || out != "echo: count the sheep" {
		t.Fatalf("run: %q %v", out, err)
	}
	// The subagent's conversation is its own: only its task.
	msgs := f.fake.Requests()[0].Body.Messages
	if len(msgs) != 2 || msgs[1].Content != "count the sheep" {
		t.Fatalf("subagent saw %+v", msgs)
	}
	// Nor tools whose work nobody would see (a canvas node drawn there
	// never reached the chat).
	offered, _ := json.Marshal(f.fake.Requests()[0].Body.Tools)
	for _, name := range []string{"spawn", "subagent", "canvas"} {
		if strings.Contains(string(offered), `"name":"`+name+`"`) {
			t.Errorf("a subagent was offered %s", name)
		}
	}
	if !strings.Contains(string(offered), `"name":"echo"`) {
		t.Errorf("the subagent's tools %s lack echo", offered)
	}
	ctx := tools.WithCall(context.Background(), tools.Call{Channel: "telegram", ChatID: "42", SessionKey: "telegram:42"})
	id, err := sub.Spawn(ctx, "slow job", "bg")
	if err != nil || !strings.HasPrefix(id, "sa-") {
		t.Fatalf("spawn: %q %v", id, err)
	}
	select {
	case out := <-f.bus.Outbound():
		if out.Channel != "telegram" || out.ChatID != "42" || !strings.Contains(out.Text, "echo: slow job") {
			t.Fatalf("notice %+v", out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no completion notice")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h, _ := f.db.History("telegram:42")
		if len(h) == 1 && strings.Contains(h[0].Content, "finished") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("requester's history: %+v", h)
		}
		time.Sleep(10 * time.Millisecond)
	}
	list := sub.List()
	if len(list) != 2 || list[0].Status != agent.StatusDone || list[1].Label != "bg" {
		t.Fatalf("list %+v", list)
	}
}

func TestLastActiveIgnoresInternalChannels(t *testing.T) {
	f := newFixture(t, nil)
	f.loop.Process(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "9", Text: "/help"})
	f.loop.Process(context.Background(), in("x", "/help"))
	if ch, chat := f.loop.LastActive(nil); ch != "telegram" || chat != "9" {
		t.Fatalf("last active %s:%s", ch, chat)
	}
}

func TestBusMessagesAreAnswered(t *testing.T) {
	f := newFixture(t, nil)
	f.loop.Start(context.Background())
	f.bus.PublishInbound(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "5", Text: "hello", ReplyTo: "m1"})
	select {
	case out := <-f.bus.Outbound():
		if out.Channel != "telegram" || out.ChatID != "5" || out.Text != "echo: hello" || out.ReplyTo != "m1" {
			t.Fatalf("reply %+v", out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reply on the bus")
	}
}

// TestFailedTurnsAnswerTheSender: a turn that fails is answered with the
// reason, but a sender nobody vouched for gets none of it: the reason
// names config keys and the provider's address.
func TestFailedTurnsAnswerTheSender(t *testing.T) {
	f := newFixture(t, nil)
	f.fake.Default = func(providertest.ChatRequest) providertest.Reply {
		return providertest.Reply{Status: 401, ErrorMessage: "bad key"}
	}
	f.loop.Start(context.Background())
	for _, tt := range []struct {
		restrict bool
		want     string
	}{
		{false, "Sorry, I could not answer: provider openrouter: authentication failed (HTTP 401)"},
		{true, "Sorry, I could not answer just now; please try again later."},
	} {
		f.bus.PublishInbound(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "5", Text: "hello", RestrictTools: tt.restrict})
		select {
		case out := <-f.bus.Outbound():
			if !strings.HasPrefix(out.Text, tt.want) || (tt.restrict && strings.Contains(out.Text, "providers.")) {
				t.Errorf("restricted %v: reply %q, want it to start %q", tt.restrict, out.Text, tt.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no reply on the bus")
		}
	}
}

func TestAskHasNoHistory(t *testing.T) {
	f := newFixture(t, nil)
	f.loop.Process(context.Background(), in("system:heartbeat", "old"))
	out, err := f.loop.Ask(context.Background(), "heartbeat", "check tasks")
	if err != nil || out != "echo: check tasks" {
		t.Fatalf("%q %v", out, err)
	}
	last := f.fake.Requests()[1].Body.Messages
	if len(last) != 2 {
		t.Fatalf("heartbeat saw history: %+v", last)
	}
}

func TestSkillsInPrompt(t *testing.T) {
	ws := t.TempDir()
	f := newFixture(t, func(o *agent.Options) { o.Workspace = ws })
	writeFile(t, ws+"/AGENT.md", "Always answer in haiku.")
	writeFile(t, ws+"/skills/weather/SKILL.md", "---\nname: weather\ndescription: Read the BME280 and describe the weather\n---\n# Weather\n")
	f.loop.Process(context.Background(), in("p", "hi"))
	sys := f.fake.Requests()[0].Body.Messages[0].Content
	for _, want := range []string{"Always answer in haiku.", "weather (skills/weather/SKILL.md): Read the BME280"} {
		if !strings.Contains(sys, want) {
			t.Errorf("system prompt lacks %q:\n%s", want, sys)
		}
	}
	if s := agent.Skills(ws); len(s) != 1 || s[0].Name != "weather" {
		t.Errorf("skills %+v", s)
	}
}

// TestStopCancelsTurnsInFlight: shutting down does not wait out a slow
// provider; the turn ends with ErrStopped.
func TestStopCancelsTurnsInFlight(t *testing.T) {
	f := newFixture(t, nil)
	atProvider := make(chan struct{}, 1)
	f.fake.Default = func(providertest.ChatRequest) providertest.Reply {
		atProvider <- struct{}{}
		time.Sleep(3 * time.Second)
		return providertest.Reply{Content: "late"}
	}
	errc := make(chan error, 1)
	go func() {
		_, err := f.loop.Process(context.Background(), in("slow", "x"))
		errc <- err
	}()
	<-atProvider
	start := time.Now()
	f.loop.Stop(context.Background())
	if err := <-errc; !errors.Is(err, agent.ErrStopped) || time.Since(start) > time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
}

// waitStats waits until the loop's figures satisfy cond: the turns a test
// started have reached the state it needs, however slow the machine.
func waitStats(t *testing.T, l *agent.Loop, cond func(agent.Stats) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(l.Stats()); {
		if time.Now().After(deadline) {
			t.Fatalf("loop never reached the expected state: %+v", l.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLastActiveIsATrustedOneToOneChat: device notices and heartbeat
// results go where the owner spoke last, never to a group (its members
// would read them) nor to a sender a channel open to anyone let in. The
// chat is kept in the store: after a restart it is the same, however
// newer a group's or a stranger's session is. A heartbeat went to a
// stranger who had written after the owner, and after a restart to a
// group whose session was the newest.
func TestLastActiveIsATrustedOneToOneChat(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.loop.Process(ctx, bus.Inbound{Channel: "telegram", ChatID: "9", Text: "/help"})
	f.loop.Process(ctx, bus.Inbound{Channel: "line", ChatID: "Ustranger", Text: "/help", RestrictTools: true})
	f.loop.Process(ctx, bus.Inbound{Channel: "telegram", ChatID: "-100", Text: "/help", Metadata: map[string]string{"group": "true"}})
	// A job that answers into the group, an API caller naming it: turns
	// of other conversations, which say nothing of who reads the chat.
	f.loop.Process(ctx, bus.Inbound{Channel: "telegram", ChatID: "-100", SessionKey: "cron:0badc0de", Text: "/help"})
	f.loop.Process(ctx, bus.Inbound{Channel: "telegram", ChatID: "-100", SessionKey: "rest:default", Text: "/help"})
	if ch, chat := f.loop.LastActive(nil); ch != "telegram" || chat != "9" {
		t.Errorf("last active %s:%s, want the owner's telegram:9", ch, chat)
	}
	if err := f.loop.Stop(ctx); err != nil { // waits for the chat's write
		t.Fatal(err)
	}

	// After a restart: the newest sessions are the stranger's and the group's.
	msgs := []chat.Message{{Role: chat.RoleUser, Content: "hi"}, {Role: chat.RoleAssistant, Content: "hello"}}
	for _, r := range [][2]string{{"telegram", "9"}, {"line", "Ustranger"}, {"telegram", "-100"}} {
		time.Sleep(5 * time.Millisecond)
		if err := f.db.Append(r[0]+":"+r[1], msgs, chat.Usage{}, 100, r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	restart := func() *agent.Loop {
		return agent.New(agent.Options{Store: f.db, Tools: f.reg, Bus: f.bus, Workspace: t.TempDir(), Log: slog.New(slog.DiscardHandler)})
	}
	if ch, chat := restart().LastActive(nil); ch != "telegram" || chat != "9" {
		t.Errorf("after a restart: last active %s:%s, want the kept telegram:9 (the group's session is newer)", ch, chat)
	}
	// Its channel opened to anyone since: nobody, so the page.
	if ch, chat := restart().LastActive(func(ch string) bool { return ch == "telegram" }); ch != "" {
		t.Errorf("after a restart with telegram now open to anyone: last active %s:%s, want none", ch, chat)
	}

	// A database from before the chat was kept: the newest session of a
	// channel not ruled out.
	if err := f.db.Delete(store.BucketMeta, "chat_routes"); err != nil {
		t.Fatal(err)
	}
	if ch, chat := restart().LastActive(func(ch string) bool { return ch == "line" }); ch != "telegram" || chat != "-100" {
		t.Errorf("without a kept chat, line ruled out: last active %s:%s, want the newest other session", ch, chat)
	}
	if ch, _ := restart().LastActive(nil); ch != "telegram" {
		t.Errorf("with nothing ruled out, the newest session is telegram's; got %q", ch)
	}
}

// TestTheKeptChatFollowsTheOwner: the chat kept for notices is the last
// trusted one-to-one chat, written beside the turns, and one that spoke
// again after a restart is not written again.
func TestTheKeptChatFollowsTheOwner(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	for _, id := range []string{"1", "2", "3", "2"} {
		f.loop.Process(ctx, bus.Inbound{Channel: "telegram", ChatID: id, Text: "/help"})
	}
	if err := f.loop.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var kept [][2]string
	if err := f.db.Get(store.BucketMeta, "chat_routes", &kept); err != nil || fmt.Sprint(kept) != "[[telegram 2]]" {
		t.Fatalf("kept %v (%v), want telegram:2 alone (one chat per channel)", kept, err)
	}
	// The same chat first after a restart: nothing to write, seen by
	// removing the key under it.
	again := agent.New(agent.Options{Store: f.db, Tools: f.reg, Bus: f.bus, Workspace: t.TempDir(), Log: slog.New(slog.DiscardHandler)})
	if ch, chat := again.LastActive(nil); ch != "telegram" || chat != "2" {
		t.Fatalf("after the restart: %s:%s", ch, chat)
	}
	if err := f.db.Delete(store.BucketMeta, "chat_routes"); err != nil {
		t.Fatal(err)
	}
	again.Process(ctx, bus.Inbound{Channel: "telegram", ChatID: "2", Text: "/help"})
	if err := again.Stop(ctx); err != nil { // waits for a write
		t.Fatal(err)
	}
	if err := f.db.Get(store.BucketMeta, "chat_routes", &kept); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the same chat again after a restart was written: %v (%v)", kept, err)
	}
	third := agent.New(agent.Options{Store: f.db, Tools: f.reg, Bus: f.bus, Workspace: t.TempDir(), Log: slog.New(slog.DiscardHandler)})
	third.Process(ctx, bus.Inbound{Channel: "telegram", ChatID: "2", Text: "/help"})
	third.Process(ctx, bus.Inbound{Channel: "slack", ChatID: "D1", Text: "/help"})
	if err := third.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.db.Get(store.BucketMeta, "chat_routes", &kept); err != nil || fmt.Sprint(kept) != "[[slack D1] [telegram 2]]" {
		t.Fatalf("kept %v (%v), want slack:D1, then telegram:2", kept, err)
	}
}

// TestAnEmptyAnswerIsExplained: a model that answers a person with nothing
// gives them EmptyAnswer (it left a blank reply); after tools ran an empty
// answer is normal and stays empty, and nothing of the note is stored.
func TestAnEmptyAnswerIsExplained(t *testing.T) {
	f := newFixture(t, nil)
	f.fake.Enqueue(providertest.Reply{Content: "  "})
	rep, err := f.loop.Process(context.Background(), in("e1", "hello?"))
	if err != nil || rep.Text != agent.EmptyAnswer {
		t.Fatalf("reply %+v, %v; want the explanation", rep, err)
	}
	f.fake.Enqueue(providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "a", Name: "echo", Args: `{"text":"x"}`}}}, providertest.Reply{Content: ""})
	rep, err = f.loop.Process(context.Background(), in("e2", "echo x"))
	if err != nil || rep.Text != "" {
		t.Errorf("after a tool: %+v, %v; want an empty answer", rep, err)
	}
	h, _ := f.db.History("e1")
	for _, m := range h {
		if strings.Contains(m.Content, "empty message") {
			t.Errorf("the note was stored: %+v", h)
		}
	}
}

// TestTheSameMessageAgainIsNotStoredTwice: after a turn that failed (or
// was cancelled, or a request the broker delivered again after a restart)
// the same message sent again is asked once more without a second copy:
// the history read the question twice in a row.
func TestTheSameMessageAgainIsNotStoredTwice(t *testing.T) {
	f := newFixture(t, nil)
	f.fake.Enqueue(providertest.Reply{Status: 400, ErrorMessage: "bad"})
	if _, err := f.loop.Process(context.Background(), in("again", "is the door shut?")); err == nil {
		t.Fatal("the first turn did not fail")
	}
	rep, err := f.loop.Process(context.Background(), in("again", "is the door shut?"))
	if err != nil || rep.Text != "echo: is the door shut?" {
		t.Fatalf("the retry: %+v, %v", rep, err)
	}
	if got := transcript(f.db, "again"); got != "user:is the door shut? | assistant:echo: is the door shut?" {
		t.Errorf("history %s", got)
	}
	if msgs := f.fake.Requests()[len(f.fake.Requests())-1].Body.Messages; len(msgs) != 2 {
		t.Errorf("the retry sent %d messages, want the system prompt and the question once", len(msgs))
	}
}

// TestAnotherMessageAfterAFailedTurnKeepsTheRolesAlternating: a new
// message after one whose turn failed follows a note in the assistant's
// place, in the request and in the history. Two user messages in a row
// break many local models' chat templates ("roles must alternate"), and
// with them every later turn of the chat.
func TestAnotherMessageAfterAFailedTurnKeepsTheRolesAlternating(t *testing.T) {
	for _, grace := range []time.Duration{-1, time.Hour} { // committed at once; folded into the answer's commit
		f := newFixture(t, func(o *agent.Options) { o.UserCommitGrace = grace })
		f.fake.Enqueue(providertest.Reply{Status: 400, ErrorMessage: "bad"})
		if _, err := f.loop.Process(context.Background(), in("alt", "is the door shut?")); err == nil {
			t.Fatal("the first turn did not fail")
		}
		rep, err := f.loop.Process(context.Background(), in("alt", "and the window?"))
		if err != nil || rep.Text != "echo: and the window?" {
			t.Fatalf("the next turn: %+v, %v", rep, err)
		}
		want := "user:is the door shut? | assistant:" + "(No answer: this turn failed.)" + " | user:and the window? | assistant:echo: and the window?"
		if got := transcript(f.db, "alt"); got != want {
			t.Errorf("grace %v: history %s\nwant %s", grace, got, want)
		}
		msgs := f.fake.Requests()[len(f.fake.Requests())-1].Body.Messages
		for i := 1; i < len(msgs); i++ {
			if msgs[i].Role == msgs[i-1].Role {
				t.Errorf("grace %v: the request has two %s messages in a row: %+v", grace, msgs[i].Role, msgs)
			}
		}
	}
	// A turn that failed after a tool ran keeps its rounds; the next
	// message follows the note too, not the tool's result.
	f := newFixture(t, nil)
	f.fake.Enqueue(providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "a", Name: "echo", Args: `{"text":"hi"}`}}},
		providertest.Reply{Status: 400, ErrorMessage: "bad"})
	if _, err := f.loop.Process(context.Background(), in("tool", "say hi")); err == nil {
		t.Fatal("the turn with a tool did not fail")
	}
	if _, err := f.loop.Process(context.Background(), in("tool", "and now?")); err != nil {
		t.Fatal(err)
	}
	if got, want := transcript(f.db, "tool"), "user:say hi | assistant: | tool:echoed hi in tool | assistant:(No answer: this turn failed.) | user:and now? | assistant:echo: and now?"; got != want {
		t.Errorf("after a failed turn with a tool: %s\nwant %s", got, want)
	}
}

// transcript is session key's history as "role:content | …".
func transcript(db *store.DB, key string) string {
	h, _ := db.History(key)
	var roles []string
	for _, m := range h {
		roles = append(roles, m.Role+":"+m.Content)
	}
	return strings.Join(roles, " | ")
}

// TestLongToolArgumentsAreKeptShort: a tool gets its arguments whole; the
// history, and every request after the tool ran, keeps long strings in
// them short. A 3 MB file the model wrote was stored and sent again with
// every later turn of the chat.
func TestLongToolArgumentsAreKeptShort(t *testing.T) {
	f := newFixture(t, nil)
	got := 0
	f.reg.Register(tools.Func{ToolName: "write_note", ToolDescription: "Write a note.",
		Params: tools.Object(map[string]*tools.Property{"text": tools.String("text")}, "text"),
		Run: func(_ context.Context, a tools.Args) tools.Result {
			got = len(a.String("text"))
			return tools.Text("written")
		}})
	text := strings.Repeat("a line of the note\n", 50000) // 950,000 bytes
	args, _ := json.Marshal(map[string]string{"text": text})
	f.fake.Enqueue(
		providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "w", Name: "write_note", Args: string(args)}}},
		providertest.Reply{Content: "done"},
	)
	if _, err := f.loop.Process(context.Background(), in("notes", "write it down")); err != nil {
		t.Fatal(err)
	}
	if got != len(text) {
		t.Fatalf("the tool got %d bytes of text, want %d", got, len(text))
	}
	if _, err := f.loop.Process(context.Background(), in("notes", "thanks")); err != nil {
		t.Fatal(err)
	}
	reqs := f.fake.Requests()
	for _, r := range reqs[1:] { // after the tool ran: its round's answer, the next turn
		for _, m := range r.Body.Messages {
			for _, tc := range m.ToolCalls {
				if n := len(tc.Function.Arguments); n > 4096 || !strings.Contains(tc.Function.Arguments, "cut from the history") {
					t.Errorf("a request after the tool ran carried %d bytes of its arguments", n)
				}
			}
		}
	}
	h, _ := f.db.History("notes")
	for _, m := range h {
		for _, tc := range m.ToolCalls {
			var v map[string]string
			if err := json.Unmarshal([]byte(tc.Arguments), &v); err != nil || len(tc.Arguments) > 4096 || !strings.HasPrefix(v["text"], "a line of the note") {
				t.Errorf("stored arguments: %d bytes, %v", len(tc.Arguments), err)
			}
		}
	}
}

// TestAChatsMessagesAreAnsweredInTheirOrder: messages of one chat that
// reach the agent together (a backlog fetched or replayed after a
// restart, a platform's batch of updates) are answered in the order they
// came, and stored in it. Each message's turn used to race the others for
// the chat's slot, so a later message could be answered first, and the
// history then read the chat out of order.
func TestAChatsMessagesAreAnsweredInTheirOrder(t *testing.T) {
	f := newFixture(t, nil)
	f.loop.Start(context.Background())
	const n = 40
	for i := range n {
		f.bus.PublishInbound(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "5", Text: fmt.Sprintf("message %02d", i)})
		f.bus.PublishInbound(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "6", Text: fmt.Sprintf("other %02d", i)})
	}
	var got []string
	for len(got) < n {
		select {
		case out := <-f.bus.Outbound():
			if out.ChatID == "5" {
				got = append(got, out.Text)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d answers came", len(got), n)
		}
	}
	for i, g := range got {
		if want := fmt.Sprintf("echo: message %02d", i); g != want {
			t.Fatalf("answer %d is %q, want %q; all: %q", i, g, want, got)
		}
	}
}
