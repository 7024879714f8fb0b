package tools

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// testSchema has one property of every type the validator knows.
func testSchema() Schema {
	return Object(map[string]*Property{
		"path":   String("file path"),
		"mode":   String("how", "fast", "safe"),
		"count":  Integer("how many", Bound(1), Bound(10)),
		"level":  {Type: "integer", Enum: []any{0, 1, 2, 3}},
		"ratio":  {Type: "number", Minimum: Bound(0), Maximum: Bound(2)},
		"factor": {Type: "number", Enum: []any{0.5, 1.5}},
		"force":  Boolean("overwrite"),
		"data":   Array("bytes", Integer("a byte", Bound(0), Bound(255))),
		"tags":   Array("labels", nil),
		"meta":   {Type: "object"},
	}, "path")
}

func TestValidateAcceptsAndNormalises(t *testing.T) {
	tests := []struct {
		name string
		in   map[string]any
		want map[string]any
	}{
		{"only required", map[string]any{"path": "a.txt"}, map[string]any{"path": "a.txt"}},
		{"enum member", map[string]any{"path": "a", "mode": "safe"}, map[string]any{"path": "a", "mode": "safe"}},
		{"integer from JSON float", map[string]any{"path": "a", "count": 3.0}, map[string]any{"path": "a", "count": int64(3)}},
		{"integer from int64", map[string]any{"path": "a", "count": int64(10)}, map[string]any{"path": "a", "count": int64(10)}},
		{"integer from int", map[string]any{"path": "a", "count": 1}, map[string]any{"path": "a", "count": int64(1)}},
		{"integer enum member", map[string]any{"path": "a", "level": 2.0}, map[string]any{"path": "a", "level": int64(2)}},
		{"number stays float", map[string]any{"path": "a", "ratio": 1.5}, map[string]any{"path": "a", "ratio": 1.5}},
		{"number from int64", map[string]any{"path": "a", "ratio": int64(2)}, map[string]any{"path": "a", "ratio": 2.0}},
		{"number from int", map[string]any{"path": "a", "ratio": 1}, map[string]any{"path": "a", "ratio": 1.0}},
		{"number enum member", map[string]any{"path": "a", "factor": 1.5}, map[string]any{"path": "a", "factor": 1.5}},
		{"boolean", map[string]any{"path": "a", "force": true}, map[string]any{"path": "a", "force": true}},
		{"array items normalised", map[string]any{"path": "a", "data": []any{1.0, 255.0}}, map[string]any{"path": "a", "data": []any{int64(1), int64(255)}}},
		{"array without item schema", map[string]any{"path": "a", "tags": []any{"x", 1.0}}, map[string]any{"path": "a", "tags": []any{"x", 1.0}}},
		{"object", map[string]any{"path": "a", "meta": map[string]any{"k": "v"}}, map[string]any{"path": "a", "meta": map[string]any{"k": "v"}}},
		{"null optional dropped", map[string]any{"path": "a", "count": nil}, map[string]any{"path": "a"}},
		{"unknown argument ignored", map[string]any{"path": "a", "colour": "red"}, map[string]any{"path": "a", "colour": "red"}},
		{"empty string is present", map[string]any{"path": ""}, map[string]any{"path": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := testSchema().Validate(tt.in); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !reflect.DeepEqual(tt.in, tt.want) {
				t.Errorf("args after Validate = %#v, want %#v", tt.in, tt.want)
			}
		})
	}
}

func TestValidateRefusesNamingTheArgument(t *testing.T) {
	tests := []struct {
		name string
		in   map[string]any
		want string // substring of the error
	}{
		{"missing required", map[string]any{}, `missing required argument "path" (string: file path)`},
		{"required null", map[string]any{"path": nil}, `missing required argument "path"`},
		{"string got number", map[string]any{"path": 3.0}, `argument "path" must be a string, got number 3`},
		{"string got bool", map[string]any{"path": true}, `argument "path" must be a string, got boolean true`},
		{"enum non-member", map[string]any{"path": "a", "mode": "slow"}, `argument "mode" must be one of "fast", "safe", got "slow"`},
		{"integer got fraction", map[string]any{"path": "a", "count": 2.5}, `argument "count" must be a whole number, got 2.5`},
		{"integer got string", map[string]any{"path": "a", "count": "3"}, `argument "count" must be an integer, got string "3"`},
		{"integer beyond float precision", map[string]any{"path": "a", "count": 1e300}, `argument "count" must be a whole number`},
		{"integer below minimum", map[string]any{"path": "a", "count": 0.0}, `argument "count" must be at least 1, got 0`},
		{"integer above maximum", map[string]any{"path": "a", "count": 11.0}, `argument "count" must be at most 10, got 11`},
		{"integer enum non-member", map[string]any{"path": "a", "level": 4.0}, `argument "level" must be one of 0, 1, 2, 3, got 4`},
		{"number got string", map[string]any{"path": "a", "ratio": "1"}, `argument "ratio" must be a number, got string "1"`},
		{"number below minimum", map[string]any{"path": "a", "ratio": -0.5}, `argument "ratio" must be at least 0, got -0.5`},
		{"number above maximum", map[string]any{"path": "a", "ratio": 2.5}, `argument "ratio" must be at most 2, got 2.5`},
		{"number enum non-member", map[string]any{"path": "a", "factor": 1.0}, `argument "factor" must be one of 0.5, 1.5, got 1`},
		{"boolean got string", map[string]any{"path": "a", "force": "true"}, `argument "force" must be true or false, got string "true"`},
		{"array got string", map[string]any{"path": "a", "data": "1,2"}, `argument "data" must be an array, got string "1,2"`},
		{"array item out of range", map[string]any{"path": "a", "data": []any{1.0, 256.0}}, `argument "data[1]" must be at most 255, got 256`},
		{"array item wrong type", map[string]any{"path": "a", "data": []any{"x"}}, `argument "data[0]" must be an integer, got string "x"`},
		{"object got array", map[string]any{"path": "a", "meta": []any{}}, `argument "meta" must be an object, got an array`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := testSchema().Validate(tt.in)
			if err == nil {
				t.Fatalf("Validate(%v) accepted bad arguments", tt.in)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// TestValidateChecksRequiredBeforeTypes keeps the message about the missing
// argument first: it is the one the model must fix before anything else.
func TestValidateChecksRequiredBeforeTypes(t *testing.T) {
	err := testSchema().Validate(map[string]any{"count": "x"})
	if err == nil || !strings.Contains(err.Error(), `"path"`) {
		t.Fatalf("err = %v, want the missing path named", err)
	}
}

// TestSchemaJSON pins the wire shape models receive: empty parts are left
// out, properties are always an object.
func TestSchemaJSON(t *testing.T) {
	tests := []struct {
		name   string
		schema Schema
		want   string
	}{
		{"no properties", Object(nil), `{"type":"object","properties":{}}`},
		{"bounded integer", Object(map[string]*Property{"n": Integer("count", Bound(1), nil)}, "n"),
			`{"type":"object","properties":{"n":{"type":"integer","description":"count","minimum":1}},"required":["n"]}`},
		{"enum and items", Object(map[string]*Property{
			"m": String("", "a", "b"),
			"d": Array("data", Integer("", nil, nil)),
		}), `{"type":"object","properties":{"d":{"type":"array","description":"data","items":{"type":"integer"}},"m":{"type":"string","enum":["a","b"]}}}`},
		{"zero default kept", Object(map[string]*Property{"n": {Type: "integer", Default: 0}}),
			`{"type":"object","properties":{"n":{"type":"integer","default":0}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.schema)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("json = %s\nwant   %s", b, tt.want)
			}
		})
	}
}

func TestArgsAccessors(t *testing.T) {
	a := Args{"s": "x", "i": int64(4), "f": 2.5, "fi": 3.0, "b": true, "arr": []any{int64(1), 2.0, "skip"}}
	if a.String("s") != "x" || a.String("i") != "" || a.String("none") != "" {
		t.Error("String")
	}
	if a.Int("i", 9) != 4 || a.Int("fi", 9) != 3 || a.Int("none", 9) != 9 || a.Int("s", 9) != 9 {
		t.Error("Int")
	}
	if a.Float("f", 0) != 2.5 || a.Float("i", 0) != 4 || a.Float("none", 7) != 7 {
		t.Error("Float")
	}
	if !a.Bool("b") || a.Bool("s") || a.Bool("none") {
		t.Error("Bool")
	}
	if !a.Has("s") || a.Has("none") {
		t.Error("Has")
	}
	if got := a.Ints("arr"); !reflect.DeepEqual(got, []int64{1, 2}) {
		t.Errorf("Ints = %v", got)
	}
	if a.Ints("none") != nil {
		t.Error("Ints of absent argument should be nil")
	}
}
