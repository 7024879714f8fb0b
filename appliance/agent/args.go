package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// A tool call's arguments are kept in the history and sent to the model
// again with every later turn of the chat. A file the model wrote
// (write_file's content) or a long command would then be carried and
// paid for on every turn — a 3 MB argument read from the database, held
// in memory and sent each time, on a board with 512 MB. Once the tool has
// run, the model needs only to recognise what it asked: long strings in
// the arguments are kept as their beginning and a note of what was cut.

const (
	// argsKeep is the size up to which arguments are kept whole.
	argsKeep = 8 << 10
	// argsStringKeep is how much of a long string value is kept.
	argsStringKeep = 1 << 10
)

// compactArgs returns args for the history: unchanged up to argsKeep
// bytes; else a JSON object still, with each string value longer than
// argsStringKeep cut to its beginning and a note (providers that read the
// arguments as an object refuse anything else). Arguments that are not an
// object (the tool refused them) are kept as a note with their beginning.
func compactArgs(args string) string {
	if len(args) <= argsKeep {
		return args
	}
	d := json.NewDecoder(bytes.NewReader([]byte(args)))
	d.UseNumber()
	var v map[string]any
	if err := d.Decode(&v); err != nil || d.More() {
		return mustJSON(map[string]string{"cut": cutString(args)})
	}
	out, err := json.Marshal(compactValue(v))
	if err != nil {
		return mustJSON(map[string]string{"cut": cutString(args)})
	}
	return string(out)
}

func compactValue(v any) any {
	switch x := v.(type) {
	case string:
		if len(x) > argsStringKeep {
			return cutString(x)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = compactValue(e)
		}
	case []any:
		for i, e := range x {
			x[i] = compactValue(e)
		}
	}
	return v
}

// cutString is s's beginning, cut at a character's edge, and a note.
func cutString(s string) string {
	n := argsStringKeep
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s… [%d more bytes, cut from the history after the tool ran; the tool received them whole]", s[:n], len(s)-n)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "{}"
	}
	return string(b)
}

// A chat message or an answer is kept whole in the history up to these
// sizes. The history is read, held and sent again with every later turn of
// the chat, up to history_limit messages: a pasted log of 1 MB, a hundred
// times, was 800 MB of memory and 93 MB requests on a board with 512 MB.
// The model has the whole text in the turn that answers it; later turns
// see its beginning and how much was left out. Real answers are far
// shorter (a model's max_tokens), so replyKeep only bounds a provider that
// misbehaves.
const (
	userKeep  = 32 << 10
	replyKeep = 64 << 10
)

// keptText is s for the history: whole up to keep bytes, else its
// beginning, cut at a character's edge, and a note.
func keptText(s string, keep int) string {
	if len(s) <= keep {
		return s
	}
	n := keep
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s… [%d more bytes, kept out of the history after this was answered; the model had them whole then]", s[:n], len(s)-n)
}
