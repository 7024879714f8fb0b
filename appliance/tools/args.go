package tools

// Args are a tool call's arguments after the registry validated them against
// the tool's Schema: strings are string, integers int64, numbers float64,
// booleans bool, arrays []any.
type Args map[string]any

// String returns the string argument name, or "" when absent.
func (a Args) String(name string) string {
	s, _ := a[name].(string)
	return s
}

// Int returns the integer argument name, or def when absent.
func (a Args) Int(name string, def int64) int64 {
	if v, ok := a[name].(int64); ok {
		return v
	}
	if v, ok := a[name].(float64); ok {
		return int64(v)
	}
	return def
}

// Float returns the number argument name, or def when absent.
func (a Args) Float(name string, def float64) float64 {
	switch v := a[name].(type) {
	case float64:
		return v
	case int64:
		return float64(v)
	}
	return def
}

// Bool returns the boolean argument name, or false when absent.
func (a Args) Bool(name string) bool {
	b, _ := a[name].(bool)
	return b
}

// Has reports whether the argument name was given.
func (a Args) Has(name string) bool {
	_, ok := a[name]
	return ok
}

// Ints returns the array-of-integers argument name (nil when absent).
func (a Args) Ints(name string) []int64 {
	arr, _ := a[name].([]any)
	if arr == nil {
		return nil
	}
	out := make([]int64, 0, len(arr))
	for _, v := range arr {
		switch n := v.(type) {
		case int64:
			out = append(out, n)
		case float64:
			out = append(out, int64(n))
		}
	}
	return out
}
