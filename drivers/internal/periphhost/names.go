package periphhost

import (
	"fmt"
	"strconv"
	"strings"
)

// Ref is a registered bus or device as i2creg and spireg describe it.
type Ref struct {
	Name    string
	Aliases []string
	Number  int // -1 for none
}

// Find returns the index of the ref name means, or -1: "" means the first,
// otherwise a name or alias equal after normalize, or the ref's number.
func Find(refs []Ref, name string, normalize func(string) string) int {
	name = strings.TrimSpace(name)
	if name == "" {
		if len(refs) == 0 {
			return -1
		}
		return 0
	}
	want := normalize(name)
	for i, r := range refs {
		if normalize(r.Name) == want || (r.Number >= 0 && strconv.Itoa(r.Number) == want) {
			return i
		}
		for _, a := range r.Aliases {
			if normalize(a) == want {
				return i
			}
		}
	}
	return -1
}

// Bytes converts integer values, as a model sends them, to bytes: each must
// be 0-255, and there may be at most max of them.
func Bytes(vals []int64, max int) ([]byte, error) {
	if len(vals) > max {
		return nil, fmt.Errorf("%d data bytes; at most %d at a time", len(vals), max)
	}
	out := make([]byte, len(vals))
	for i, v := range vals {
		if v < 0 || v > 0xFF {
			return nil, fmt.Errorf("data[%d] = %d is not a byte (0-255)", i, v)
		}
		out[i] = byte(v)
	}
	return out, nil
}

// Lookup returns the entry of all that name means (see Find), or an error
// wrapping notFound that lists what is present ("buses present: …", with
// kind "buses"), each as label gives it.
// i2creg and spireg keep different Ref types; ref maps either to Ref.
func Lookup[R any](all []R, name, kind string, ref func(R) Ref, label func(R) string, normalize func(string) string, notFound error) (R, error) {
	list := make([]Ref, len(all))
	names := make([]string, len(all))
	for i, r := range all {
		list[i] = ref(r)
		names[i] = label(r)
	}
	if i := Find(list, name, normalize); i >= 0 {
		return all[i], nil
	}
	var zero R
	return zero, fmt.Errorf("%w %q; %s present: %s", notFound, strings.TrimSpace(name), kind, strings.Join(names, ", "))
}
