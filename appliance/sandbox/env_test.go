package sandbox

import (
	"slices"
	"testing"
)

// TestEnvIsAllowListed: nothing of the gateway's environment reaches a
// command except LANG and TZ, and those only when they look like a locale or
// a zone.
func TestEnvIsAllowListed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		parent map[string]string
		want   []string
	}{
		{
			name: "secrets and PERCH_ variables stay behind",
			parent: map[string]string{
				"OPENAI_API_KEY":                 "sk-live",
				"PERCH_PROVIDERS_OPENAI_API_KEY": "sk-live",
				"PERCH_GATEWAY_API_TOKEN":        "tok",
				"TELEGRAM_TOKEN":                 "t",
				"PATH":                           "/root/go/bin:/usr/bin",
				"HOME":                           "/root",
				"LD_PRELOAD":                     "/tmp/evil.so",
				"LANG":                           "en_GB.UTF-8",
				"TZ":                             "Europe/London",
			},
			want: []string{
				"PATH=" + safePath, "HOME=/ws", "TMPDIR=/ws/.tmp/x", "LANG=en_GB.UTF-8", "TZ=Europe/London",
			},
		},
		{
			name:   "defaults when the gateway has none",
			parent: map[string]string{},
			want:   []string{"PATH=" + safePath, "HOME=/ws", "TMPDIR=/ws/.tmp/x", "LANG=" + defaultLang},
		},
		{
			name:   "odd values are not passed on",
			parent: map[string]string{"LANG": "C.UTF-8\nOPENAI_API_KEY=sk", "TZ": "$(id)"},
			want:   []string{"PATH=" + safePath, "HOME=/ws", "TMPDIR=/ws/.tmp/x", "LANG=" + defaultLang},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := buildEnv("/ws", "/ws/.tmp/x", func(k string) (string, bool) {
				v, ok := tc.parent[k]
				return v, ok
			})
			if !slices.Equal(got, tc.want) {
				t.Errorf("env = %q\nwant  %q", got, tc.want)
			}
		})
	}
}

// TestLauncherEnvIsGoRuntimeOnly: the launcher gets the Go runtime's
// settings and nothing else of the gateway's environment.
func TestLauncherEnvIsGoRuntimeOnly(t *testing.T) {
	parent := map[string]string{"GOMEMLIMIT": "64MiB", "GORACE": "halt_on_error=1", "OPENAI_API_KEY": "sk", "PERCH_X": "y", "HOME": "/root"}
	got := launcherEnv(func(k string) (string, bool) { v, ok := parent[k]; return v, ok })
	if want := []string{"GOMEMLIMIT=64MiB", "GORACE=halt_on_error=1"}; !slices.Equal(got, want) {
		t.Errorf("launcher env %q, want %q", got, want)
	}
}
