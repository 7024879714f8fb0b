package channel

import "strings"

// Fence reads line as a code fence: a run of three or more backticks or
// tildes (CommonMark allows either), and the info string after it (the
// language). A backtick run followed by another backtick is inline code
// ("```x```"), not a fence.
func Fence(line string) (marker, info string, ok bool) {
	t := strings.TrimLeft(line, " ")
	if t == "" || (t[0] != '`' && t[0] != '~') {
		return "", "", false
	}
	n := len(t) - len(strings.TrimLeft(t, t[:1]))
	if n < 3 {
		return "", "", false
	}
	info = strings.TrimSpace(t[n:])
	if t[0] == '`' && strings.Contains(info, "`") {
		return "", "", false
	}
	return t[:n], info, true
}

// closesFence reports whether line ends the code block marker opened. Only
// a fence of the same character, at least as long and with no info string
// does: a ``` line inside a ~~~ block, or a ```go one inside a ``` block,
// is code.
func closesFence(marker, line string) bool {
	m, info, ok := Fence(line)
	return ok && info == "" && m[0] == marker[0] && len(m) >= len(marker)
}

// Fences is a step of a walk over Markdown's lines that keeps code apart:
// with open the marker of the code block line is in ("" outside any), it
// returns the marker of the block line opens, or whether it closes open.
func Fences(open, line string) (opens string, closes bool) {
	if open != "" {
		return "", closesFence(open, line)
	}
	m, _, _ := Fence(line)
	return m, false
}

// fenceLines returns the byte offsets of the lines of text that open or
// close a code block, and the opening line of the block still open at the
// end of text ("" when none is).
func fenceLines(text string) (offsets []int, open string) {
	marker := ""
	pos := 0
	for _, line := range strings.SplitAfter(text, "\n") {
		l := strings.TrimRight(line, " \r\n")
		if opens, closes := Fences(marker, l); opens != "" || closes {
			marker, open = opens, ""
			if opens != "" {
				open = strings.TrimLeft(l, " ")
			}
			offsets = append(offsets, pos)
		}
		pos += len(line)
	}
	return offsets, open
}
