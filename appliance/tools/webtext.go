package tools

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/perchhq/perch/appliance/tools/htmlscan"
)

// pageText is the readable text of an HTML page.
type pageText struct {
	Title string
	Text  string
	// Total counts the characters of text the whole page had; more than
	// len(Text) in runes when the limit cut it.
	Total int
}

// htmlToText converts HTML read from r into plain text a model can read:
// headings as "# ", paragraphs separated by blank lines, list items as "- "
// or "1. ", table cells joined by " | ", link text kept, and no script,
// style, noscript, nav, template, svg or iframe content. It streams through
// a tokenizer, so memory stays at the kept text (limit characters) whatever
// the page's size.
func htmlToText(r io.Reader, limit int) (pageText, error) {
	z := htmlscan.NewTokenizer(r)
	w := &textWriter{limit: limit}
	var (
		title     strings.Builder
		inTitle   bool
		skip      []string // open skipped elements, innermost last
		pre       int
		lists     []int // per open list: -1 unordered, else the last number
		rowCells  int
		tokenDone bool
	)
	for !tokenDone {
		tt := z.Next()
		switch tt {
		case htmlscan.ErrorToken:
			if err := z.Err(); err != io.EOF {
				return pageText{}, err
			}
			tokenDone = true
		case htmlscan.TextToken:
			switch {
			case len(skip) > 0:
			case inTitle:
				if title.Len() < 500 {
					title.Write(z.Text())
				}
			default:
				w.text(z.Text(), pre > 0)
			}
		case htmlscan.StartTagToken, htmlscan.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			if len(skip) > 0 {
				if tt == htmlscan.StartTagToken && string(name) == skip[len(skip)-1] {
					skip = append(skip, skip[len(skip)-1]) // nested same element
				}
				continue
			}
			switch a := string(name); a {
			case "script", "style", "noscript", "nav", "template", "svg", "iframe", "object":
				if tt == htmlscan.StartTagToken {
					skip = append(skip, a)
				}
			case "title":
				inTitle = tt == htmlscan.StartTagToken
			case "h1", "h2", "h3", "h4", "h5", "h6":
				w.block(2)
				w.marker = strings.Repeat("#", int(name[1]-'0')) + " "
			case "p", "blockquote", "table", "figure", "section", "article",
				"main", "header", "footer", "aside", "form", "fieldset",
				"details", "address", "dl", "hr":
				w.block(2)
			case "pre":
				w.block(2)
				pre++
				w.skipNL = true // HTML ignores a line break right after <pre>
			case "ul", "ol":
				if len(lists) == 0 {
					w.block(2)
				}
				n := -1
				if a == "ol" {
					n = 0
					if hasAttr {
						if s := attrOf(z, "start"); s != "" {
							if v, err := strconv.Atoi(s); err == nil {
								n = v - 1
							}
						}
					}
				}
				lists = append(lists, n)
			case "li":
				w.block(1)
				indent := strings.Repeat("  ", max(len(lists)-1, 0))
				if len(lists) > 0 && lists[len(lists)-1] >= 0 {
					lists[len(lists)-1]++
					w.marker = indent + strconv.Itoa(lists[len(lists)-1]) + ". "
				} else {
					w.marker = indent + "- "
				}
			case "tr":
				w.block(1)
				rowCells = 0
			case "td", "th":
				if rowCells > 0 {
					w.marker = " | "
				}
				rowCells++
			case "br":
				w.lineBreak()
			case "div", "dt", "dd", "caption", "figcaption", "summary", "option":
				w.block(1)
			case "img":
				if hasAttr {
					if alt := strings.TrimSpace(attrOf(z, "alt")); alt != "" {
						w.text([]byte(" [image: "+alt+"] "), false)
					}
				}
			}
		case htmlscan.EndTagToken:
			name, _ := z.TagName()
			if len(skip) > 0 {
				if string(name) == skip[len(skip)-1] {
					skip = skip[:len(skip)-1]
				}
				continue
			}
			switch string(name) {
			case "title":
				inTitle = false
			case "h1", "h2", "h3", "h4", "h5", "h6",
				"p", "blockquote", "table", "figure", "section", "article",
				"main", "header", "footer", "aside", "form", "fieldset",
				"details", "address", "dl":
				w.block(2)
			case "pre":
				w.block(2)
				pre = max(pre-1, 0)
			case "ul", "ol":
				if len(lists) > 0 {
					lists = lists[:len(lists)-1]
				}
				w.block(1)
				if len(lists) == 0 {
					w.block(2)
				}
			case "li", "tr", "div", "dt", "dd", "caption", "figcaption", "summary":
				w.block(1)
			}
		}
	}
	return pageText{
		Title: strings.Join(strings.Fields(title.String()), " "),
		Text:  strings.TrimRightFunc(w.sb.String(), unicode.IsSpace),
		Total: w.total,
	}, nil
}

// attrOf returns the value of the current tag's attribute key.
func attrOf(z *htmlscan.Tokenizer, key string) string {
	for {
		k, v, more := z.TagAttr()
		if string(k) == key {
			return string(v)
		}
		if !more {
			return ""
		}
	}
}

// textWriter lays text out in lines and blocks, collapsing white space as a
// browser does, and keeps at most limit characters while counting all.
type textWriter struct {
	sb     strings.Builder
	limit  int
	kept   int
	total  int
	nl     int    // line breaks owed before the next text (at most 2)
	space  bool   // a space is owed before the next text
	marker string // written before the next text: list bullet, heading hashes, cell separator
	atBOL  bool   // the last thing written ends a line (or nothing was written)
	any    bool   // something was written
	skipNL bool   // drop the next text's leading line break
}

func (w *textWriter) block(n int) {
	w.nl = max(w.nl, n)
	w.space = false
	w.marker = ""
}

func (w *textWriter) lineBreak() {
	w.nl = min(w.nl+1, 2)
	w.space = false
}

// flush writes what is owed before a visible character.
func (w *textWriter) flush() {
	if w.any && w.nl > 0 {
		if !w.atBOL {
			w.put("\n")
			w.nl--
		}
		if w.nl > 0 {
			w.put("\n")
		}
		w.space = false
	}
	w.nl = 0
	if w.marker != "" {
		w.put(w.marker)
		w.marker = ""
		w.space = false
	}
	if w.space && w.any && !w.atBOL {
		w.put(" ")
	}
	w.space = false
}

// text writes a text token; it takes the tokenizer's bytes as they are, so
// a page of a million words costs no allocation per word.
func (w *textWriter) text(s []byte, pre bool) {
	if w.skipNL {
		w.skipNL = false
		if pre {
			s = bytes.TrimPrefix(bytes.TrimPrefix(s, []byte("\r")), []byte("\n"))
		}
	}
	for len(s) > 0 {
		r, size := utf8.DecodeRune(s)
		s = s[size:]
		if pre {
			if r == '\n' {
				w.flush()
				w.put("\n")
				continue
			}
		} else if unicode.IsSpace(r) {
			w.space = true
			continue
		}
		w.flush()
		w.putRune(r)
	}
}

func (w *textWriter) put(s string) {
	for _, r := range s {
		w.putRune(r)
	}
}

func (w *textWriter) putRune(r rune) {
	w.total++
	w.any = true
	w.atBOL = r == '\n'
	if w.kept < w.limit {
		w.sb.WriteRune(r)
		w.kept++
	}
}

// keepRunes returns the first limit characters of s and the count of all.
func keepRunes(s string, limit int) (string, int) {
	total := utf8.RuneCountInString(s)
	if total <= limit {
		return s, total
	}
	i, n := 0, 0
	for i < len(s) && n < limit {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		n++
	}
	return s[:i], total
}
