// Package htmlscan splits HTML into tokens (text, start and end tags) the
// way a browser's tokenizer does for the parts the web tools read: tag and
// attribute names lowercased, character references decoded with the
// standard library's html.UnescapeString, and the content of script, style
// and the other raw-text elements kept as text up to their end tag.
//
// It replaces golang.org/x/net/html, whose package initialiser builds a
// table of every named character reference at every start of the gateway
// (a millisecond or more on a small board) although pages are read only
// when a tool fetches one; the standard library builds its table on first
// use. It builds no tree, and its memory is bounded whatever the input:
// text comes in pieces of a few KiB, and a tag keeps at most maxAttrs
// attributes of at most maxAttrValue bytes each.
package htmlscan

import (
	"bufio"
	"bytes"
	"html"
	"io"
)

// TokenType is the kind of a token.
type TokenType int

const (
	// ErrorToken ends the input: Err says whether by io.EOF or a read error.
	ErrorToken TokenType = iota
	TextToken
	StartTagToken
	EndTagToken
	SelfClosingTagToken
	// CommentToken stands for comments, doctypes and processing
	// instructions, which carry no text for a reader.
	CommentToken
)

const (
	textChunk    = 4 << 10  // text is cut at white space after this many bytes
	maxText      = 64 << 10 // and anywhere (at a character's start) after this many
	maxName      = 64       // longer tag and attribute names are cut
	maxAttrs     = 64       // further attributes of a tag are dropped
	maxAttrValue = 64 << 10 // further bytes of an attribute value are dropped
)

// rawText reports the elements whose content is text up to their end tag,
// not markup.
func rawText(name string) bool {
	switch name {
	case "script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes", "noscript", "plaintext":
		return true
	}
	return false
}

// rcdata reports the raw-text elements whose text has character references.
func rcdata(name string) bool { return name == "textarea" || name == "title" }

type attr struct{ key, val []byte }

// Tokenizer reads tokens from an io.Reader. The byte slices it returns are
// valid until the next call to Next.
type Tokenizer struct {
	r   *bufio.Reader
	err error

	tt    TokenType
	text  []byte
	name  []byte
	attrs []attr
	next  int // the next attribute TagAttr returns

	raw    string // the raw-text element whose content comes next ("" for none)
	endTag bool   // its end tag comes next, after the "<" already read

	buf  []byte // text and the tag's name
	abuf []byte // the tag's attribute keys and values
}

// NewTokenizer returns a tokenizer reading r.
func NewTokenizer(r io.Reader) *Tokenizer {
	return &Tokenizer{r: bufio.NewReaderSize(r, 8<<10)}
}

// Err is the error that ended the input: io.EOF at its end.
func (z *Tokenizer) Err() error { return z.err }

// Text is a text token's text, character references decoded (but in
// script, style and the like) and line breaks normalised to "\n".
func (z *Tokenizer) Text() []byte {
	if z.tt == TextToken {
		return z.text
	}
	return nil
}

// TagName is a tag's lowercased name and whether it has attributes.
func (z *Tokenizer) TagName() (name []byte, hasAttr bool) {
	switch z.tt {
	case StartTagToken, EndTagToken, SelfClosingTagToken:
		return z.name, len(z.attrs) > 0
	}
	return nil, false
}

// TagAttr returns the next attribute of a start tag, its key lowercased and
// its value decoded, and whether more follow.
func (z *Tokenizer) TagAttr() (key, val []byte, more bool) {
	if z.next >= len(z.attrs) {
		return nil, nil, false
	}
	a := z.attrs[z.next]
	z.next++
	return a.key, a.val, z.next < len(z.attrs)
}

// Next reads the next token.
func (z *Tokenizer) Next() TokenType {
	z.tt = z.read()
	return z.tt
}

func (z *Tokenizer) read() TokenType {
	z.text, z.name, z.attrs, z.next = nil, nil, z.attrs[:0], 0
	if z.err != nil {
		return ErrorToken
	}
	if z.raw != "" {
		if tt, ok := z.readRaw(); ok {
			return tt
		}
	}
	if z.endTag {
		z.endTag = false
		z.r.ReadByte() // the "/" atEndTag saw
		return z.readEndTag()
	}
	for {
		c, err := z.r.ReadByte()
		if err != nil {
			z.err = err
			return ErrorToken
		}
		if c != '<' {
			z.r.UnreadByte()
			return z.readText()
		}
		p, _ := z.r.Peek(2)
		switch {
		case len(p) == 0:
			z.buf = append(z.buf[:0], '<')
			z.text = z.buf
			return TextToken
		case isLetter(p[0]):
			return z.readStartTag()
		case p[0] == '/' && len(p) > 1 && isLetter(p[1]):
			z.r.ReadByte()
			return z.readEndTag()
		case p[0] == '/' && len(p) > 1 && p[1] == '>':
			z.r.Discard(2) // "</>" is nothing
			continue
		case p[0] == '!' || p[0] == '?' || p[0] == '/':
			z.skipMarkup()
			return CommentToken
		default:
			// A "<" that opens no tag is text.
			z.buf = append(z.buf[:0], '<')
			return z.readTextInto()
		}
	}
}

// readText reads text up to the next "<", in pieces.
func (z *Tokenizer) readText() TokenType {
	z.buf = z.buf[:0]
	return z.readTextInto()
}

func (z *Tokenizer) readTextInto() TokenType {
	for {
		c, err := z.r.ReadByte()
		if err != nil {
			z.err = err // the text so far; the error ends the next token
			break
		}
		if c == '<' {
			z.r.UnreadByte()
			break
		}
		if len(z.buf) >= textChunk && (isSpace(c) || len(z.buf) >= maxText && c&0xC0 != 0x80) {
			z.r.UnreadByte() // cut before it: "\r\n" and characters stay whole
			break
		}
		z.buf = append(z.buf, c)
	}
	z.text = decodeText(normalizeNewlines(z.buf), true)
	return TextToken
}

// readRaw reads a raw-text element's content up to its end tag, which it
// leaves for the next token; ok is false when no text precedes it.
func (z *Tokenizer) readRaw() (TokenType, bool) {
	z.buf = z.buf[:0]
	decode := rcdata(z.raw)
	for {
		c, err := z.r.ReadByte()
		if err != nil {
			z.err = err // ends the next token
			break
		}
		if c == '<' && z.raw != "plaintext" && z.atEndTag() {
			// Its "<" is read (and cannot be unread after a Peek): the
			// next token is the end tag.
			z.raw, z.endTag = "", true
			break
		}
		if len(z.buf) >= textChunk && (isSpace(c) || len(z.buf) >= maxText && c&0xC0 != 0x80) {
			z.r.UnreadByte()
			break
		}
		z.buf = append(z.buf, c)
	}
	if len(z.buf) == 0 {
		return 0, false
	}
	z.text = decodeText(normalizeNewlines(z.buf), decode)
	return TextToken, true
}

// atEndTag reports whether "/name" of the raw element follows, then white
// space, "/" or ">" (after the "<" just read).
func (z *Tokenizer) atEndTag() bool {
	n := len(z.raw)
	p, _ := z.r.Peek(n + 2)
	if len(p) < n+1 || p[0] != '/' || !bytes.EqualFold(p[1:n+1], []byte(z.raw)) {
		return false
	}
	return len(p) == n+1 || isSpace(p[n+1]) || p[n+1] == '/' || p[n+1] == '>'
}

// readStartTag reads a start tag after its "<".
func (z *Tokenizer) readStartTag() TokenType {
	z.buf = z.readName(z.buf[:0])
	z.name = z.buf
	z.abuf = z.abuf[:0]
	type span struct{ k0, k1, v0, v1 int }
	var spans [maxAttrs]span
	n := 0
	selfClosing := false
	for {
		c, err := z.r.ReadByte()
		if err != nil {
			z.err = err
			return ErrorToken // a tag cut by the end of the input is dropped
		}
		switch {
		case c == '>':
			goto done
		case isSpace(c):
			continue
		case c == '/':
			if p, _ := z.r.Peek(1); len(p) == 1 && p[0] == '>' {
				z.r.ReadByte()
				selfClosing = true
				goto done
			}
			continue
		}
		z.r.UnreadByte()
		k0 := len(z.abuf)
		z.abuf = z.readName(z.abuf)
		k1 := len(z.abuf)
		v0, v1, ok := z.readValue()
		if !ok {
			return ErrorToken
		}
		if n < maxAttrs && k1 > k0 {
			spans[n] = span{k0, k1, v0, v1}
			n++
		} else {
			z.abuf = z.abuf[:k0]
		}
	}
done:
	for _, s := range spans[:n] {
		z.attrs = append(z.attrs, attr{key: z.abuf[s.k0:s.k1], val: decodeAttr(normalizeNewlines(z.abuf[s.v0:s.v1]))})
	}
	if name := string(z.name); rawText(name) {
		// A browser ignores "/>" on these: their content follows anyway.
		z.raw = name
		return StartTagToken
	}
	if selfClosing {
		return SelfClosingTagToken
	}
	return StartTagToken
}

// readName reads a tag or attribute name, lowercased, up to white space,
// "/", ">" or (for attributes, after the first byte) "=".
func (z *Tokenizer) readName(dst []byte) []byte {
	start := len(dst)
	for {
		c, err := z.r.ReadByte()
		if err != nil {
			return dst
		}
		if isSpace(c) || c == '/' || c == '>' || (c == '=' && len(dst) > start) {
			z.r.UnreadByte()
			return dst
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if len(dst)-start < maxName {
			dst = append(dst, c)
		}
	}
}

// readValue reads an attribute's "= value" if one follows, appending the
// raw value to abuf; ok is false at the end of the input.
func (z *Tokenizer) readValue() (v0, v1 int, ok bool) {
	v0 = len(z.abuf)
	c, err := z.skipSpace()
	if err != nil {
		z.err = err
		return 0, 0, false
	}
	if c != '=' {
		z.r.UnreadByte()
		return v0, v0, true
	}
	if c, err = z.skipSpace(); err != nil {
		z.err = err
		return 0, 0, false
	}
	keep := func(c byte) {
		if len(z.abuf)-v0 < maxAttrValue {
			z.abuf = append(z.abuf, c)
		}
	}
	switch c {
	case '"', '\'':
		quote := c
		for {
			if c, err = z.r.ReadByte(); err != nil {
				z.err = err
				return 0, 0, false
			}
			if c == quote {
				return v0, len(z.abuf), true
			}
			keep(c)
		}
	case '>':
		z.r.UnreadByte()
		return v0, v0, true
	}
	for {
		keep(c)
		if c, err = z.r.ReadByte(); err != nil {
			z.err = err
			return 0, 0, false
		}
		if isSpace(c) || c == '>' {
			z.r.UnreadByte()
			return v0, len(z.abuf), true
		}
	}
}

func (z *Tokenizer) skipSpace() (byte, error) {
	for {
		c, err := z.r.ReadByte()
		if err != nil || !isSpace(c) {
			return c, err
		}
	}
}

// readEndTag reads an end tag after its "</"; its attributes are ignored.
func (z *Tokenizer) readEndTag() TokenType {
	z.buf = z.readName(z.buf[:0])
	z.name = z.buf
	var quote byte
	for {
		c, err := z.r.ReadByte()
		if err != nil {
			z.err = err
			return ErrorToken
		}
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '>':
			return EndTagToken
		}
	}
}

// skipMarkup skips a comment ("<!--" to "-->"), a doctype or another "<!",
// "<?" or "</" that is no tag, up to its end.
func (z *Tokenizer) skipMarkup() {
	if p, _ := z.r.Peek(3); bytes.Equal(p, []byte("!--")) {
		z.r.Discard(3)
		// "<!-->" and "<!--->" are whole comments already.
		if p, _ := z.r.Peek(1); bytes.Equal(p, []byte(">")) {
			z.r.Discard(1)
			return
		}
		if p, _ := z.r.Peek(2); bytes.Equal(p, []byte("->")) {
			z.r.Discard(2)
			return
		}
		dashes := 0
		for {
			c, err := z.r.ReadByte()
			if err != nil {
				z.err = err
				return
			}
			switch {
			case c == '-':
				dashes++
				continue
			case c == '>' && dashes >= 2:
				return
			case c == '!' && dashes >= 2:
				if p, _ := z.r.Peek(1); bytes.Equal(p, []byte(">")) {
					z.r.Discard(1)
					return
				}
			}
			dashes = 0
		}
	}
	for {
		c, err := z.r.ReadByte()
		if err != nil {
			z.err = err
			return
		}
		if c == '>' {
			return
		}
	}
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f'
}

func isAlnum(c byte) bool { return isLetter(c) || '0' <= c && c <= '9' }

// normalizeNewlines turns "\r\n" and lone "\r" into "\n", in place.
func normalizeNewlines(b []byte) []byte {
	if bytes.IndexByte(b, '\r') < 0 {
		return b
	}
	out := b[:0]
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c == '\r' {
			c = '\n'
			if i+1 < len(b) && b[i+1] == '\n' {
				i++
			}
		}
		out = append(out, c)
	}
	return out
}

// decodeText decodes character references in text when decode is set.
func decodeText(b []byte, decode bool) []byte {
	if !decode || bytes.IndexByte(b, '&') < 0 {
		return b
	}
	return []byte(html.UnescapeString(string(b)))
}

// decodeAttr decodes character references in an attribute value as a
// browser does: a named reference counts only when its whole name is one,
// and one without ";" followed by "=" stays as it is ("?a=1&copy=2" in a
// URL keeps its "&copy").
func decodeAttr(b []byte) []byte {
	if bytes.IndexByte(b, '&') < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		if b[i] != '&' {
			out = append(out, b[i])
			i++
			continue
		}
		j := i + 1
		if j < len(b) && b[j] == '#' {
			// A numeric reference: "&#", an optional "x", digits, ";".
			j++
			if j < len(b) && (b[j] == 'x' || b[j] == 'X') {
				j++
			}
			for j < len(b) && isAlnum(b[j]) {
				j++
			}
			if j < len(b) && b[j] == ';' {
				j++
			}
			out = append(out, html.UnescapeString(string(b[i:j]))...)
			i = j
			continue
		}
		for j < len(b) && isAlnum(b[j]) {
			j++
		}
		semi := j < len(b) && b[j] == ';'
		if semi {
			j++
		}
		ref := b[i:j]
		if j == i+1 || !semi && j < len(b) && b[j] == '=' {
			out = append(out, ref...)
			i = j
			continue
		}
		// The standard library also decodes a known name's prefix
		// ("&copyx" as "©x"), which a browser does not do in attributes;
		// what is left of the name then shows as letters or digits, which
		// no named reference stands for.
		if d := html.UnescapeString(string(ref)); d != string(ref) && !hasAlnum(d) {
			out = append(out, d...)
		} else {
			out = append(out, ref...)
		}
		i = j
	}
	return out
}

func hasAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		if isAlnum(s[i]) {
			return true
		}
	}
	return false
}
