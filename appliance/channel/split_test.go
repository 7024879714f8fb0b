package channel

import (
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// joinFields compares texts ignoring the whitespace a cut may drop.
func joinFields(s string) string { return strings.Join(strings.Fields(s), " ") }

// noSpace compares texts a cut may have split anywhere.
func noSpace(s string) string { return strings.Join(strings.Fields(s), "") }

func TestSplitKeepsShortTextWhole(t *testing.T) {
	if got := Split("hello\n\nworld", 100); len(got) != 1 || got[0] != "hello\n\nworld" {
		t.Errorf("Split = %q", got)
	}
	if got := Split("   \n\n  ", 10); len(got) != 0 {
		t.Errorf("blank text split into %q", got)
	}
}

func TestSplitPrefersParagraphThenLineThenWord(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		limit      int
		first      string
	}{
		{"paragraph", "aaaa aaaa aaaa\nbbbb bbbb\n\ncccc cccc", 30, "aaaa aaaa aaaa\nbbbb bbbb"},
		{"line", "aaaa aaaa aaaa\nbbbb bbbb cccc cccc", 25, "aaaa aaaa aaaa"},
		{"word", "aaaa bbbb cccc dddd eeee", 12, "aaaa bbbb"},
		{"anywhere", strings.Repeat("x", 25), 10, strings.Repeat("x", 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Split(tc.text, tc.limit)
			if got[0] != tc.first {
				t.Errorf("first part %q, want %q (all: %q)", got[0], tc.first, got)
			}
			for _, p := range got {
				if n := utf8.RuneCountInString(p); n > tc.limit {
					t.Errorf("part %q has %d runes > %d", p, n, tc.limit)
				}
			}
			if noSpace(strings.Join(got, "")) != noSpace(tc.text) {
				t.Errorf("parts %q do not add up to %q", got, tc.text)
			}
		})
	}
}

func TestSplitAvoidsCuttingACodeBlock(t *testing.T) {
	code := "```go\n" + strings.Repeat("fmt.Println(1)\n", 5) + "```"
	text := "Intro line one.\nIntro line two.\n\n" + code + "\n\nAfter."
	got := Split(text, len(code)+5)
	var inBlock []string
	for _, p := range got {
		if strings.Contains(p, "```") {
			inBlock = append(inBlock, p)
		}
	}
	if len(inBlock) != 1 || !strings.Contains(inBlock[0], code) {
		t.Errorf("the code block was cut although it fits in one part: %q", got)
	}
}

func TestSplitClosesAndReopensAnOverlongCodeBlock(t *testing.T) {
	code := "```python\n" + strings.Repeat("print('plants watered')\n", 30) + "```"
	got := Split(code, 200)
	if len(got) < 3 {
		t.Fatalf("got %d parts", len(got))
	}
	for i, p := range got {
		if utf8.RuneCountInString(p) > 200 {
			t.Errorf("part %d has %d runes", i, utf8.RuneCountInString(p))
		}
		if !strings.HasPrefix(p, "```python\n") || !strings.HasSuffix(p, "```") {
			t.Errorf("part %d does not render as a code block on its own: %q", i, p)
		}
	}
	var body []string
	for _, p := range got {
		p = strings.TrimSuffix(strings.TrimPrefix(p, "```python\n"), "```")
		body = append(body, p)
	}
	if joinFields(strings.Join(body, "\n")) != joinFields(strings.Repeat("print('plants watered')\n", 30)) {
		t.Error("the code lines do not add up")
	}
}

func TestSplitMeasuresAsThePlatformCounts(t *testing.T) {
	utf16Len := func(s string) int { return len(utf16.Encode([]rune(s))) }
	text := strings.Repeat("🌱 ", 100) // 3 UTF-16 units per "🌱 "
	got := splitMeasured(text, 30, utf16Len, true)
	for _, p := range got {
		if n := utf16Len(p); n > 30 {
			t.Errorf("part of %d UTF-16 units > 30", n)
		}
	}
	if joinFields(strings.Join(got, " ")) != joinFields(text) {
		t.Error("parts do not add up")
	}
}

func TestSplitNeverLoopsOnATinyLimit(t *testing.T) {
	got := Split("héllo wörld", 1)
	if strings.Join(got, "") != "héllowörld" {
		t.Errorf("Split(…, 1) = %q", got)
	}
}

func FuzzSplitKeepsEverythingInOrder(f *testing.F) {
	f.Add("a b c\n\n```\ncode\n```\nend", 7)
	f.Add(strings.Repeat("word ", 50), 13)
	f.Add("```\n"+strings.Repeat("x", 40)+"\n```", 9)
	// A reopened code span beside the text's own backticks made a fence.
	f.Add("000`000 ``", 9)
	f.Fuzz(func(t *testing.T, text string, limit int) {
		if limit < 8 || limit > 500 || !utf8.ValidString(text) {
			return
		}
		parts := Split(text, limit)
		var rest []string
		for _, p := range parts {
			if n := utf8.RuneCountInString(p); n > limit {
				t.Fatalf("part of %d runes > %d: %q", n, limit, p)
			}
			rest = append(rest, strings.ReplaceAll(p, "```", ""))
		}
		// Fences may be added (closed and reopened) and whitespace dropped
		// at cuts; the words stay, in order.
		got := strings.Join(strings.Fields(strings.Join(rest, " ")), "")
		want := strings.Join(strings.Fields(strings.ReplaceAll(text, "```", "")), "")
		// Reopened fences carry their language word again: the original
		// must be a subsequence of what was sent.
		if !subsequence(want, got) {
			t.Fatalf("text lost or reordered: got %q, want %q", got, want)
		}
	})
}

func subsequence(want, got string) bool {
	i := 0
	for j := 0; i < len(want) && j < len(got); j++ {
		if want[i] == got[j] {
			i++
		}
	}
	return i == len(want)
}

// A split treats a ~~~ block, and one whose fence is longer than three,
// as it treats a ``` block: a fence inside that does not close the block
// is code, not a place where the block ends.
func TestSplitClosesAndReopensEveryKindOfFence(t *testing.T) {
	line := "print('plants_watered * 2')\n"
	for _, tc := range []struct{ open, inner, close string }{
		{"```python", "", "```"},
		{"~~~python", "```\n", "~~~"},
		{"````python", "```\n", "````"},
		{"~~~~", "~~~\n", "~~~~"},
	} {
		t.Run(tc.open, func(t *testing.T) {
			body := strings.Repeat(line, 6) + tc.inner + strings.Repeat(line, 6)
			got := Split(tc.open+"\n"+body+tc.close, 100)
			if len(got) < 3 {
				t.Fatalf("got %d parts", len(got))
			}
			var joined []string
			for i, p := range got {
				if utf8.RuneCountInString(p) > 100 {
					t.Errorf("part %d has %d runes", i, utf8.RuneCountInString(p))
				}
				if !strings.HasPrefix(p, tc.open+"\n") || !strings.HasSuffix(p, "\n"+tc.close) {
					t.Errorf("part %d does not render as a code block on its own: %q", i, p)
				}
				joined = append(joined, strings.TrimSuffix(strings.TrimPrefix(p, tc.open+"\n"), tc.close))
			}
			if joinFields(strings.Join(joined, "\n")) != joinFields(body) {
				t.Errorf("the code lines do not add up: %q", got)
			}
		})
	}
}

func TestSplitAvoidsCuttingATildeBlock(t *testing.T) {
	code := "~~~go\n" + strings.Repeat("fmt.Println(1)\n", 5) + "~~~"
	text := "Intro line one.\nIntro line two.\n\n" + code + "\n\nAfter."
	got := Split(text, len(code)+5)
	if len(got) != 3 || got[1] != code {
		t.Errorf("the code block was cut although it fits in one part: %q", got)
	}
}

// A cut between the pieces of what a reader sees as one character leaves
// broken glyphs on both sides: every part must hold whole units only.
func TestSplitKeepsEmojiSequencesWhole(t *testing.T) {
	utf16Len := func(s string) int { return len(utf16.Encode([]rune(s))) }
	for _, unit := range []string{
		"👩\u200d👩\u200d👧\u200d👦", // family: ZWJ sequence
		"🏳\ufe0f\u200d🌈",         // rainbow flag: variation selector and ZWJ
		"👍🏽",                     // skin-tone modifier
		"❤\ufe0f",                // variation selector
		"1\ufe0f\u20e3",          // keycap: enclosing mark
		"e\u0301",                // combining accent
		"\u0915\u093f",           // Devanagari "ki": a spacing vowel sign (Mc)
		"🇩🇪",                     // regional-indicator pair
	} {
		for _, prefix := range []string{"", "x", "🇫🇷"} {
			text := prefix + strings.Repeat(unit, 9)
			for _, m := range []struct {
				name    string
				measure func(string) int
			}{{"runes", utf8.RuneCountInString}, {"utf16", utf16Len}} {
				for limit := max(m.measure(unit), m.measure(prefix)) + 1; limit < 4*m.measure(unit); limit++ {
					parts := splitMeasured(text, limit, m.measure, true)
					if strings.Join(parts, "") != text {
						t.Fatalf("%q in %s %d: parts %q do not add up", text, m.name, limit, parts)
					}
					for i, p := range parts {
						if i == 0 {
							p = strings.TrimPrefix(p, prefix)
						}
						if strings.ReplaceAll(p, unit, "") != "" {
							t.Errorf("%q in %s %d: part %d is %q, a %q cut apart", text, m.name, limit, i, parts[i], unit)
							break
						}
					}
				}
			}
		}
	}
}

// A span a cut falls inside is closed at the end of the part and reopened
// at the start of the next, so each part shows it formatted, not its
// markers as text.
func TestSplitClosesAndReopensASpanItCuts(t *testing.T) {
	words := func(w string, n int) string { return strings.TrimSpace(strings.Repeat(w+" ", n)) }
	for _, tc := range []struct{ name, md, tag string }{
		{"bold", "Done. **" + words("watered the basil", 8) + "** after", "<b>"},
		{"underscore bold", "Done. __" + words("watered the basil", 8) + "__ after", "<b>"},
		{"italic", "Done. *" + words("watered the basil", 8) + "* after", "<i>"},
		{"underscore italic", "Done. _" + words("watered the basil", 8) + "_ after", "<i>"},
		{"strike", "Done. ~~" + words("watered the basil", 8) + "~~ after", "<s>"},
		{"code", "Done. `" + words("watered the basil", 8) + "` after", "<code>"},
		{"nested", "**Done " + words("watered", 6) + " _" + words("the basil", 8) + "_ " + words("moved", 6) + "**", "<b>"},
		{"star in bold", "**Done " + words("watered", 6) + " *" + words("the basil", 8) + "* " + words("moved", 6) + "**", "<b>"},
		{"bold in italic", "*Done " + words("watered", 6) + " **" + words("the basil", 8) + "** " + words("moved", 6) + "*", "<i>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := Split(tc.md, 40)
			if len(parts) < 3 {
				t.Fatalf("got %d parts: %q", len(parts), parts)
			}
			var shown []string
			for i, p := range parts {
				if n := utf8.RuneCountInString(p); n > 40 {
					t.Errorf("part %d has %d runes > 40: %q", i, n, p)
				}
				html := TelegramHTML(p)
				if strings.ContainsAny(html, "*_~`") {
					t.Errorf("part %d shows its markers: %q as %q", i, p, html)
				}
				if i < len(parts)-1 && !strings.Contains(html, tc.tag) {
					t.Errorf("part %d is not formatted: %q as %q", i, p, html)
				}
				shown = append(shown, PlainText(p))
			}
			if joinFields(strings.Join(shown, " ")) != joinFields(PlainText(tc.md)) {
				t.Errorf("the words do not add up: %q", shown)
			}
		})
	}
}

// Plain text (LINE's, and the fallback's) has no spans: its stars are
// text, and a cut adds none.
func TestPrepareAddsNoMarkersToPlainText(t *testing.T) {
	text := "a*" + strings.Repeat("b ", 40) + "c*d"
	var got []string
	for _, p := range Prepare(text, Format{Limit: 30}) {
		got = append(got, p.Text)
	}
	if noSpace(strings.Join(got, "")) != noSpace(text) {
		t.Errorf("Prepare(%q) = %q", text, got)
	}
}

func TestPrepareKeepsACutBoldSpanBoldOnTelegram(t *testing.T) {
	utf16Len := func(s string) int { return len(utf16.Encode([]rune(s))) }
	md := "The log says: **" + strings.Repeat("pump_2 ran for 10 s, ", 12) + "all fine**."
	parts := Prepare(md, Format{Limit: 80, Measure: utf16Len, Render: TelegramHTML})
	if len(parts) < 3 {
		t.Fatalf("got %d parts", len(parts))
	}
	for i, p := range parts {
		if strings.Contains(p.Text, "*") || !strings.Contains(p.Text, "<b>") || !strings.Contains(p.Text, "</b>") {
			t.Errorf("part %d is not bold on its own: %q", i, p.Text)
		}
		if strings.Contains(p.Plain, "*") {
			t.Errorf("part %d's plain text shows the markers: %q", i, p.Plain)
		}
	}
}

// A cut that falls inside a link moves before it: the halves of a link
// show its brackets and half its address as text, and neither opens. A
// link inside a bold span keeps both: the cut before the link closes the
// span, and the next part reopens it.
func TestSplitKeepsLinksWhole(t *testing.T) {
	filler := strings.Repeat("the pump ran fine ", 3)
	for _, tc := range []struct{ name, md string }{
		{"plain", filler + "see [the pump's manual page](https://example.com/pumps/manual) for more"},
		{"in bold", "**" + filler + "see [the pump's manual page](https://example.com/pumps/manual) for more**"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := Split(tc.md, 70)
			whole := 0
			for i, p := range parts {
				if n := utf8.RuneCountInString(p); n > 70 {
					t.Errorf("part %d has %d runes > 70: %q", i, n, p)
				}
				if strings.Contains(p, "[the pump's manual page](https://example.com/pumps/manual)") {
					whole++
				}
				html := TelegramHTML(p)
				if strings.ContainsAny(html, "[]*") {
					t.Errorf("part %d shows markdown as text: %q as %q", i, p, html)
				}
			}
			if whole != 1 {
				t.Errorf("the link is not whole in one part: %q", parts)
			}
			if joinFields(PlainText(strings.Join(parts, " "))) != joinFields(PlainText(tc.md)) {
				t.Errorf("the words do not add up: %q", parts)
			}
		})
	}
	// A link longer than a part cannot go whole: it is cut as before, and
	// the split still ends.
	long := "[" + strings.Repeat("word ", 30) + "](https://example.com/x)"
	if parts := Split(long, 40); len(parts) < 2 || noSpace(strings.Join(parts, "")) != noSpace(long) {
		t.Errorf("an overlong link: %q", parts)
	}
}
