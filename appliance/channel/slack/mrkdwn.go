package slack

import (
	"cmp"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/perchhq/perch/appliance/channel"
)

// Slack does not render Markdown in a message's text: it has its own
// "mrkdwn" (*bold*, _italic_, ~strike~, <url|label> links, no headings), and
// it reads &, < and > as markup, so those must be escaped everywhere. A
// model writes Markdown; mrkdwn translates it.

// The expressions compile on first use: every start would otherwise pay
// for them, on boards that never talk to Slack.
var (
	// A link's URL may hold one level of balanced parentheses, as
	// Wikipedia's do (/wiki/Foo_(bar)).
	reImage = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`!\[([^\]\n]*)\]\(` + linkURL + `\)`) })
	reLink  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\[([^\]\n]+)\]\(` + linkURL + `\)`) })
	// The text is escaped by then, so a URL's & reads &amp;. A | ends
	// Slack's URL and starts its label: <https://evil.example|click> is
	// left as the text it is, not made a link that hides its target.
	reAutolink  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`&lt;((?:https?|mailto):(?:[^\s&|]|&amp;)+)&gt;`) })
	reBoldStar  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\*\*([^*\n]+?)\*\*`) })
	reBoldUnder = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(^|[^\w])__([^_\n]+?)__([^\w]|$)`) })
	reItalic    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(^|[^\w*])\*([^*\s](?:[^*\n]*[^*\s])?)\*([^\w*]|$)`) })
	reUnderIt   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(^|[^\w_])_([^_\s](?:[^_\n]*[^_\s])?)_([^\w_]|$)`) })
	reStrike    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`~~([^~\n]+?)~~`) })
	reHeading   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`) })
	reBullet    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(\s*)[-*+]\s+(.*)$`) })
	reRule      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^ {0,3}([-*_])(\s*[-*_]){2,}\s*$`) })
	reQuote     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^ {0,3}>\s?(.*)$`) })
)

const linkURL = `((?:[^()\s]|\([^()\s]*\))+)`

// escape makes text literal in Slack.
func escape(s string) string {
	if !strings.ContainsAny(s, "&<>") {
		return s
	}
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// mrkdwn renders Markdown as Slack mrkdwn.
func mrkdwn(md string) string {
	return renderLines(unmark(md), inlineMrkdwn, func(level int, text string) string {
		return "*" + text + "*"
	})
}

// plainText renders Markdown as text Slack shows as is (sent with
// mrkdwn=false): markers dropped, links written out, &<> escaped.
func plainText(md string) string {
	return renderLines(unmark(md), inlinePlain, func(_ int, text string) string { return text })
}

// unmark drops the bytes the renderers use as markers (placeholders,
// bold): a model's text has no business holding them, and one left in
// would be read as a marker.
func unmark(s string) string {
	if !strings.ContainsAny(s, "\x00\x01") {
		return s
	}
	return strings.NewReplacer("\x00", "", "\x01", "").Replace(s)
}

// renderLines walks md line by line: fenced code is kept (only escaped),
// headings, bullets, quotes and rules are rewritten, the rest goes through
// inline.
func renderLines(md string, inline func(string) string, heading func(level int, text string) string) string {
	var b strings.Builder
	b.Grow(len(md) + len(md)/8)
	fence := ""
	for i, line := range strings.Split(md, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		if opens, closes := channel.Fences(fence, line); opens != "" || closes {
			// Slack shows a language tag as the block's first line.
			fence = opens
			b.WriteString("```")
			continue
		}
		if fence != "" {
			b.WriteString(escape(line))
			continue
		}
		switch {
		case reRule().MatchString(line):
			b.WriteString("──────────")
		case reHeading().MatchString(line):
			m := reHeading().FindStringSubmatch(line)
			level := strings.Count(strings.TrimSpace(line), "#")
			b.WriteString(heading(level, inline(m[1])))
		case reBullet().MatchString(line):
			m := reBullet().FindStringSubmatch(line)
			b.WriteString(m[1] + "• " + inline(m[2]))
		case reQuote().MatchString(line):
			m := reQuote().FindStringSubmatch(line)
			b.WriteString("> " + inline(m[1]))
		default:
			b.WriteString(inline(line))
		}
	}
	return b.String()
}

// protector swaps spans that must not be rewritten (code, links) for
// placeholders and puts them back at the end. Each span also has the text
// it reads as inside a link's label (code without its backticks, an
// image's description), since Slack's <url|label> nests no markup.
type protector struct{ spans, labels []string }

func (p *protector) hide(s, label string) string {
	p.spans = append(p.spans, s)
	p.labels = append(p.labels, label)
	return "\x00" + strconv.Itoa(len(p.spans)-1) + "\x00"
}

var rePlaceholder = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("\x00([0-9]+)\x00") })

// put replaces the placeholders in s by from's spans. A span hidden inside
// another (code in a link's label) comes back on a later pass; each span
// only holds placeholders of spans hidden before it, so the passes end.
func (p *protector) put(s string, from []string) string {
	for range len(from) + 1 {
		if !strings.Contains(s, "\x00") {
			return s
		}
		s = rePlaceholder().ReplaceAllStringFunc(s, func(m string) string {
			n, err := strconv.Atoi(m[1 : len(m)-1])
			if err != nil || n >= len(from) {
				return ""
			}
			return from[n]
		})
	}
	return strings.ReplaceAll(s, "\x00", "")
}

func (p *protector) restore(s string) string { return p.put(s, p.spans) }

// label is a link's label as Slack shows it: the spans in it as their
// text, and no markers, as Slack renders none there.
func (p *protector) label(s string) string {
	s = p.put(s, p.labels)
	s = reBoldStar().ReplaceAllString(s, "$1")
	s = replaceAdjacent(reBoldUnder(), s, "$1$2$3")
	s = replaceAdjacent(reItalic(), s, "$1$2$3")
	s = replaceAdjacent(reUnderIt(), s, "$1$2$3")
	return reStrike().ReplaceAllString(s, "$1")
}

// codeSpans hides `code` spans (escaped, kept in backticks when keep).
func codeSpans(p *protector, line string, keep bool) string {
	if !strings.Contains(line, "`") {
		return escape(line)
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(line, '`')
		if i < 0 {
			break
		}
		j := strings.IndexByte(line[i+1:], '`')
		if j < 0 {
			break
		}
		b.WriteString(escape(line[:i]))
		code := escape(line[i+1 : i+1+j])
		shown := code
		if keep {
			shown = "`" + code + "`"
		}
		b.WriteString(p.hide(shown, code))
		line = line[i+j+2:]
	}
	b.WriteString(escape(line))
	return b.String()
}

func inlineMrkdwn(line string) string {
	p := &protector{}
	s := codeSpans(p, line, true)
	s = reImage().ReplaceAllStringFunc(s, func(m string) string {
		sm := reImage().FindStringSubmatch(m)
		label := p.label(sm[1])
		return p.hide(link(sm[2], label), cmp.Or(label, sm[2]))
	})
	s = reLink().ReplaceAllStringFunc(s, func(m string) string {
		sm := reLink().FindStringSubmatch(m)
		label := p.label(sm[1])
		return p.hide(link(sm[2], label), label)
	})
	s = reAutolink().ReplaceAllStringFunc(s, func(m string) string {
		url := reAutolink().FindStringSubmatch(m)[1]
		return p.hide("<"+url+">", url)
	})
	s = reBoldStar().ReplaceAllString(s, "\x01$1\x01")
	s = replaceAdjacent(reBoldUnder(), s, "$1\x01$2\x01$3")
	s = replaceAdjacent(reItalic(), s, "${1}_${2}_$3")
	s = reStrike().ReplaceAllString(s, "~$1~")
	s = strings.ReplaceAll(s, "\x01", "*")
	return p.restore(s)
}

// link is Slack's <url|label>; a label equal to the URL is dropped. A |
// in the URL is percent-encoded, as it would end the URL there.
func link(url, label string) string {
	url = strings.ReplaceAll(url, "|", "%7C")
	label = strings.ReplaceAll(label, "|", "¦")
	if label == "" || label == url {
		return "<" + url + ">"
	}
	return "<" + url + "|" + label + ">"
}

func inlinePlain(line string) string {
	p := &protector{}
	s := codeSpans(p, line, false)
	// URLs are hidden: their _ and * are not emphasis.
	s = reImage().ReplaceAllStringFunc(s, func(m string) string {
		sm := reImage().FindStringSubmatch(m)
		if sm[1] == "" {
			return p.hide(sm[2], sm[2])
		}
		return sm[1] + " (" + p.hide(sm[2], sm[2]) + ")"
	})
	s = reLink().ReplaceAllStringFunc(s, func(m string) string {
		sm := reLink().FindStringSubmatch(m)
		if sm[1] == sm[2] {
			return p.hide(sm[2], sm[2])
		}
		return sm[1] + " (" + p.hide(sm[2], sm[2]) + ")"
	})
	s = reAutolink().ReplaceAllStringFunc(s, func(m string) string {
		url := reAutolink().FindStringSubmatch(m)[1]
		return p.hide(url, url)
	})
	s = reBoldStar().ReplaceAllString(s, "$1")
	s = replaceAdjacent(reBoldUnder(), s, "$1$2$3")
	s = replaceAdjacent(reItalic(), s, "$1$2$3")
	s = replaceAdjacent(reUnderIt(), s, "$1$2$3")
	s = reStrike().ReplaceAllString(s, "$1")
	return p.restore(s)
}

// replaceAdjacent applies re twice: its boundary groups consume the
// character between two neighbouring spans ("*a* *b*"), so one pass
// leaves every second one (Go's regexp has no look-behind).
func replaceAdjacent(re *regexp.Regexp, s, repl string) string {
	return re.ReplaceAllString(re.ReplaceAllString(s, repl), repl)
}
