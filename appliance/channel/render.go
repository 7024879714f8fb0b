package channel

import (
	"html"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The agent answers in Markdown. Each platform shows a dialect of its own
// (or none), so a reply is rendered per platform: what the platform cannot
// show becomes readable plain text rather than stray asterisks.
//
// The renderer knows the Markdown models actually write: fenced code
// blocks, headings, quotes, bullet lists, inline code, bold, italic,
// strikethrough and links. Anything else passes through as text.

// style is one output dialect.
type style interface {
	text(s string) string // escape literal text
	bold(inner string) string
	italic(inner string) string
	strike(inner string) string
	code(s string) string
	pre(lang, s string) string
	link(label, url string) string
	heading(inner string) string
	quote(lines []string) string
	bullet() string
}

// TelegramHTML renders Markdown as Telegram's HTML parse mode: only the
// tags Telegram knows, every other <, > and & escaped.
func TelegramHTML(md string) string { return render(md, telegramStyle{}) }

// SlackMrkdwn renders Markdown as Slack's mrkdwn.
func SlackMrkdwn(md string) string { return render(md, slackStyle{}) }

// DiscordMarkdown renders Markdown for Discord, which shows most of it as
// is; only what Discord lacks is rewritten (links keep their text and URL).
func DiscordMarkdown(md string) string { return md }

// PlainText renders Markdown as plain text (LINE, and every platform's
// fallback when it refuses the markup): markers removed, code kept, links
// as "text (url)", bullets as "•".
func PlainText(md string) string { return render(md, plainStyle{}) }

func render(md string, st style) string {
	var out []string
	lines := strings.Split(strings.ReplaceAll(md, "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trim := strings.TrimLeft(line, " ")
		switch {
		case isFence(trim):
			marker, lang, _ := Fence(trim)
			var body []string
			j := i + 1
			for ; j < len(lines); j++ {
				if closesFence(marker, lines[j]) {
					break
				}
				body = append(body, lines[j])
			}
			out = append(out, st.pre(lang, strings.Join(body, "\n")))
			i = j // the closing fence (or the end)
		case headingLevel(trim) > 0:
			n := headingLevel(trim)
			out = append(out, st.heading(inline(strings.TrimSpace(trim[n:]), st)))
		case strings.HasPrefix(trim, ">"):
			var q []string
			j := i
			for ; j < len(lines) && strings.HasPrefix(strings.TrimLeft(lines[j], " "), ">"); j++ {
				t := strings.TrimPrefix(strings.TrimLeft(lines[j], " "), ">")
				q = append(q, inline(strings.TrimPrefix(t, " "), st))
			}
			out = append(out, st.quote(q))
			i = j - 1
		case isBullet(trim):
			indent := line[:len(line)-len(trim)]
			out = append(out, indent+st.bullet()+inline(trim[2:], st))
		default:
			out = append(out, inline(line, st))
		}
	}
	return strings.Join(out, "\n")
}

func isFence(line string) bool {
	_, _, ok := Fence(line)
	return ok
}

func headingLevel(s string) int {
	n := 0
	for n < len(s) && n < 6 && s[n] == '#' {
		n++
	}
	if n == 0 || n >= len(s) || s[n] != ' ' {
		return 0
	}
	return n
}

func isBullet(s string) bool {
	return len(s) > 2 && (s[0] == '-' || s[0] == '*' || s[0] == '+') && s[1] == ' '
}

// inline renders the spans of one line.
func inline(s string, st style) string {
	var sb strings.Builder
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			sb.WriteString(st.text(lit.String()))
			lit.Reset()
		}
	}
	for i := 0; i < len(s); {
		if sp, ok := spanAt(s, i); ok {
			flush()
			switch sp.marker {
			case "`":
				sb.WriteString(st.code(sp.inner))
			case "**", "__":
				sb.WriteString(st.bold(inline(sp.inner, st)))
			case "~~":
				sb.WriteString(st.strike(inline(sp.inner, st)))
			case "*", "_":
				sb.WriteString(st.italic(inline(sp.inner, st)))
			case "[":
				sb.WriteString(st.link(inline(sp.inner, st), sp.url))
			}
			i += sp.n
			continue
		}
		if longRun(s, i) {
			end := runEnd(s, i)
			lit.WriteString(s[i:end])
			i = end
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		lit.WriteRune(r)
		i += size
	}
	flush()
	return sb.String()
}

// span is an inline element: code, bold, strikethrough or italic by its
// marker, or a link ("[").
type span struct {
	marker string
	inner  string // the content between the markers, or a link's label
	url    string
	n      int // bytes from the opening marker to past the closing one
}

// spanAt returns the span that starts at byte i of line s, if one does.
// The splitter reads spans with it too, so it closes the spans a cut
// falls inside exactly as the renderer sees them.
func spanAt(s string, i int) (span, bool) {
	rest := s[i:]
	if longRun(s, i) {
		return span{}, false
	}
	switch {
	case rest[0] == '`':
		if j := strings.IndexByte(rest[1:], '`'); j >= 0 {
			return span{marker: "`", inner: rest[1 : 1+j], n: j + 2}, true
		}
	case strings.HasPrefix(rest, "**") || strings.HasPrefix(rest, "__") || strings.HasPrefix(rest, "~~"):
		if j := closing(rest[2:], rest[:2]); j > 0 {
			sp := span{marker: rest[:2], inner: rest[2 : 2+j], n: j + 4}
			// "***a** b*" is italic around bold, as a split that cut
			// inside both reopens them: the reading that spans more of
			// the text wins, bold outside when both span the same.
			if rest[0] != '~' && len(rest) > 2 && rest[2] == rest[0] {
				if k := closing(rest[1:], rest[:1]); k > 0 && k+2 > sp.n {
					return span{marker: rest[:1], inner: rest[1 : 1+k], n: k + 2}, true
				}
			}
			return sp, true
		}
	case rest[0] == '*' || rest[0] == '_':
		// Italic only when it looks like emphasis: not snake_case,
		// not a lone "2 * 3".
		prevOK := i == 0 || !isWordByte(s[i-1])
		if prevOK || rest[0] == '*' {
			if j := closing(rest[1:], rest[:1]); j > 0 {
				after := 1 + j + 1
				if rest[0] == '*' || after >= len(rest) || !isWordByte(rest[after]) {
					return span{marker: rest[:1], inner: rest[1 : 1+j], n: after}, true
				}
			}
		}
	case rest[0] == '[':
		if j := strings.Index(rest, "]("); j > 0 {
			if k := strings.IndexByte(rest[j+2:], ')'); k > 0 {
				return span{marker: "[", inner: rest[1:j], url: rest[j+2 : j+2+k], n: j + 2 + k + 1}, true
			}
		}
	}
	return span{}, false
}

// closing finds the closing marker of a span whose content starts s: the
// content must not start or end with a space.
func closing(s, marker string) int {
	if s == "" || s[0] == ' ' {
		return -1
	}
	// Once no inner span closes after some point, none that opens later
	// can, and the inner spans' closes are looked for in one pass over s
	// (doubleCloses): a line costs a scan per opener, as without nesting.
	// That is still a scan of the line per run in a line of unclosed
	// runs, so a line longer than any paragraph is read as before: each
	// run closes at its first character after a non-space.
	nested := len(s) <= maxNestedScan
	inner := nested && len(marker) == 1
	var dc doubleCloses
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
		// A lone marker cannot open an inner span: tested here, before
		// the call, it keeps a line of them as cheap as without nesting.
		if inner && j+1 < len(s) && s[j+1] == marker[0] {
			end, ok := innerDouble(s, j, marker, &dc)
			if ok {
				// "*a **b** c*": the run of two opens a bold span inside
				// the italic one, and its closing run is not the
				// italic's close.
				from = end
				continue
			}
			inner = end >= 0
		}
		if run := runStart(s, j, marker, nested); run > 0 && s[run-1] != ' ' {
			// In a longer run the span's marker is the last characters:
			// the first close an inner span ("**a *b***"), as a split
			// that closes both writes them.
			for j+len(marker) < len(s) && s[j+len(marker)] == marker[0] {
				j++
			}
			return j
		}
		from = j + len(marker)
		if nested && len(marker) == 1 {
			// The rest of the run begins where this did, after a space:
			// none of it closes, and none opens an inner span.
			for from < len(s) && s[from] == marker[0] {
				from++
			}
		}
	}
}

// maxNestedScan bounds the rest of a line that a span's close is looked
// for in with nested spans told apart (innerDouble, runStart): a
// paragraph of 700 words fits, and a longer line of unclosed runs costs
// 20 ms to render at this length on a desktop core.
const maxNestedScan = 4096

// runStart is where the run of marker characters holding j begins: a run
// that begins after a space opens spans ("*a **b c*"), whatever its last
// characters touch.
func runStart(s string, j int, marker string, nested bool) int {
	if len(marker) != 1 || !nested {
		return j
	}
	for j > 0 && s[j-1] == marker[0] {
		j--
	}
	return j
}

// innerDouble reports whether a single-character marker found at j of a
// span's content s begins a span of the doubled marker ("**", "__") that
// opens there (after a space, or at the content's start, and before a
// non-space), and returns where that inner span ends. Its close is the
// first closing run of two: in "*a **b***" the bold closes with the first
// two stars and the italic with the third. The end is -1 when such a span
// opens but nothing after it closes one. dc carries what earlier calls for
// the same s found, as closing asks for increasing j.
func innerDouble(s string, j int, marker string, dc *doubleCloses) (int, bool) {
	if !doubleOpens(s, j, marker) {
		return 0, false
	}
	end := dc.after(s, j+2, marker[0])
	return end, end >= 0
}

// doubleOpens reports whether the doubled marker at j of s opens a span:
// after a space or at the start, before a character that is neither a
// space nor the marker.
func doubleOpens(s string, j int, marker string) bool {
	m := marker[0]
	if j+1 >= len(s) || s[j] != m || s[j+1] != m || (j > 0 && s[j-1] != ' ') {
		return false
	}
	content := s[j+2:]
	return content != "" && content[0] != ' ' && content[0] != m
}

// doubleCloses finds, for content that begins at from in s (on a
// character other than the marker), the end of the first pair of marker
// characters that closes a doubled span: the first two of a run that
// follows a non-space, or the third and fourth of a longer run that
// follows a space (the first pair there opens, the next closes). It
// remembers the run it found: a later content start before that run has
// the same answer, so the runs of s are read once however often it is
// asked.
type doubleCloses struct {
	searched bool
	upTo     int // answers hold for content starting before this
	end      int // the close's end, or -1
}

func (dc *doubleCloses) after(s string, from int, m byte) int {
	if dc.searched && (dc.end < 0 || from < dc.upTo) {
		return dc.end
	}
	dc.searched = true
	for p := from; ; {
		k := strings.IndexByte(s[p:], m)
		if k < 0 {
			dc.upTo, dc.end = len(s), -1
			return -1
		}
		r := p + k
		q := r
		for q < len(s) && s[q] == m {
			q++
		}
		switch n := q - r; {
		case n >= minTextRun:
			// Text: it neither opens nor closes.
		case n >= 2 && s[r-1] != ' ':
			dc.upTo, dc.end = r, r+2
			return r + 2
		}
		p = q
	}
}

// minTextRun is the shortest run of * or _ that is text, not markers: a
// line of them (a rule, a form's blank, a masked password) read as spans
// nested thousands deep, and a split closing and reopening them all at
// every cut sent 5,000 stars as 112 Telegram messages (1,335 on Discord),
// with seconds of work per answer; 16 KB of them did not finish. Markdown
// itself has no span three markers deep.
const minTextRun = 4

// longRun reports whether byte i of s is in a run of at least minTextRun
// stars or underscores. It looks no further than that either side, so a
// scan that asks at every byte of a long run stays linear.
func longRun(s string, i int) bool {
	c := s[i]
	if c != '*' && c != '_' {
		return false
	}
	n := 1
	for k := i - 1; k >= 0 && s[k] == c && n < minTextRun; k-- {
		n++
	}
	for k := i + 1; k < len(s) && s[k] == c && n < minTextRun; k++ {
		n++
	}
	return n >= minTextRun
}

// runEnd is where the run of s[i]'s character that holds i ends.
func runEnd(s string, i int) int {
	c := s[i]
	for i < len(s) && s[i] == c {
		i++
	}
	return i
}

func isWordByte(b byte) bool {
	r := rune(b)
	return b >= utf8.RuneSelf || unicode.IsLetter(r) || unicode.IsDigit(r)
}

type telegramStyle struct{}

func (telegramStyle) text(s string) string    { return escapeHTML(s) }
func (telegramStyle) bold(s string) string    { return "<b>" + s + "</b>" }
func (telegramStyle) italic(s string) string  { return "<i>" + s + "</i>" }
func (telegramStyle) strike(s string) string  { return "<s>" + s + "</s>" }
func (telegramStyle) code(s string) string    { return "<code>" + escapeHTML(s) + "</code>" }
func (telegramStyle) heading(s string) string { return "<b>" + s + "</b>" }
func (telegramStyle) bullet() string          { return "• " }
func (telegramStyle) quote(l []string) string {
	return "<blockquote>" + strings.Join(l, "\n") + "</blockquote>"
}
func (telegramStyle) link(label, u string) string {
	return `<a href="` + html.EscapeString(u) + `">` + label + "</a>"
}
func (telegramStyle) pre(lang, s string) string {
	if lang != "" && isLangName(lang) {
		return `<pre><code class="language-` + lang + `">` + escapeHTML(s) + "</code></pre>"
	}
	return "<pre>" + escapeHTML(s) + "</pre>"
}

// escapeHTML escapes the three characters Telegram's HTML mode requires
// (quotes may stay as they are in text).
func escapeHTML(s string) string {
	if !strings.ContainsAny(s, "<>&") {
		return s
	}
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func isLangName(s string) bool {
	for _, r := range s {
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '+' || r == '-' || r == '#' || r == '_') {
			return false
		}
	}
	return true
}

type slackStyle struct{}

func (slackStyle) text(s string) string    { return escapeSlack(s) }
func (slackStyle) bold(s string) string    { return "*" + s + "*" }
func (slackStyle) italic(s string) string  { return "_" + s + "_" }
func (slackStyle) strike(s string) string  { return "~" + s + "~" }
func (slackStyle) code(s string) string    { return "`" + escapeSlack(s) + "`" }
func (slackStyle) heading(s string) string { return "*" + s + "*" }
func (slackStyle) bullet() string          { return "• " }
func (slackStyle) quote(l []string) string { return "> " + strings.Join(l, "\n> ") }
func (slackStyle) link(label, u string) string {
	return "<" + escapeSlack(u) + "|" + label + ">"
}
func (slackStyle) pre(_, s string) string { return "```\n" + escapeSlack(s) + "\n```" }

// escapeSlack escapes what Slack's mrkdwn treats as control characters.
func escapeSlack(s string) string {
	if !strings.ContainsAny(s, "<>&") {
		return s
	}
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

type plainStyle struct{}

func (plainStyle) text(s string) string    { return s }
func (plainStyle) bold(s string) string    { return s }
func (plainStyle) italic(s string) string  { return s }
func (plainStyle) strike(s string) string  { return s }
func (plainStyle) code(s string) string    { return s }
func (plainStyle) heading(s string) string { return s }
func (plainStyle) bullet() string          { return "• " }
func (plainStyle) quote(l []string) string { return "“" + strings.Join(l, "\n") + "”" }
func (plainStyle) pre(_, s string) string  { return s }
func (plainStyle) link(label, u string) string {
	if label == u || u == "" {
		return u
	}
	return label + " (" + u + ")"
}
