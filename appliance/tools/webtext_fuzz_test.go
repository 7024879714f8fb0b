package tools

import (
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

// FuzzHTMLToText: whatever the page, the extractor ends, keeps at most
// limit characters of valid UTF-8 while counting them all, and reads the
// same from a body that arrives a byte at a time.
func FuzzHTMLToText(f *testing.F) {
	for _, s := range []string{"<h1>T</h1><p>a &amp; b</p>", "<ul><li>x<li>y</ul>", "<pre>\n a\n</pre>", "<script>x</script>y",
		"<table><tr><td>a<td>b</table>", "<ol start=3><li>c</ol>", "<img alt='pic'>", "<title>t</title>\xff"} {
		f.Add(s, 50)
	}
	f.Fuzz(func(t *testing.T, page string, limit int) {
		limit = max(0, limit%200)
		got, err := htmlToText(strings.NewReader(page), limit)
		if err != nil {
			t.Fatalf("error on a string: %v", err)
		}
		if n := utf8.RuneCountInString(got.Text); n > limit || !utf8.ValidString(got.Text) || got.Total < n {
			t.Fatalf("%d characters kept of %d counted, limit %d, valid %v", n, got.Total, limit, utf8.ValidString(got.Text))
		}
		slow, err := htmlToText(iotest.OneByteReader(strings.NewReader(page)), limit)
		if err != nil || slow != got {
			t.Fatalf("a byte at a time: %+v, %v; at once: %+v", slow, err, got)
		}
	})
}
