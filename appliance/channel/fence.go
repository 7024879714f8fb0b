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

// ClosesFence reports whether line ends the code block marker opened. Only
// a fence of the same character, at least as long and with no info string
// does: a ``` line inside a ~~~ block, or a ```go one inside a ``` block,
// is code.
func ClosesFence(marker, line string) bool {
	m, info, ok := Fence(line)
	return ok && info == "" && m[0] == marker[0] && len(m) >= len(marker)
}

// fenceLines returns the byte offsets of the lines of text that open or
// close a code block, and the opening line of the block still open at the
// end of text ("" when none is).
func fenceLines(text string) (offsets []int, open string) {
	marker := ""
	pos := 0
	for _, line := range strings.SplitAfter(text, "\n") {
		l := strings.TrimRight(line, " \r\n")
		switch m, _, ok := Fence(l); {
		case marker == "" && ok:
			marker, open = m, strings.TrimLeft(l, " ")
			offsets = append(offsets, pos)
		case marker != "" && ClosesFence(marker, l):
			marker, open = "", ""
			offsets = append(offsets, pos)
		}
		pos += len(line)
	}
	return offsets, open
}
