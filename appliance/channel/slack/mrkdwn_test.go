package slack

import "testing"

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
		{"[a|b](https://x.io)", "<https://x.io|a¦b>"},
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
	} {
		if got := plainText(c.md); got != c.want {
			t.Errorf("plainText(%q)\n got %q\nwant %q", c.md, got, c.want)
		}
	}
}
