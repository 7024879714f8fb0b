package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/bus"
)

// fakeJobs counts what the cron tool would change.
type fakeJobs struct {
	added   int
	list    []api.Job
	removed []string
}

func (f *fakeJobs) List(context.Context) ([]api.Job, error) { return f.list, nil }
func (f *fakeJobs) Add(_ context.Context, s api.JobSpec) (api.Job, error) {
	f.added++
	j := api.Job{ID: fmt.Sprintf("j%d", f.added), JobSpec: s}
	f.list = append(f.list, j)
	return j, nil
}
func (f *fakeJobs) Remove(_ context.Context, id string) (api.Job, error) {
	f.removed = append(f.removed, id)
	return api.Job{}, nil
}
func (f *fakeJobs) SetEnabled(context.Context, string, bool) (api.Job, error) {
	return api.Job{}, nil
}

// boardTools is a registry of the real tools whose calls can change the
// board, plus a read-only one.
func boardTools(t *testing.T, jobs *fakeJobs, sent *[]string) *Registry {
	r := NewRegistry(slog.New(slog.DiscardHandler))
	for _, tool := range NewFS(FSOptions{Dir: t.TempDir(), Restrict: true}) {
		r.Register(tool)
	}
	r.Register(NewExec(nil))
	r.Register(NewI2C())
	r.Register(NewSPI())
	r.Register(NewCron(jobs, nil))
	r.Register(NewMessage(MessageOptions{Send: func(o bus.Outbound) error { *sent = append(*sent, o.ChatID); return nil }}))
	r.Register(NewCanvas())
	return r
}

func TestSafeDefinitionsWithholdTheToolsThatAlwaysChangeTheBoard(t *testing.T) {
	var sent []string
	r := boardTools(t, &fakeJobs{}, &sent)
	defs, withheld := r.SafeDefinitions()
	var offered []string
	for _, d := range defs {
		offered = append(offered, d.Name)
	}
	if got := strings.Join(withheld, ","); got != "append_file,edit_file,exec,write_file" {
		t.Errorf("withheld %s", got)
	}
	if got := strings.Join(offered, ","); got != "canvas,cron,i2c,list_dir,message,read_file,spi" {
		t.Errorf("offered %s", got)
	}
	// The cache follows the registry.
	r.Register(Func{ToolName: "zap", ToolDescription: "x", Mutating: true, Run: func(context.Context, Args) Result { return Text("") }})
	if _, w := r.SafeDefinitions(); !strings.Contains(strings.Join(w, ","), "zap") {
		t.Errorf("a tool registered later is not withheld: %v", w)
	}
}

// TestSafeDefinitionsJSONIsEncodedOncePerToolSet: a restricted turn gets
// the safe definitions already encoded, the same JSON the provider would
// encode from them, built again only when the tools change.
func TestSafeDefinitionsJSONIsEncodedOncePerToolSet(t *testing.T) {
	var sent []string
	r := boardTools(t, &fakeJobs{}, &sent)
	defs, _, encoded := r.SafeDefinitionsJSON()
	want, err := json.Marshal(defs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(encoded, want) {
		t.Fatalf("encoded safe definitions differ from their JSON:\n%s\n%s", encoded, want)
	}
	if allocs := testing.AllocsPerRun(20, func() { r.SafeDefinitionsJSON() }); allocs > 0 {
		t.Errorf("SafeDefinitionsJSON allocates %.0f times once cached", allocs)
	}
	r.Register(Func{ToolName: "peek", ToolDescription: "reads nothing", Run: func(context.Context, Args) Result { return Text("") }})
	_, _, encoded = r.SafeDefinitionsJSON()
	var got []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(encoded, &got); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range got {
		found = found || d.Name == "peek" || d.Function.Name == "peek"
	}
	if !found {
		t.Errorf("a tool registered later is not in the encoded definitions: %s", encoded)
	}
}

func TestRestrictedCallsThatChangeTheBoardAreRefused(t *testing.T) {
	jobs := &fakeJobs{}
	var sent []string
	r := boardTools(t, jobs, &sent)
	restricted := WithCall(context.Background(), Call{Channel: "telegram", ChatID: "5", SessionKey: "telegram:5", Restricted: true})
	for _, tc := range []struct {
		tool, args string
		refused    bool
	}{
		{"exec", `{"command":"reboot"}`, true},
		{"write_file", `{"path":"x","content":"y"}`, true},
		{"i2c", `{"action":"write","address":64,"data":[1],"confirm":true}`, true},
		{"spi", `{"action":"transfer","data":[1],"confirm":true}`, true},
		{"i2c", `{"action":"read","address":32,"register":0}`, true},
		{"spi", `{"action":"read","length":3}`, true},
		{"i2c", `{"action":"read","address":32}`, false},
		{"i2c", `{"action":"scan"}`, false},
		{"cron", `{"action":"add","message":"x","every_seconds":60,"command":"rm -r /"}`, true},
		{"cron", `{"action":"add","message":"check the pump","every_seconds":60,"deliver":false}`, true},
		{"cron", `{"action":"remove","job_id":"j9"}`, true},
		{"cron", `{"action":"add","message":"x","every_seconds":60,"chat_id":"other"}`, true},
		{"message", `{"content":"hi","chat_id":"77"}`, true},
		{"message", `{"content":"hi"}`, false},
		{"cron", `{"action":"add","message":"water the plants","at_seconds":3600}`, false},
		{"cron", `{"action":"list"}`, false},
		{"read_file", `{"path":"nothing"}`, false},
	} {
		res := r.Execute(restricted, tc.tool, tc.args)
		refused := strings.Contains(res.ForLLM, "refused: this call would change the board")
		if refused != tc.refused {
			t.Errorf("%s %s: refused=%v (%s), want %v", tc.tool, tc.args, refused, res.ForLLM, tc.refused)
		}
		if refused && !strings.Contains(res.ForLLM, "channels.telegram.allow_all_tools") {
			t.Errorf("the refusal does not say how to allow it: %s", res.ForLLM)
		}
	}
	if jobs.added != 1 || len(sent) != 1 || sent[0] != "5" {
		t.Errorf("cron added %d jobs, messages to %v; want the one reminder and the one message to this chat", jobs.added, sent)
	}
	// The owner's turn is not restricted.
	owner := WithCall(context.Background(), Call{Channel: "telegram", ChatID: "5"})
	if res := r.Execute(owner, "cron", `{"action":"remove","job_id":"j9"}`); strings.Contains(res.ForLLM, "refused") {
		t.Errorf("an unrestricted call was refused: %s", res.ForLLM)
	}
}

// A sender nobody vouched for sees only the reminders for its own chat,
// may take those back, and every job it adds is marked to run with the
// same few tools when due.
func TestRestrictedSenderHasOnlyItsOwnJobs(t *testing.T) {
	jobs := &fakeJobs{list: []api.Job{
		{ID: "own1", JobSpec: api.JobSpec{Message: "stretch", Deliver: true, Channel: "telegram", To: "5"}},
		{ID: "owner1", JobSpec: api.JobSpec{Message: "call the bank about the loan", Deliver: true, Channel: "telegram", To: "1"}},
		{ID: "owner2", JobSpec: api.JobSpec{Command: "backup --key s3cr3t", Channel: "telegram", To: "5"}},
	}}
	var sent []string
	r := boardTools(t, jobs, &sent)
	stranger := WithCall(context.Background(), Call{Channel: "telegram", ChatID: "5", SessionKey: "telegram:5", Restricted: true})
	res := r.Execute(stranger, "cron", `{"action":"list"}`)
	if !strings.Contains(res.ForLLM, "own1") || strings.Contains(res.ForLLM, "bank") || strings.Contains(res.ForLLM, "s3cr3t") ||
		!strings.Contains(res.ForLLM, "2 more jobs, for other chats, not shown") {
		t.Errorf("a stranger's list:\n%s", res.ForLLM)
	}
	for id, refused := range map[string]bool{"own1": false, "owner1": true, "owner2": true, "nosuch": true} {
		res := r.Execute(stranger, "cron", `{"action":"remove","job_id":"`+id+`"}`)
		if got := strings.Contains(res.ForLLM, "refused"); got != refused {
			t.Errorf("remove %s: %s", id, res.ForLLM)
		}
	}
	if strings.Join(jobs.removed, ",") != "own1" {
		t.Errorf("removed %v", jobs.removed)
	}
	r.Execute(stranger, "cron", `{"action":"add","message":"drink water","at_seconds":60}`)
	if j := jobs.list[len(jobs.list)-1]; !j.Restricted || j.To != "5" {
		t.Errorf("a stranger's job %+v is not marked restricted", j)
	}
	// A client over MQTT has no chat: its reminder would go nowhere and
	// become a task for the agent when due, calling the model for ever.
	n := len(jobs.list)
	automation := WithCall(context.Background(), Call{Channel: "mqtt", SessionKey: "ha:x", Restricted: true})
	if res := r.Execute(automation, "cron", `{"action":"add","message":"spam","every_seconds":10}`); !strings.Contains(res.ForLLM, "refused") || len(jobs.list) != n {
		t.Errorf("an automation's reminder to nowhere: %s", res.ForLLM)
	}
	owner := WithCall(context.Background(), Call{Channel: "telegram", ChatID: "1"})
	if res := r.Execute(owner, "cron", `{"action":"list"}`); !strings.Contains(res.ForLLM, "bank") || strings.Contains(res.ForLLM, "not shown") {
		t.Errorf("the owner's list:\n%s", res.ForLLM)
	}
	r.Execute(owner, "cron", `{"action":"add","message":"water","at_seconds":60}`)
	if j := jobs.list[len(jobs.list)-1]; j.Restricted {
		t.Errorf("the owner's job %+v is marked restricted", j)
	}
}

func TestRestrictionNoteNamesTheSetting(t *testing.T) {
	note := RestrictionNote("slack", []string{"exec", "write_file"})
	for _, want := range []string{"withheld: exec, write_file", "channels.slack.allow_from", "channels.slack.allow_all_tools"} {
		if !strings.Contains(note, want) {
			t.Errorf("note lacks %q:\n%s", want, note)
		}
	}
	if note := RestrictionNote("mqtt", nil); !strings.Contains(note, "mqtt.allow_all_tools") {
		t.Errorf("MQTT note: %s", note)
	}
}

// A sender nobody vouched for may read the skills, the agent's own
// instructions, and nothing else in the workspace: the rest is the
// owner's.
func TestRestrictedReadsOnlyTheSkills(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "skills", "water"), 0o700)
	os.MkdirAll(filepath.Join(dir, "memory"), 0o700)
	os.WriteFile(filepath.Join(dir, "skills", "water", "SKILL.md"), []byte("Water at dawn."), 0o600)
	os.WriteFile(filepath.Join(dir, "memory", "MEMORY.md"), []byte("door code 4711"), 0o600)
	// Second names of the owner's notes inside skills/, as a command of
	// the owner's can make: they were read out to strangers.
	os.Symlink("../memory/MEMORY.md", filepath.Join(dir, "skills", "leak.md"))
	os.Symlink("../memory", filepath.Join(dir, "skills", "mem"))
	if err := os.Link(filepath.Join(dir, "memory", "MEMORY.md"), filepath.Join(dir, "skills", "hard.md")); err != nil {
		t.Fatal(err)
	}
	os.Symlink("water/SKILL.md", filepath.Join(dir, "skills", "alias.md"))
	r := NewRegistry(slog.New(slog.DiscardHandler))
	for _, tool := range NewFS(FSOptions{Dir: dir, Restrict: true}) {
		r.Register(tool)
	}
	stranger := WithCall(context.Background(), Call{Channel: "telegram", ChatID: "5", Restricted: true})
	owner := WithCall(context.Background(), Call{Channel: "telegram", ChatID: "5"})
	for _, tc := range []struct {
		tool, path string
		refused    bool
	}{
		{"read_file", "skills/water/SKILL.md", false},
		{"read_file", filepath.Join(dir, "skills", "water", "SKILL.md"), false},
		{"list_dir", "skills", false},
		{"list_dir", "./skills/", false},
		{"read_file", "memory/MEMORY.md", true},
		{"read_file", "skills/../memory/MEMORY.md", true},
		{"read_file", filepath.Join(dir, "memory", "MEMORY.md"), true},
		{"read_file", "skillsx/a", true},
		{"list_dir", ".", true},
		{"list_dir", "memory", true},
		{"read_file", "skills/leak.md", true},
		{"read_file", "skills//leak.md", true},
		{"read_file", "skills/mem/MEMORY.md", true},
		{"list_dir", "skills/mem", true},
		{"read_file", "skills/hard.md", true},
		{"read_file", "skills/alias.md", false}, // a link within skills/
	} {
		res := r.Execute(stranger, tc.tool, `{"path":"`+tc.path+`"}`)
		refused := strings.Contains(res.ForLLM, "refused: the workspace holds the owner's files")
		if refused != tc.refused || strings.Contains(res.ForLLM, "4711") {
			t.Errorf("%s %s: %s", tc.tool, tc.path, res.ForLLM)
		}
		if refused && !strings.Contains(res.ForLLM, "channels.telegram.allow_from") {
			t.Errorf("the refusal does not name the setting: %s", res.ForLLM)
		}
	}
	if res := r.Execute(owner, "read_file", `{"path":"memory/MEMORY.md"}`); !strings.Contains(res.ForLLM, "4711") {
		t.Errorf("the owner's read: %s", res.ForLLM)
	}
}
