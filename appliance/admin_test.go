package appliance

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/api"
)

// call sends a request with the test gateway's token ("t") and decodes the
// JSON answer into out (when not nil); it returns the status.
func call(t *testing.T, base, method, path, body string, out any) int {
	t.Helper()
	return callAs(t, base, method, path, body, "Bearer t", out)
}

func callAs(t *testing.T, base, method, path, body, auth string, out any) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

// errBody is a JSON error answer.
type errBody struct {
	Error string `json:"error"`
}

func TestAdminCronAPI(t *testing.T) {
	fake := newFake(t)
	_, base := startSystem(t, fake.Base())

	// An empty list is an array, not null.
	var raw json.RawMessage
	if code := call(t, base, "GET", "/admin/cron", "", &raw); code != 200 || string(raw) != "[]" {
		t.Fatalf("empty list = %d %s, want 200 []", code, raw)
	}

	var added api.Job
	code := call(t, base, "POST", "/admin/cron",
		`{"message":"stand up","deliver":true,"channel":"web","to":"home","schedule":{"cron_expr":"0 9 * * 1-5","tz":"Europe/Berlin"}}`, &added)
	if code != 200 || added.ID == "" || !added.Enabled || added.NextRun == nil {
		t.Fatalf("add = %d %+v, want 200 with an id, enabled, next_run", code, added)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if n := added.NextRun.In(berlin); n.Hour() != 9 || n.Minute() != 0 {
		t.Errorf("next_run %v is not 09:00 in Berlin", added.NextRun)
	}

	// The listed form: the job's fields, a schedule object with one
	// kind, and no internal fields.
	var listed []map[string]any
	call(t, base, "GET", "/admin/cron", "", &listed)
	if len(listed) != 1 {
		t.Fatalf("list = %v, want one job", listed)
	}
	j := listed[0]
	for _, k := range []string{"id", "message", "deliver", "channel", "to", "schedule", "enabled", "next_run"} {
		if _, ok := j[k]; !ok {
			t.Errorf("listed job lacks %q: %v", k, j)
		}
	}
	for _, k := range []string{"created", "at", "last_run", "last_result"} {
		if _, ok := j[k]; ok {
			t.Errorf("listed job has %q: %v", k, j)
		}
	}
	if sch := j["schedule"].(map[string]any); len(sch) != 2 || sch["cron_expr"] != "0 9 * * 1-5" || sch["tz"] != "Europe/Berlin" {
		t.Errorf("schedule = %v, want cron_expr and tz only", sch)
	}
	if _, err := time.Parse(time.RFC3339, j["next_run"].(string)); err != nil {
		t.Errorf("next_run %v is not RFC 3339", j["next_run"])
	}

	var v api.Job
	if code := call(t, base, "POST", "/admin/cron/"+added.ID+"/disable", "", &v); code != 200 || v.Enabled || v.NextRun != nil {
		t.Errorf("disable = %d %+v, want 200 disabled without next_run", code, v)
	}
	v = api.Job{}
	if code := call(t, base, "POST", "/admin/cron/"+added.ID+"/enable", "", &v); code != 200 || !v.Enabled || v.NextRun == nil {
		t.Errorf("enable = %d %+v, want 200 enabled with next_run", code, v)
	}

	var removed api.Job
	if code := call(t, base, "DELETE", "/admin/cron/"+added.ID, "", &removed); code != 200 || removed.ID != added.ID || removed.Message != added.Message {
		t.Errorf("delete = %d %v", code, removed)
	}
	call(t, base, "GET", "/admin/cron", "", &raw)
	if string(raw) != "[]" {
		t.Errorf("after delete the list is %s", raw)
	}
}

func TestAdminCronAPIRefusals(t *testing.T) {
	fake := newFake(t)
	_, base := startSystem(t, fake.Base())
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		auth   string
		status int
		substr string
	}{
		{"no token", "GET", "/admin/cron", "", "", 401, "gateway.api_token"},
		{"malformed JSON", "POST", "/admin/cron", `{"message":`, "Bearer t", 400, "malformed JSON"},
		{"no schedule", "POST", "/admin/cron", `{"message":"m"}`, "Bearer t", 400, "exactly one of at_seconds, every_seconds or cron_expr"},
		// A field the job does not have is named, not dropped (which read
		// as "no schedule"), and where it belongs is said.
		{"schedule field outside schedule", "POST", "/admin/cron", `{"message":"m","every_seconds":60}`, "Bearer t", 400,
			`"every_seconds" is not a field of this request; it goes in "schedule": {"every_seconds": ...}`},
		{"unknown field", "POST", "/admin/cron", `{"msg":"m","schedule":{"every_seconds":60}}`, "Bearer t", 400,
			`"msg" is not a field of this request; a job has "message", `},
		{"unknown schedule field", "POST", "/admin/cron", `{"message":"m","schedule":{"every":60}}`, "Bearer t", 400, `"every" is not a field of this request`},
		{"job field inside schedule", "POST", "/admin/cron", `{"schedule":{"message":"m","every_seconds":60}}`, "Bearer t", 400,
			`"message" is not a field of this request; it goes beside "schedule", not in it`},
		{"interval too short", "POST", "/admin/cron", `{"message":"m","schedule":{"every_seconds":5}}`, "Bearer t", 400, "every_seconds must be at least 10"},
		{"bad cron", "POST", "/admin/cron", `{"message":"m","schedule":{"cron_expr":"0 9 * *"}}`, "Bearer t", 400, "five fields"},
		{"bad zone", "POST", "/admin/cron", `{"message":"m","schedule":{"cron_expr":"0 9 * * *","tz":"Moon/Base"}}`, "Bearer t", 400, "Moon/Base"},
		{"deliver without chat", "POST", "/admin/cron", `{"message":"m","deliver":true,"schedule":{"at_seconds":60}}`, "Bearer t", 400, "deliver needs channel and to"},
		{"enable unknown", "POST", "/admin/cron/nope/enable", "", "Bearer t", 404, `"nope"`},
		{"disable unknown", "POST", "/admin/cron/nope/disable", "", "Bearer t", 404, `"nope"`},
		{"delete unknown", "DELETE", "/admin/cron/nope", "", "Bearer t", 404, `"nope"`},
		{"unknown action", "POST", "/admin/cron/nope/pause", "", "Bearer t", 404, "use enable or disable"},
		// A channel that is not enabled would take the job's result
		// nowhere: refused, naming the channels that deliver.
		{"channel not enabled", "POST", "/admin/cron", `{"message":"m","deliver":true,"channel":"bogus","to":"1","schedule":{"at_seconds":60}}`, "Bearer t", 400,
			`no channel "bogus" is enabled, so nothing would be delivered; channels that deliver: web`},
		{"internal channel", "POST", "/admin/cron", `{"message":"m","deliver":true,"channel":"cli","to":"1","schedule":{"at_seconds":60}}`, "Bearer t", 400,
			`channel "cli" is internal`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e errBody
			code := callAs(t, base, tt.method, tt.path, tt.body, tt.auth, &e)
			if code != tt.status || !strings.Contains(e.Error, tt.substr) {
				t.Errorf("%s %s = %d %q, want %d with %q", tt.method, tt.path, code, e.Error, tt.status, tt.substr)
			}
		})
	}
	var raw json.RawMessage
	call(t, base, "GET", "/admin/cron", "", &raw)
	if string(raw) != "[]" {
		t.Errorf("refused requests left jobs behind: %s", raw)
	}
}

// A one-time job that has passed cannot be enabled again: 400, not 404.
func TestAdminCronEnablePastJob(t *testing.T) {
	fake := newFake(t)
	_, base := startSystem(t, fake.Base())
	var v api.Job
	call(t, base, "POST", "/admin/cron", `{"message":"now","schedule":{"at_seconds":0}}`, &v)
	waitCronRun(t, base)
	var e errBody
	if code := call(t, base, "POST", "/admin/cron/"+v.ID+"/enable", "", &e); code != 400 || !strings.Contains(e.Error, "moment has passed") {
		t.Errorf("enable a past job = %d %q, want 400 explaining why", code, e.Error)
	}
}

// TestAdminCronPreview: the page's form shows the next runs of a schedule
// before adding it, with the scheduler's own rules and errors.
func TestAdminCronPreview(t *testing.T) {
	_, base := startSystem(t, newFake(t).Base())
	var p struct {
		Describe string      `json:"describe"`
		Next     []time.Time `json:"next"`
		Zone     string      `json:"zone"`
	}
	if code := call(t, base, "GET", "/admin/cron/preview?cron_expr=0+9+*+*+1-5&tz=Europe/Berlin", "", &p); code != 200 || len(p.Next) != 5 || p.Zone != "Europe/Berlin" {
		t.Fatalf("preview = %d %+v", code, p)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	for _, n := range p.Next {
		if l := n.In(berlin); l.Hour() != 9 || l.Weekday() == time.Saturday || l.Weekday() == time.Sunday {
			t.Errorf("next run %v is not 09:00 on a weekday in Berlin", l)
		}
	}
	p.Next = nil
	if code := call(t, base, "GET", "/admin/cron/preview?every_seconds=3600", "", &p); code != 200 || len(p.Next) != 5 || p.Next[1].Sub(p.Next[0]) != time.Hour || p.Describe != "every 1 hour" {
		t.Errorf("every: %d %+v", code, p)
	}
	p.Next = nil
	if code := call(t, base, "GET", "/admin/cron/preview?at_seconds=600", "", &p); code != 200 || len(p.Next) != 1 || time.Until(p.Next[0]) < 9*time.Minute {
		t.Errorf("at: %d %+v", code, p)
	}
	for q, want := range map[string]string{
		"":                                  "exactly one of",
		"?every_seconds=5":                  "at least 10",
		"?every_seconds=soon":               "not a whole number",
		"?cron_expr=61+*+*+*+*":             "cron_expr",
		"?cron_expr=0+9+*+*+*&tz=Mars/Base": "Mars/Base",
	} {
		var e errBody
		if code := call(t, base, "GET", "/admin/cron/preview"+q, "", &e); code != 400 || !strings.Contains(e.Error, want) {
			t.Errorf("preview%s = %d %q, want 400 with %q", q, code, e.Error, want)
		}
	}
}
