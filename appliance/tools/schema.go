package tools

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Schema describes a tool's parameters as a JSON-schema object. Only the
// subset the registry validates is modelled: what a model can get wrong.
type Schema struct {
	Type       string               `json:"type"` // always "object"
	Properties map[string]*Property `json:"properties"`
	Required   []string             `json:"required,omitempty"`
}

// Property is one parameter.
type Property struct {
	Type        string    `json:"type"` // string, integer, number, boolean, array, object
	Description string    `json:"description,omitempty"`
	Enum        []any     `json:"enum,omitempty"`
	Items       *Property `json:"items,omitempty"`
	Minimum     *float64  `json:"minimum,omitempty"`
	Maximum     *float64  `json:"maximum,omitempty"`
	Default     any       `json:"default,omitempty"`
}

// MarshalJSON writes absent properties as {}: providers reject an object
// schema whose properties are null.
func (s Schema) MarshalJSON() ([]byte, error) {
	type plain Schema
	if s.Properties == nil {
		s.Properties = map[string]*Property{}
	}
	return json.Marshal(plain(s))
}

// Object builds a Schema from properties and the names that are required.
func Object(props map[string]*Property, required ...string) Schema {
	return Schema{Type: "object", Properties: props, Required: required}
}

// String, Integer, Number, Boolean and Array build properties tersely.
func String(desc string, enum ...string) *Property {
	p := &Property{Type: "string", Description: desc}
	for _, e := range enum {
		p.Enum = append(p.Enum, e)
	}
	return p
}

// Integer is an integer property, optionally bounded (pass nil for no bound).
func Integer(desc string, min, max *float64) *Property {
	return &Property{Type: "integer", Description: desc, Minimum: min, Maximum: max}
}

// Number is a floating-point property.
func Number(desc string) *Property { return &Property{Type: "number", Description: desc} }

// Boolean is a boolean property.
func Boolean(desc string) *Property { return &Property{Type: "boolean", Description: desc} }

// Array is an array property of items.
func Array(desc string, items *Property) *Property {
	return &Property{Type: "array", Description: desc, Items: items}
}

// Bound returns a pointer to v, for Minimum/Maximum.
func Bound(v float64) *float64 { return &v }

// Validate checks args against s and normalises numbers: JSON decodes every
// number as float64, and integer parameters come back as int64 so tools need
// not round. The error names the argument and what was expected.
func (s Schema) Validate(args map[string]any) error {
	for _, name := range s.Required {
		v, ok := args[name]
		if !ok || v == nil {
			return fmt.Errorf("missing required argument %q (%s)", name, s.describe(name))
		}
	}
	names := make([]string, 0, len(args))
	for name := range args {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p, ok := s.Properties[name]
		if !ok {
			// Models sometimes add arguments; ignoring them is kinder than
			// failing a call whose declared arguments are fine.
			continue
		}
		v := args[name]
		if v == nil {
			delete(args, name)
			continue
		}
		nv, err := p.check(name, v)
		if err != nil {
			return err
		}
		args[name] = nv
	}
	return nil
}

// Unknown lists, sorted, the arguments args holds that s does not declare
// (Validate lets them pass).
func (s Schema) Unknown(args map[string]any) []string {
	var out []string
	for name := range args {
		if _, ok := s.Properties[name]; !ok {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (s Schema) describe(name string) string {
	p := s.Properties[name]
	if p == nil {
		return "unknown"
	}
	if p.Description != "" {
		return p.Type + ": " + p.Description
	}
	return p.Type
}

func (p *Property) check(name string, v any) (any, error) {
	switch p.Type {
	case "string":
		s, ok := v.(string)
		if !ok {
			return nil, typeErr(name, "a string", v)
		}
		if len(p.Enum) > 0 && !slices.Contains(p.Enum, any(s)) {
			return nil, fmt.Errorf("argument %q must be one of %s, got %q", name, enumList(p.Enum), s)
		}
		return s, nil
	case "integer":
		f, ok := toFloat(v)
		if !ok {
			return nil, typeErr(name, "an integer", v)
		}
		if f != math.Trunc(f) || math.IsInf(f, 0) || math.Abs(f) > 1<<53 {
			return nil, fmt.Errorf("argument %q must be a whole number, got %v", name, f)
		}
		if err := p.bounds(name, f); err != nil {
			return nil, err
		}
		if err := p.numEnum(name, f); err != nil {
			return nil, err
		}
		return int64(f), nil
	case "number":
		f, ok := toFloat(v)
		if !ok {
			return nil, typeErr(name, "a number", v)
		}
		if err := p.bounds(name, f); err != nil {
			return nil, err
		}
		if err := p.numEnum(name, f); err != nil {
			return nil, err
		}
		return f, nil
	case "boolean":
		b, ok := v.(bool)
		if !ok {
			return nil, typeErr(name, "true or false", v)
		}
		return b, nil
	case "array":
		a, ok := v.([]any)
		if !ok {
			return nil, typeErr(name, "an array", v)
		}
		if p.Items != nil {
			for i, e := range a {
				ne, err := p.Items.check(fmt.Sprintf("%s[%d]", name, i), e)
				if err != nil {
					return nil, err
				}
				a[i] = ne
			}
		}
		return a, nil
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, typeErr(name, "an object", v)
		}
		return m, nil
	}
	return v, nil
}

func (p *Property) bounds(name string, f float64) error {
	if p.Minimum != nil && f < *p.Minimum {
		return fmt.Errorf("argument %q must be at least %v, got %v", name, *p.Minimum, f)
	}
	if p.Maximum != nil && f > *p.Maximum {
		return fmt.Errorf("argument %q must be at most %v, got %v", name, *p.Maximum, f)
	}
	return nil
}

// numEnum checks a number against an enum declared with Go numbers of any
// kind (0, int64(0) and 0.0 are the same value to the model).
func (p *Property) numEnum(name string, f float64) error {
	if len(p.Enum) == 0 {
		return nil
	}
	for _, e := range p.Enum {
		if ef, ok := toFloat(e); ok && ef == f {
			return nil
		}
	}
	return fmt.Errorf("argument %q must be one of %s, got %v", name, enumList(p.Enum), f)
}

// toFloat accepts the numbers JSON decoding gives (float64) and those Go
// callers of ExecuteWith pass (int, int64).
func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	}
	return 0, false
}

func typeErr(name, want string, v any) error {
	return fmt.Errorf("argument %q must be %s, got %s", name, want, jsonType(v))
}

func jsonType(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("string %q", v)
	case float64, int64, int:
		return fmt.Sprintf("number %v", v)
	case bool:
		return fmt.Sprintf("boolean %v", v)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func enumList(e []any) string {
	parts := make([]string, len(e))
	for i, v := range e {
		b, _ := json.Marshal(v)
		parts[i] = string(b)
	}
	return strings.Join(parts, ", ")
}
