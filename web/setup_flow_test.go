package web

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/gateway"
	"github.com/perchhq/perch/systemd/systemdtest"
)

func TestCodeWhereFollowsHowPerchRuns(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	// The gateway's standard error: systemd names the journal's stream by
	// its device and inode.
	stderr, journal := systemdtest.JournalStream(t)
	for _, tc := range []struct {
		name string
		env  func(string) (string, bool)
		want string
	}{
		{"systemd", env("INVOCATION_ID", "4f1c", "JOURNAL_STREAM", journal), "in the journal, the latest since boot (journalctl -u perch -b -o cat | grep setup_code | tail -n1)"},
		{"journal only", env("JOURNAL_STREAM", journal), "in the journal"},
		// A terminal that runs as a user service hands JOURNAL_STREAM to
		// its shells, whose output is the terminal.
		{"inherited from a service", env("INVOCATION_ID", "4f1c", "JOURNAL_STREAM", "8:1234"), `in the terminal where "perch gateway" runs`},
		{"make run", env("MAKELEVEL", "1"), `in the terminal where "make run" runs`},
		{"a shell", env(), `in the terminal where "perch gateway" runs`},
	} {
		if got := CodeWhere(tc.env, stderr); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestSetupByCodeHandsOverTheToken: the page that proved the code gets the
// API token in the answer (and GET /setup says where the code is, never
// the code); a setup with the token answers no token.
func TestSetupByCodeHandsOverTheToken(t *testing.T) {
	var logs bytes.Buffer
	setup := &fakeSetup{}
	const tok = "tok-0123456789abcdef01234567"
	s := gateway.New(gateway.Options{Host: "0.0.0.0", Token: tok})
	page := Register(s, Deps{Setup: setup, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Token: func() string { return tok }, CodeWhere: `in the terminal where "make run" runs`})
	code := regexp.MustCompile(`setup_code=(\d{4}-\d{4})`).FindStringSubmatch(logs.String())[1]
	if page.SetupCode() != code {
		t.Errorf("SetupCode() = %q, logged %q", page.SetupCode(), code)
	}
	do := func(method, body, auth string) (int, map[string]any) {
		req := pageRequest(method, "/setup", strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		req.RemoteAddr = "192.0.2.10:4000"
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		var out map[string]any
		json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	st, info := do("GET", "", "")
	if st != 200 || info["needs_code"] != true || info["code_where"] != `in the terminal where "make run" runs` || strings.Contains(logs.String(), "code_where") {
		t.Errorf("GET /setup = %d %v", st, info)
	}
	if _, wrong := do("POST", `{"code":"0000-0000","provider":"openai","model":"m","api_key":"k"}`, ""); !strings.Contains(wrong["error"].(string), `the gateway printed in the terminal where "make run" runs`) {
		t.Errorf("wrong code message: %v", wrong)
	}
	st, ok := do("POST", `{"code":"`+code+`","provider":"openai","model":"m","api_key":"k"}`, "")
	if st != 200 || ok["token"] != tok {
		t.Fatalf("setup by code = %d %v, want the token handed over", st, ok)
	}
	if page.SetupCode() != "" {
		t.Error("the code is still active after its use")
	}
	if _, info := do("GET", "", ""); info["needs_code"] != false {
		t.Errorf("GET /setup after setup = %v", info)
	}
	st, again := do("POST", `{"provider":"openai","model":"m2","api_key":"k"}`, tok)
	if st != 200 || again["token"] != nil {
		t.Errorf("setup with the token = %d %v, want no token in it", st, again)
	}
}
