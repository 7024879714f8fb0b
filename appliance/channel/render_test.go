package channel

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/channel/telegram/telegramtest"
)

func TestTelegramHTML(t *testing.T) {
	for _, tc := range []struct{ md, want string }{
		{"plain & simple <tag>", "plain &amp; simple &lt;tag&gt;"},
		{"**bold** and __bold__", "<b>bold</b> and <b>bold</b>"},
		{"*it* and _it_", "<i>it</i> and <i>it</i>"},
		{"snake_case_name stays", "snake_case_name stays"},
		{"2 * 3 * 4", "2 * 3 * 4"},
		{"~~gone~~", "<s>gone</s>"},
		{"use `a < b`", "use <code>a &lt; b</code>"},
		{"[docs](https://x.io/?a=1&b=2)", `<a href="https://x.io/?a=1&amp;b=2">docs</a>`},
		{"# Title", "<b>Title</b>"},
		{"- one\n- two", "• one\n• two"},
		{"> quoted\n> more", "<blockquote>quoted\nmore</blockquote>"},
		{"```go\nif a < b {}\n```", `<pre><code class="language-go">if a &lt; b {}</code></pre>`},
		{"```\nno lang\n```", "<pre>no lang</pre>"},
		{"**unclosed bold", "**unclosed bold"},
		{"**bold with `code`**", "<b>bold with <code>code</code></b>"},
		{"***both***", "<b><i>both</i></b>"},
		{"**bold *it***", "<b>bold <i>it</i></b>"},
		// Italic around bold: the bold's runs are not the italic's close.
		{"*it **bold** it*", "<i>it <b>bold</b> it</i>"},
		{"*it **bold***", "<i>it <b>bold</b></i>"},
		{"_it __bold__ it_", "<i>it <b>bold</b> it</i>"},
		{"***bold** it*", "<i><b>bold</b> it</i>"},
		// A run that begins after a space opens, even when its last star
		// touches a word.
		{"*it **unclosed it*", "<i>it **unclosed it</i>"},
		{"~~~python\nmy_var = __init__ * 2 * x_y\n~~~", `<pre><code class="language-python">my_var = __init__ * 2 * x_y</code></pre>`},
		{"~~~\n**not bold** ~~kept~~\n~~~", "<pre>**not bold** ~~kept~~</pre>"},
		// A fence closes only with its own character, at least as many.
		{"~~~\n```\n_x_\n~~~", "<pre>```\n_x_</pre>"},
		{"````md\n```\n_x_\n```\n````", `<pre><code class="language-md">` + "```\n_x_\n```" + `</code></pre>`},
		{"```\n_x_\n```go\n```", "<pre>_x_\n```go</pre>"},
	} {
		got := TelegramHTML(tc.md)
		if got != tc.want {
			t.Errorf("TelegramHTML(%q) = %q, want %q", tc.md, got, tc.want)
		}
		if _, err := telegramtest.CheckHTML(got); err != nil {
			t.Errorf("TelegramHTML(%q) = %q, which Telegram refuses: %v", tc.md, got, err)
		}
	}
}

func TestPlainText(t *testing.T) {
	for _, tc := range []struct{ md, want string }{
		{"**Done**: the `pump` ran", "Done: the pump ran"},
		{"[log](https://x.io)", "log (https://x.io)"},
		{"[https://x.io](https://x.io)", "https://x.io"},
		{"## Status\n- **pump**: on", "Status\n• pump: on"},
		{"```sh\nls -l\n```", "ls -l"},
		{"a < b & c", "a < b & c"},
		{"~~~\n**x**\n~~~", "**x**"},
		// Backticks in the info string make it inline code, not a fence.
		{"```a``` and _b_", "a and b"},
	} {
		if got := PlainText(tc.md); got != tc.want {
			t.Errorf("PlainText(%q) = %q, want %q", tc.md, got, tc.want)
		}
	}
}

func TestSlackMrkdwn(t *testing.T) {
	for _, tc := range []struct{ md, want string }{
		{"**bold** _it_ ~~s~~", "*bold* _it_ ~s~"},
		{"[docs](https://x.io)", "<https://x.io|docs>"},
		{"a < b & c", "a &lt; b &amp; c"},
	} {
		if got := SlackMrkdwn(tc.md); got != tc.want {
			t.Errorf("SlackMrkdwn(%q) = %q, want %q", tc.md, got, tc.want)
		}
	}
}

// Whatever the model writes, Telegram must accept the HTML: a refusal costs
// a round trip and the formatting.
func FuzzTelegramHTMLIsAlwaysValid(f *testing.F) {
	for _, s := range []string{"**a *b* c**", "`x` <y> &z;", "[a](b) ~~c~~", "```\n<>\n```", "_a **b_ c**", "> q\n# h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, md string) {
		out := TelegramHTML(md)
		if _, err := telegramtest.CheckHTML(out); err != nil {
			t.Fatalf("TelegramHTML(%q) = %q: %v", md, out, err)
		}
		if strings.Count(out, "<b>") != strings.Count(out, "</b>") {
			t.Fatalf("unbalanced bold in %q", out)
		}
	})
}

// TestInnerDoubleReadsEachRunOnce: the inner spans' closes, found in one
// pass over the content for all of a span's candidates, and a span's own
// close, found looking at each run once, are the ones a scan from each
// candidate and each character finds.
func TestInnerDoubleReadsEachRunOnce(t *testing.T) {
	// scan is the close a candidate's own scan finds: the first run of
	// two or three after a non-space, pairs taken left to right (a longer
	// run is text).
	scan := func(s string, j int, marker string) (int, bool) {
		if !doubleOpens(s, j, marker) {
			return 0, false
		}
		double, content := marker+marker, s[j+2:]
		for from := 0; ; {
			k := strings.Index(content[from:], double)
			if k < 0 {
				return -1, false
			}
			k += from
			if longRun(content, k) { // a run that is text
				from = runEnd(content, k)
				continue
			}
			if k > 0 && content[k-1] != ' ' {
				return j + 2 + k + 2, true
			}
			from = k + 2
		}
	}
	// closingByScan is closing as it read before: each candidate scanned
	// for itself, each character of a run looked at in turn.
	closingByScan := func(s, marker string) int {
		if s == "" || s[0] == ' ' {
			return -1
		}
		inner := len(marker) == 1
		for from := 0; ; {
			j := strings.Index(s[from:], marker)
			if j < 0 {
				return -1
			}
			j += from
			if longRun(s, j) {
				from = runEnd(s, j)
				continue
			}
			if inner {
				end, ok := scan(s, j, marker)
				if ok {
					from = end
					continue
				}
				inner = end >= 0
			}
			if run := runStart(s, j, marker, true); run > 0 && s[run-1] != ' ' {
				for j+len(marker) < len(s) && s[j+len(marker)] == marker[0] {
					j++
				}
				return j
			}
			from = j + len(marker)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "**** a_"
	for range 20000 {
		b := make([]byte, 1+rng.IntN(24))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		s := string(b)
		for _, marker := range []string{"*", "_", "**", "__"} {
			if got, want := closing(s, marker), closingByScan(s, marker); got != want {
				t.Fatalf("closing(%q, %q) = %d; scanning each candidate finds %d", s, marker, got, want)
			}
			if len(marker) != 1 {
				continue
			}
			var dc doubleCloses
			for j := 0; j < len(s); j++ {
				if s[j] != marker[0] {
					continue
				}
				wantEnd, wantOK := scan(s, j, marker)
				end, ok := innerDouble(s, j, marker, &dc)
				if ok != wantOK || (ok || wantEnd < 0) && end != wantEnd {
					t.Fatalf("innerDouble(%q, %d, %q) = %d, %v; a scan from there finds %d, %v", s, j, marker, end, ok, wantEnd, wantOK)
				}
			}
		}
	}
}

// TestLongParagraphsNest: a paragraph of a few kilobytes on one line (a
// model's long answer) reads italic around bold as a short one does.
func TestLongParagraphsNest(t *testing.T) {
	long := strings.Repeat("word ", 600) // 3,000 bytes
	got := TelegramHTML("*it **bold** it* " + long)
	if want := "<i>it <b>bold</b> it</i> "; !strings.HasPrefix(got, want) {
		t.Fatalf("a %d-byte line starts %q, want %q", len(long)+17, got[:40], want)
	}
}
