package sandbox

import (
	"strconv"
	"strings"
)

// A small shell lexer for the deny list: enough of POSIX sh and bash to
// find every command a line runs (quotes, escapes, $'…', $(…), `…`, <(…),
// operators, redirections, groups). It errs towards seeing more commands
// than the shell would, never fewer.

// tok is a lexical token: a word (quotes removed) or an operator.
type tok struct {
	text   string
	op     bool // ; & | && || |& ( ) newline, or a redirection
	redir  bool // the operator is a redirection; the next word is its target
	quoted bool // the word had quotes or escapes: not a reserved word, no brace expansion
}

// subst stands for a $(…) or `…` in a word: its value is unknown here (the
// inner command is checked on its own).
const subst = "$(…)"

// lex splits a line into tokens and collects the command
// strings of substitutions for separate checking. It never fails: unclosed
// quotes run to the end, as a shell would complain and run nothing.
func lex(s string) (toks []tok, subs []string) {
	var w strings.Builder
	inWord, quoted := false, false
	flush := func() {
		if inWord {
			toks = append(toks, tok{text: w.String(), quoted: quoted})
		}
		w.Reset()
		inWord, quoted = false, false
	}
	op := func(text string, redir bool) {
		flush()
		toks = append(toks, tok{text: text, op: true, redir: redir})
	}
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			flush()
			i++
		case c == '\n':
			op("\n", false)
			i++
		case c == '#' && !inWord:
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '\\':
			inWord, quoted = true, true
			if i+1 < len(s) {
				if s[i+1] != '\n' {
					w.WriteByte(s[i+1])
				}
				i += 2
			} else {
				i++
			}
		case c == '\'':
			inWord, quoted = true, true
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				w.WriteString(s[i+1:])
				i = len(s)
			} else {
				w.WriteString(s[i+1 : i+1+end])
				i += end + 2
			}
		case c == '"':
			inWord, quoted = true, true
			i = lexDouble(s, i+1, &w, &subs)
		case c == '$' && i+1 < len(s) && s[i+1] == '\'':
			inWord, quoted = true, true
			i = lexANSIC(s, i+2, &w)
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			inner, next := matchParen(s, i+2)
			subs = append(subs, inner)
			inWord = true
			w.WriteString(subst)
			i = next
		case c == '`':
			inner, next := matchBacktick(s, i+1)
			subs = append(subs, inner)
			inWord = true
			w.WriteString(subst)
			i = next
		case (c == '<' || c == '>') && i+1 < len(s) && s[i+1] == '(':
			inner, next := matchParen(s, i+2)
			subs = append(subs, inner)
			inWord = true
			w.WriteString(subst)
			i = next
		case c == '<' || c == '>':
			if inWord && !quoted && isDigits(w.String()) {
				w.Reset() // an fd number: 2>file
				inWord = false
			}
			text := redirOp(s[i:])
			op(text, true)
			i += len(text)
		case c == '&':
			switch {
			case strings.HasPrefix(s[i:], "&>>"):
				op("&>>", true)
				i += 3
			case strings.HasPrefix(s[i:], "&>"):
				op("&>", true)
				i += 2
			case strings.HasPrefix(s[i:], "&&"):
				op("&&", false)
				i += 2
			default:
				op("&", false)
				i++
			}
		case c == '|':
			switch {
			case strings.HasPrefix(s[i:], "||"), strings.HasPrefix(s[i:], "|&"):
				op(s[i:i+2], false)
				i += 2
			default:
				op("|", false)
				i++
			}
		case c == ';':
			op(";", false)
			i++
			for i < len(s) && (s[i] == ';' || s[i] == '&') { // ;; ;& ;;& of case
				i++
			}
		case c == '(' || c == ')':
			op(string(c), false)
			i++
		default:
			inWord = true
			w.WriteByte(c)
			i++
		}
	}
	flush()
	return toks, subs
}

func redirOp(s string) string {
	for _, o := range []string{"<<<", "<<-", ">>", ">|", ">&", "<<", "<>", "<&", ">", "<"} {
		if strings.HasPrefix(s, o) {
			return o
		}
	}
	return s[:1]
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// lexDouble reads a double-quoted string starting after the quote and
// returns the index after the closing quote.
func lexDouble(s string, i int, w *strings.Builder, subs *[]string) int {
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"':
			return i + 1
		case c == '\\' && i+1 < len(s):
			switch s[i+1] {
			case '"', '\\', '$', '`':
				w.WriteByte(s[i+1])
			case '\n':
			default:
				w.WriteByte('\\')
				w.WriteByte(s[i+1])
			}
			i += 2
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			inner, next := matchParen(s, i+2)
			*subs = append(*subs, inner)
			w.WriteString(subst)
			i = next
		case c == '`':
			inner, next := matchBacktick(s, i+1)
			*subs = append(*subs, inner)
			w.WriteString(subst)
			i = next
		default:
			w.WriteByte(c)
			i++
		}
	}
	return i
}

// lexANSIC decodes a $'…' string starting after the opening quote.
func lexANSIC(s string, i int, w *strings.Builder) int {
	for i < len(s) {
		c := s[i]
		if c == '\'' {
			return i + 1
		}
		if c != '\\' || i+1 >= len(s) {
			w.WriteByte(c)
			i++
			continue
		}
		e := s[i+1]
		i += 2
		switch e {
		case 'n':
			w.WriteByte('\n')
		case 't':
			w.WriteByte('\t')
		case 'r':
			w.WriteByte('\r')
		case 'x':
			j := i
			for j < len(s) && j < i+2 && isHex(s[j]) {
				j++
			}
			if v, err := strconv.ParseUint(s[i:j], 16, 8); err == nil {
				w.WriteByte(byte(v))
			}
			i = j
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i - 1
			for j < len(s) && j < i+2 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			if v, err := strconv.ParseUint(s[i-1:j], 8, 16); err == nil {
				w.WriteByte(byte(v))
			}
			i = j
		default:
			w.WriteByte(e)
		}
	}
	return i
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// matchParen returns the text up to the ')' that closes a '(' just before i,
// and the index after it; quotes and nested parentheses are skipped.
func matchParen(s string, i int) (string, int) {
	depth := 1
	start := i
	for i < len(s) {
		switch s[i] {
		case '\\':
			i++
		case '\'':
			if end := strings.IndexByte(s[i+1:], '\''); end >= 0 {
				i += end + 1
			} else {
				i = len(s)
			}
		case '"':
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return s[start:i], i + 1
			}
		}
		i++
	}
	return s[start:min(i, len(s))], len(s)
}

func matchBacktick(s string, i int) (string, int) {
	var b strings.Builder
	for i < len(s) {
		switch c := s[i]; {
		case c == '`':
			return b.String(), i + 1
		case c == '\\' && i+1 < len(s) && (s[i+1] == '`' || s[i+1] == '\\' || s[i+1] == '$'):
			b.WriteByte(s[i+1])
			i += 2
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), i
}

// simpleCmd is one command: its words and the targets of its redirections.
type simpleCmd struct {
	words   []string
	targets []string
}

// simpleCommands splits tokens at operators. Unquoted { and } words end a
// command too (they open and close groups and function bodies).
func simpleCommands(toks []tok) []simpleCmd {
	var out []simpleCmd
	var cur simpleCmd
	end := func() {
		if len(cur.words) > 0 || len(cur.targets) > 0 {
			out = append(out, cur)
		}
		cur = simpleCmd{}
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.redir:
			if i+1 < len(toks) && !toks[i+1].op {
				cur.targets = append(cur.targets, toks[i+1].text)
				i++
			}
		case t.op:
			end()
		case !t.quoted && (t.text == "{" || t.text == "}"):
			end()
		default:
			cur.words = append(cur.words, expandBraces(t)...)
		}
	}
	end()
	return out
}

// expandBraces turns an unquoted {a,b,c} word into its parts, as bash does
// ({rm,-rf,x} runs rm -rf x).
func expandBraces(t tok) []string {
	s := t.text
	if t.quoted || len(s) < 3 || s[0] != '{' || s[len(s)-1] != '}' || !strings.Contains(s, ",") {
		return []string{s}
	}
	return strings.Split(s[1:len(s)-1], ",")
}
