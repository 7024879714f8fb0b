package agent

import (
	"fmt"
	"log/slog"
	"strings"
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
