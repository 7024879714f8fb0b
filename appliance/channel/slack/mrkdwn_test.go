package slack

import (
	"strings"
	"testing"
)

func TestMrkdwn(t *testing.T) {
	for _, c := range []struct{ md, want string }{
		{"plain words", "plain words"},
		{"**bold** and __bold__", "*bold* and *bold*"},
		{"*italic* and _italic_", "_italic_ and _italic_"},
		{"*a* *b*", "_a_ _b_"},
		{"~~gone~~", "~gone~"},
		{"2 * 3 * 4 = 24", "2 * 3 * 4 = 24"},
		{"snake_case_name stays", "snake_case_name stays"},
		{"a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"},
		{"see [the docs](https://example.com/a_b*c?x=1&y=2)", "see <https://example.com/a_b*c?x=1&amp;y=2|the docs>"},
		{"[https://x.io](https://x.io)", "<https://x.io>"},
		{"![chart](https://x.io/c.png)", "<https://x.io/c.png|chart>"},
		{"<https://x.io/a_b_>", "<https://x.io/a_b_>"},
		{"`**not bold** <x>`", "`**not bold** &lt;x&gt;`"},
		{"# Title", "*Title*"},
		{"### Sub *part* ###", "*Sub _part_*"},
		{"- one\n* two\n  + nested", "• one\n• two\n  • nested"},
		{"> quoted **text**", "> quoted *text*"},
		{"---", "──────────"},
		{"```go\nif a < b && *p {\n**x**\n```\nafter **b**", "```\nif a &lt; b &amp;&amp; *p {\n**x**\n```\nafter *b*"},
		{"1. first\n2. second", "1. first\n2. second"},
		// A fence closes only with its own character, at least as many.
		{"````\n```go\n**x**\n```\n````\n**b**", "```\n```go\n**x**\n```\n```\n*b*"},
		{"~~~\n**x**\n```\n~~~\n**b**", "```\n**x**\n```\n```\n*b*"},
		{"[a|b](https://x.io)", "<https://x.io|a¦b>"},
		// A | in a URL would end it and start the label Slack shows.
		{"[a link](https://example.com/a|b>c)", "<https://example.com/a%7Cb&gt;c|a link>"},
		// An autolink with a label is text, not a link hiding its target.
		{"<https://evil.example|click>", "&lt;https://evil.example|click&gt;"},
		// Slack nests no markup in a link's label: its code and emphasis
		// are shown as their text.
		{"Run [`perch status`](https://example.com/docs) to see it.", "Run <https://example.com/docs|perch status> to see it."},
		{"[**bold** link](https://x.io)", "<https://x.io|bold link>"},
		{"[![build](https://ci.io/b.svg)](https://ci.io/x_y)", "<https://ci.io/x_y|build>"},
		{"see [Foo](https://en.wikipedia.org/wiki/Foo_(bar)) ok", "see <https://en.wikipedia.org/wiki/Foo_(bar)|Foo> ok"},
		{"![p](https://x.io/a_(b).png) (c)", "<https://x.io/a_(b).png|p> (c)"},
		{"<https://x.io/?a=1&b=2>", "<https://x.io/?a=1&amp;b=2>"},
		{"a\x00 0\x00 b `c` \x000\x00 \x01x\x01", "a 0 b `c` 0 x"},
	} {
		if got := mrkdwn(c.md); got != c.want {
			t.Errorf("mrkdwn(%q)\n got %q\nwant %q", c.md, got, c.want)
		}
	}
}

func TestPlainText(t *testing.T) {
	for _, c := range []struct{ md, want string }{
		{"**bold** *it* ~~s~~ `code`", "bold it s code"},
		{"[docs](https://x.io) and [https://y.io](https://y.io)", "docs (https://x.io) and https://y.io"},
		{"# Title\n- item", "Title\n• item"},
		{"a < b", "a &lt; b"},
		{"```\n**kept**\n```", "```\n**kept**\n```"},
		{"[`a`](https://x.io/a_b_) _it_", "a (https://x.io/a_b_) it"},
		{"<https://x.io/?a=1&b=2>", "https://x.io/?a=1&amp;b=2"},
	} {
		if got := plainText(c.md); got != c.want {
			t.Errorf("plainText(%q)\n got %q\nwant %q", c.md, got, c.want)
		}
	}
}

// FuzzRenderingLeaksNoMarker: whatever the model writes, the text sent
// holds none of the renderers' marker bytes (a placeholder left in showed
// as "\x000\x00" where a link's label should be).
func FuzzRenderingLeaksNoMarker(f *testing.F) {
	for _, s := range []string{
		"Run [`perch status`](https://example.com/docs) to see it.",
		"[**bold** `x` _y_](https://x.io/(a)) ![`i`](https://x.io/i.png)",
		"[![b](https://x.io/b.svg)](https://x.io) <https://x.io/?a=1&b=2>",
		"\x000\x00 `a` \x001\x00 \x01 **b**",
		"```\n\x00\x01\n```",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, md string) {
		for name, render := range map[string]func(string) string{"mrkdwn": mrkdwn, "plainText": plainText} {
			if got := render(md); strings.ContainsAny(got, "\x00\x01") {
				t.Errorf("%s(%q) = %q holds a marker byte", name, md, got)
			}
		}
	})
}
