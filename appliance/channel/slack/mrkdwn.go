package slack

import (
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Slack does not render Markdown in a message's text: it has its own
// "mrkdwn" (*bold*, _italic_, ~strike~, <url|label> links, no headings), and
// it reads &, < and > as markup, so those must be escaped everywhere. A
// model writes Markdown; mrkdwn translates it.

// The expressions compile on first use: every start would otherwise pay
// for them, on boards that never talk to Slack.
var (
	reImage     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`!\[([^\]\n]*)\]\(([^)\s]+)\)`) })
	reLink      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\[([^\]\n]+)\]\(([^)\s]+)\)`) })
	reAutolink  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`&lt;((?:https?|mailto):[^\s&]+)&gt;`) })
	reBoldStar  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\*\*([^*\n]+?)\*\*`) })
	reBoldUnder = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(^|[^\w])__([^_\n]+?)__([^\w]|$)`) })
	reItalic    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(^|[^\w*])\*([^*\s](?:[^*\n]*[^*\s])?)\*([^\w*]|$)`) })
	reUnderIt   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(^|[^\w_])_([^_\s](?:[^_\n]*[^_\s])?)_([^\w_]|$)`) })
	reStrike    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`~~([^~\n]+?)~~`) })
	reHeading   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`) })
	reBullet    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(\s*)[-*+]\s+(.*)$`) })
	reRule      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^ {0,3}([-*_])(\s*[-*_]){2,}\s*$`) })
	reQuote     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^ {0,3}>\s?(.*)$`) })
	reFence     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("^ {0,3}(```|~~~)") })
)

// escape makes text literal in Slack.
func escape(s string) string {
	if !strings.ContainsAny(s, "&<>") {
		return s
	}
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// mrkdwn renders Markdown as Slack mrkdwn.
func mrkdwn(md string) string {
	return renderLines(md, inlineMrkdwn, func(level int, text string) string {
		return "*" + text + "*"
	})
}

// plainText renders Markdown as text Slack shows as is (sent with
// mrkdwn=false): markers dropped, links written out, &<> escaped.
func plainText(md string) string {
	return renderLines(md, inlinePlain, func(_ int, text string) string { return text })
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
		if m := reFence().FindStringSubmatch(line); m != nil && (fence == "" || m[1] == fence) {
			if fence == "" {
				// Slack shows a language tag as the block's first line.
				fence = m[1]
			} else {
				fence = ""
			}
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
// placeholders and puts them back at the end.
type protector struct{ spans []string }

func (p *protector) hide(s string) string {
	p.spans = append(p.spans, s)
	return "\x00" + strconv.Itoa(len(p.spans)-1) + "\x00"
}

var rePlaceholder = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("\x00([0-9]+)\x00") })

func (p *protector) restore(s string) string {
	if len(p.spans) == 0 {
		return s
	}
	return rePlaceholder().ReplaceAllStringFunc(s, func(m string) string {
		n, _ := strconv.Atoi(m[1 : len(m)-1])
		return p.spans[n]
	})
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
		if keep {
			code = "`" + code + "`"
		}
		b.WriteString(p.hide(code))
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
		return p.hide(link(sm[2], sm[1]))
	})
	s = reLink().ReplaceAllStringFunc(s, func(m string) string {
		sm := reLink().FindStringSubmatch(m)
		return p.hide(link(sm[2], sm[1]))
	})
	s = reAutolink().ReplaceAllStringFunc(s, func(m string) string {
		return p.hide("<" + reAutolink().FindStringSubmatch(m)[1] + ">")
	})
	s = reBoldStar().ReplaceAllString(s, "\x01$1\x01")
	s = replaceAdjacent(reBoldUnder(), s, "$1\x01$2\x01$3")
	s = replaceAdjacent(reItalic(), s, "${1}_${2}_$3")
	s = reStrike().ReplaceAllString(s, "~$1~")
	s = strings.ReplaceAll(s, "\x01", "*")
	return p.restore(s)
}

// link is Slack's <url|label>; a label equal to the URL is dropped.
func link(url, label string) string {
	label = strings.ReplaceAll(label, "|", "¦")
	if label == "" || label == url {
		return "<" + url + ">"
	}
	return "<" + url + "|" + label + ">"
}

func inlinePlain(line string) string {
	p := &protector{}
	s := codeSpans(p, line, false)
	s = reImage().ReplaceAllString(s, "$1 ($2)")
	s = reLink().ReplaceAllStringFunc(s, func(m string) string {
		sm := reLink().FindStringSubmatch(m)
		if sm[1] == sm[2] {
			return sm[2]
		}
		return sm[1] + " (" + sm[2] + ")"
	})
	s = reAutolink().ReplaceAllString(s, "$1")
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
