package config

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

var assignSeeds = []string{
	`{}`,
	`{"agents":{"defaults":{"model":"m","max_tokens":100,"temperature":0.5,"fallback_models":["a","b"]}}}`,
	`{"agents":{"defaults":{"max_tokens":1.5}}}`,
	`{"agents":{"defaults":{"max_tokens":1e3}}}`,
	`{"agents":{"defaults":{"max_tokens":99999999999999999999}}}`,
	`{"agents":{"defaults":{"temperature":1e400}}}`,
	`{"agents":{"defaults":{"temperature":"hot"}}}`,
	`{"agents":{"defaults":{"fallback_models":null}}}`,
	`{"agents":{"defaults":{"fallback_models":[]}}}`,
	`{"agents":{"defaults":{"fallback_models":[1]}}}`,
	`{"agents":{"defaults":{"fallback_models":"a"}}}`,
	`{"agents":{"defaults":{"model":null,"max_tokens":null}}}`,
	`{"agents":null}`,
	`{"agents":[]}`,
	`{"providers":{"openai":{"api_key":"sk-1","api_base":"http://x"}}}`,
	`{"providers":{"openai":{"api_key":null}}}`,
	`{"providers":{"openai":{"api_key":5}}}`,
	`{"providers":{"openai":{"api_key":{"a":1}}}}`,
	`{"gateway":{"port":"80","host":true}}`,
	`{"gateway":{"allowed_hosts":["a.local","b"],"api_token":"0123456789abcdef0123"}}`,
	`{"channels":{"telegram":{"enabled":"yes"}}}`,
	`{"channels":{"slack":{"allow_from":["U1"],"bot_token":"xoxb"}}}`,
	`{"sensors":[{"name":"a","type":"bme280","bus":"1","address":118}]}`,
	`{"sensors":{"sample_seconds":30,"parts":[{"name":"a","type":"bme280","bus":"1","address":"0x76"}]}}`,
	`{"sensors":{"sample_seconds":"x"}}`,
	`{"sensors":[{"name":"a","type":"bme280","bus":1,"address":118}]}`,
	`{"sensors":"bme280"}`,
	`{"sensors":null}`,
	`{"mqtt":{"broker":"mqtt://h","password":"p","enabled":true}}`,
	`{"heartbeat":{"interval":5}}`,
	`{"tools":{"exec":{"user":"nobody","timeout_seconds":-1},"web":{"search":{"api_key":"k"}}}}`,
	`{"devices":{}}`,
	"{\"agents\":{\"defaults\":{\"model\":\"\\u00e9\\ud800<>&\"}}}",
}

// FuzzAssignAgreesWithUnmarshal: for any file the key check lets through,
// assign leaves the same config as json.Unmarshal, which also goes on past a
// wrong type, and fails where it fails. Both name the first mistake they
// meet; json.Unmarshal meets them in the file's order, assign in the order
// of the fields, so the two errors are compared when the file has one.
// Duplicate keys are left out: json.Unmarshal decodes each (and reports a
// mistyped earlier one), the key check's map keeps the last.
func FuzzAssignAgreesWithUnmarshal(f *testing.F) {
	for _, s := range assignSeeds {
		f.Add([]byte(s))
	}
	full, err := Default().Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	f.Fuzz(func(t *testing.T, data []byte) {
		var raw any
		d := json.NewDecoder(bytes.NewReader(data))
		d.UseNumber()
		if d.Decode(&raw) != nil || !atEOF(d) || checkKeys(raw, reflect.TypeOf(Config{}), "") != nil || hasDuplicateKeys(data) {
			return // refused before either runs, or left out (above)
		}
		if _, ok := raw.(map[string]any); !ok {
			return
		}
		want, got := Default(), Default()
		werr := json.Unmarshal(data, want)
		gerr := assign(reflect.ValueOf(got).Elem(), raw, "")
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%s\njson.Unmarshal: %v\nassign: %v", data, werr, gerr)
		}
		wte, wok := werr.(*json.UnmarshalTypeError)
		gte, gok := gerr.(*json.UnmarshalTypeError)
		if werr != nil && !wok {
			// An error that stops json.Unmarshal (a sensors value of no
			// form) must stop assign with the same words.
			if werr.Error() != gerr.Error() {
				t.Fatalf("%s\njson.Unmarshal: %v\nassign: %v", data, werr, gerr)
			}
			return
		}
		if wok != gok {
			t.Fatalf("%s\njson.Unmarshal: %#v\nassign: %#v", data, werr, gerr)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%s\njson.Unmarshal: %#v\nassign: %#v", data, want, got)
		}
		if wok && mistakes(got, raw) == 1 && (wte.Field != withoutIndexes(gte.Field) || wte.Value != gte.Value || KindName(wte.Type) != KindName(gte.Type)) {
			t.Fatalf("%s\njson.Unmarshal: %v (%q %q %v)\nassign: %v (%q %q %v)", data, werr, wte.Field, wte.Value, wte.Type, gerr, gte.Field, gte.Value, gte.Type)
		}
	})
}

// withoutIndexes drops the [i] of array elements, which assign names and
// json.Unmarshal does not.
func withoutIndexes(path string) string {
	return regexp.MustCompile(`\[\d+\]`).ReplaceAllString(path, "")
}

// mistakes counts the wrong types in raw, assigning it again over a copy of
// cfg with each found mistake's value removed.
func mistakes(cfg *Config, raw any) int {
	n := 0
	for range 64 {
		c := *cfg
		var a assigner
		a.value(reflect.ValueOf(&c).Elem(), raw, "")
		if a.first == nil {
			return n
		}
		n++
		te, ok := a.first.(*json.UnmarshalTypeError)
		if !ok || !dropKey(raw, withoutIndexes(te.Field)) {
			return n + 1 // cannot tell: count it as more than one
		}
	}
	return n
}

// dropKey deletes the dotted key path from raw's objects; a path through
// an array drops the key from every element.
func dropKey(raw any, path string) bool {
	switch r := raw.(type) {
	case map[string]any:
		k, rest, deeper := strings.Cut(path, ".")
		if !deeper {
			_, ok := r[k]
			delete(r, k)
			return ok
		}
		return dropKey(r[k], rest)
	case []any:
		ok := false
		for _, e := range r {
			ok = dropKey(e, path) || ok
		}
		return ok
	}
	return false
}

func atEOF(d *json.Decoder) bool {
	_, err := d.Token()
	return err == io.EOF
}

// hasDuplicateKeys reports whether any object in data repeats a key.
func hasDuplicateKeys(data []byte) bool {
	d := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		keys  map[string]bool
		isObj bool
		key   bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{', '[':
				if top != nil && top.isObj {
					top.key = true
				}
				stack = append(stack, &frame{keys: map[string]bool{}, isObj: tok == '{', key: tok == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if top != nil && top.isObj && top.key {
				if top.keys[tok] {
					return true
				}
				top.keys[tok] = true
				top.key = false
				continue
			}
		}
		if top != nil && top.isObj {
			top.key = true
		}
	}
}
