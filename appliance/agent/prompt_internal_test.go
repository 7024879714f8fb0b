package agent

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/tools"
)

// TestPromptNowSection: the per-turn end of the system prompt (time,
// session, channel, chat, media wishes), written without fmt, reads as the
// fmt version did.
func TestPromptNowSection(t *testing.T) {
	reg := tools.NewRegistry(slog.New(slog.DiscardHandler))
	b := newPromptBuilder(t.TempDir())
	cases := []struct {
		in   bus.Inbound
		key  string
		tail func(now time.Time) string
	}{
		{bus.Inbound{Channel: "cli"}, "rest:default", func(now time.Time) string {
			return fmt.Sprintf("\n## Now\nTime: %s (%s)\nSession: %s (channel %s)\n", now.Format("2006-01-02 15:04 MST"), now.Weekday(), "rest:default", "cli")
		}},
		{bus.Inbound{Channel: "telegram", ChatID: "42"}, "telegram:42", func(now time.Time) string {
			return fmt.Sprintf("\n## Now\nTime: %s (%s)\nSession: %s (channel %s, chat %s)\n", now.Format("2006-01-02 15:04 MST"), now.Weekday(), "telegram:42", "telegram", "42")
		}},
		{bus.Inbound{Channel: "cli", Metadata: map[string]string{"media_type": "image", "media_size": "1024x1024", "media_aspect_ratio": "1:1"}}, "k", func(now time.Time) string {
			return fmt.Sprintf("\n## Now\nTime: %s (%s)\nSession: k (channel cli)\n", now.Format("2006-01-02 15:04 MST"), now.Weekday()) +
				"The user asks for generated media: type image, size 1024x1024, aspect ratio 1:1; for images use generate_image with these settings.\n"
		}},
	}
	for _, c := range cases {
		before := time.Now()
		got := b.build(reg, c.in, c.key)
		after := time.Now()
		if !strings.HasPrefix(got, "You are Perch") || !strings.Contains(got, "## Tools\n") {
			t.Fatalf("prompt lost its static part:\n%s", got)
		}
		if !strings.HasSuffix(got, c.tail(before)) && !strings.HasSuffix(got, c.tail(after)) {
			t.Errorf("prompt ends\n%q\nwant\n%q", got[strings.LastIndex(got, "\n## Now"):], c.tail(after))
		}
	}
}

// TestPromptHeadIsKept: the head of the system prompt is the same string
// from turn to turn (the provider keeps its encoding while it is), and a
// new one once the tools change.
func TestPromptHeadIsKept(t *testing.T) {
	reg := tools.NewRegistry(slog.New(slog.DiscardHandler))
	b := newPromptBuilder(t.TempDir())
	h1, tail := b.parts(reg, bus.Inbound{Channel: "cli"}, "k")
	h2, _ := b.parts(reg, bus.Inbound{Channel: "telegram", ChatID: "1"}, "t")
	if unsafe.StringData(h1) != unsafe.StringData(h2) || !strings.HasPrefix(h1, "You are Perch") || !strings.HasPrefix(tail, "\n## Now\n") {
		t.Fatalf("two turns built two heads, or the parts are wrong: %q | %q", h1[:20], tail)
	}
	if got := b.build(reg, bus.Inbound{Channel: "cli"}, "k"); !strings.HasPrefix(got, h1) || !strings.Contains(got[len(h1):], "Session: k (channel cli)") {
		t.Fatalf("build is not head and tail: %q", got)
	}
	reg.Register(tools.Func{ToolName: "newtool", ToolDescription: "a new tool", Params: tools.Object(nil)})
	h3, _ := b.parts(reg, bus.Inbound{Channel: "cli"}, "k")
	if h3 == h1 || !strings.Contains(h3, "newtool") {
		t.Fatal("the head did not change with the tools")
	}
}

// The prompt's files are the workspace's own: a command that links one of
// them to the config file (or any file outside) does not put the keys in
// the prompt, a FIFO in their place does not block the turn, and a skill
// whose SKILL.md leads out of the workspace is not listed.
func TestPromptFilesStayInTheWorkspace(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "config.json")
	if err := os.WriteFile(secret, []byte(`{"api_key":"sk-leaked"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	for _, err := range []error{
		os.WriteFile(filepath.Join(ws, "AGENT.md"), []byte("Be brief."), 0o644),
		os.Symlink(secret, filepath.Join(ws, "IDENTITY.md")),
		syscall.Mkfifo(filepath.Join(ws, "USER.md"), 0o644),
		os.MkdirAll(filepath.Join(ws, "skills", "leak"), 0o755),
		os.Symlink(secret, filepath.Join(ws, "skills", "leak", "SKILL.md")),
		os.MkdirAll(filepath.Join(ws, "skills", "ok"), 0o755),
		os.WriteFile(filepath.Join(ws, "skills", "ok", "SKILL.md"), []byte("water the plants"), 0o644),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	reg := tools.NewRegistry(slog.New(slog.DiscardHandler))
	done := make(chan string, 1)
	go func() { done <- newPromptBuilder(ws).build(reg, bus.Inbound{Channel: "cli"}, "k") }()
	var got string
	select {
	case got = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("building the prompt blocked on the FIFO in USER.md's place")
	}
	if strings.Contains(got, "sk-leaked") || strings.Contains(got, "IDENTITY.md") || strings.Contains(got, "leak (") {
		t.Errorf("a file outside the workspace reached the prompt:\n%s", got)
	}
	if !strings.Contains(got, "Be brief.") || !strings.Contains(got, "ok (skills/ok/SKILL.md): water the plants") {
		t.Errorf("the workspace's own files are missing:\n%s", got)
	}
}
