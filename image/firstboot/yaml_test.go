package firstboot

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// plain turns a node into Go values for comparison: map[string]any (keys
// in any order), []any, string, nil.
func plain(n *node) any {
	switch n.kind {
	case scalarNode:
		return n.str
	case mapNode:
		m := map[string]any{}
		for i, k := range n.keys {
			m[k] = plain(n.vals[i])
		}
		return m
	case seqNode:
		a := []any{}
		for _, it := range n.items {
			a = append(a, plain(it))
		}
		return a
	}
	return nil
}

func TestYAMLSubset(t *testing.T) {
	tests := []struct {
		name, in string
		want     any
	}{
		{"empty", "", nil},
		{"comments only", "#cloud-config\n# nothing here\n", nil},
		{"document markers", "---\na: 1\n...\n", map[string]any{"a": "1"}},
		{"plain scalars and comments", "a: hello world # note\nb: x#y\nc: ALL=(ALL) NOPASSWD:ALL\n", map[string]any{"a": "hello world", "b": "x#y", "c": "ALL=(ALL) NOPASSWD:ALL"}},
		{"empty value and null", "a:\nb: ~\nc: null\n", map[string]any{"a": nil, "b": nil, "c": nil}},
		{"double quoted escapes", `a: "q\"u\\o\tte \u00e9 \x41"` + "\n", map[string]any{"a": "q\"u\\o\tte é A"}},
		{"single quoted", "a: 'it''s # not a comment'\n", map[string]any{"a": "it's # not a comment"}},
		{"quoted keys", `"Cafe \"Zur Post\"":` + "\n  password: x\n'it''s': y\n", map[string]any{`Cafe "Zur Post"`: map[string]any{"password": "x"}, "it's": "y"}},
		{"nested mappings", "a:\n  b:\n    c: d\n  e: f\ng: h\n", map[string]any{"a": map[string]any{"b": map[string]any{"c": "d"}, "e": "f"}, "g": "h"}},
		{"sequence at the key's indent", "packages:\n- avahi-daemon\n- vim\nnext: 1\n", map[string]any{"packages": []any{"avahi-daemon", "vim"}, "next": "1"}},
		{"indented sequence", "keys:\n    - a b c\n    - d\n", map[string]any{"keys": []any{"a b c", "d"}}},
		{"sequence of mappings", "users:\n- name: pi\n  groups: a,b\n  keys:\n    - k1\n- default\n- name: bo\n", map[string]any{"users": []any{
			map[string]any{"name": "pi", "groups": "a,b", "keys": []any{"k1"}}, "default", map[string]any{"name": "bo"}}}},
		{"nested sequences", "a:\n- - x\n  - y\n- z\n", map[string]any{"a": []any{[]any{"x", "y"}, "z"}}},
		{"literal block", "conf: |\n  Acquire {\n    Check-Date \"false\";\n  };\n\nnext: x\n", map[string]any{"conf": "Acquire {\n  Check-Date \"false\";\n};\n", "next": "x"}},
		{"literal block strip", "a: |-\n  one\n  two\n", map[string]any{"a": "one\ntwo"}},
		{"literal block keeps # and tabs", "a: |\n  # not a comment\n  \tx\n", map[string]any{"a": "# not a comment\n\tx\n"}},
		{"folded block", "a: >\n  one\n  two\n\n  three\n", map[string]any{"a": "one two\nthree\n"}},
		{"flow sequence", `runcmd:` + "\n  - [ sh, -c, \"echo 0 > \\\"$f\\\"\" ]\n  - [ rfkill, unblock, wifi ]\n", map[string]any{"runcmd": []any{
			[]any{"sh", "-c", `echo 0 > "$f"`}, []any{"rfkill", "unblock", "wifi"}}}},
		{"flow mapping", "chpasswd: { expire: false, list: [a, 'b'] }\n", map[string]any{"chpasswd": map[string]any{"expire": "false", "list": []any{"a", "b"}}}},
		{"empty flow", "a: []\nb: {}\n", map[string]any{"a": []any{}, "b": map[string]any{}}},
		{"crlf and bom", "\ufeffa: 1\r\nb: 2\r\n", map[string]any{"a": "1", "b": "2"}},
		{"urls are not keys", "url: http://x.example:8080/a\n", map[string]any{"url": "http://x.example:8080/a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := parseYAML([]byte(tt.in))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if got := plain(n); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

// TestYAMLRefusesWhatItCannotRead: constructs outside the subset fail with
// the line number instead of being misread.
func TestYAMLRefusesWhatItCannotRead(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"anchor", "a: &x 1\n", "line 1: anchors, aliases and tags"},
		{"alias", "a: 1\nb: *x\n", "line 2: anchors"},
		{"tag", "a: !!str 1\n", "line 1: anchors"},
		{"tab indent", "a:\n\tb: 1\n", "line 2: a tab in the indentation"},
		{"multi-line quoted", "a: \"one\n  two\"\n", "line 1: a quoted value is not closed"},
		{"multi-line flow", "a: [1,\n  2]\n", "line 1: a [list] or {mapping} is not closed"},
		{"second document", "a: 1\n---\nb: 2\n", "line 2: a second document"},
		{"bad indentation", "a: 1\n  b: 2\n", "line 2: indented more"},
		{"duplicate key", "a: 1\na: 2\n", `line 2: key "a" appears twice`},
		{"unquoted colon in value", "a: b: c\n", "line 1: a value containing"},
		{"text after quote", "a: \"x\" y\n", "line 1: unexpected text after a quoted value"},
		{"bad escape", `a: "\q"` + "\n", `line 1: unknown escape \q`},
		{"list where key expected", "a: 1\n- b\n", "line 2: a list item where a key was expected"},
		{"not utf-8", "a: \xff\n", "not UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseYAML([]byte(tt.in))
			if err == nil {
				t.Fatal("parsed; want an error")
			}
			if !errors.Is(err, ErrYAML) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q; want ErrYAML containing %q", err, tt.want)
			}
		})
	}
}

// FuzzYAML: any input parses or fails cleanly, never panics or loops.
func FuzzYAML(f *testing.F) {
	for _, s := range []string{
		"a: 1\n", "users:\n- name: pi\n  keys:\n    - k\n", "a: |\n  x\n", "a: [b, {c: d}]\n",
		`"k\"": "v"` + "\n", "- - - x\n", "a: >-\n\n  b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := parseYAML(data)
		if err == nil && n == nil {
			t.Fatal("nil node without an error")
		}
	})
}
