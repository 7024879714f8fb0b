package htmlscan

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	xhtml "golang.org/x/net/html"
)

// dump renders the tokens of s, one per line, for comparisons.
func dump(t testing.TB, r io.Reader) string {
	t.Helper()
	z := NewTokenizer(r)
	var out strings.Builder
	var text []byte
	flush := func() {
		if text != nil {
			fmt.Fprintf(&out, "text %q\n", text)
			text = nil
		}
	}
	for {
		tt := z.Next()
		if tt == TextToken {
			// Text may come in pieces; join them, as readers do.
			text = append(text, z.Text()...)
			continue
		}
		flush()
		switch tt {
		case ErrorToken:
			if z.Err() != io.EOF {
				fmt.Fprintf(&out, "error %v\n", z.Err())
			}
			return out.String()
		case StartTagToken, SelfClosingTagToken, EndTagToken:
			name, more := z.TagName()
			kind := map[TokenType]string{StartTagToken: "start", SelfClosingTagToken: "self", EndTagToken: "end"}[tt]
			fmt.Fprintf(&out, "%s %s", kind, name)
			for more {
				var k, v []byte
				k, v, more = z.TagAttr()
				fmt.Fprintf(&out, " %s=%q", k, v)
			}
			out.WriteString("\n")
		case CommentToken:
			out.WriteString("comment\n")
		}
	}
}

func TestTokens(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain", `text "plain"` + "\n"},
		{"<P CLASS=x Id='a b' data-v=\"1 > 2\" checked>hi</P>",
			"start p class=\"x\" id=\"a b\" data-v=\"1 > 2\" checked=\"\"\ntext \"hi\"\nend p\n"},
		{"<br/><img src=a.png />", "self br\nself img src=\"a.png\"\n"},
		{"a &amp; b &lt;c&gt; &copy 2026 &#65;&#x42; &bogus; &notit;", `text "a & b <c> © 2026 AB &bogus; ¬it;"` + "\n"},
		// In attributes a reference counts only when its whole name is one,
		// and "&name=" stays as it is (a URL's query).
		{`<a href="?a=1&copy=2&amp;b=3&copyx&lt;&#47;">`, `start a href="?a=1&copy=2&b=3&copyx</"` + "\n"},
		{"<!DOCTYPE html><!-- a <b>comment</b> -->x<?xml bogus?>", "comment\ncomment\ntext \"x\"\ncomment\n"},
		{"<!-->x<!--->y<!-- a --!>z", "comment\ntext \"x\"\ncomment\ntext \"y\"\ncomment\ntext \"z\"\n"},
		{"<script>if (a<b && c>d) { x = '</p>' }</script>after",
			"start script\ntext \"if (a<b && c>d) { x = '</p>' }\"\nend script\ntext \"after\"\n"},
		{"<style>p{}</STYLE >", "start style\ntext \"p{}\"\nend style\n"},
		{"<title>A &amp; B</title>", "start title\ntext \"A & B\"\nend title\n"},
		{"<script>&amp;</script>", "start script\ntext \"&amp;\"\nend script\n"},
		// "/>" does not end a script: a browser reads what follows as its text.
		{"<script/>alert(1)</script>x", "start script\ntext \"alert(1)\"\nend script\ntext \"x\"\n"},
		{"<script></script>", "start script\nend script\n"},
		{"<script>unclosed", "start script\ntext \"unclosed\"\n"},
		{"a < b <3 </> c", `text "a < b <3  c"` + "\n"},
		{"line1\r\nline2\rline3", `text "line1\nline2\nline3"` + "\n"},
		{"<div", ""},
		{"x<", `text "x<"` + "\n"},
		{"</div foo='>'>", "end div\n"},
		{"<a b='unterminated>", ""},
	} {
		if got := dump(t, strings.NewReader(c.in)); got != c.want {
			t.Errorf("%q:\ngot:\n%swant:\n%s", c.in, got, c.want)
		}
	}
}

// TestOneByteReads: a reader that returns a byte at a time gives the same
// tokens (the tokenizer buffers, it does not assume whole reads).
func TestOneByteReads(t *testing.T) {
	in := `<html><head><title>T &amp; U</title><script>x="</scr"+"ipt>"</script></head>` +
		`<body class="a"><p>Hello&nbsp;world<br>next</p><!-- c --><a href="/x?a=1&amp;b=2">link</a></body></html>`
	if a, b := dump(t, strings.NewReader(in)), dump(t, iotest.OneByteReader(strings.NewReader(in))); a != b {
		t.Errorf("whole reads:\n%s\none byte at a time:\n%s", a, b)
	}
}

func TestReadErrorEndsTheTokens(t *testing.T) {
	boom := fmt.Errorf("boom")
	z := NewTokenizer(io.MultiReader(strings.NewReader("<p>text"), iotest.ErrReader(boom)))
	var got []TokenType
	for tt := z.Next(); tt != ErrorToken; tt = z.Next() {
		got = append(got, tt)
	}
	if z.Err() != boom {
		t.Errorf("Err() = %v, want the reader's error", z.Err())
	}
	if len(got) != 2 || got[0] != StartTagToken || got[1] != TextToken {
		t.Errorf("tokens before the error: %v", got)
	}
}

// TestLongTextComesInPieces: memory stays bounded on a huge text node, and
// the pieces are cut between characters, never inside one.
func TestLongTextComesInPieces(t *testing.T) {
	word := "héllo wörld "
	in := strings.Repeat(word, 20000) + strings.Repeat("é", 100000)
	z := NewTokenizer(strings.NewReader(in))
	var all bytes.Buffer
	pieces := 0
	for z.Next() == TextToken {
		p := z.Text()
		if len(p) > maxText+utf8.UTFMax {
			t.Fatalf("a piece of %d bytes", len(p))
		}
		if !utf8.Valid(p) {
			t.Fatalf("a piece cut inside a character: %q…", p[:20])
		}
		all.Write(p)
		pieces++
	}
	if all.String() != in || pieces < 2 {
		t.Errorf("%d pieces, %d of %d bytes back", pieces, all.Len(), len(in))
	}
}

func TestTagLimits(t *testing.T) {
	var in strings.Builder
	in.WriteString("<div")
	for i := range maxAttrs + 10 {
		fmt.Fprintf(&in, " a%d=%d", i, i)
	}
	fmt.Fprintf(&in, " big=\"%s\" %s=1>", strings.Repeat("x", maxAttrValue+100), strings.Repeat("n", 200))
	z := NewTokenizer(strings.NewReader(in.String()))
	if z.Next() != StartTagToken {
		t.Fatal("no start tag")
	}
	n := 0
	for more := true; more; {
		var k, v []byte
		k, v, more = z.TagAttr()
		n++
		if len(v) > maxAttrValue || len(k) > maxName {
			t.Errorf("attribute %.20s… of %d bytes, value of %d", k, len(k), len(v))
		}
	}
	if n != maxAttrs {
		t.Errorf("%d attributes kept, want %d", n, maxAttrs)
	}
}

// FuzzTokenizer: whatever the input, the tokenizer ends, keeps its limits,
// returns lowercased names, and gives back text that has no markup in it
// unchanged.
func FuzzTokenizer(f *testing.F) {
	for _, s := range []string{"", "<p class=a>x</p>", "<script>a</script>", "&amp;&#1;&#x10FFFF;&copy", "<!-- x -->", "<a href='&copy=1'>",
		"<title>a</title", "<textarea>&lt;</textarea>", "<plaintext><p>", "</>", "<?x>", "\r\n\r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		z := NewTokenizer(strings.NewReader(in))
		var text []byte
		for i := 0; ; i++ {
			if i > len(in)+2 {
				t.Fatalf("more tokens (%d) than bytes of input (%d)", i, len(in))
			}
			tt := z.Next()
			if tt == ErrorToken {
				if z.Err() != io.EOF {
					t.Fatalf("error %v reading a string", z.Err())
				}
				break
			}
			switch tt {
			case TextToken:
				if len(z.Text()) > maxText+utf8.UTFMax {
					t.Fatalf("a text piece of %d bytes", len(z.Text()))
				}
				text = append(text, z.Text()...)
			case StartTagToken, SelfClosingTagToken, EndTagToken:
				name, more := z.TagName()
				if len(name) == 0 || len(name) > maxName || hasUpper(name) {
					t.Fatalf("tag name %q", name)
				}
				n := 0
				for more {
					var k, v []byte
					k, v, more = z.TagAttr()
					n++
					if len(k) == 0 || len(k) > maxName || hasUpper(k) || len(v) > maxAttrValue {
						t.Fatalf("attribute %q=%q", k, v)
					}
				}
				if n > maxAttrs {
					t.Fatalf("%d attributes", n)
				}
			}
		}
		if !strings.ContainsAny(in, "<&\r") && string(text) != in {
			t.Fatalf("text %q came back as %q", in, text)
		}
	})
}

// hasUpper reports ASCII capitals: names are lowercased byte by byte, as
// HTML's names are ASCII (other bytes stay as they are).
func hasUpper(b []byte) bool {
	return bytes.ContainsFunc(b, func(r rune) bool { return 'A' <= r && r <= 'Z' })
}

// xnetDump renders golang.org/x/net/html's tokens of r like dump does.
func xnetDump(t testing.TB, r io.Reader) string {
	t.Helper()
	z := xhtml.NewTokenizer(r)
	var out strings.Builder
	var text []byte
	for {
		tt := z.Next()
		if tt == xhtml.TextToken {
			text = append(text, z.Text()...)
			continue
		}
		if text != nil {
			fmt.Fprintf(&out, "text %q\n", text)
			text = nil
		}
		switch tt {
		case xhtml.ErrorToken:
			return out.String()
		case xhtml.StartTagToken, xhtml.SelfClosingTagToken, xhtml.EndTagToken:
			name, more := z.TagName()
			kind := map[xhtml.TokenType]string{xhtml.StartTagToken: "start", xhtml.SelfClosingTagToken: "self", xhtml.EndTagToken: "end"}[tt]
			fmt.Fprintf(&out, "%s %s", kind, name)
			for more && tt != xhtml.EndTagToken {
				var k, v []byte
				k, v, more = z.TagAttr()
				fmt.Fprintf(&out, " %s=%q", k, v)
			}
			out.WriteString("\n")
		case xhtml.CommentToken, xhtml.DoctypeToken:
			out.WriteString("comment\n")
		}
	}
}

// TestSameTokensAsXNetHTML: on the pages the web tools' tests read (a
// documentation page, DuckDuckGo's result pages), the tokens are those of
// golang.org/x/net/html, which this package replaced.
func TestSameTokensAsXNetHTML(t *testing.T) {
	pages, _ := filepath.Glob("../testdata/*.html")
	if len(pages) == 0 {
		t.Fatal("no pages in ../testdata")
	}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := dump(t, bytes.NewReader(b)), xnetDump(t, bytes.NewReader(b)); got != want {
			t.Errorf("%s: tokens differ:\ngot:\n%s\nx/net/html:\n%s", p, got, want)
		}
	}
}
