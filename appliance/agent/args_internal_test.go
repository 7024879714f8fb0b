package agent

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCompactArgs(t *testing.T) {
	small := `{"path":"notes.txt","content":"hello"}`
	if got := compactArgs(small); got != small {
		t.Errorf("small arguments changed: %s", got)
	}
	long := strings.Repeat("é", 20000) // 40,000 bytes, two per character
	args, _ := json.Marshal(map[string]any{"path": "big.txt", "content": long, "mode": 420, "lines": []any{"short", long}, "opts": map[string]any{"body": long, "n": 1.5e300}})
	got := compactArgs(string(args))
	if len(got) > 5*argsStringKeep+1000 {
		t.Errorf("compacted to %d bytes", len(got))
	}
	var v struct {
		Path    string         `json:"path"`
		Content string         `json:"content"`
		Mode    json.Number    `json:"mode"`
		Lines   []string       `json:"lines"`
		Opts    map[string]any `json:"opts"`
	}
	d := json.NewDecoder(strings.NewReader(got))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("not a JSON object any more: %v\n%s", err, got)
	}
	if v.Path != "big.txt" || v.Mode != "420" || v.Lines[0] != "short" || v.Opts["n"] != json.Number("1.5e+300") {
		t.Errorf("short values changed: %+v", v)
	}
	for _, s := range []string{v.Content, v.Lines[1], v.Opts["body"].(string)} {
		if !strings.HasPrefix(s, long[:argsStringKeep]) || !strings.Contains(s, "38976 more bytes, cut from the history") || !utf8.ValidString(s) {
			t.Errorf("a long string became %.80q…", s)
		}
	}
	// Not an object (the tool refused it): a note with its beginning.
	bad := strings.Repeat("x", argsKeep+1)
	var note map[string]string
	if err := json.Unmarshal([]byte(compactArgs(bad)), &note); err != nil || !strings.HasPrefix(note["cut"], "xxx") {
		t.Errorf("arguments that are no object: %v %v", note, err)
	}
}
