package appliance

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider/providertest"
	"github.com/perchhq/perch/appliance/schedule"
)

// noEnv keeps the machine's environment out of a test's config.
func noEnv(string) (string, bool) { return "", false }

// newCore builds the store, provider, tools, agent and scheduler in a temp
// config dir, against the fake provider, with no listener and no
// dispatcher: outbound messages stay on the bus for the test to read.
func newCore(t *testing.T, fake *providertest.Server) *System {
	t.Helper()
	t.Setenv("PERCH_HOME", t.TempDir())
	cfg, err := config.Load(config.Options{Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Providers.OpenRouter.APIKey = "k"
	cfg.Providers.OpenRouter.APIBase = fake.Base()
	cfg.Providers.OpenRouter.MaxRetries = 0
	cfg.Agents.Defaults.Model = "openai/gpt-4o-mini"
	sys, err := NewCore(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sys.Agent.Stop(context.Background())
		sys.Close()
	})
	return sys
}

func newFake(t *testing.T) *providertest.Server {
	t.Helper()
	f := providertest.New()
	t.Cleanup(f.Close)
	return f
}

// outbound returns what is queued for the dispatcher, without waiting.
func outbound(b *bus.Bus) []bus.Outbound {
	var out []bus.Outbound
	for b.OutboundDepth() > 0 {
		out = append(out, <-b.Outbound())
	}
	return out
}

func TestRunJobDeliver(t *testing.T) {
	fake := newFake(t)
	sys := newCore(t, fake)
	res, err := sys.runJob(context.Background(), api.Job{ID: "j1", JobSpec: api.JobSpec{Message: "Time for tea", Deliver: true, Channel: "telegram", To: "42"}})
	if err != nil {
		t.Fatal(err)
	}
	if res != "delivered to telegram:42" {
		t.Errorf("result %q", res)
	}
	got := outbound(sys.Bus)
	if len(got) != 1 || got[0].Channel != "telegram" || got[0].ChatID != "42" || got[0].Text != "Time for tea" {
		t.Errorf("outbound = %+v, want the message as is for telegram:42", got)
	}
	if fake.Calls() != 0 {
		t.Errorf("a delivered reminder called the model %d times", fake.Calls())
	}
}

func TestRunJobDeliverQueueFull(t *testing.T) {
	sys := newCore(t, newFake(t))
	for sys.Bus.PublishOutbound(bus.Outbound{Channel: "telegram", ChatID: "0"}) == nil {
	}
	_, err := sys.runJob(context.Background(), api.Job{ID: "j1", JobSpec: api.JobSpec{Message: "m", Deliver: true, Channel: "telegram", To: "42"}})
	if !errors.Is(err, bus.ErrFull) || !strings.Contains(err.Error(), "telegram:42") {
		t.Errorf("runJob on a full bus = %v, want ErrFull naming telegram:42", err)
	}
}

// deliver=false: the job's message reaches the agent as a user message
// (what scripts rely on), and the reply goes to channel/to when they name an external
// chat.
func TestRunJobAsksTheAgent(t *testing.T) {
	tests := []struct {
		name      string
		channel   string
		to        string
		published bool
		session   string
	}{
		{"reply delivered to the chat", "telegram", "42", true, "cron:j7"},
		{"no chat: reply kept", "", "", false, "cron:j7"},
		{"internal channel: reply kept", "cli", "x", false, "cron:j7"},
		{"channel without to: reply kept", "telegram", "", false, "cron:j7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFake(t)
			sys := newCore(t, fake)
			res, err := sys.runJob(context.Background(), api.Job{ID: "j7", JobSpec: api.JobSpec{Message: "Summarise today's sensor readings", Channel: tt.channel, To: tt.to}})
			if err != nil {
				t.Fatal(err)
			}
			if res != "echo: Summarise today's sensor readings" {
				t.Errorf("result %q, want the agent's reply", res)
			}
			reqs := fake.Requests()
			if len(reqs) != 1 {
				t.Fatalf("provider got %d requests, want 1", len(reqs))
			}
			msgs := reqs[0].Body.Messages
			last := msgs[len(msgs)-1]
			if last.Role != "user" || last.Content != "Summarise today's sensor readings" {
				t.Errorf("last message sent = %s %q, want the job's message as the user's", last.Role, last.Content)
			}
			got := outbound(sys.Bus)
			if tt.published {
				if len(got) != 1 || got[0].Channel != tt.channel || got[0].ChatID != tt.to || got[0].Text != res {
					t.Errorf("outbound = %+v, want the reply for %s:%s", got, tt.channel, tt.to)
				}
			} else if len(got) != 0 {
				t.Errorf("outbound = %+v, want nothing", got)
			}
			if h, err := sys.Store.History(tt.session); err != nil || len(h) != 2 {
				t.Errorf("session %s has %d messages (%v), want the job's turn", tt.session, len(h), err)
			}
		})
	}
}

// The agent's failure is the job's failure (the scheduler records it).
func TestRunJobAgentFailure(t *testing.T) {
	fake := newFake(t)
	fake.Enqueue(providertest.Reply{Status: 401, ErrorMessage: "bad key"})
	sys := newCore(t, fake)
	_, err := sys.runJob(context.Background(), api.Job{ID: "j1", JobSpec: api.JobSpec{Message: "m", Channel: "telegram", To: "42"}})
	if err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("runJob = %v, want the provider's error", err)
	}
	if got := outbound(sys.Bus); len(got) != 0 {
		t.Errorf("outbound = %+v after a failed turn", got)
	}
}

// A turn the agent's stop ended (the gateway stops the agent before the
// scheduler) is said to the scheduler as cut off by the stop, not failed.
func TestRunJobCutOffByTheAgentsStop(t *testing.T) {
	sys := newCore(t, newFake(t))
	if err := sys.Agent.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := sys.runJob(context.Background(), api.Job{ID: "j1", JobSpec: api.JobSpec{Message: "m"}})
	if !errors.Is(err, schedule.ErrStopping) {
		t.Errorf("runJob after the agent stopped = %v, want schedule.ErrStopping", err)
	}
}

// TestRunJobCommand: command jobs run confined through the same sandbox as
// the exec tool; their output is the result, delivered when asked.
func TestRunJobCommand(t *testing.T) {
	sys := newCore(t, newFake(t))
	res, err := sys.runJob(context.Background(), api.Job{ID: "j2", JobSpec: api.JobSpec{Message: "Uptime:", Command: "echo ' up 3 days '", Deliver: true, Channel: "slack", To: "C1"}})
	if err != nil {
		t.Fatal(err)
	}
	if res != "delivered to slack:C1" {
		t.Errorf("result %q", res)
	}
	if got := outbound(sys.Bus); len(got) != 1 || got[0].Text != "Uptime:\nup 3 days" {
		t.Errorf("outbound = %+v, want the message and the trimmed output", got)
	}
	res, err = sys.runJob(context.Background(), api.Job{ID: "j3", JobSpec: api.JobSpec{Command: "pwd"}})
	if err != nil || res != sys.Cfg.WorkspaceDir() {
		t.Errorf("undelivered command job = %q, %v; want its output (the workspace) as the result", res, err)
	}
	if len(outbound(sys.Bus)) != 0 {
		t.Error("an undelivered command job published its output")
	}
	if _, err := sys.runJob(context.Background(), api.Job{ID: "j4", JobSpec: api.JobSpec{Command: "echo nope >&2; exit 3"}}); err == nil ||
		!strings.Contains(err.Error(), "status 3") || !strings.Contains(err.Error(), "nope") {
		t.Errorf("failing command: %v", err)
	}
	if _, err := sys.runJob(context.Background(), api.Job{ID: "j4b", JobSpec: api.JobSpec{Command: "exit 4"}}); err == nil || err.Error() != "command exited with status 4" {
		t.Errorf("failing command without output: %v", err)
	}
	if _, err := sys.runJob(context.Background(), api.Job{ID: "j5", JobSpec: api.JobSpec{Command: "sudo reboot"}}); err == nil ||
		!strings.Contains(err.Error(), "reboot") {
		t.Errorf("blocked command: %v", err)
	}
	// The config file is a secret: not readable from a job either.
	if out, err := sys.runJob(context.Background(), api.Job{ID: "j6", JobSpec: api.JobSpec{Command: "cat " + sys.Cfg.DBPath()}}); err == nil {
		t.Errorf("a job read the database: %q", out)
	}
	// Nor the journal beside it, which holds the latest messages too.
	if out, err := sys.runJob(context.Background(), api.Job{ID: "j7", JobSpec: api.JobSpec{Command: "head -c 64 " + sys.Cfg.DBPath() + ".journal"}}); err == nil {
		t.Errorf("a job read the database's journal: %q", out)
	}
}

// Through the whole gateway: a job added over the admin API with
// at_seconds 0 reaches the model as a user message, and the job then shows
// as run and disabled.
func TestCronJobReachesTheAgent(t *testing.T) {
	fake := newFake(t)
	_, base := startSystem(t, fake.Base())
	var v api.Job
	if code := call(t, base, "POST", "/admin/cron", `{"message":"read the greenhouse sensor","schedule":{"at_seconds":0}}`, &v); code != 200 {
		t.Fatalf("add = %d", code)
	}
	j := waitCronRun(t, base)
	if j["last_result"] != "echo: read the greenhouse sensor" || j["enabled"] != false {
		t.Errorf("after running: %v", j)
	}
	if _, ok := j["next_run"]; ok {
		t.Errorf("a one-time job that ran still has next_run: %v", j)
	}
	reqs := fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("provider got %d requests, want 1", len(reqs))
	}
	if got := providertest.LastUser(reqs[0].Body); got != "read the greenhouse sensor" {
		t.Errorf("the model got the user message %q, want the job's message", got)
	}
}

// waitCronRun polls /admin/cron until its only job has run, and returns it.
func waitCronRun(t *testing.T, base string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var jobs []map[string]any
		call(t, base, "GET", "/admin/cron", "", &jobs)
		if len(jobs) == 1 && jobs[0]["last_run"] != nil {
			return jobs[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job never ran: %v", jobs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeliveryIsRecordedAsItWent: in the gateway a job's result goes to its
// channel directly, so the run says "delivered" only when the message
// arrived, and a delivery that fails is a failed run with the reason.
func TestDeliveryIsRecordedAsItWent(t *testing.T) {
	sys, base := startSystem(t, newFake(t).Base())
	var v api.Job
	if code := call(t, base, "POST", "/admin/cron", `{"message":"Water the plants","deliver":true,"channel":"web","to":"home","schedule":{"at_seconds":0}}`, &v); code != 200 {
		t.Fatalf("add = %d", code)
	}
	j := waitCronRun(t, base)
	if j["last_result"] != "delivered to web:home" || j["last_failed"] != nil {
		t.Errorf("after delivering: %v", j)
	}
	h, err := sys.Store.History("web:home")
	if err != nil || len(h) != 1 || h[0].Content != "Water the plants" || h[0].Role != "assistant" {
		t.Errorf("web:home history = %+v, %v; want the reminder waiting there", h, err)
	}
	call(t, base, "DELETE", "/admin/cron/"+v.ID, "", nil)

	// A chat the page channel cannot take: recorded as failed, not delivered.
	if code := call(t, base, "POST", "/admin/cron", `{"message":"x","deliver":true,"channel":"web","to":"no such chat","schedule":{"at_seconds":0}}`, &v); code != 200 {
		t.Fatalf("add = %d", code)
	}
	j = waitCronRun(t, base)
	res, _ := j["last_result"].(string)
	if j["last_failed"] != true || !strings.HasPrefix(res, "error: delivery to web:no such chat failed: web: ") {
		t.Errorf("after a failed delivery: %v", j)
	}
}

// A job a sender nobody vouched for scheduled (over MQTT, where it has no
// chat to deliver to, so its message goes to the agent when due) runs with
// that sender's few tools: its text cannot become a command run later with
// every tool.
func TestRestrictedJobRunsWithRestrictedTools(t *testing.T) {
	fake := newFake(t)
	sys := newCore(t, fake)
	marker := filepath.Join(sys.Cfg.WorkspaceDir(), "ran")
	for _, restricted := range []bool{true, false} {
		os.Remove(marker)
		fake.Enqueue(providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "c1", Name: "exec", Args: `{"command":"touch ran"}`}}},
			providertest.Reply{Content: "done"})
		job := api.Job{ID: "jr", JobSpec: api.JobSpec{Message: "run touch ran", Channel: "mqtt", Restricted: restricted}}
		if _, err := sys.runJob(context.Background(), job); err != nil {
			t.Fatal(err)
		}
		_, err := os.Stat(marker)
		if ran := err == nil; ran == restricted {
			t.Errorf("restricted=%v: the command ran=%v", restricted, ran)
		}
	}
}

// /cron, asked by a sender nobody vouched for, lists only the reminders
// for its own chat; the owner's list is whole.
func TestCronCommandShowsAStrangerOnlyItsJobs(t *testing.T) {
	sys := newCore(t, newFake(t))
	ctx := context.Background()
	at := int64(3600)
	for _, spec := range []api.JobSpec{
		{Message: "stretch", Deliver: true, Channel: "web", To: "kitchen", Schedule: api.Schedule{AtSeconds: &at}},
		{Message: "call the bank about the loan", Deliver: true, Channel: "web", To: "main", Schedule: api.Schedule{AtSeconds: &at}},
	} {
		if _, err := sys.Cron.Add(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	ask := func(restricted bool) string {
		rep, err := sys.Agent.Process(ctx, bus.Inbound{Channel: "web", ChatID: "kitchen", SessionKey: "web:kitchen", Text: "/cron", RestrictTools: restricted})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Text
	}
	if got := ask(true); !strings.Contains(got, "stretch") || strings.Contains(got, "bank") || !strings.Contains(got, "1 more job, for other chats") {
		t.Errorf("a stranger's /cron:\n%s", got)
	}
	if got := ask(false); !strings.Contains(got, "bank") {
		t.Errorf("the owner's /cron:\n%s", got)
	}
}
