package channel

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Split cuts text into parts of at most limit runes, in order: at a
// paragraph break when one falls in the second half of the allowed length,
// else at a line break, else at a space, else anywhere between two
// characters. A cut inside a fenced code block is avoided when any other
// boundary exists; when a block is itself longer than the limit, each part
// closes the block and the next reopens it, so every part renders as code.
// A bold, italic, strikethrough or code span a cut falls inside is closed
// and reopened likewise. Whitespace at a cut is dropped; nothing else is.
func Split(text string, limit int) []string {
	return splitMeasured(text, limit, utf8.RuneCountInString, true)
}

// splitMeasured splits text measured as the platform counts; markdown says
// its spans are Markdown's (plain text's stars are text).
func splitMeasured(text string, limit int, measure func(string) int, markdown bool) []string {
	if limit < 1 {
		limit = 1
	}
	text = strings.TrimRight(text, " \t\r\n")
	var out []string
	for text != "" {
		if measure(text) <= limit {
			out = append(out, text)
			break
		}
		part, rest := cutOne(text, limit, measure, markdown)
		if len(rest) >= len(text) || measure(part) > limit {
			// A reopened fence would eat the progress, or a closing one
			// not fit (a limit too small for fences): cut plainly, which
			// always moves on.
			end := fitting(text, limit, measure)
			part, rest = text[:end], text[end:]
		}
		if strings.TrimSpace(part) != "" {
			out = append(out, part)
		}
		text = rest
	}
	return out
}

// cutOne returns the first part of text (at most limit) and what remains.
// In Markdown, the spans a cut falls inside are closed at the end of the
// part and reopened at the start of the rest, as code blocks are.
func cutOne(text string, limit int, measure func(string) int, markdown bool) (part, rest string) {
	end := fitting(text, limit, measure)
	if cut, ok := boundary(text, end, true); ok && content(text[:cut]) {
		part, rest = strings.TrimRight(text[:cut], " \t\r\n"), strings.TrimLeft(text[cut:], " \t\r\n")
		if !markdown {
			return part, rest
		}
		return closeSpans(text, cut, part, rest, limit, measure)
	}
	// Only cuts inside a code block remain: close the block in this part
	// and reopen it in the next. Leave room for the closing fence, as long
	// as the open block's.
	closing := "\n```"
	if m, _, ok := Fence(openingFenceAt(text, end)); ok {
		closing = "\n" + m
	}
	end = fitting(text, max(limit-measure(closing), 1), measure)
	cut, ok := boundary(text, end, false)
	if !ok || !content(text[:cut]) {
		cut = end
	}
	open := openingFenceAt(text, cut)
	part = strings.TrimRight(text[:cut], " \t\r\n")
	rest = strings.TrimLeft(text[cut:], "\r\n")
	if open == "" {
		return part, strings.TrimLeft(rest, " \t")
	}
	marker, _, _ := Fence(open)
	return part + "\n" + marker, open + "\n" + rest
}

// closeSpans closes the spans the cut at byte cut of text falls inside at
// the end of part and reopens them at the start of rest; the markers left
// as they were would show as text on both sides. When the closing markers
// do not fit, the cut moves back to make room (a few times: each move may
// land in other spans), else the spans stay cut.
func closeSpans(text string, cut int, part, rest string, limit int, measure func(string) int) (string, string) {
	room := limit
	for range 4 {
		if at, ok := linkAround(text, cut); ok && content(text[:at]) {
			// A link cut in two shows its brackets and half its address
			// as text, and neither half opens: the cut moves before it
			// (into whatever spans hold the link, closed below).
			cut = at
			part, rest = strings.TrimRight(text[:at], " \t\r\n"), strings.TrimLeft(text[at:], " \t\r\n")
		}
		closers, openers := spansAcross(text, cut)
		switch {
		case closers == "":
			return part, rest
		case merges(part, closers, openers, rest):
			// A backtick or tilde beside one of its own reads as a longer
			// run: "`" before "``" opens a code block, and the backticks
			// the text had would vanish. Shown markers lose nothing.
			return part, rest
		case measure(part+closers) <= limit:
			return part + closers, openers + rest
		}
		room = min(room-1, limit-measure(closers))
		if room < 1 {
			break
		}
		c, ok := boundary(text, fitting(text, room, measure), true)
		if !ok || !content(text[:c]) {
			break
		}
		cut = c
		part, rest = strings.TrimRight(text[:c], " \t\r\n"), strings.TrimLeft(text[c:], " \t\r\n")
	}
	return part, rest
}

// merges reports whether a closing backtick or tilde would run into the
// end of part, or a reopening one into the start of rest. Stars and
// underscores may: a run of them closes or opens the spans inside out.
func merges(part, closers, openers, rest string) bool {
	fenceChar := func(c byte) bool { return c == '`' || c == '~' }
	return part != "" && fenceChar(closers[0]) && part[len(part)-1] == closers[0] ||
		rest != "" && fenceChar(openers[len(openers)-1]) && rest[0] == openers[len(openers)-1]
}

// spansAcross returns the markers that close the inline spans a cut at
// byte cut of text falls inside, innermost first, and those that reopen
// them, outermost first. A cut in a span's marker or in a link is left as
// it is: there is no marker to repeat.
func spansAcross(text string, cut int) (closers, openers string) {
	start := strings.LastIndexByte(text[:cut], '\n') + 1
	line := text[start:]
	if nl := strings.IndexByte(line, '\n'); nl >= 0 {
		line = line[:nl]
	}
	for c := cut - start; ; {
		sp, at, ok := spanHolding(line, c)
		if !ok {
			return closers, openers
		}
		closers, openers = sp.marker+closers, openers+sp.marker
		if sp.marker == "`" {
			return closers, openers // code holds no spans
		}
		line, c = sp.inner, c-at-len(sp.marker)
	}
}

// linkAround returns where the link that a cut at byte cut of text falls
// inside begins, in whatever spans hold it; false when the cut is in no
// link, or in code, where brackets are text.
func linkAround(text string, cut int) (int, bool) {
	start := strings.LastIndexByte(text[:cut], '\n') + 1
	line := text[start:]
	if nl := strings.IndexByte(line, '\n'); nl >= 0 {
		line = line[:nl]
	}
	base, c := start, cut-start
	for {
		sp, at, ok := spanCovering(line, c)
		switch {
		case !ok || sp.marker == "`":
			return 0, false
		case sp.marker == "[":
			return base + at, true
		}
		inner := at + len(sp.marker)
		if c <= inner || c >= inner+len(sp.inner) {
			return 0, false // in the span's marker
		}
		line, base, c = sp.inner, base+inner, c-inner
	}
}

// spanCovering returns the span of line that byte c falls strictly inside
// (markers included), and where it starts.
func spanCovering(line string, c int) (span, int, bool) {
	for i := 0; i < c; {
		sp, ok := spanAt(line, i)
		if !ok {
			_, size := utf8.DecodeRuneInString(line[i:])
			i += size
			continue
		}
		if i+sp.n <= c {
			i += sp.n
			continue
		}
		return sp, i, true
	}
	return span{}, 0, false
}

// spanHolding returns the span of line whose content holds byte c, and
// where it starts.
func spanHolding(line string, c int) (span, int, bool) {
	sp, i, ok := spanCovering(line, c)
	if !ok {
		return span{}, 0, false
	}
	inner := i + len(sp.marker)
	return sp, i, sp.marker != "[" && c > inner && c < inner+len(sp.inner)
}

// content reports whether part holds more than fence lines and spaces.
func content(part string) bool {
	for _, line := range strings.Split(part, "\n") {
		if t := strings.TrimSpace(line); t != "" && !isFence(t) {
			return true
		}
	}
	return false
}

// fitting returns the largest rune boundary i with measure(text[:i]) <=
// limit (at least one rune, so progress is always made) that does not
// split a character, when one fits.
func fitting(text string, limit int, measure func(string) int) int {
	// Candidate ends are rune boundaries; measure is monotonic in them.
	idx := make([]int, 0, min(len(text), limit*4+1))
	for i := range text {
		if i > 0 {
			idx = append(idx, i)
		}
		if len(idx) > limit*4 {
			break
		}
	}
	idx = append(idx, len(text))
	n := sort.Search(len(idx), func(k int) bool { return measure(text[:idx[k]]) > limit })
	if n == 0 {
		_, size := utf8.DecodeRuneInString(text)
		return size
	}
	for k := n - 1; k >= 0; k-- {
		if !joined(text, idx[k]) {
			return idx[k]
		}
	}
	// One character longer than the limit: it cannot go whole.
	return idx[n-1]
}

// joined reports whether a cut at byte offset i of text would split what
// a reader sees as one character, leaving a broken glyph on both sides: an
// emoji sequence joined by ZWJ, a character and the marks, variation
// selectors, skin-tone modifiers or tags that follow it, or a flag's pair
// of regional indicators.
func joined(text string, i int) bool {
	if i <= 0 || i >= len(text) {
		return false
	}
	prev, _ := utf8.DecodeLastRuneInString(text[:i])
	next, _ := utf8.DecodeRuneInString(text[i:])
	switch {
	case prev == zwj || next == zwj || extends(next):
		return true
	case regional(prev) && regional(next):
		// Indicators pair from the start of their run: a cut after an
		// odd count of them splits a flag.
		n := 0
		for s := text[:i]; ; n++ {
			r, size := utf8.DecodeLastRuneInString(s)
			if !regional(r) {
				break
			}
			s = s[:len(s)-size]
		}
		return n%2 == 1
	}
	return false
}

const zwj = '\u200d'

// extends reports whether r belongs to the character before it.
func extends(r rune) bool {
	// Spacing marks (Mc) too: a Devanagari vowel sign cut from its
	// consonant shows as a dotted circle.
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Mc) ||
		r >= 0x1F3FB && r <= 0x1F3FF || // skin tones
		r >= 0xE0020 && r <= 0xE007F // tags (the flags of England, Scotland, Wales)
}

func regional(r rune) bool { return r >= 0x1F1E6 && r <= 0x1F1FF }

// boundary finds the best cut at or before end. With outside set, only cuts
// outside code blocks count. It prefers a paragraph break, a line break and
// a space, in that order, in the second half of end; then any of them.
func boundary(text string, end int, outside bool) (int, bool) {
	inCode := codeMap(text[:end])
	good := func(i int) bool { return i > 0 && (!outside || !inCode(i)) }
	for _, minPos := range []int{end / 2, 1} {
		for _, sep := range []string{"\n\n", "\n", " "} {
			for i := strings.LastIndex(text[:end], sep); i >= minPos; i = strings.LastIndex(text[:i], sep) {
				if good(i) {
					return i, true
				}
			}
		}
	}
	if !outside || !inCode(end) {
		return end, true // one long word: cut it
	}
	return 0, false
}

// codeMap returns a function telling whether a cut at byte offset i of
// text falls inside a fenced code block.
func codeMap(text string) func(i int) bool {
	fences, _ := fenceLines(text)
	return func(i int) bool {
		return sort.SearchInts(fences, i)%2 == 1 // fence lines before the cut
	}
}

// openingFenceAt returns the fence line of the code block open at a cut
// at byte cut of text, judging the line the cut falls in whole: its first
// half alone may read as a fence ("````" of "````x`y", which is text)
// that the text never opened.
func openingFenceAt(text string, cut int) string {
	end := len(text)
	if nl := strings.IndexByte(text[cut:], '\n'); nl >= 0 {
		end = cut + nl
	}
	return openingFence(text[:end])
}

// openingFence returns the fence line ("```go", "~~~") of the code block
// still open at the end of text, or "" when none is.
func openingFence(text string) string {
	_, open := fenceLines(text)
	return open
}
