package agent

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

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
