package firstboot

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file reads the subset of YAML that cloud-init seed files use, as
// Raspberry Pi Imager writes them: block mappings and sequences (including
// "key:" followed by "- item" at the same indentation), plain, single- and
// double-quoted scalars, literal and folded block scalars, one-line flow
// sequences and mappings, and comments. Anchors, aliases, tags, multi-line
// quoted or flow values and multiple documents are refused with the line
// number, rather than misread.
//
// A full YAML library (gopkg.in/yaml.v3) would add about 0.7 MiB to the
// arm64 binary for two small files whose writer is known; this reader is a
// few hundred lines and has its own tests and fuzz target.

// ErrYAML marks a seed file this reader cannot parse.
var ErrYAML = errors.New("yaml")

type nodeKind int

const (
	nullNode nodeKind = iota
	scalarNode
	mapNode
	seqNode
)

// node is one parsed YAML value. Mappings keep their keys in order.
type node struct {
	kind  nodeKind
	line  int
	str   string // scalarNode
	keys  []string
	vals  []*node
	items []*node
	// quoted scalars are strings whatever they spell ("true" stays text).
	quoted bool
}

// get returns the value of key in a mapping, or nil.
func (n *node) get(key string) *node {
	if n == nil || n.kind != mapNode {
		return nil
	}
	for i, k := range n.keys {
		if k == key {
			return n.vals[i]
		}
	}
	return nil
}

// text returns a scalar's text; ok is false for mappings and sequences.
func (n *node) text() (string, bool) {
	if n == nil || n.kind == nullNode {
		return "", true
	}
	if n.kind != scalarNode {
		return "", false
	}
	return n.str, true
}

// boolean reads YAML 1.1 truth values, as cloud-init (PyYAML) does.
func (n *node) boolean() (v, ok bool) {
	if n == nil || n.kind == nullNode {
		return false, true
	}
	if n.kind != scalarNode || n.quoted {
		return false, false
	}
	switch strings.ToLower(n.str) {
	case "true", "yes", "on", "y":
		return true, true
	case "false", "no", "off", "n":
		return false, true
	}
	return false, false
}

func (k nodeKind) String() string {
	switch k {
	case scalarNode:
		return "a single value"
	case mapNode:
		return "a mapping (key: value lines)"
	case seqNode:
		return "a list (- item lines)"
	}
	return "empty"
}

type yline struct {
	no     int    // 1-based line number
	indent int    // leading spaces
	text   string // the line after its indentation, trailing spaces removed
}

type yparser struct {
	lines []yline
	pos   int
}

// parseYAML parses one document of the subset.
func parseYAML(data []byte) (*node, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: the file is not UTF-8 text", ErrYAML)
	}
	s := strings.TrimPrefix(string(data), "\ufeff")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	p := &yparser{}
	for i, raw := range strings.Split(s, "\n") {
		body := strings.TrimLeft(raw, " ")
		p.lines = append(p.lines, yline{no: i + 1, indent: len(raw) - len(body), text: strings.TrimRight(body, " \t")})
	}
	p.skipBlank()
	if p.pos < len(p.lines) && isDocMarker(p.lines[p.pos].text, "---") {
		p.pos++
	}
	root, err := p.parseNode(0)
	if err != nil {
		return nil, err
	}
	p.skipBlank()
	if p.pos < len(p.lines) && isDocMarker(p.lines[p.pos].text, "...") {
		p.pos++
		p.skipBlank()
	}
	if p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if isDocMarker(l.text, "---") {
			return nil, fmt.Errorf("%w: line %d: a second document (---); put everything in one", ErrYAML, l.no)
		}
		return nil, fmt.Errorf("%w: line %d: unexpected indentation or text %q", ErrYAML, l.no, clip(l.text))
	}
	return root, nil
}

func isDocMarker(text, m string) bool {
	return text == m || strings.HasPrefix(text, m+" ")
}

// structural returns the line at pos, refusing tab indentation there (tabs
// are allowed only inside block scalars).
func (p *yparser) structural() (yline, error) {
	l := p.lines[p.pos]
	if strings.HasPrefix(l.text, "\t") {
		return l, fmt.Errorf("%w: line %d: a tab in the indentation (YAML indents with spaces)", ErrYAML, l.no)
	}
	return l, nil
}

// atDocEnd reports whether the next line ends the document (--- or ...).
func (p *yparser) atDocEnd() bool {
	if p.pos >= len(p.lines) {
		return true
	}
	l := p.lines[p.pos]
	return l.indent == 0 && (isDocMarker(l.text, "---") || isDocMarker(l.text, "..."))
}

// skipBlank moves past empty lines and comment lines.
func (p *yparser) skipBlank() {
	for p.pos < len(p.lines) {
		t := strings.TrimLeft(p.lines[p.pos].text, "\t ")
		if t != "" && !strings.HasPrefix(t, "#") {
			return
		}
		p.pos++
	}
}

// parseNode parses the block that starts at the next content line, which
// must be indented at least min spaces; a less indented line means the
// value is empty.
func (p *yparser) parseNode(min int) (*node, error) {
	p.skipBlank()
	if p.atDocEnd() {
		return &node{}, nil
	}
	l, err := p.structural()
	if err != nil {
		return nil, err
	}
	if l.indent < min {
		return &node{line: l.no}, nil
	}
	if isSeqItem(l.text) {
		return p.parseSeq(l.indent)
	}
	if _, _, ok, err := splitKey(l.text, l.no); err != nil {
		return nil, err
	} else if ok {
		return p.parseMap(l.indent)
	}
	// A lone scalar (a document that is just a value).
	p.pos++
	return parseInline(l.text, l.no)
}

func isSeqItem(text string) bool { return text == "-" || strings.HasPrefix(text, "- ") }

func (p *yparser) parseMap(indent int) (*node, error) {
	n := &node{kind: mapNode, line: p.lines[p.pos].no}
	for {
		p.skipBlank()
		if p.atDocEnd() {
			return n, nil
		}
		l, err := p.structural()
		if err != nil {
			return nil, err
		}
		if l.indent < indent {
			return n, nil
		}
		if l.indent > indent {
			return nil, fmt.Errorf("%w: line %d: indented more than the key above it", ErrYAML, l.no)
		}
		if isSeqItem(l.text) {
			return nil, fmt.Errorf("%w: line %d: a list item where a key was expected", ErrYAML, l.no)
		}
		key, rest, ok, err := splitKey(l.text, l.no)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: line %d: expected \"key: value\", got %q", ErrYAML, l.no, clip(l.text))
		}
		for _, k := range n.keys {
			if k == key {
				return nil, fmt.Errorf("%w: line %d: key %q appears twice", ErrYAML, l.no, key)
			}
		}
		var val *node
		switch {
		case rest == "" || strings.HasPrefix(rest, "#"):
			p.pos++
			p.skipBlank()
			if p.pos < len(p.lines) && p.lines[p.pos].indent == indent && isSeqItem(p.lines[p.pos].text) {
				// "key:" with its list at the key's own indentation.
				val, err = p.parseSeq(indent)
			} else {
				val, err = p.parseNode(indent + 1)
			}
		case rest[0] == '|' || rest[0] == '>':
			val, err = p.parseBlockScalar(indent, rest, l.no)
		default:
			p.pos++
			val, err = parseInline(rest, l.no)
		}
		if err != nil {
			return nil, err
		}
		n.keys = append(n.keys, key)
		n.vals = append(n.vals, val)
	}
}

func (p *yparser) parseSeq(indent int) (*node, error) {
	n := &node{kind: seqNode, line: p.lines[p.pos].no}
	for {
		p.skipBlank()
		if p.atDocEnd() {
			return n, nil
		}
		l, err := p.structural()
		if err != nil {
			return nil, err
		}
		if l.indent < indent || (l.indent == indent && !isSeqItem(l.text)) {
			return n, nil
		}
		if l.indent > indent {
			return nil, fmt.Errorf("%w: line %d: indented more than the list item above it", ErrYAML, l.no)
		}
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		var item *node
		switch {
		case rest == "" || strings.HasPrefix(rest, "#"):
			p.pos++
			item, err = p.parseNode(indent + 1)
		case rest[0] == '|' || rest[0] == '>':
			item, err = p.parseBlockScalar(indent, rest, l.no)
		default:
			// "- key: value" or "- - x": the item's block starts where
			// its text does; reparse the line from there.
			col := l.indent + len(l.text) - len(rest)
			_, _, isKey, kerr := splitKey(rest, l.no)
			if kerr != nil {
				return nil, kerr
			}
			if isKey || isSeqItem(rest) {
				p.lines[p.pos] = yline{no: l.no, indent: col, text: rest}
				item, err = p.parseNode(col)
			} else {
				p.pos++
				item, err = parseInline(rest, l.no)
			}
		}
		if err != nil {
			return nil, err
		}
		n.items = append(n.items, item)
	}
}

// parseBlockScalar reads a | or > scalar whose lines are indented more than
// parent; the current line holds the header.
func (p *yparser) parseBlockScalar(parent int, header string, no int) (*node, error) {
	h := header
	if i := strings.Index(h, " #"); i >= 0 {
		h = strings.TrimRight(h[:i], " ")
	}
	folded := h[0] == '>'
	chomp, explicit := byte(0), 0
	for _, c := range []byte(h[1:]) {
		switch {
		case (c == '-' || c == '+') && chomp == 0:
			chomp = c
		case c >= '1' && c <= '9' && explicit == 0:
			explicit = int(c - '0')
		default:
			return nil, fmt.Errorf("%w: line %d: bad block scalar header %q", ErrYAML, no, header)
		}
	}
	p.pos++
	indent := -1
	if explicit > 0 {
		indent = parent + explicit
	}
	var lines []string
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if l.text == "" {
			lines = append(lines, "")
			p.pos++
			continue
		}
		if indent < 0 {
			if l.indent <= parent {
				break
			}
			indent = l.indent
		}
		if l.indent < indent {
			break
		}
		lines = append(lines, strings.Repeat(" ", l.indent-indent)+l.text)
		p.pos++
	}
	// Trailing blank lines belong to chomping, not content.
	end := len(lines)
	for end > 0 && lines[end-1] == "" {
		end--
	}
	var b strings.Builder
	for i, s := range lines[:end] {
		switch {
		case !folded:
			if i > 0 {
				b.WriteByte('\n')
			}
		case s == "":
			// A blank line in folded text is a line break.
			b.WriteByte('\n')
			continue
		case i > 0 && lines[i-1] != "":
			if strings.HasPrefix(s, " ") || strings.HasPrefix(lines[i-1], " ") {
				b.WriteByte('\n') // more-indented lines keep their breaks
			} else {
				b.WriteByte(' ')
			}
		}
		b.WriteString(s)
	}
	out := b.String()
	switch chomp {
	case '-':
	case '+':
		if end > 0 {
			out += "\n" + strings.Repeat("\n", len(lines)-end)
		}
	default:
		if end > 0 {
			out += "\n"
		}
	}
	return &node{kind: scalarNode, line: no, str: out, quoted: true}, nil
}

// splitKey splits "key: rest". ok is false when text is not a mapping entry.
func splitKey(text string, no int) (key, rest string, ok bool, err error) {
	if text == "" {
		return "", "", false, nil
	}
	if text[0] == '"' || text[0] == '\'' {
		k, n, qerr := readQuoted(text, no)
		if qerr != nil {
			return "", "", false, qerr
		}
		after := strings.TrimLeft(text[n:], " ")
		if after == ":" || strings.HasPrefix(after, ": ") {
			return k, strings.TrimSpace(after[1:]), true, nil
		}
		return "", "", false, nil
	}
	if strings.ContainsRune("[{", rune(text[0])) {
		return "", "", false, nil
	}
	i := strings.Index(text, ": ")
	if i < 0 {
		if !strings.HasSuffix(text, ":") {
			return "", "", false, nil
		}
		i = len(text) - 1
	}
	key = strings.TrimRight(text[:i], " ")
	if strings.Contains(key, " #") || strings.HasPrefix(key, "#") {
		return "", "", false, nil // the colon is inside a comment
	}
	if key == "" || strings.ContainsAny(key[:1], "&*!|>%@`") || key == "?" {
		return "", "", false, fmt.Errorf("%w: line %d: unsupported YAML key %q", ErrYAML, no, clip(key))
	}
	return key, strings.TrimSpace(text[i+1:]), true, nil
}

// parseInline parses the value part of a line: a quoted or plain scalar or
// a one-line flow collection.
func parseInline(s string, no int) (*node, error) {
	if s == "" || strings.HasPrefix(s, "#") {
		return &node{line: no}, nil
	}
	switch s[0] {
	case '"', '\'':
		v, n, err := readQuoted(s, no)
		if err != nil {
			return nil, err
		}
		if err := onlyComment(s[n:], no); err != nil {
			return nil, err
		}
		return &node{kind: scalarNode, line: no, str: v, quoted: true}, nil
	case '[', '{':
		fp := &flowParser{s: s, no: no}
		v, err := fp.value()
		if err != nil {
			return nil, err
		}
		if err := onlyComment(s[fp.i:], no); err != nil {
			return nil, err
		}
		return v, nil
	case '&', '*', '!', '%', '@', '`':
		return nil, fmt.Errorf("%w: line %d: anchors, aliases and tags are not supported (%q)", ErrYAML, no, clip(s))
	}
	v := s
	if i := strings.Index(v, " #"); i >= 0 {
		v = v[:i]
	}
	v = strings.TrimSpace(v)
	if strings.Contains(v, ": ") || strings.HasSuffix(v, ":") {
		return nil, fmt.Errorf("%w: line %d: a value containing \": \" must be quoted (%q)", ErrYAML, no, clip(v))
	}
	if v == "~" || v == "null" || v == "Null" || v == "NULL" {
		return &node{line: no}, nil
	}
	return &node{kind: scalarNode, line: no, str: v}, nil
}

func onlyComment(rest string, no int) error {
	rest = strings.TrimLeft(rest, " ")
	if rest == "" || strings.HasPrefix(rest, "#") {
		return nil
	}
	return fmt.Errorf("%w: line %d: unexpected text after a quoted value: %q", ErrYAML, no, clip(rest))
}

// readQuoted reads a quoted scalar at the start of s and returns its value
// and the bytes it used. The closing quote must be on the same line.
func readQuoted(s string, no int) (string, int, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		if q == '\'' {
			if c == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				return b.String(), i + 1, nil
			}
			b.WriteByte(c)
			continue
		}
		switch c {
		case '"':
			return b.String(), i + 1, nil
		case '\\':
			if i+1 >= len(s) {
				return "", 0, fmt.Errorf("%w: line %d: a quoted value continues on the next line (not supported: keep it on one line)", ErrYAML, no)
			}
			i++
			switch e := s[i]; e {
			case '0':
				b.WriteByte(0)
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 't', '\t':
				b.WriteByte('\t')
			case 'n':
				b.WriteByte('\n')
			case 'v':
				b.WriteByte('\v')
			case 'f':
				b.WriteByte('\f')
			case 'r':
				b.WriteByte('\r')
			case 'e':
				b.WriteByte(0x1b)
			case ' ', '"', '/', '\\':
				b.WriteByte(e)
			case 'N':
				b.WriteString("\u0085")
			case '_':
				b.WriteString("\u00a0")
			case 'L':
				b.WriteString("\u2028")
			case 'P':
				b.WriteString("\u2029")
			case 'x', 'u', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if i+n >= len(s) {
					return "", 0, fmt.Errorf("%w: line %d: short \\%c escape", ErrYAML, no, e)
				}
				r, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
				if err != nil || !utf8.ValidRune(rune(r)) {
					return "", 0, fmt.Errorf("%w: line %d: bad \\%c escape %q", ErrYAML, no, e, s[i+1:i+1+n])
				}
				b.WriteRune(rune(r))
				i += n
			default:
				return "", 0, fmt.Errorf("%w: line %d: unknown escape \\%c in a double-quoted value", ErrYAML, no, e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, fmt.Errorf("%w: line %d: a quoted value is not closed on its line (multi-line quoted values are not supported)", ErrYAML, no)
}

// flowParser reads [a, b] and {k: v} on one line.
type flowParser struct {
	s  string
	i  int
	no int
}

func (f *flowParser) space() {
	for f.i < len(f.s) && f.s[f.i] == ' ' {
		f.i++
	}
}

func (f *flowParser) errorf(format string, a ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrYAML, f.no, fmt.Sprintf(format, a...))
}

func (f *flowParser) value() (*node, error) {
	f.space()
	if f.i >= len(f.s) {
		return nil, f.errorf("a [list] or {mapping} is not closed on its line (multi-line ones are not supported)")
	}
	switch c := f.s[f.i]; c {
	case '[':
		f.i++
		n := &node{kind: seqNode, line: f.no}
		for {
			f.space()
			if f.i < len(f.s) && f.s[f.i] == ']' {
				f.i++
				return n, nil
			}
			v, err := f.value()
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
			if err := f.sep(']'); err != nil {
				return nil, err
			}
		}
	case '{':
		f.i++
		n := &node{kind: mapNode, line: f.no}
		for {
			f.space()
			if f.i < len(f.s) && f.s[f.i] == '}' {
				f.i++
				return n, nil
			}
			k, err := f.scalar(true)
			if err != nil {
				return nil, err
			}
			f.space()
			if f.i >= len(f.s) || f.s[f.i] != ':' {
				return nil, f.errorf("expected ':' after key %q in a {mapping}", k.str)
			}
			f.i++
			v, err := f.value()
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, k.str)
			n.vals = append(n.vals, v)
			if err := f.sep('}'); err != nil {
				return nil, err
			}
		}
	default:
		return f.scalar(false)
	}
}

// sep consumes "," or leaves the closing bracket for the caller.
func (f *flowParser) sep(closer byte) error {
	f.space()
	if f.i >= len(f.s) {
		return f.errorf("a [list] or {mapping} is not closed on its line (multi-line ones are not supported)")
	}
	switch f.s[f.i] {
	case ',':
		f.i++
		return nil
	case closer:
		return nil
	}
	return f.errorf("expected ',' or '%c', got %q", closer, clip(f.s[f.i:]))
}

func (f *flowParser) scalar(isKey bool) (*node, error) {
	f.space()
	if f.i >= len(f.s) {
		return nil, f.errorf("a [list] or {mapping} is not closed on its line")
	}
	if c := f.s[f.i]; c == '"' || c == '\'' {
		v, n, err := readQuoted(f.s[f.i:], f.no)
		if err != nil {
			return nil, err
		}
		f.i += n
		return &node{kind: scalarNode, line: f.no, str: v, quoted: true}, nil
	}
	if strings.ContainsRune("&*!|>%@`", rune(f.s[f.i])) {
		return nil, f.errorf("anchors, aliases and tags are not supported (%q)", clip(f.s[f.i:]))
	}
	start := f.i
	for f.i < len(f.s) {
		c := f.s[f.i]
		if c == ',' || c == ']' || c == '}' || c == '[' || c == '{' {
			break
		}
		if c == ':' && (isKey || f.i+1 == len(f.s) || f.s[f.i+1] == ' ') {
			break
		}
		f.i++
	}
	v := strings.TrimSpace(f.s[start:f.i])
	if v == "" && !isKey {
		return &node{line: f.no}, nil
	}
	return &node{kind: scalarNode, line: f.no, str: v}, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
