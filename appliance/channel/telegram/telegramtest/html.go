package telegramtest

import (
	"fmt"
	"html"
	"strings"
)

// allowed are the tags of the Bot API's HTML parse mode.
var allowed = map[string]bool{
	"b": true, "strong": true, "i": true, "em": true, "u": true, "ins": true, "s": true, "strike": true, "del": true,
	"span": true, "tg-spoiler": true, "a": true, "tg-emoji": true, "code": true, "pre": true, "blockquote": true,
}

// CheckHTML validates text as the Bot API's HTML parse mode does: only its
// tags, properly nested and closed, and no <, > or & outside tags and
// entities. It returns the text as shown (tags removed, entities decoded).
func CheckHTML(text string) (string, error) {
	var shown strings.Builder
	var stack []string
	for i := 0; i < len(text); {
		switch c := text[i]; c {
		case '<':
			end := strings.IndexByte(text[i:], '>')
			if end < 0 {
				return "", fmt.Errorf("unclosed start tag at byte offset %d", i)
			}
			tag := text[i+1 : i+end]
			if strings.HasPrefix(tag, "/") {
				name := strings.ToLower(strings.TrimSpace(tag[1:]))
				if len(stack) == 0 || stack[len(stack)-1] != name {
					return "", fmt.Errorf("unexpected end tag at byte offset %d", i)
				}
				stack = stack[:len(stack)-1]
			} else {
				name := strings.ToLower(strings.Fields(tag + " ")[0])
				if !allowed[name] {
					return "", fmt.Errorf("unsupported start tag %q at byte offset %d", name, i)
				}
				if name == "a" && !strings.Contains(tag, "href=") {
					return "", fmt.Errorf("an <a> tag without href at byte offset %d", i)
				}
				stack = append(stack, name)
			}
			i += end + 1
		case '>':
			return "", fmt.Errorf("character '>' is reserved and must be escaped with \"&gt;\" (byte offset %d)", i)
		case '&':
			end := strings.IndexByte(text[i:], ';')
			if end < 0 || end > 10 {
				return "", fmt.Errorf("character '&' is reserved and must be escaped with \"&amp;\" (byte offset %d)", i)
			}
			ent := text[i : i+end+1]
			dec := html.UnescapeString(ent)
			if dec == ent || !(strings.HasPrefix(ent, "&#") || ent == "&lt;" || ent == "&gt;" || ent == "&amp;" || ent == "&quot;") {
				return "", fmt.Errorf("unsupported HTML entity %q at byte offset %d", ent, i)
			}
			shown.WriteString(dec)
			i += end + 1
		default:
			shown.WriteByte(c)
			i++
		}
	}
	if len(stack) > 0 {
		return "", fmt.Errorf("can't find end tag corresponding to start tag %q", stack[len(stack)-1])
	}
	return shown.String(), nil
}
