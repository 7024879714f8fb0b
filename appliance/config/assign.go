package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
)

// assign stores raw, a JSON value decoded with UseNumber, into v as
// json.Unmarshal would store the same text: absent keys keep their value,
// null leaves scalars and structs alone and empties slices, and a value of
// the wrong type is an *json.UnmarshalTypeError naming the dotted key path.
// Like json.Unmarshal it goes on past a wrong type, so the rest is stored
// and the first mistake (in the order of the struct's fields, the order
// onboard writes them) is the one returned.
//
// It exists because the file is already decoded once, to name unknown keys,
// and json.Unmarshal into Config builds a decoder and an encoder for every
// struct type of the config on first use: about half of what reading the
// config cost at start, paid by the gateway and every CLI command. Types
// with their own UnmarshalJSON (sensors) still get their JSON text.
func assign(v reflect.Value, raw any, path string) error {
	var a assigner
	if err := a.value(v, raw, path); err != nil {
		return err
	}
	return a.first
}

type assigner struct {
	first error // the first wrong type met; decoding goes on past it
}

func (a *assigner) mistake(err error) {
	if a.first == nil {
		a.first = err
	}
}

// value stores raw into v; it returns only the errors that stop decoding.
func (a *assigner) value(v reflect.Value, raw any, path string) error {
	t := v.Type()
	if t == secretType {
		// Secret's UnmarshalJSON reads a plain string; null empties it.
		// Anything else fails it, and an error from an UnmarshalJSON ends
		// json.Unmarshal where it stands, not only that field.
		switch s := raw.(type) {
		case string:
			v.SetString(s)
		case nil:
			v.SetString("")
		default:
			return typeError(raw, t, path)
		}
		return nil
	}
	if u, ok := v.Addr().Interface().(json.Unmarshaler); ok {
		b, err := json.Marshal(raw)
		if err != nil {
			return err
		}
		if err := u.UnmarshalJSON(b); err != nil {
			if te, ok := err.(*json.UnmarshalTypeError); ok {
				te.Field = join(path, te.Field)
			}
			return err
		}
		return nil
	}
	if raw == nil {
		if t.Kind() == reflect.Slice {
			v.SetZero()
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			a.mistake(typeError(raw, t, path))
			return nil
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := jsonName(f)
			e, ok := m[name]
			if !ok || name == "-" {
				continue
			}
			if err := a.value(v.Field(i), e, join(path, name)); err != nil {
				return err
			}
		}
	case reflect.String:
		if s, ok := raw.(string); ok {
			v.SetString(s)
		} else {
			a.mistake(typeError(raw, t, path))
		}
	case reflect.Bool:
		if b, ok := raw.(bool); ok {
			v.SetBool(b)
		} else {
			a.mistake(typeError(raw, t, path))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := raw.(json.Number)
		if !ok {
			a.mistake(typeError(raw, t, path))
			return nil
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || v.OverflowInt(i) {
			a.mistake(&json.UnmarshalTypeError{Value: "number " + string(n), Type: t, Field: path})
			return nil
		}
		v.SetInt(i)
	case reflect.Float32, reflect.Float64:
		n, ok := raw.(json.Number)
		if !ok {
			a.mistake(typeError(raw, t, path))
			return nil
		}
		f, err := strconv.ParseFloat(string(n), t.Bits())
		if err != nil {
			a.mistake(&json.UnmarshalTypeError{Value: "number " + string(n), Type: t, Field: path})
			return nil
		}
		v.SetFloat(f)
	case reflect.Slice:
		elems, ok := raw.([]any)
		if !ok {
			a.mistake(typeError(raw, t, path))
			return nil
		}
		s := reflect.MakeSlice(t, len(elems), len(elems))
		for i, e := range elems {
			// A mistyped element is left zero, as json.Unmarshal leaves
			// it; the error names the element, which json.Unmarshal's
			// does not.
			if err := a.value(s.Index(i), e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
	default:
		return fmt.Errorf("key %q: a config value of type %s cannot be read", path, t)
	}
	return nil
}

// typeError is the error json.Unmarshal gives for raw stored into a t.
func typeError(raw any, t reflect.Type, path string) error {
	var what string
	switch raw.(type) {
	case string:
		what = "string"
	case json.Number:
		what = "number"
	case bool:
		what = "bool"
	case []any:
		what = "array"
	case map[string]any:
		what = "object"
	default:
		what = fmt.Sprintf("%T", raw)
	}
	return &json.UnmarshalTypeError{Value: what, Type: t, Field: path}
}
